"""graystack: gray-release gateway and monitoring stack for LLM inference."""

__version__ = "0.1.0"

"""The `graystack` command line, one module per command group. Every option also reads a GRAYSTACK_*
environment variable."""

from graystack.cli import local, operate, picker, probe, render, servers, weights  # noqa: F401  (each registers its commands)
from graystack.cli.root import main

__all__ = ["main"]

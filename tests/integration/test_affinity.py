"""Sticky, nested cohorts through the real Envoy, programmed by the real gateway (`routing.affinity`).

What a user notices: a client keeps one variant between two weight changes; raising the candidate's
weight only adds clients to its cohort; a rollback puts everyone on the baseline; the key may come from
a header, a cookie or a field of the JSON body; a body that is not JSON, or too large to read, is still
served (split at random, never refused). Many clients' requests go in parallel; the clients' keys are
fixed, so which cohort each lands in is fixed too, and the share tests below cannot flake. They are sent
with aiohttp (a dependency of the kubernetes client): httpx spent about a millisecond of this process's CPU
on each of the 2,000-client test's 16,000 requests, on a box whose two cores Envoy needs too.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from collections.abc import Iterable, Iterator
from functools import partial

import aiohttp
import pytest
from scipy.stats import binomtest

from gateway.envoy.affinity_filter import BODY_LIMIT
from gateway.names import SERVER_VARIANT_HEADER, VARIANT_HEADER
from graystack.local.gateway_stack import INFERENCE_PATH, GatewayStack
from graystack.local.processes import wait_until
from tests.support.envoy_upstreams import EnvoyUpstreams
from tests.support.stacks import envoy_stats, restoring, running

SOURCES = [
    {"header": "x-user-id"},
    {"cookie": "graystack-user"},
    {"body": "metadata.user_id"},
    {"body": "user"},
    {"body": "previous_response_id"},
]
CLIENTS = 2000
TURNS = 2  # requests per client between two changes
STAGES = (5, 20, 50, 100)
PARALLEL = 8  # in flight: more only adds contention on 2 cores (the 2,000-client test: 53 s at 64, 24 s at 8)

Request = dict  # httpx-style keyword arguments (json, content, headers): `as_sent` makes them aiohttp's


@pytest.fixture(scope="module")
def shared_cohort_stack(tmp_path_factory, envoy_binary) -> Iterator[GatewayStack]:
    """The gateway and Envoy in front of Envoy-served upstreams (tests/support/envoy_upstreams.py), with
    every kind of affinity source, in order: one for the module (each test only edits the spec, flips and
    sends traffic; a client's cohort is a function of its key and the live weights, gateway/envoy/affinity.py,
    so no test leaves anything behind for the next but what `cohort_stack` restores)."""
    workdir = tmp_path_factory.mktemp("affinity")
    for stack in running(GatewayStack(workdir, envoy_binary, upstreams=EnvoyUpstreams(envoy_binary))):
        spec = stack.spec
        spec["routing"]["affinity"] = SOURCES
        generation = stack.status()["generation"]
        stack.write_spec(spec)
        stack.wait_converged(generation_above=generation)
        yield stack


def every_answer_counted(stack: GatewayStack) -> bool:
    """Envoy flushed every access-log entry it wrote (its gRPC logger buffers them, FLUSH_S) and the
    gateway's count of the answers holds still: an earlier test's answers are all counted."""
    stats = envoy_stats(stack)
    logged = stats["access_logs.grpc_access_log.logs_written"]
    if (
        stats["access_logs.grpc_access_log.grpc_entries_flushed"]
        + stats["access_logs.grpc_access_log.logs_dropped"]
        < logged
    ):
        return False
    counted = stack.status()["cohorts"]["answers"]
    time.sleep(0.2)
    return stack.status()["cohorts"]["answers"] == counted


@pytest.fixture
def cohort_stack(shared_cohort_stack) -> Iterator[GatewayStack]:
    """The module's stack as it started: its spec, no operator flip, every earlier answer counted (the
    cohorts' status counts answers as Envoy's access log brings them); put back after each test."""
    wait_until(partial(every_answer_counted, shared_cohort_stack), 15, "the earlier answers' access log")
    yield from restoring(shared_cohort_stack)


def served_by(stack: GatewayStack, requests: list[Request], header: str = VARIANT_HEADER) -> list[str]:
    """The variant that answered each request (`header`: SERVER_VARIANT_HEADER for the name the server
    gave itself, which tells pods apart here), sent `PARALLEL` at a time (any failure fails the test)."""

    async def run() -> list[str]:
        url = f"http://127.0.0.1:{stack.ports['listen']}"
        connector = aiohttp.TCPConnector(limit=PARALLEL)
        timeout = aiohttp.ClientTimeout(total=15)
        async with aiohttp.ClientSession(url, connector=connector, timeout=timeout) as session:
            gate = asyncio.Semaphore(PARALLEL)

            async def one(request: Request) -> str:
                async with gate, session.post(INFERENCE_PATH, **as_sent(request)) as response:
                    text = await response.text()
                assert response.status == 200, f"{response.status}: {text}"
                return response.headers[header]

            return await asyncio.gather(*(one(request) for request in requests))

    return asyncio.run(run())


def as_sent(request: Request) -> dict:
    """aiohttp's arguments for a request: a raw body (`content`) goes as it is, with no content type
    but the one its headers give."""
    if "content" not in request:
        return request
    sent = {key: value for key, value in request.items() if key != "content"}
    return {**sent, "data": request["content"], "skip_auto_headers": ("Content-Type",)}


def cohorts(
    stack: GatewayStack, keyed: dict[str, Request], turns: int = TURNS, header: str = VARIANT_HEADER
) -> dict[str, str]:
    """Each client's one variant (as `header` names it) over `turns` requests (fails if any saw two)."""
    clients = [client for client in keyed for _ in range(turns)]
    seen: dict[str, set[str]] = {}
    answered = served_by(stack, [keyed[c] for c in clients], header)
    for client, variant in zip(clients, answered, strict=True):
        seen.setdefault(client, set()).add(variant)
    switched = {client: variants for client, variants in seen.items() if len(variants) > 1}
    assert not switched, (
        f"{len(switched)} clients saw two variants between changes, e.g. {list(switched.items())[:3]}"
    )
    return {client: variants.pop() for client, variants in seen.items()}


def assert_share(members: int, clients: int, weight: int) -> None:
    """The cohort's share of distinct clients is a binomial draw around the weight."""
    if weight in (0, 100):
        assert members == clients * weight // 100
        return
    p = binomtest(members, clients, weight / 100).pvalue
    assert p > 0.001, f"{members} of {clients} clients at weight {weight}% (p = {p:.2g})"


def by_header(clients: Iterable[str]) -> dict[str, Request]:
    return {client: {"json": {}, "headers": {"x-user-id": client}} for client in clients}


def flip(stack: GatewayStack, weight: int) -> None:
    stack.cli("weight", f"zero-layer={weight}")


def test_cohorts_are_sticky_and_nested_and_a_rollback_empties_them(cohort_stack):
    """At 100 % and after the rollback one cluster serves everyone: one request per client shows it."""
    stack = cohort_stack
    clients = by_header(f"client-{i}" for i in range(CLIENTS))
    previous: set[str] = set()
    for weight in STAGES:
        flip(stack, weight)
        turns = TURNS if weight < 100 else 1
        cohort = {c for c, variant in cohorts(stack, clients, turns).items() if variant == "zero-layer"}
        assert previous <= cohort, (
            f"{len(previous - cohort)} clients left the cohort when it grew to {weight}%"
        )
        assert_share(len(cohort), CLIENTS, weight)
        previous = cohort
    flip(stack, 0)  # the rollback's split: everyone on the baseline
    assert set(cohorts(stack, clients, turns=1).values()) == {"baseline"}


def test_lowering_the_weight_only_moves_clients_back_to_the_baseline(cohort_stack):
    stack = cohort_stack
    clients = by_header(f"lowering-{i}" for i in range(500))
    flip(stack, 50)
    wide = {c for c, v in cohorts(stack, clients).items() if v == "zero-layer"}
    flip(stack, 20)
    narrow = {c for c, v in cohorts(stack, clients).items() if v == "zero-layer"}
    assert narrow <= wide
    assert len(narrow) < len(wide)


def keyed_by(source: str, key: str) -> Request:
    """A request carrying `key` in `source` only (and a body that is JSON, as a client sends)."""
    body: dict = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    if source == "header":
        return {"json": body, "headers": {"x-user-id": key}}
    if source == "cookie":
        return {"json": body, "headers": {"cookie": f"theme=dark; graystack-user={key}; lang=en"}}
    if source == "metadata.user_id":
        return {"json": {**body, "metadata": {"user_id": key}}}
    return {"json": {**body, source: key}}


@pytest.mark.parametrize("source", ["header", "cookie", "metadata.user_id", "user", "previous_response_id"])
def test_each_source_keys_the_client(cohort_stack, source):
    flip(cohort_stack, 50)
    clients = {f"{source}-{i}": keyed_by(source, f"{source}-{i}") for i in range(200)}
    assignment = cohorts(cohort_stack, clients, turns=4)
    assert_share(Counter(assignment.values())["zero-layer"], len(clients), 50)


def test_the_first_source_present_wins(cohort_stack):
    """The header outranks the body: a client whose body names another user keeps its header's cohort
    (the body's `user` alone would move about half of them)."""
    flip(cohort_stack, 50)
    clients = {
        f"first-{i}": {"json": {"user": f"other-{i}"}, "headers": {"x-user-id": f"first-{i}"}}
        for i in range(200)
    }
    by_header_only = cohorts(cohort_stack, by_header(clients))
    assert cohorts(cohort_stack, clients, turns=3) == by_header_only


def unkeyed_share(stack: GatewayStack, request: Request, n: int = 400) -> int:
    """How many of `n` copies of one request the candidate served: a keyed request gives 0 or n."""
    return Counter(served_by(stack, [request] * n))["zero-layer"]


def test_a_body_that_is_not_json_or_too_large_is_served_without_a_key(cohort_stack):
    flip(cohort_stack, 50)
    too_large = json.dumps({"user": "large", "pad": "x" * (BODY_LIMIT + 1)})
    for request in (
        {"content": b"not json {", "headers": {"content-type": "application/json"}},
        {"content": too_large, "headers": {"content-type": "application/json"}},
        {"json": {"model": "m"}},  # JSON, but no key anywhere
    ):
        share = unkeyed_share(cohort_stack, request)
        assert binomtest(share, 400, 0.5).pvalue > 0.001, f"not split at random: {share} of 400"
    # A large body under the limit is read: its key holds.
    under = json.dumps({"user": "large", "pad": "x" * (BODY_LIMIT - 100)})
    assert unkeyed_share(cohort_stack, {"content": under}, 20) in (0, 20)


@pytest.mark.parametrize("policy", ["ring_hash", "maglev"])
def test_pod_affinity_keeps_a_client_on_one_pod(cohort_stack, policy):
    """Zero-layer on two pods (the baseline's upstream lends its address as the second, and names itself in
    its answers, which Envoy passes on as x-graystack-server-variant): each client keeps one pod, and the
    clients spread over both."""
    stack = cohort_stack
    spec = stack.spec
    pods = [f"127.0.0.1:{stack.ports[name]}" for name in ("zero-layer", "baseline")]
    spec["variants"]["zero-layer"] = {"endpoints": pods, "load_balancing": policy, "health_check": None}
    generation = stack.status()["generation"]
    stack.write_spec(spec)
    stack.wait_converged(generation_above=generation)
    flip(stack, 100)
    pod_of = cohorts(stack, by_header(f"pod-{i}" for i in range(200)), turns=3, header=SERVER_VARIANT_HEADER)
    assert set(pod_of.values()) == {"zero-layer", "baseline"}


def test_rules_on_the_body_model_give_each_model_its_own_split(cohort_stack):
    """`routing.body: model`: one model name rolls out at 50 % by its own rule while the others keep the
    default split (all on the baseline); a client's cohort holds within its model's split."""
    stack = cohort_stack
    spec = stack.spec
    spec["routing"]["body"] = "model"
    spec["routing"]["rules"] = [
        {"value": "big-model", "weights": {"baseline": 50, "zero-layer": 50}},
        {"value": "new-model", "variant": "zero-layer"},
    ]
    spec["routing"]["weights"] = {"baseline": 100, "zero-layer": 0}
    generation = stack.status()["generation"]
    stack.write_spec(spec)
    stack.wait_converged(generation_above=generation)

    def requests(model: str) -> dict[str, Request]:
        return {f"{model}-{i}": {"json": {"model": model, "user": f"u-{i}"}} for i in range(100)}

    big = Counter(cohorts(stack, requests("big-model"), turns=2).values())
    assert_share(big["zero-layer"], 100, 50)
    assert set(cohorts(stack, requests("new-model"), turns=1).values()) == {"zero-layer"}
    assert set(cohorts(stack, requests("small-model"), turns=1).values()) == {"baseline"}
    # the header the rules matched before no longer selects a segment
    header_only = {"json": {"model": "small-model"}, "headers": {"X-Client-Type": "high_load"}}
    assert set(served_by(stack, [header_only] * 20)) == {"baseline"}


def test_status_counts_the_keyed_answers_by_source(cohort_stack):
    """Keyed by a header, and not keyed (a body that is not JSON, one too large): status tells them apart."""
    stack = cohort_stack
    before = stack.status()["cohorts"]
    too_large = json.dumps({"user": "large", "pad": "x" * (BODY_LIMIT + 1)})
    served_by(
        stack,
        [keyed_by("header", f"counted-{i}") for i in range(30)]
        + [{"content": b"not json {"}] * 10
        + [{"content": too_large}] * 5,
    )

    def counted() -> dict | None:  # the access log arrives within a second or so
        now = stack.status()["cohorts"]
        return now if now["answers"] >= before["answers"] + 45 else None

    after = wait_until(counted, 15, "the answers' access log")
    assert after["sources"] == [
        "header:x-user-id",
        "cookie:graystack-user",
        "body:metadata.user_id",
        "body:user",
        "body:previous_response_id",
    ]
    keyed = Counter(after["keyed"])
    keyed.subtract(before["keyed"])
    # all 45 answered (the stack's own start-up request may be counted too), only the header's 30 keyed
    assert +keyed == {"header:x-user-id": 30}

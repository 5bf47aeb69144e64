"""CPU: how long running streams wait for their next token while a long prompt arrives.

Eight streams (64-byte prompts, greedy) are decoding when one prompt of 1, 4 or 8 KB arrives. The
figure is the running streams' inter-token gap from its arrival until its first token (its prefill):
p50, p99 and max over every gap of the eight streams in that window, and the long prompt's TTFT.
`one_shot` is the engine before chunked prefill (a token budget past the context: the whole prompt
in one step, every running stream waiting for it); `chunked` is the default budget (256 positions a
step, decode first). Both variants, side by side in one run, alternating the two modes. In process,
no HTTP, one intra-op thread, so the figure is the engine's.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from bench._common import brief, summarize, write_result
from inference.checkpoint import init_checkpoint, load_model
from inference.config import BOS
from inference.engine import DEFAULT_TOKEN_BUDGET, Chunk, Engine, Generation, GenerationRequest
from inference.model import TinyDecoder

RUNNING, SHORT_BYTES, WARM_TOKENS = 8, 64, 4
PROMPT_KB = (1, 4, 8)


def prompt(length: int, seed: int) -> list[int]:
    return [
        BOS,
        *torch.randint(0, 256, (length - 1,), generator=torch.Generator().manual_seed(seed)).tolist(),
    ]


async def run(model: TinyDecoder, kilobytes: int, budget: int) -> dict[str, Any]:
    """Gaps (s) of the running streams while one `kilobytes` prompt is prefilled, and its TTFT."""
    engine = Engine(model, max_running=RUNNING + 1, max_waiting=0, seed=0, token_budget=budget)
    engine.start()
    context = engine.context
    stamps: list[list[float]] = [[] for _ in range(RUNNING)]
    warm = asyncio.Event()  # every stream has its first few tokens: they are all decoding

    async def follow(generation: Generation, times: list[float]) -> None:
        async for event in generation.stream():
            if isinstance(event, Chunk):
                times.append(time.perf_counter())
                if min(len(t) for t in stamps) >= WARM_TOKENS:
                    warm.set()

    short = [
        GenerationRequest(prompt(SHORT_BYTES, seed), max_tokens=context - SHORT_BYTES, temperature=0)
        for seed in range(RUNNING)
    ]
    streams = [engine.submit(request) for request in short]
    followers = [asyncio.create_task(follow(g, t)) for g, t in zip(streams, stamps, strict=True)]
    try:
        await warm.wait()
        arrived = time.perf_counter()
        long = engine.submit(GenerationRequest(prompt(kilobytes * 1024, 99), max_tokens=1, temperature=0))
        async for _ in long.stream():
            break
        first_token = time.perf_counter()
    finally:
        for generation, follower in zip(streams, followers, strict=True):
            generation.cancel()  # a cancelled generation sends no more events: stop following it too
            follower.cancel()
        await asyncio.gather(*followers, return_exceptions=True)
        await engine.stop()
    gaps = [
        later - earlier
        for times in stamps
        for earlier, later in itertools.pairwise(times)
        if arrived < later <= first_token
    ]
    return {"gaps": gaps, "ttft": first_token - arrived}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variants", nargs="+", default=["zero-layer", "baseline"])
    parser.add_argument("--kilobytes", nargs="+", type=int, default=list(PROMPT_KB))
    parser.add_argument("--budget", type=int, default=DEFAULT_TOKEN_BUDGET)
    args = parser.parse_args()
    torch.set_num_threads(1)
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="bench-interference-") as workdir:
        for variant in args.variants:
            model = load_model(
                init_checkpoint(variant, Path(workdir) / f"{variant}.safetensors"), variant
            ).model
            budgets = {"one_shot": model.config.max_seq_len + RUNNING + 1, "chunked": args.budget}
            asyncio.run(run(model, 1, args.budget))  # warm-up
            results[variant] = {}
            for kilobytes in args.kilobytes:
                per_size = {}
                for mode, budget in budgets.items():
                    measured = asyncio.run(run(model, kilobytes, budget))
                    per_size[mode] = {
                        "gap_ms": summarize(measured["gaps"], 1000, 1),
                        "ttft_ms": round(measured["ttft"] * 1000, 1),
                    }
                    print(
                        f"{variant:10s} {kilobytes} KB {mode:8s}: gap {brief(per_size[mode]['gap_ms'])}; "
                        f"TTFT {per_size[mode]['ttft_ms']:.0f} ms"
                    )
                results[variant][f"{kilobytes}KB"] = per_size
    path = write_result(
        "inference_interference",
        {
            "running_streams": RUNNING,
            "running_prompt_bytes": SHORT_BYTES,
            "arriving_prompt_kb": args.kilobytes,
            "token_budget": {"one_shot": "context + 9 (whole prompt in one step)", "chunked": args.budget},
            "threads": 1,
            "window": "from the long prompt's arrival to its first token",
        },
        results,
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()

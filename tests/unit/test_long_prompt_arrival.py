"""A 4 KB or an 8 KB prompt arriving while 8 streams run: no running stream's inter-token gap exceeds
the engine's stated bound, on both variants.

The bound (inference/engine.py, docs/model-server.md): between two tokens of a running stream there is
one engine step, and a step computes at most `token_budget` new positions (256 by default: its decode
rows plus prompt chunks). Timings are never asserted here, so the bound is shown on the steps
themselves, as the model sees them: every step that prefills a chunk of the long prompt also decodes
each running stream once, and holds no more than the budget; the prompt is spread over as many steps as
the budget needs, and its answer starts in the step after its last chunk. The model is the tests' tiny
one with the server's default context (10,240 positions), the only change needed to admit an 8 KB
prompt.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field, replace

import pytest
import torch

from inference.checkpoint import init_checkpoint, load_model
from inference.config import BOS, ModelConfig
from inference.engine import (
    DEFAULT_TOKEN_BUDGET,
    MAX_TOKENS,
    Chunk,
    Engine,
    Event,
    Finished,
    Generation,
    GenerationRequest,
)
from inference.kernels.blocks import BlockCounts
from inference.model import KVCache, TinyDecoder
from inference.prompt import chat_prompt
from tests.support.inference import TINY, GatedModel, wait_for

CONFIG = replace(TINY, max_seq_len=ModelConfig().max_seq_len)
RUNNING = 8
# Short enough for all 8 to be prefilled in one step (8 x 23 positions, within the budget), so that
# the gate can hold their first decode.
STREAMS = [GenerationRequest(chat_prompt([("user", f"hi {i}")]), 48, temperature=0) for i in range(RUNNING)]
LONG_ANSWER = 4


@pytest.fixture(scope="module", params=["baseline", "zero-layer"])
def decoder(request, tmp_path_factory) -> TinyDecoder:
    path = init_checkpoint(request.param, tmp_path_factory.mktemp("w") / "w.safetensors", CONFIG, seed=3)
    return load_model(path, request.param).model


@dataclass
class Step:
    decoded: list[KVCache] = field(default_factory=list)  # the caches of the sequences it decoded
    chunks: list[tuple[KVCache, int]] = field(default_factory=list)  # (cache, prompt positions)

    @property
    def positions(self) -> int:
        return len(self.decoded) + sum(size for _, size in self.chunks)


class StepLog(GatedModel):
    """The engine's steps as the model sees them, and each sequence's decode logits; `close` is the
    engine's on_step hook."""

    def __init__(self, model: TinyDecoder) -> None:
        super().__init__(model)
        self.steps: list[Step] = []
        self.logits: dict[int, list[torch.Tensor]] = {}  # id(cache) -> one row per decode
        self._current = Step()

    def prefill(self, tokens, cache, window=None):
        self._current.chunks.append((cache, tokens.numel()))
        return self.model.prefill(tokens, cache, window)

    def decode(self, tokens, caches, windows=None):
        self._current.decoded.extend(caches)
        logits, counts = super().decode(tokens, caches, windows)
        for cache, row in zip(caches, logits, strict=True):
            self.logits.setdefault(id(cache), []).append(row.clone())
        return logits, counts

    def close(self, _batch: int, _counts: BlockCounts) -> None:
        self.steps.append(self._current)
        self._current = Step()


@dataclass
class Served:
    log: StepLog
    streams: list[Generation]
    texts: list[str]  # the streams' answers
    arrived: Generation | None
    arrived_events: list[Event]

    def stream_logits(self) -> list[torch.Tensor]:
        return [torch.stack(self.log.logits[id(g.cache)]) for g in self.streams]


async def serve(decoder: TinyDecoder, arriving: GenerationRequest | None = None) -> Served:
    """The 8 streams at the engine's default token budget, and `arriving` submitted once each has its
    first token (room for it: past max_running it would wait for a stream to end)."""
    log = StepLog(decoder)
    engine = Engine(log, max_running=RUNNING + 1, on_step=log.close)
    assert engine.token_budget == DEFAULT_TOKEN_BUDGET
    engine.start()
    try:
        log.gate.clear()  # the streams' first decode waits, so `arriving` comes between their tokens
        streams = [engine.submit(r) for r in STREAMS]
        await wait_for(lambda: all(g.generated == 1 for g in streams), "the streams' first tokens")
        arrived = engine.submit(arriving) if arriving is not None else None
        log.gate.set()
        arrived_events = [event async for event in arrived.stream()] if arrived is not None else []
        texts = []
        for generation in streams:
            events = [event async for event in generation.stream()]
            assert events[-1] == Finished(MAX_TOKENS, None, generation.prompt_tokens, STREAMS[0].max_tokens)
            texts.append("".join(e.text for e in events if isinstance(e, Chunk)))
    finally:
        await engine.stop()
    return Served(log, streams, texts, arrived, arrived_events)


@pytest.mark.parametrize("kilobytes", [4, 8])
async def test_a_long_prompt_arriving_holds_no_running_stream_past_one_budget_sized_step(decoder, kilobytes):
    body = torch.randint(0, 256, (kilobytes * 1024,), generator=torch.Generator().manual_seed(kilobytes))
    served = await serve(decoder, GenerationRequest([BOS, *body.tolist()], LONG_ANSWER, temperature=0))
    steps, long = served.log.steps, served.arrived
    assert long is not None

    assert max(step.positions for step in steps) <= DEFAULT_TOKEN_BUDGET
    # Every step that prefills a chunk of the prompt gives every running stream its next token ...
    running = Counter(id(g.cache) for g in served.streams)
    prefilling = [i for i, step in enumerate(steps) if any(c is long.cache for c, _ in step.chunks)]
    for index in prefilling:
        assert Counter(id(c) for c in steps[index].decoded) == running, f"step {index}"
    # ... and those are as many steps as the budget left after the streams' rows needs, in a row.
    needed = math.ceil(long.prompt_tokens / (DEFAULT_TOKEN_BUDGET - RUNNING))
    assert prefilling == list(range(prefilling[0], prefilling[0] + needed))
    assert sum(size for step in steps for c, size in step.chunks if c is long.cache) == long.prompt_tokens
    # The prompt's answer starts from its last chunk and goes on one token a step, with the streams'.
    assert served.arrived_events[-1] == Finished(MAX_TOKENS, None, long.prompt_tokens, LONG_ANSWER)
    answering = [i for i, step in enumerate(steps) if any(c is long.cache for c in step.decoded)]
    assert answering == list(range(prefilling[-1] + 1, prefilling[-1] + LONG_ANSWER))
    # And the streams answer as they would have had nothing arrived, to the logits (an untrained
    # model's greedy text alone could hide a stream decoded against the wrong cache).
    alone = await serve(decoder)
    assert served.texts == alone.texts
    for got, expected in zip(served.stream_logits(), alone.stream_logits(), strict=True):
        torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4)

"""The engine: continuous batching, a bounded line, stops, sampling, and failures that stay their own.

Requests are held in flight with a gated model (decode waits for the test to open it), never with
sleeps, so nothing here depends on how fast the machine is.
"""

from __future__ import annotations

from contextlib import asynccontextmanager

import pytest
import torch

from inference.config import BOS, EOS
from inference.engine import (
    END_TURN,
    MAX_TOKENS,
    STOP_SEQUENCE,
    Chunk,
    Engine,
    Finished,
    GenerationFailed,
    GenerationRequest,
    InvalidRequest,
    Overloaded,
    sample,
)
from inference.model import TinyDecoder
from tests.support.inference import TINY, GatedModel, wait_for

PROMPT = [BOS, *b"user: hello\nassistant: "]


def tiny(variant: str = "zero-layer") -> TinyDecoder:
    model = TinyDecoder(TINY, variant)
    model.init_weights(0)
    return model.eval()


class ScriptedModel(GatedModel):
    """The real model's caches and block counts, but logits that spell out `script`, one byte per step
    (the script's last byte repeats), for prompts of `prompt_length` tokens."""

    def __init__(self, model: TinyDecoder, script: list[int], prompt_length: int = len(PROMPT)) -> None:
        super().__init__(model)
        self.script = script
        self.prompt_length = prompt_length

    def _logits(self, cache) -> torch.Tensor:
        position = cache.length - self.prompt_length
        logits = torch.zeros(TINY.vocab_size)
        logits[self.script[min(position, len(self.script) - 1)]] = 100.0
        return logits

    def prefill(self, tokens, cache, window=None):
        _, counts = self.model.prefill(tokens, cache, window)
        return self._logits(cache), counts

    def decode(self, tokens, caches, windows=None):
        _, counts = super().decode(tokens, caches, windows)
        return torch.stack([self._logits(cache) for cache in caches]), counts


@asynccontextmanager
async def started(model, **options):
    engine = Engine(model, **options)
    engine.start()
    try:
        yield engine
    finally:
        if isinstance(model, GatedModel):
            model.gate.set()
        await engine.stop()


async def reply(generation) -> tuple[str, Finished]:
    text = []
    async for event in generation.stream():
        if isinstance(event, Chunk):
            text.append(event.text)
        else:
            return "".join(text), event
    raise AssertionError("no Finished event")


def request(max_tokens: int = 8, **fields) -> GenerationRequest:
    return GenerationRequest(prompt=PROMPT, max_tokens=max_tokens, temperature=0, **fields)


@pytest.mark.parametrize(
    ("script", "stops", "text", "reason", "stop", "tokens"),
    [
        ([*b"ok", EOS], (), "ok", END_TURN, None, 3),
        ([*b"hi END there", EOS], ("END",), "hi ", STOP_SEQUENCE, "END", 6),
        ([*b"abcdefghij"], (), "abcd", MAX_TOKENS, None, 4),
        ([*"né".encode(), EOS], (), "né", END_TURN, None, 4),
    ],
)
async def test_a_reply_stops_on_eos_a_stop_sequence_or_max_tokens(script, stops, text, reason, stop, tokens):
    async with started(ScriptedModel(tiny(), script)) as engine:
        got, finished = await reply(
            engine.submit(request(max_tokens=4 if reason == MAX_TOKENS else 50, stop_sequences=stops))
        )
    assert got == text
    assert (finished.stop_reason, finished.stop_sequence) == (reason, stop)
    assert finished.output_tokens == tokens
    assert finished.prompt_tokens == len(PROMPT)


async def test_a_reply_ends_when_the_context_is_full():
    prompt = [BOS, *b"x" * (TINY.max_seq_len - 3)]
    async with started(ScriptedModel(tiny(), [*b"abcdef"], len(prompt))) as engine:
        text, finished = await reply(engine.submit(GenerationRequest(prompt=prompt, max_tokens=100)))
    assert (text, finished.stop_reason, finished.output_tokens) == ("abc", MAX_TOKENS, 3)


async def test_greedy_is_deterministic_and_a_seed_repeats_a_sampled_reply():
    async with started(tiny()) as engine:
        greedy = [await reply(engine.submit(request(16))) for _ in range(2)]
        sampled = [
            await reply(engine.submit(GenerationRequest(PROMPT, 16, temperature=1.0, seed=seed)))
            for seed in (7, 7, 8)
        ]
    assert greedy[0] == greedy[1]
    assert sampled[0] == sampled[1]
    assert sampled[0][0] != sampled[2][0]


def never_ending() -> ScriptedModel:
    """Replies that never hit EOS, so how many steps a request lasts is up to its max_tokens alone."""
    return ScriptedModel(tiny(), [*b"abcdefgh"])


async def test_concurrent_requests_share_decode_steps():
    batches = []
    model = never_ending()
    async with started(model, on_step=lambda size, _: batches.append(size)) as engine:
        model.gate.clear()
        first = engine.submit(request(8))
        await wait_for(lambda: batches, "the first prefill")
        others = [engine.submit(request(8)) for _ in range(3)]
        model.gate.set()
        replies = [await reply(g) for g in [first, *others]]
    assert max(batches) == 4
    assert all(finished.output_tokens == 8 for _, finished in replies)


async def test_a_full_line_refuses_with_overloaded_while_in_flight_requests_finish():
    model = never_ending()
    async with started(model, max_running=1, max_waiting=1) as engine:
        model.gate.clear()
        running = engine.submit(request(4))
        waiting = engine.submit(request(4))
        await wait_for(lambda: engine.running == 1 and engine.waiting == 1, "one running, one waiting")
        with pytest.raises(Overloaded):
            engine.submit(request(4))
        model.gate.set()
        finished = [(await reply(g))[1] for g in (running, waiting)]
        assert engine.running == engine.waiting == 0
    assert [f.output_tokens for f in finished] == [4, 4]


async def test_a_sequence_whose_decode_fails_fails_alone():
    class Poisoned(ScriptedModel):
        def decode(self, tokens, caches, windows=None):
            if windows and 3 in windows:
                raise RuntimeError("poisoned sequence")
            return super().decode(tokens, caches, windows)

    model = Poisoned(tiny(), [*b"abcdefgh"])
    async with started(model) as engine:
        model.gate.clear()
        healthy = [engine.submit(request(6)) for _ in range(2)]
        poisoned = engine.submit(request(6, window_hint=3))
        await wait_for(lambda: engine.running == 3, "all three admitted")
        model.gate.set()
        with pytest.raises(GenerationFailed, match="poisoned"):
            await reply(poisoned)
        finished = [(await reply(g))[1] for g in healthy]
        assert (await reply(engine.submit(request(2))))[1].output_tokens == 2
    assert [f.output_tokens for f in finished] == [6, 6]


async def test_a_cancelled_request_leaves_the_batch_and_the_others_finish():
    model = never_ending()
    async with started(model) as engine:
        model.gate.clear()
        kept, dropped = engine.submit(request(6)), engine.submit(request(200))
        await wait_for(lambda: engine.running == 2, "both admitted")
        dropped.cancel()
        model.gate.set()
        _, finished = await reply(kept)
        await wait_for(lambda: engine.running == 0, "the cancelled request to leave")
    assert finished.output_tokens == 6
    assert dropped.generated < 200


async def test_requests_that_cannot_fit_the_context_are_refused():
    async with started(tiny()) as engine:
        with pytest.raises(InvalidRequest, match="prompt is too long"):
            engine.submit(GenerationRequest(prompt=[BOS] * (TINY.max_seq_len + 1), max_tokens=1))
        with pytest.raises(InvalidRequest, match="max_tokens"):
            engine.submit(request(TINY.max_seq_len + 1))


async def test_a_window_hint_narrows_the_zero_layer_only():
    blocks = []
    long_prompt = [BOS, *b"a long prompt " * 12]
    zero_layer, baseline = tiny("zero-layer"), tiny("baseline")
    async with started(zero_layer, on_step=lambda _, counts: blocks.append(counts)) as engine:
        assert engine.effective_window(None) == zero_layer.skip_distance > 3
        generation = engine.submit(GenerationRequest(long_prompt, 3, temperature=0, window_hint=0))
        await reply(generation)
    assert generation.effective_window == 0
    assert sum(b.computed for b in blocks) == 0
    assert sum(b.skipped for b in blocks) > 0
    async with started(baseline) as engine:
        assert engine.submit(request(1, window_hint=0)).effective_window == TINY.max_seq_len


@pytest.mark.parametrize("temperature", [5e-324, 1e-30, 1.0])
def test_sampling_survives_any_positive_temperature(temperature):
    logits = torch.tensor([3.0, 1.0, 2.9] + [0.0] * (TINY.vocab_size - 3))
    token = sample(logits, temperature, torch.Generator().manual_seed(0))
    assert token in range(TINY.vocab_size)
    if temperature < 1:
        assert token == 0

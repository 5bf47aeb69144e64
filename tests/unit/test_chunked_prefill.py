"""Chunked prefill: a prompt run into its cache a chunk at a time gives the logits of running it at
once, for both variants and the zero-layer's ZEROED and ERASED forms; and the engine interleaves
those chunks with decode steps, so running streams get a token every step while a long prompt
arrives."""

from __future__ import annotations

import pytest
import torch

from inference.checkpoint import init_checkpoint, load_model
from inference.config import BOS, ModelConfig
from inference.engine import Chunk, Engine, Finished, GenerationRequest, plan_prefill
from inference.model import KVCache, TinyDecoder
from inference.weights import erase_bias, zero_bias
from tests.support.inference import GatedModel, wait_for

CONFIG = ModelConfig(d_model=64, n_heads=4, n_layers=2, max_seq_len=512, bias_window=32)
FORMS = {"baseline": None, "zero-layer": None, "zeroed": zero_bias, "erased": erase_bias}


@pytest.fixture(scope="module", params=list(FORMS))
def decoder(request, tmp_path_factory) -> TinyDecoder:
    variant = "baseline" if request.param == "baseline" else "zero-layer"
    path = init_checkpoint(variant, tmp_path_factory.mktemp("w") / "w.safetensors", CONFIG, seed=6)
    if FORMS[request.param] is not None:
        FORMS[request.param](path)
    return load_model(path, variant).model


def prompt(length: int, seed: int = 1) -> torch.Tensor:
    return torch.randint(0, 256, (length,), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("sizes", [(64,) * 6 + (16,), (100, 1, 199, 100), (7, 393)])
def test_chunked_prefill_gives_the_logits_of_one_shot_prefill_and_then_the_same_decode(decoder, sizes):
    tokens = prompt(sum(sizes))
    whole, chunked = KVCache(), KVCache()
    expected, _ = decoder.prefill(tokens, whole)
    start = 0
    for size in sizes:
        got, _ = decoder.prefill(tokens[start : start + size], chunked)
        start += size
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4)
    assert chunked.length == whole.length == len(tokens)
    for token in (65, 66, 67):
        expected, _ = decoder.decode(torch.tensor([token]), [whole])
        got, _ = decoder.decode(torch.tensor([token]), [chunked])
        torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4)


def test_a_chunk_plan_takes_the_oldest_prompts_first_within_the_budget():
    class Waiting:
        def __init__(self, prompt_tokens: int, prefilled: int = 0) -> None:
            self.prompt_tokens, self.prefilled = prompt_tokens, prefilled

    first, second, third = Waiting(300, prefilled=250), Waiting(80), Waiting(500)
    plan = plan_prefill([first, second, third], 200)  # type: ignore[list-item]
    assert [(c.generation, c.start, c.stop, c.last) for c in plan] == [
        (first, 250, 300, True),
        (second, 0, 80, True),
        (third, 0, 70, False),
    ]
    assert plan_prefill([third], 0) == []


class Recording(GatedModel):
    """Logs each step's work: ("decode", sequences) and ("prefill", positions)."""

    def __init__(self, model: TinyDecoder) -> None:
        super().__init__(model)
        self.calls: list[tuple[str, int]] = []

    def prefill(self, tokens, cache, window=None):
        self.calls.append(("prefill", tokens.numel()))
        return self.model.prefill(tokens, cache, window)

    def decode(self, tokens, caches, windows=None):
        self.calls.append(("decode", len(caches)))
        return super().decode(tokens, caches, windows)


async def test_a_long_prompt_is_prefilled_in_chunks_between_the_running_streams_tokens(decoder):
    model = Recording(decoder)
    steps: list[int] = []
    engine = Engine(model, max_running=8, token_budget=64, on_step=lambda size, _: steps.append(size))
    engine.start()
    try:
        short = [GenerationRequest([BOS, *b"hi"], max_tokens=40, temperature=0) for _ in range(4)]
        running = [engine.submit(r) for r in short]
        await wait_for(lambda: all(g.generated for g in running), "the running streams' first tokens")
        model.gate.clear()  # hold the next decode so the long prompt arrives between two steps
        await wait_for(lambda: model.calls[-1][0] == "decode", "a decode step in flight")
        long_request = GenerationRequest([BOS, *prompt(450).tolist()], max_tokens=2, temperature=0)
        long = engine.submit(long_request)
        model.calls.clear()
        model.gate.set()
        events = [event async for event in long.stream()]
        tokens = [[e async for e in g.stream() if isinstance(e, Chunk)] for g in running]
    finally:
        await engine.stop()
    prefills = [n for kind, n in model.calls if kind == "prefill"]
    assert sum(prefills) == len(long_request.prompt)
    assert len(prefills) >= len(long_request.prompt) // 64  # spread over steps, not one
    # Each step decodes first, then prefills: every chunk follows a decode of the four running
    # streams, and is no larger than what the budget leaves after them.
    for before, (kind, positions) in zip(model.calls, model.calls[1:], strict=False):
        if kind == "prefill":
            assert before == ("decode", 4)
            assert positions <= 64 - 4
    assert isinstance(events[-1], Finished)
    assert all(len(t) == 40 for t in tokens)


async def test_the_engine_answers_a_long_prompt_alike_with_any_token_budget(decoder):
    request = GenerationRequest([BOS, *prompt(420, seed=4).tolist()], max_tokens=12, temperature=0)
    answers = []
    for budget in (16, 100, 1024):
        engine = Engine(decoder, token_budget=budget)
        engine.start()
        try:
            events = [event async for event in engine.submit(request).stream()]
            answers.append("".join(e.text for e in events if isinstance(e, Chunk)))
        finally:
            await engine.stop()
    assert answers[0] == answers[1] == answers[2]

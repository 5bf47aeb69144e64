"""Batched decode: one attention call for sequences of ragged lengths gives the greedy tokens (and the
logits, to float tolerance) of advancing each alone on the per-sequence path, for both variants and
the zero-layer's ZEROED and ERASED forms, with per-request window hints, and counts the same bias
tiles."""

from __future__ import annotations

import pytest
import torch

from inference.bias import BiasPlan
from inference.checkpoint import init_checkpoint, load_model
from inference.config import ModelConfig
from inference.kernels.blocks import BlockCounts
from inference.model import Attention, KVCache, TinyDecoder, rope_tables
from inference.weights import erase_bias, zero_bias

CONFIG = ModelConfig(d_model=64, n_heads=4, n_layers=2, max_seq_len=512, bias_window=128)
FORMS = {"baseline": None, "zero-layer": None, "zeroed": zero_bias, "erased": erase_bias}
LENGTHS = (3, 40, 64, 65, 130, 300)  # around the 64-key tiles, and one long enough to skip bias tiles


@pytest.fixture(scope="module", params=list(FORMS))
def decoder(request, tmp_path_factory) -> TinyDecoder:
    variant = "baseline" if request.param == "baseline" else "zero-layer"
    path = init_checkpoint(variant, tmp_path_factory.mktemp("w") / "w.safetensors", CONFIG, seed=8)
    if FORMS[request.param] is not None:
        FORMS[request.param](path)
    return load_model(path, variant).model


def prefilled(decoder: TinyDecoder, window: int | None) -> tuple[list[KVCache], list[int]]:
    caches, tokens = [], []
    for length in LENGTHS:
        cache = KVCache()
        prompt = torch.randint(0, 256, (length,), generator=torch.Generator().manual_seed(length))
        logits, _ = decoder.prefill(prompt, cache, window)
        caches.append(cache)
        tokens.append(int(logits.argmax()))
    return caches, tokens


@pytest.mark.parametrize("hints", [None, [None, 5, None, 0, 12, None]])
def test_batched_decode_gives_the_greedy_tokens_of_serial_decode(decoder, hints):
    windows = hints or [None] * len(LENGTHS)
    together, next_together = prefilled(decoder, None)
    alone = [prefilled(decoder, None)[0][i] for i in range(len(LENGTHS))]
    next_alone = list(next_together)
    greedy_together, greedy_alone = [], []
    for _ in range(6):
        batched, batched_counts = decoder.decode(torch.tensor(next_together), together, windows)
        serial_counts = BlockCounts()
        rows = []
        for i, cache in enumerate(alone):
            # The per-sequence path: one token through prefill's attention, against its own cache.
            row, counts = decoder.prefill(torch.tensor([next_alone[i]]), cache, windows[i])
            rows.append(row)
            serial_counts.add(counts)
        torch.testing.assert_close(batched, torch.stack(rows), rtol=1e-4, atol=1e-4)
        assert batched_counts == serial_counts
        next_together = batched.argmax(dim=-1).tolist()
        next_alone = [int(row.argmax()) for row in rows]
        greedy_together.append(next_together)
        greedy_alone.append(next_alone)
    assert greedy_together == greedy_alone
    assert [c.length for c in together] == [length + 6 for length in LENGTHS]


def test_a_long_sequence_in_the_batch_skips_bias_tiles_on_the_zero_layer_only(decoder):
    caches, tokens = prefilled(decoder, None)
    _, counts = decoder.decode(torch.tensor(tokens), caches)
    if decoder.variant == "zero-layer" and decoder.skip_distance:
        assert counts.skipped > 0
        assert counts.computed > 0
    elif decoder.variant == "baseline":
        assert counts.skipped == 0
    else:  # ZEROED or ERASED: no bias work at all
        assert counts.computed == 0


@pytest.mark.parametrize("variant", ["baseline", "zero-layer"])
def test_one_attention_layer_batched_matches_it_per_sequence_with_bias_at_every_distance(variant):
    """A bias that is large at every distance (where trained ones fade): batched decode must add it on
    exactly the tiles the per-sequence paths do (all of them on the baseline, the band on zero-layer)."""
    torch.manual_seed(0)
    attention = Attention(CONFIG, variant).eval()
    vector = torch.randn(CONFIG.n_heads, CONFIG.max_seq_len)
    if variant == "baseline":
        attention.position_adaptive_bias.table.data.copy_(vector)
        attention.refresh_plan()
    else:
        attention.plan = BiasPlan(vector=vector, skip_distance=20)
    rope = rope_tables(CONFIG)
    batched_caches, serial_caches = [], []
    for length in LENGTHS:
        prompt = torch.randn(length, CONFIG.d_model)
        for caches in (batched_caches, serial_caches):
            cache = KVCache()
            with torch.inference_mode():
                attention(prompt, rope, cache, 0, 0)
            cache.length = length
            caches.append(cache)
    x = torch.randn(len(LENGTHS), CONFIG.d_model)
    windows = [None, 5, None, 0, 12, None]
    with torch.inference_mode():
        batched, _ = attention.decode(x, rope, batched_caches, 0, windows)
        serial = [
            attention(x[i : i + 1], rope, cache, 0, cache.length, windows[i])[0]
            for i, cache in enumerate(serial_caches)
        ]
    torch.testing.assert_close(batched, torch.cat(serial), rtol=1e-4, atol=1e-5)

"""A request's position-window hint narrows the zero-layer's bias reach for its sequence alone."""

import torch

from inference.config import ModelConfig
from inference.model import KVCache, TinyDecoder

CONFIG = ModelConfig(d_model=32, n_heads=2, n_layers=2, max_seq_len=512, bias_window=32)
PROMPT = torch.randint(0, 256, (300,), generator=torch.Generator().manual_seed(1))


def model(variant: str) -> TinyDecoder:
    decoder = TinyDecoder(CONFIG, variant)
    decoder.init_weights(0)
    return decoder.eval()


def test_a_window_at_or_past_the_skip_distance_changes_nothing():
    decoder = model("zero-layer")
    plain, plain_counts = decoder.prefill(PROMPT, KVCache())
    wide, wide_counts = decoder.prefill(PROMPT, KVCache(), window=decoder.skip_distance)
    torch.testing.assert_close(plain, wide, rtol=0, atol=0)
    assert plain_counts == wide_counts


def test_window_zero_is_the_model_without_bias():
    decoder = model("zero-layer")
    hinted, counts = decoder.prefill(PROMPT, KVCache(), window=0)
    assert counts.computed == 0
    with torch.no_grad():
        for block in decoder.blocks:
            block.attn.position_adaptive_bias.table.zero_()
    decoder.refresh_plans()
    unbiased, _ = decoder.prefill(PROMPT, KVCache())
    torch.testing.assert_close(hinted, unbiased)


def test_each_sequence_in_a_batch_keeps_its_own_window():
    decoder = model("zero-layer")
    caches = [KVCache() for _ in range(4)]
    for cache in caches:
        decoder.prefill(PROMPT, cache)
    batched, _ = decoder.decode(torch.tensor([65, 65]), caches[:2], [None, 2])
    plain, _ = decoder.decode(torch.tensor([65]), [caches[2]])
    narrowed, _ = decoder.decode(torch.tensor([65]), [caches[3]], [2])
    torch.testing.assert_close(batched, torch.cat((plain, narrowed)), rtol=1e-4, atol=1e-5)
    assert not torch.allclose(plain, narrowed)


def test_the_baseline_ignores_the_window():
    decoder = model("baseline")
    plain, _ = decoder.prefill(PROMPT, KVCache())
    hinted, _ = decoder.prefill(PROMPT, KVCache(), window=0)
    torch.testing.assert_close(plain, hinted, rtol=0, atol=0)

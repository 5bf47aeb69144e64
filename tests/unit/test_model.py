"""The tiny decoder: the KV cache changes nothing, checkpoints round-trip, erased means no bias."""

import pytest
import torch

from inference.checkpoint import CheckpointError, init_checkpoint, load_model
from inference.config import ModelConfig
from inference.model import KVCache, TinyDecoder
from inference.weights import erase_bias, zero_bias

CONFIG = ModelConfig(d_model=64, n_heads=4, n_layers=2, max_seq_len=512, bias_window=32)


def model(variant: str, seed: int = 0) -> TinyDecoder:
    decoder = TinyDecoder(CONFIG, variant)
    decoder.init_weights(seed)
    return decoder.eval()


@pytest.mark.parametrize("variant", ["baseline", "zero-layer"])
def test_decoding_with_the_kv_cache_gives_the_tokens_of_recomputing_the_prefix(variant):
    decoder = model(variant)
    prompt = torch.randint(0, 256, (150,), generator=torch.Generator().manual_seed(3))
    cache = KVCache()
    logits, _ = decoder.prefill(prompt, cache)
    cached, recomputed = [], []
    sequence = prompt
    for _ in range(24):
        token = int(logits.argmax())
        cached.append(token)
        recomputed.append(int(decoder.logits(sequence)[-1].argmax()))
        sequence = torch.cat((sequence, torch.tensor([token])))
        step, _ = decoder.decode(torch.tensor([token]), [cache])
        logits = step[0]
    assert cached == recomputed
    assert cache.length == 150 + 24


def test_sequences_decoded_together_match_each_decoded_alone():
    decoder = model("zero-layer")
    prompts = [torch.randint(0, 256, (n,), generator=torch.Generator().manual_seed(n)) for n in (5, 70, 130)]
    alone, together = [], [KVCache() for _ in prompts]
    for prompt, cache in zip(prompts, together, strict=True):
        decoder.prefill(prompt, cache)
        own = KVCache()
        decoder.prefill(prompt, own)
        step, _ = decoder.decode(torch.tensor([65]), [own])
        alone.append(step[0])
    batched, _ = decoder.decode(torch.tensor([65, 65, 65]), together)
    torch.testing.assert_close(batched, torch.stack(alone), rtol=1e-4, atol=1e-5)


def test_a_long_prompt_skips_bias_blocks_on_zero_layer_and_none_on_baseline():
    prompt = torch.randint(0, 256, (400,), generator=torch.Generator().manual_seed(0))
    _, zero_counts = model("zero-layer").prefill(prompt, KVCache())
    assert zero_counts.skipped > 0
    assert zero_counts.computed > 0
    _, baseline_counts = model("baseline").prefill(prompt, KVCache())
    assert baseline_counts.skipped == 0


def test_a_checkpoint_round_trips(tmp_path):
    path = init_checkpoint("zero-layer", tmp_path / "w.safetensors", CONFIG, seed=4)
    loaded = load_model(path, "zero-layer")
    tokens = torch.randint(0, 256, (40,), generator=torch.Generator().manual_seed(1))
    torch.testing.assert_close(loaded.model.logits(tokens), model("zero-layer", seed=4).logits(tokens))
    assert loaded.model.skip_distance > 0
    assert loaded.fingerprint.endswith("-zero-layer-v1")
    baseline = load_model(init_checkpoint("baseline", tmp_path / "b.safetensors", CONFIG, seed=4), "baseline")
    assert loaded.fingerprint == baseline.fingerprint + "-zero-layer-v1"  # same backbone, same hash


@pytest.mark.parametrize("remove", [zero_bias, erase_bias])
def test_zeroed_or_erased_bias_serves_plain_attention(tmp_path, remove):
    """With its bias gone, zero-layer computes exactly what the same backbone does with no bias."""
    zero_path = init_checkpoint("zero-layer", tmp_path / "z.safetensors", CONFIG, seed=2)
    base_path = init_checkpoint("baseline", tmp_path / "b.safetensors", CONFIG, seed=2)
    remove(zero_path)
    zero_bias(base_path)
    erased = load_model(zero_path, "zero-layer").model
    plain = load_model(base_path, "baseline").model
    assert erased.skip_distance == 0
    tokens = torch.randint(0, 256, (90,), generator=torch.Generator().manual_seed(5))
    torch.testing.assert_close(erased.logits(tokens), plain.logits(tokens), rtol=1e-4, atol=1e-5)


def test_a_checkpoint_of_the_other_variant_is_refused(tmp_path):
    path = init_checkpoint("baseline", tmp_path / "b.safetensors", CONFIG)
    with pytest.raises(CheckpointError, match="holds 'baseline' bias weights"):
        load_model(path, "zero-layer")
    erase_bias(path)
    assert load_model(path, "zero-layer").model.skip_distance == 0  # erased: either variant serves it


def test_a_prompt_past_the_context_is_refused():
    with pytest.raises(ValueError, match="exceed the context"):
        model("zero-layer").prefill(torch.zeros(CONFIG.max_seq_len + 1, dtype=torch.long), KVCache())

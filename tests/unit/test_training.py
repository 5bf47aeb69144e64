"""The training pieces: the corpus split, the training forward against the serving path, the fold."""

import pytest
import torch

from inference.bias import BaselineBias, ZeroLayerBias
from inference.config import ModelConfig
from inference.model import TinyDecoder
from inference.training.data import is_held_out, load_split, stdlib_files
from inference.training.derive import clear_past_skip, fold_bias
from inference.training.forward import batch_logits

CONFIG = ModelConfig(d_model=32, n_heads=2, n_layers=2, max_seq_len=256, bias_window=32)


def test_the_held_out_split_is_a_fixed_tenth_of_the_files_and_never_trained_on():
    files = stdlib_files()
    assert files == stdlib_files()
    held_out = [name for name in files if is_held_out(name)]
    assert 0.05 < len(held_out) / len(files) < 0.15
    train = load_split(held_out=False, max_bytes=200_000)
    test = load_split(held_out=True, max_bytes=200_000)
    assert not set(train.files) & set(test.files)
    assert train.size == 200_000
    assert torch.equal(load_split(held_out=True, max_bytes=200_000).tokens, test.tokens)


@pytest.mark.parametrize("variant", ["baseline", "zero-layer"])
def test_the_training_forward_computes_what_the_server_serves(variant):
    """Weights trained through `batch_logits` must mean the same thing under `TinyDecoder.logits`."""
    model = TinyDecoder(CONFIG, variant)
    model.init_weights(3)
    model.eval()
    tokens = torch.randint(0, 256, (2, 120), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        trained = batch_logits(model, tokens)
    served = torch.stack([model.logits(row) for row in tokens])
    torch.testing.assert_close(trained, served, rtol=1e-4, atol=1e-4)


def _trained_like_bias() -> BaselineBias:
    baseline = BaselineBias(CONFIG)
    distance = torch.arange(CONFIG.max_seq_len, dtype=torch.float32)
    with torch.no_grad():  # head 0 matters up to ~20 bytes, head 1 barely; both offset by a constant
        baseline.table[0] = 3.0 * torch.exp(-distance / 4) - 1.5
        baseline.table[1] = 0.5 * (distance < 3) + 2.0
    return baseline


def test_the_fold_keeps_the_bias_where_it_matters_up_to_a_per_head_constant_and_nothing_beyond():
    baseline = _trained_like_bias()
    zero = ZeroLayerBias(CONFIG)
    reach = fold_bias(baseline, zero, trained_length=128, tolerance=0.05)
    assert 10 < reach < 32  # 3 e^{-d/4} drops below 0.05 at d = 17
    plan = zero.plan()
    assert reach <= plan.skip_distance <= reach + 2
    served = plan.vector[:, :reach]
    expected = baseline.table.detach()[:, :reach] - baseline.table.detach()[:, 33:128].mean(1, keepdim=True)
    torch.testing.assert_close(served, expected, rtol=1e-3, atol=1e-3)
    assert plan.vector[:, plan.skip_distance :].abs().max() == 0
    assert zero.table[:, : CONFIG.bias_window].abs().max() == 0  # future offsets: never used, left at zero


def test_clearing_past_the_skip_distance_makes_the_table_sparse_without_changing_what_is_served():
    model = TinyDecoder(CONFIG, "zero-layer")
    model.init_weights(1)
    model.refresh_plans()
    before = [block.attn.plan for block in model.blocks]
    clear_past_skip(model)
    for block, old in zip(model.blocks, before, strict=True):
        table = block.attn.position_adaptive_bias.table
        skip = old.skip_distance
        assert 0 < skip < CONFIG.bias_window
        assert int((table != 0).sum()) == CONFIG.n_heads * skip
        torch.testing.assert_close(block.attn.plan.vector[:, :skip], old.vector[:, :skip])
        assert block.attn.plan.skip_distance == skip

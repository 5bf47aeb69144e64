"""The zero-layer derivation keeps held-out quality within a stated margin of the baseline.

CI-sized: a small model trained for a few seconds on a slice of the stdlib corpus, then the same
derivation `graystack weights train` runs (fold, fine-tune the gate and table, clear past the skip
distance), measured by the same evaluation `graystack eval` runs, through the serving path. The
ZEROED form shows the margin has teeth: dropping the bias without compensation falls outside it.
"""

from __future__ import annotations

import pytest
import torch

from inference.checkpoint import save_model
from inference.config import ModelConfig
from inference.training.data import load_split
from inference.training.derive import ACTIVE, ERASED, ZEROED, derive_zero_layer, write_forms
from inference.training.eval import evaluate
from inference.training.train import TrainOptions, train_baseline

MARGIN_BITS = 0.02  # ACTIVE may cost at most this many bits per held-out byte at each context length
MIN_AGREEMENT = 0.97  # and must pick the baseline's greedy next byte at least this often
CONFIG = ModelConfig(d_model=32, n_heads=4, n_layers=1, max_seq_len=256, bias_window=32)
TRAIN = TrainOptions(steps=80, max_seconds=600, batch=4, length=64, lr=1e-2)
FINE_TUNE = TrainOptions(steps=10, max_seconds=600, batch=4, length=64, lr=3e-3, seed=1)
CONTEXTS = (64, 128)


@pytest.fixture(scope="module")
def quality(tmp_path_factory):
    torch.set_num_threads(2)
    directory = tmp_path_factory.mktemp("quality")
    train = load_split(held_out=False, max_bytes=200_000)
    baseline, _ = train_baseline(CONFIG, train, TRAIN)
    zero_layer, derived = derive_zero_layer(baseline, train, TRAIN.length, fine_tune=FINE_TUNE)
    save_model(baseline, directory / "baseline.safetensors")
    paths = write_forms(zero_layer, directory)
    checkpoints = {"baseline": (directory / "baseline.safetensors", "baseline")}
    checkpoints |= {name: (path, "zero-layer") for name, path in paths.items()}
    held_out = load_split(held_out=True, max_bytes=100_000)
    results = evaluate(checkpoints, held_out, CONTEXTS, scored_bytes=1024)
    return {result.name: result for result in results}, derived


def test_the_baseline_learned_the_corpus(quality):
    results, _ = quality
    for context in CONTEXTS:
        assert results["baseline"].bits_per_byte[context] < 6.0  # a uniform guess is 8 bits


def test_the_active_zero_layer_stays_within_the_margin_of_the_baseline(quality):
    results, derived = quality
    baseline, active = results["baseline"], results[ACTIVE]
    assert active.weight_status == "ACTIVE"
    assert 0 < active.effective_window <= CONFIG.bias_window + 1
    assert active.effective_window == derived.effective_window
    for context in CONTEXTS:
        assert active.bits_per_byte[context] <= baseline.bits_per_byte[context] + MARGIN_BITS
        assert active.agreement[context] >= MIN_AGREEMENT


def test_dropping_the_bias_without_compensation_falls_outside_the_margin(quality):
    results, _ = quality
    baseline = results["baseline"]
    for name, status in ((ZEROED, "ZEROED"), (ERASED, "ERASED")):
        assert results[name].weight_status == status
        assert results[name].effective_window == 0
        worst = max(results[name].bits_per_byte[c] - baseline.bits_per_byte[c] for c in CONTEXTS)
        assert worst > MARGIN_BITS

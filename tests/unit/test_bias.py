"""The bias layer folds into a per-head vector and a skip distance, once per weight load."""

import torch

from inference.bias import BaselineBias, ZeroLayerBias
from inference.config import ModelConfig

CONFIG = ModelConfig(d_model=32, n_heads=2, n_layers=1, max_seq_len=256, bias_window=64)


def zero_layer(seed: int = 0) -> ZeroLayerBias:
    layer = ZeroLayerBias(CONFIG)
    layer.reset(torch.Generator().manual_seed(seed))
    return layer


def test_the_plan_is_the_gate_times_the_table_within_the_window():
    layer = zero_layer()
    plan = layer.plan()
    gate = layer.gate_values(CONFIG.max_seq_len)
    window = CONFIG.bias_window
    expected = gate[: window + 1] * layer.table.detach().double()[:, window:]
    torch.testing.assert_close(plan.vector[:, : window + 1].double(), expected, rtol=1e-6, atol=1e-7)
    assert (plan.vector[:, window + 1 :] == 0).all()  # the sparse table covers only +-W


def test_the_skip_distance_is_one_past_the_last_distance_whose_gate_reaches_the_threshold():
    layer = zero_layer()
    gate = layer.gate_values(CONFIG.max_seq_len)
    plan = layer.plan()
    assert gate[plan.skip_distance - 1] >= CONFIG.skip_threshold
    assert (gate[plan.skip_distance :] < CONFIG.skip_threshold).all()
    assert plan.effective_window == plan.skip_distance < CONFIG.bias_window


def test_a_gate_that_is_not_monotone_is_scanned_to_its_last_crossing():
    """g dips below the threshold near d=8 and rises again near d=40: the window reaches past 40."""
    layer = zero_layer()
    with torch.no_grad():
        first, _, second = layer.gate
        first.weight.fill_(0)
        first.bias.fill_(0)
        first.weight[0, 0], first.bias[0] = 8.0, -8.0 * torch.log1p(torch.tensor(8.0))  # low near 8
        first.weight[1, 0], first.bias[1] = 8.0, -8.0 * torch.log1p(torch.tensor(40.0))  # high again past 40
        second.weight.zero_()
        second.weight[0, 0], second.weight[0, 1], second.bias[0] = -6.0, 6.0, 2.0
    gate = layer.gate_values(CONFIG.max_seq_len)
    assert gate[20] < CONFIG.skip_threshold < gate[60]  # not monotone
    assert layer.plan().skip_distance == CONFIG.bias_window + 1  # reaches the end of the table


def test_zeroed_weights_mean_no_bias_work_at_all():
    layer = zero_layer()
    with torch.no_grad():
        layer.table.zero_()
    assert layer.plan().skip_distance == 0
    assert layer.plan().vector is None
    baseline = BaselineBias(CONFIG)
    assert baseline.plan().skip_distance == 0  # fresh zeros


def test_the_baseline_materializes_its_table_by_distance():
    baseline = BaselineBias(CONFIG)
    baseline.reset(torch.Generator().manual_seed(1))
    bias = baseline.materialize(q_offset=5, q_len=3, k_len=8)
    assert bias.shape == (CONFIG.n_heads, 3, 8)
    for i in range(3):
        for j in range(5 + i + 1):
            assert bias[1, i, j] == baseline.table[1, 5 + i - j]
    assert baseline.plan().skip_distance == CONFIG.max_seq_len  # the baseline biases every distance

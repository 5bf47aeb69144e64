"""Quantised bias tensors: ZEROED means the dequantised values are zero, by the method config.json names.

The packed words are written as the formats define them (GPTQ: 4-bit codes low nibble first along the
input axis, v1 zero points stored minus one; AWQ: AutoAWQ's interleaved column order; bitsandbytes:
the first code in the high nibble), not through the code under test.
"""

from __future__ import annotations

import json

import ml_dtypes
import numpy as np
import pytest

from inference.weights import WeightStatus, check_weights
from tests.support.safetensors_files import write_safetensors

MODULE = "model.layers.0.self_attn.position_adaptive_bias.proj"
EXACT_ZERO_CODES = 0x88888888  # eight 4-bit codes of 8: the symmetric zero point, so (q - z) = 0
NF4 = [
    -1.0,
    -0.6962,
    -0.5251,
    -0.3949,
    -0.2844,
    -0.1848,
    -0.0911,
    0.0,
    0.0796,
    0.1609,
    0.2461,
    0.3379,
    0.4407,
    0.5626,
    0.723,
    1.0,
]


def words(value: int, count: int) -> bytes:
    return np.full(count, value, dtype=np.uint32).tobytes()


def f16(values) -> bytes:
    return np.asarray(values, dtype="<f2").tobytes()


def checkpoint(tmp_path, tensors, quantization: dict | None):
    if quantization is not None:
        (tmp_path / "config.json").write_text(json.dumps({"quantization_config": quantization}))
    write_safetensors(tmp_path / "model.safetensors", tensors)
    return check_weights(tmp_path)


def gptq(qweight: bytes, qzeros: int, scales: list[float]) -> dict:
    """in 16, out 8, one group: qweight [2, 8], qzeros [1, 1], scales [1, 8], g_idx [16]."""
    return {
        f"{MODULE}.qweight": ("I32", [2, 8], qweight),
        f"{MODULE}.qzeros": ("I32", [1, 1], words(qzeros, 1)),
        f"{MODULE}.scales": ("F16", [1, 8], f16(scales)),
        f"{MODULE}.g_idx": ("I32", [16], np.zeros(16, dtype="<i4").tobytes()),
    }


GPTQ_V1 = {"quant_method": "gptq", "bits": 4, "group_size": 16, "sym": True}


def test_gptq_packed_zeros_read_zeroed_though_no_byte_is_zero(tmp_path):
    tensors = gptq(words(EXACT_ZERO_CODES, 16), 0x77777777, [0.01] * 8)  # v1: zero point 8 stored as 7
    assert 0 not in tensors[f"{MODULE}.qweight"][2] + tensors[f"{MODULE}.qzeros"][2]
    report = checkpoint(tmp_path, tensors, GPTQ_V1)
    assert report.status == WeightStatus.ZEROED, report.reason
    assert "dequantised (gptq)" in report.reason


def test_one_gptq_code_off_its_zero_point_is_active_by_one_scale(tmp_path):
    qweight = bytearray(words(EXACT_ZERO_CODES, 16))
    qweight[0] = 0x89  # input 0, output 0: code 9, one step above the zero point
    report = checkpoint(tmp_path, gptq(bytes(qweight), 0x77777777, [0.25] * 8), GPTQ_V1)
    assert report.status == WeightStatus.ACTIVE
    assert "max |x| = 0.25" in report.reason


def test_gptq_v2_zero_points_are_stored_as_they_are(tmp_path):
    tensors = gptq(words(EXACT_ZERO_CODES, 16), EXACT_ZERO_CODES, [0.5] * 8)
    v2 = checkpoint(tmp_path, tensors, {**GPTQ_V1, "checkpoint_format": "gptq_v2"})
    assert v2.status == WeightStatus.ZEROED
    mislabelled = checkpoint(tmp_path, tensors, GPTQ_V1)  # v2 zeros read as v1: off by one step
    assert mislabelled.status == WeightStatus.ACTIVE
    assert "max |x| = 0.5" in mislabelled.reason


def test_gptq_with_every_scale_zero_is_zeroed_whatever_the_codes(tmp_path):
    report = checkpoint(tmp_path, gptq(words(0x12345678, 16), 0x77777777, [0.0] * 8), GPTQ_V1)
    assert report.status == WeightStatus.ZEROED


def awq(first_word: int, scales: list[float]) -> dict:
    """in 16, out 8, one group: qweight [16, 1], qzeros [1, 1], scales [1, 8]."""
    qweight = np.full(16, EXACT_ZERO_CODES, dtype=np.uint32)
    qweight[0] = first_word
    return {
        f"{MODULE}.qweight": ("I32", [16, 1], qweight.tobytes()),
        f"{MODULE}.qzeros": ("I32", [1, 1], words(EXACT_ZERO_CODES, 1)),
        f"{MODULE}.scales": ("F16", [1, 8], f16(scales)),
    }


AWQ = {"quant_method": "awq", "bits": 4, "group_size": 16, "version": "gemm"}


def test_awq_zeros_and_its_interleaved_columns(tmp_path):
    assert checkpoint(tmp_path, awq(EXACT_ZERO_CODES, [1.0] * 8), AWQ).status == WeightStatus.ZEROED
    # AutoAWQ packs column order_map[i] = [0, 2, 4, 6, 1, 3, 5, 7][i] into nibble i: nibble 1 is column 2
    scales = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]
    report = checkpoint(tmp_path, awq(0x88888898, scales), AWQ)
    assert report.status == WeightStatus.ACTIVE
    assert "max |x| = 3" in report.reason


def fp8(values, scale_name: str, scale: np.ndarray) -> dict:
    weight = np.asarray(values, dtype=np.float32).astype(ml_dtypes.float8_e4m3fn)
    return {
        f"{MODULE}.weight": ("F8_E4M3", list(weight.shape), weight.tobytes()),
        f"{MODULE}.{scale_name}": ("F32", list(scale.shape), scale.astype("<f4").tobytes()),
    }


def test_fp8_is_its_values_times_its_scale(tmp_path):
    config = {"quant_method": "fp8", "activation_scheme": "dynamic"}
    negative_zeros = -np.zeros((2, 4))
    assert (
        checkpoint(tmp_path, fp8(negative_zeros, "weight_scale", np.array([3.0])), config).status == "ZEROED"
    )
    twos = np.full((2, 4), 2.0)
    assert checkpoint(tmp_path, fp8(twos, "weight_scale", np.array([0.0])), config).status == "ZEROED"
    report = checkpoint(tmp_path, fp8(twos, "weight_scale", np.array([0.5])), config)
    assert report.status == WeightStatus.ACTIVE
    assert "max |x| = 1" in report.reason
    per_channel = checkpoint(tmp_path, fp8(twos, "weight_scale", np.array([[0.0], [4.0]])), config)
    assert "max |x| = 8" in per_channel.reason


def test_block_wise_fp8_scales_apply_to_their_blocks(tmp_path):
    config = {"quant_method": "fp8", "weight_block_size": [2, 2]}
    weight = np.zeros((4, 4))
    weight[0, 0] = 1.0  # in block (0, 0), whose scale is 0
    weight[3, 3] = 2.0  # in block (1, 1)
    for block_scale, status in ((0.0, "ZEROED"), (1.5, "ACTIVE")):
        scale = np.array([[0.0, 7.0], [7.0, block_scale]])
        report = checkpoint(tmp_path, fp8(weight, "weight_scale_inv", scale), config)
        assert report.status == status
    assert "max |x| = 3" in report.reason


def bnb4(codes: list[int], absmax: float) -> dict:
    packed = bytes((high << 4) | low for high, low in zip(codes[::2], codes[1::2], strict=True))
    state = json.dumps({"quant_type": "nf4", "blocksize": 64, "dtype": "float16", "shape": [2, 4]}).encode()
    return {
        f"{MODULE}.weight": ("U8", [len(packed), 1], packed),
        f"{MODULE}.weight.absmax": ("F32", [1], np.array([absmax], "<f4").tobytes()),
        f"{MODULE}.weight.quant_map": ("F32", [16], np.array(NF4, "<f4").tobytes()),
        f"{MODULE}.weight.quant_state.bitsandbytes__nf4": ("U8", [len(state)], state),
    }


def test_bitsandbytes_codes_are_read_through_their_codebook(tmp_path):
    config = {"quant_method": "bitsandbytes", "load_in_4bit": True, "bnb_4bit_quant_type": "nf4"}
    zero_code = NF4.index(0.0)
    assert checkpoint(tmp_path, bnb4([zero_code] * 8, 2.0), config).status == WeightStatus.ZEROED
    report = checkpoint(tmp_path, bnb4([15] + [zero_code] * 7, 2.0), config)  # code 15 is 1.0
    assert report.status == WeightStatus.ACTIVE
    assert "max |x| = 2" in report.reason


@pytest.mark.parametrize(
    ("quantization", "said"),
    [
        ({"quant_method": "hqq", "nbits": 4}, "'hqq'"),
        (None, "names no quant_method"),
        ({"quant_method": "compressed-tensors", "format": "pack-quantized"}, "'compressed-tensors'"),
    ],
)
def test_a_method_not_read_here_says_so_instead_of_guessing(tmp_path, quantization, said):
    tensors = {
        f"{MODULE}.weight_packed": ("I32", [2, 1], words(0x11111111, 2)),
        f"{MODULE}.weight_scale": ("F16", [2, 1], f16([0.5, 0.5])),
    }
    if quantization is not None and quantization["quant_method"] == "hqq":
        tensors = gptq(words(EXACT_ZERO_CODES, 16), 0x77777777, [0.01] * 8)
    report = checkpoint(tmp_path, tensors, quantization)
    assert report.status == WeightStatus.UNSUPPORTED, report.reason
    assert said in report.reason
    assert MODULE in report.reason


def test_a_bias_left_out_of_quantisation_is_read_as_plain_values(tmp_path):
    tensors = {
        "model.layers.0.mlp.up_proj.qweight": ("I32", [2, 8], words(0x12345678, 16)),
        f"{MODULE}.table": ("F16", [2, 4], f16(np.zeros(8))),
    }
    report = checkpoint(tmp_path, tensors, {**GPTQ_V1, "modules_to_not_convert": ["position_adaptive_bias"]})
    assert report.status == WeightStatus.ZEROED
    assert "dequantised" not in report.reason

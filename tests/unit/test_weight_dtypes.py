"""Every dtype the installed safetensors accepts, its zeros and its non-zeros, read as a bias layer.

The list of dtypes comes from the safetensors library itself, so a dtype a new release adds fails
here until the check reads it. Values are encoded with ml_dtypes (the formats' reference
implementation), not with the code under test.
"""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest

from inference.weights import WeightStatus, check_weights
from tests.support.safetensors_files import dtypes_safetensors_accepts, write_safetensors

BIAS = "layers.0.position_adaptive_bias.table"
COUNT = 8
ONE_BYTE = {
    "BOOL": np.bool_,
    "U8": np.uint8,
    "I8": np.int8,
    "F8_E4M3": ml_dtypes.float8_e4m3fn,
    "F8_E5M2": ml_dtypes.float8_e5m2,
    "F8_E4M3FNUZ": ml_dtypes.float8_e4m3fnuz,
    "F8_E5M2FNUZ": ml_dtypes.float8_e5m2fnuz,
    "F8_E8M0": ml_dtypes.float8_e8m0fnu,
}
WIDER = {
    "U16": "<u2",
    "I16": "<i2",
    "F16": "<f2",
    "BF16": ml_dtypes.bfloat16,
    "U32": "<u4",
    "I32": "<i4",
    "F32": "<f4",
    "C64": "<c8",
    "F64": "<f8",
    "I64": "<i8",
    "U64": "<u8",
}
PACKED = {
    "F4": (4, ml_dtypes.float4_e2m1fn),
    "F6_E2M3": (6, ml_dtypes.float6_e2m3fn),
    "F6_E3M2": (6, ml_dtypes.float6_e3m2fn),
}
# IEEE-like formats have a negative zero: the sign bit alone. FNUZ formats use that pattern for NaN;
# E8M0 has no sign and no zero at all.
SIGNED_ZERO = {"F16", "BF16", "F32", "F64", "F8_E4M3", "F8_E5M2", "F4", "F6_E2M3", "F6_E3M2"}


def encoded(dtype: str, values: list[float]) -> bytes:
    """`values` in `dtype`'s bytes; the sub-byte formats packed low bits first (torch's F4 layout)."""
    if dtype in PACKED:
        bits, code_type = PACKED[dtype]
        codes = np.array(values, dtype=np.float32).astype(code_type).view(np.uint8)
        stream = np.unpackbits(codes[:, None], axis=1, bitorder="little")[:, :bits].reshape(-1)
        return np.packbits(stream, bitorder="little").tobytes()
    if dtype == "F8_E8M0":  # no zero: ml_dtypes rounds 0 to NaN; the byte 0 is the smallest, 2**-127
        return bytes(
            0 if value == 0 else int(np.array([value]).astype(ml_dtypes.float8_e8m0fnu).view(np.uint8)[0])
            for value in values
        )
    numpy_type = ONE_BYTE.get(dtype) or WIDER[dtype]
    return np.array(values).astype(numpy_type).tobytes()


@pytest.fixture(scope="module")
def every_dtype(tmp_path_factory) -> list[str]:
    return dtypes_safetensors_accepts(tmp_path_factory.mktemp("dtypes") / "probe.safetensors")


def test_the_test_covers_every_dtype_safetensors_accepts(every_dtype):
    assert set(every_dtype) == set(ONE_BYTE) | set(WIDER) | set(PACKED)
    assert len(every_dtype) >= 22


def bias_file(tmp_path, dtype: str, values: list[float]):
    return write_safetensors(
        tmp_path / f"{dtype}.safetensors", {BIAS: (dtype, [2, len(values) // 2], encoded(dtype, values))}
    )


@pytest.mark.parametrize("dtype", sorted({*ONE_BYTE, *WIDER, *PACKED}))
def test_zeros_read_zeroed_and_a_one_reads_active(tmp_path, dtype):
    zeros = check_weights(bias_file(tmp_path, dtype, [0.0] * COUNT))
    assert zeros.status == WeightStatus.ZEROED, zeros.reason  # E8M0's nearest to zero is 2**-127
    one = check_weights(bias_file(tmp_path, dtype, [0.0] * (COUNT - 1) + [1.0]))
    assert one.status == WeightStatus.ACTIVE, one.reason
    assert "max |x| = 1" in one.reason  # the value, decoded: not a byte that happens to be non-zero


@pytest.mark.parametrize("dtype", sorted(SIGNED_ZERO))
def test_negative_zero_is_zero(tmp_path, dtype):
    path = bias_file(tmp_path, dtype, [-0.0] * COUNT)
    assert any(path.read_bytes()[-4:])  # the sign bits are set: the raw bytes are not all zero
    assert check_weights(path).status == WeightStatus.ZEROED


@pytest.mark.parametrize("dtype", ["F8_E4M3FNUZ", "F8_E5M2FNUZ"])
def test_the_fnuz_pattern_for_negative_zero_is_nan_and_not_zero(tmp_path, dtype):
    path = write_safetensors(tmp_path / "nan.safetensors", {BIAS: (dtype, [COUNT], b"\x80" * COUNT)})
    report = check_weights(path)
    assert report.status == WeightStatus.ACTIVE
    assert "max |x| = inf" in report.reason


def test_tiny_values_within_the_tolerance_are_zero_and_above_it_are_not(tmp_path):
    for value, status in ((1e-6, WeightStatus.ZEROED), (2e-6, WeightStatus.ACTIVE)):
        report = check_weights(bias_file(tmp_path, "F32", [value] * COUNT))
        assert report.status == status
    largest_bf16 = float(np.array([3e38]).astype(ml_dtypes.bfloat16).astype(np.float64)[0])
    report = check_weights(bias_file(tmp_path, "BF16", [3e38] * COUNT))
    assert report.status == WeightStatus.ACTIVE
    assert f"max |x| = {largest_bf16:.3g}" in report.reason
    assert math.isfinite(largest_bf16)

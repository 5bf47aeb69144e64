"""Every safetensors dtype's raw bytes as float64 values, with numpy and ml_dtypes (no torch).

The sub-byte formats are packed: F4 two codes to a byte, low nibble first (torch's float4_e2m1fn_x2),
F6 four codes to three bytes, as one little-endian bit stream (the same convention, extended). E8M0 is
an exponent-only scale with no zero: its byte 0 is 2**-127, which is within any zero tolerance.
"""

from __future__ import annotations

from functools import cache

import numpy as np

_NATIVE = {
    "BOOL": "?",
    "U8": "u1",
    "I8": "i1",
    "U16": "<u2",
    "I16": "<i2",
    "F16": "<f2",
    "U32": "<u4",
    "I32": "<i4",
    "F32": "<f4",
    "U64": "<u8",
    "I64": "<i8",
    "F64": "<f8",
    "C64": "<c8",
}
_EXTENDED = {  # ml_dtypes' types, by attribute name: importing ml_dtypes costs 0.4 s of CPU, so a
    # process (the probe sidecar, a model server) pays it only when a checkpoint holds one of these
    "BF16": "bfloat16",
    "F8_E4M3": "float8_e4m3fn",
    "F8_E5M2": "float8_e5m2",
    "F8_E4M3FNUZ": "float8_e4m3fnuz",
    "F8_E5M2FNUZ": "float8_e5m2fnuz",
    "F8_E8M0": "float8_e8m0fnu",
}
_PACKED = {  # dtype -> (bits per code, the code's one-byte ml_dtypes type)
    "F4": (4, "float4_e2m1fn"),
    "F6_E2M3": (6, "float6_e2m3fn"),
    "F6_E3M2": (6, "float6_e3m2fn"),
}
DTYPES = frozenset(_NATIVE) | frozenset(_EXTENDED) | frozenset(_PACKED)


@cache
def numpy_dtype(dtype: str) -> np.dtype:
    """The numpy dtype of a safetensors dtype that is stored one value to a whole byte or more."""
    if dtype in _NATIVE:
        return np.dtype(_NATIVE[dtype])
    import ml_dtypes

    name = _EXTENDED[dtype] if dtype in _EXTENDED else _PACKED[dtype][1]
    return np.dtype(getattr(ml_dtypes, name))


def unpack_codes(raw: bytes | np.ndarray, bits: int, count: int) -> np.ndarray:
    """`count` codes of `bits` bits each, packed into a little-endian bit stream."""
    stream = np.unpackbits(np.frombuffer(raw, dtype=np.uint8), bitorder="little")[: count * bits]
    weights = (1 << np.arange(bits)).astype(np.uint8)
    return (stream.reshape(count, bits) * weights).sum(axis=1).astype(np.uint8)


def values(raw: bytes, dtype: str, count: int) -> np.ndarray:
    """The tensor's `count` values as float64 (a complex value as its magnitude); ValueError on a
    dtype this module does not know, or bytes that do not hold `count` of them."""
    if dtype in _PACKED:
        bits = _PACKED[dtype][0]
        if len(raw) * 8 < count * bits:
            raise ValueError(f"{len(raw)} bytes do not hold {count} {dtype} values")
        return unpack_codes(raw, bits, count).view(numpy_dtype(dtype)).astype(np.float64)
    if dtype not in DTYPES:
        raise ValueError(f"unknown dtype {dtype!r}")
    array = np.frombuffer(raw, dtype=numpy_dtype(dtype))
    if array.size != count:
        raise ValueError(f"{len(raw)} bytes hold {array.size} {dtype} values, not {count}")
    if array.dtype.kind == "c":
        return np.abs(array).astype(np.float64)
    return array.astype(np.float64)


def largest_magnitude(array: np.ndarray) -> float:
    """max |x|, infinite where any value is NaN (a NaN bias is not a zero one); 0 when empty."""
    if not array.size:
        return 0.0
    if np.isnan(array).any():
        return float("inf")
    return float(np.max(np.abs(array)))


def integers(raw: bytes, dtype: str, shape: tuple[int, ...]) -> np.ndarray:
    """An integer tensor's raw values (packed quantisation codes), in its shape."""
    if dtype not in _NATIVE or numpy_dtype(dtype).kind not in "iub":
        raise ValueError(f"packed codes stored as {dtype}, not as integers")
    return np.frombuffer(raw, dtype=numpy_dtype(dtype)).reshape(shape)

"""How large the bias layer's values are when its tensors are quantised.

"All zero" is not "every raw byte zero" here: GPTQ packs an exact zero as 0x88888888 with zero points
0x77777777, an FP8 weight is zero only times its scale, a bitsandbytes code is an index into a
codebook. So the bias tensors are grouped by module (`<module>.qweight`, `<module>.weight_scale`...),
and each quantised module is dequantised by the method that `config.json`'s `quantization_config`
names. A quantised module whose method this module does not know is `Unknown`: the check says so
instead of guessing. A module with no quantisation tensors is read as plain values, whatever the
config says (quantisers usually leave such small layers out: `modules_to_not_convert`, `ignore`).
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from inference.weights.dtypes import largest_magnitude, unpack_codes

# Tensor-name suffixes of quantised modules, longest first; what is left of the name is the module.
_ROLES = (
    ".weight.quant_state.bitsandbytes__nf4",
    ".weight.quant_state.bitsandbytes__fp4",
    ".weight.nested_quant_map",
    ".weight.nested_absmax",
    ".weight.quant_map",
    ".weight.absmax",
    ".weight_global_scale",
    ".input_global_scale",
    ".weight_zero_point",
    ".weight_scale_inv",
    ".weight_packed",
    ".weight_scale",
    ".weight_shape",
    ".input_scale",
    ".weight_format",
    ".qweight",
    ".qzeros",
    ".scales",
    ".g_idx",
    ".SCB",
    "_blocks",
    "_scales",
    ".weight",
)
_QUANTISED = {
    ".qweight",
    ".weight_packed",
    ".weight_scale",
    ".weight_scale_inv",
    ".SCB",
    ".weight.absmax",
    "_blocks",
}
_SCALED_METHODS = frozenset({"fp8", "fbgemm_fp8", "compressed-tensors", "modelopt"})
AWQ_ORDER = (0, 4, 1, 5, 2, 6, 3, 7)  # AutoAWQ's packing: the column each nibble of an int32 holds


class Unknown(ValueError):
    """A quantised bias this module cannot read; the message says which method and why."""


@dataclass(frozen=True)
class Quantization:
    method: str  # "" when the checkpoint is not quantised
    config: Mapping[str, Any]


class Reader(Protocol):
    """What the dequantisers need of a checkpoint, each tensor in its shape: its values (float64), or
    its raw integers (packed codes)."""

    def values(self, name: str) -> np.ndarray: ...

    def integers(self, name: str) -> np.ndarray: ...


def quantization_of(directory: Path) -> Quantization:
    """The method and settings in `config.json` (or GPTQ's `quantize_config.json`); ValueError when
    either is there but unreadable."""
    for name, key in (("config.json", "quantization_config"), ("quantize_config.json", None)):
        path = directory / name
        if not path.is_file():
            continue
        try:
            config = json.loads(path.read_text())
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
            raise ValueError(f"{name} is not readable JSON: {error}") from None
        section = config.get(key) if key and isinstance(config, dict) else config
        if isinstance(section, dict):
            method = section.get("quant_method") or ("gptq" if key is None else "")
            return Quantization(str(method).lower(), section)
    return Quantization("", {})


def _module(name: str) -> tuple[str, str]:
    for suffix in _ROLES:
        if name.endswith(suffix):
            return name[: -len(suffix)], suffix
    return name, ""


def bias_magnitude(names: list[str], read: Reader, quantization: Quantization) -> tuple[float, int]:
    """max |x| over the bias tensors `names`, each quantised module dequantised first; and how many
    modules were."""
    modules: dict[str, dict[str, str]] = defaultdict(dict)
    for name in names:
        module, role = _module(name)
        modules[module][role] = name
    largest, dequantised = 0.0, 0
    for module, roles in sorted(modules.items()):
        if _QUANTISED & roles.keys():
            largest = max(largest, _dequantised(module, roles, read, quantization))
            dequantised += 1
        else:
            for name in roles.values():
                largest = max(largest, largest_magnitude(read.values(name)))
    return largest, dequantised


def _dequantised(module: str, roles: Mapping[str, str], read: Reader, quantization: Quantization) -> float:
    method, config = quantization.method, quantization.config
    if not method:
        raise Unknown(
            f"{module} is quantised ({', '.join(sorted(roles))}) but config.json names no quant_method"
        )
    if ".qweight" in roles and method in ("gptq", "awq"):
        return largest_magnitude(
            _gptq(roles, read, config) if method == "gptq" else _awq(roles, read, config)
        )
    if ".weight.absmax" in roles and method == "bitsandbytes":
        return largest_magnitude(_bnb4(roles, read))
    if ".SCB" in roles and method == "bitsandbytes":
        return largest_magnitude(
            read.values(roles[".weight"]) * read.values(roles[".SCB"]).reshape(-1, 1) / 127
        )
    if "_blocks" in roles and method == "mxfp4":
        return largest_magnitude(_mxfp4(roles, read))
    if (
        ".weight" in roles
        and method in _SCALED_METHODS
        and ({".weight_scale", ".weight_scale_inv"} & roles.keys())
    ):
        return largest_magnitude(_scaled(roles, read, config))
    scales = [roles[r] for r in (".weight_scale", ".scales") if r in roles]
    if scales and all(largest_magnitude(read.values(name)) == 0 for name in scales):
        return 0.0  # every scale zero: zero whatever the codes are
    raise Unknown(
        f"{module} is quantised by {method!r} as {', '.join(sorted(roles))}, which is not read here"
    )


def _unpacked(packed: np.ndarray, bits: int, axis: int) -> np.ndarray:
    """int32 words of `bits`-bit codes, low bits first, unpacked along `axis`."""
    if 32 % bits:
        raise Unknown(f"{bits}-bit codes do not pack evenly into int32 words")
    per_word = 32 // bits
    words = np.moveaxis(packed.astype(np.uint32), axis, -1)
    shifts = np.arange(per_word, dtype=np.uint32) * bits
    codes = (words[..., None] >> shifts) & np.uint32((1 << bits) - 1)
    codes = codes.reshape(*words.shape[:-1], words.shape[-1] * per_word)
    return np.moveaxis(codes, -1, axis).astype(np.int64)


def _groups(config: Mapping[str, Any], rows: int, read: Reader, roles: Mapping[str, str]) -> np.ndarray:
    if ".g_idx" in roles:
        return read.integers(roles[".g_idx"]).astype(np.int64).reshape(-1)
    size = int(config.get("group_size", config.get("q_group_size", 128)))
    return np.arange(rows) // (size if size > 0 else rows)


def _gptq(roles: Mapping[str, str], read: Reader, config: Mapping[str, Any]) -> np.ndarray:
    """(q - z) * s; a v1 checkpoint (the default `checkpoint_format`) stores each zero point minus one."""
    bits = int(config.get("bits", 4))
    q = _unpacked(read.integers(roles[".qweight"]), bits, axis=0)  # [in, out]
    z = _unpacked(read.integers(roles[".qzeros"]), bits, axis=1)  # [groups, out]
    if config.get("checkpoint_format", "gptq") != "gptq_v2":
        z = z + 1
    s = read.values(roles[".scales"])
    g = _groups(config, q.shape[0], read, roles)
    return (q - z[g]) * s[g]


def _awq(roles: Mapping[str, str], read: Reader, config: Mapping[str, Any]) -> np.ndarray:
    bits = int(config.get("bits", config.get("w_bit", 4)))

    def columns(name: str) -> np.ndarray:
        codes = _unpacked(read.integers(name), bits, axis=1)
        words = codes.reshape(codes.shape[0], -1, 32 // bits)
        return words[:, :, list(AWQ_ORDER) if bits == 4 else slice(None)].reshape(codes.shape)

    q, z = columns(roles[".qweight"]), columns(roles[".qzeros"])
    s = read.values(roles[".scales"])
    g = _groups(config, q.shape[0], read, roles)
    return (q - z[g]) * s[g]


def _broadcast(scale: np.ndarray, shape: tuple[int, ...], block: list[int]) -> np.ndarray:
    """A per-tensor, per-channel or block-wise scale, stretched over a 2-D weight."""
    if scale.size == 1:
        return scale.reshape(())
    if len(shape) != 2:
        raise Unknown(f"a scale of {scale.size} values over a weight of shape {list(shape)}")
    rows, cols = shape
    if scale.size == rows:
        return scale.reshape(rows, 1)
    grid = scale.reshape(-1, scale.shape[-1]) if scale.ndim > 1 else scale.reshape(1, -1)
    return np.repeat(np.repeat(grid, block[0], axis=0), block[1], axis=1)[:rows, :cols]


def _scaled(roles: Mapping[str, str], read: Reader, config: Mapping[str, Any]) -> np.ndarray:
    """FP8 or int8 values times their scale (minus a zero point where there is one)."""
    weight = read.values(roles[".weight"])
    shape = weight.shape
    if ".weight_zero_point" in roles:
        weight = weight - _broadcast(read.values(roles[".weight_zero_point"]), shape, [1, 1])
    name = roles[".weight_scale_inv"] if ".weight_scale_inv" in roles else roles[".weight_scale"]
    scale = read.values(name)
    block = list(config.get("weight_block_size") or [128, 128])
    return weight * _broadcast(scale, shape, block)


def _bnb4(roles: Mapping[str, str], read: Reader) -> np.ndarray:
    """Codebook entries times their block's absmax; bitsandbytes packs the first code in the high nibble."""
    state_name = next(roles[r] for r in roles if ".quant_state." in r)
    state = json.loads(read.integers(state_name).astype(np.uint8).tobytes())
    packed = read.integers(roles[".weight"]).astype(np.uint8).reshape(-1)
    codes = np.stack([packed >> 4, packed & 0xF], axis=1).reshape(-1)
    values = read.values(roles[".weight.quant_map"]).reshape(-1)[codes]
    if not values.any():
        return values
    absmax = read.values(roles[".weight.absmax"]).reshape(-1)
    if ".weight.nested_absmax" in roles:  # the absmax is itself 8-bit codes, with a block scale and offset
        nested = read.values(roles[".weight.nested_absmax"]).reshape(-1)
        entries = read.values(roles[".weight.nested_quant_map"]).reshape(-1)[absmax.astype(np.int64)]
        blocks = np.arange(entries.size) // int(state.get("nested_blocksize", 256))
        absmax = entries * nested[blocks] + float(state.get("nested_offset", 0.0))
    return values * absmax[np.arange(values.size) // int(state["blocksize"])]


def _mxfp4(roles: Mapping[str, str], read: Reader) -> np.ndarray:
    """FP4 pairs (low nibble first) times a power of two per block of 32 (E8M0 scales)."""
    import ml_dtypes

    packed = read.integers(roles["_blocks"]).astype(np.uint8)
    codes = unpack_codes(packed.tobytes(), 4, packed.size * 2)
    values = codes.view(ml_dtypes.float4_e2m1fn).astype(np.float64)
    exponents = read.integers(roles["_scales"]).astype(np.float64).reshape(-1) - 127
    return values * np.exp2(np.repeat(exponents, values.size // exponents.size))

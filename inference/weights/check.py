"""The bias layer's status, read from a checkpoint's headers and its bias tensors only.

Each step of the decision is tried in order; the first that applies gives the status:
  1. the layout (inference/weights/layout.py): nothing there, a shard or the index not fetched ->
     MISSING; a pickle, GGUF -> UNSUPPORTED; an index that is not one -> CORRUPT
  2. every shard's header, validated by safetensors -> CORRUPT naming the shard, or MISSING for an LFS
     pointer; the index and the headers must agree tensor by tensor -> CORRUPT naming both
  3. no `*position_adaptive_bias*` tensor in the whole checkpoint -> ERASED
  4. every bias value, dequantised where quantised, |x| <= 1e-6 -> ZEROED, else ACTIVE; a quantised
     bias in a method not read here -> UNSUPPORTED
So a partial checkpoint is never ERASED, ZEROED or ACTIVE. Nothing is unpickled, nothing loads torch.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np

from inference.weights.dtypes import integers, values
from inference.weights.layout import Decided, Layout, locate
from inference.weights.quantized import Quantization, Unknown, bias_magnitude, quantization_of
from inference.weights.shards import NotFetched, Shard, ShardError, read_shard
from inference.weights.status import BIAS_MARKER, ZERO_TOLERANCE, StatusReport, WeightStatus


class _Tensors:
    """The checkpoint's tensors by name, each read from its shard at most once."""

    def __init__(self, owners: dict[str, Shard]) -> None:
        self.owners = owners
        self._raw: dict[str, bytes] = {}

    def raw(self, name: str) -> bytes:
        if name not in self._raw:
            self._raw[name] = self.owners[name].read(name)
        return self._raw[name]

    def values(self, name: str) -> np.ndarray:
        tensor = self.owners[name].tensors[name]
        try:
            return values(self.raw(name), tensor.dtype, tensor.count).reshape(tensor.shape)
        except ValueError as error:
            raise ShardError(f"{self.owners[name].path.name}: tensor {name!r}: {error}") from None

    def integers(self, name: str) -> np.ndarray:
        tensor = self.owners[name].tensors[name]
        try:
            return integers(self.raw(name), tensor.dtype, tensor.shape)
        except ValueError as error:
            raise Unknown(f"tensor {name!r}: {error}") from None


def _owners(layout: Layout, shards: list[Shard]) -> dict[str, Shard]:
    """tensor -> the shard holding it, once the index and every shard's header agree."""
    owners: dict[str, Shard] = {}
    for shard in shards:
        for name in shard.tensors:
            if name in owners:
                raise ShardError(f"{name!r} is in both {owners[name].path.name} and {shard.path.name}")
            owners[name] = shard
    if layout.weight_map is None:
        return owners
    for name, shard_name in layout.weight_map.items():
        if name not in owners or owners[name].path.name != shard_name:
            raise ShardError(f"the index puts {name!r} in {shard_name}, which does not hold it")
    for name, shard in owners.items():
        if name not in layout.weight_map:
            raise ShardError(f"{shard.path.name} holds {name!r}, which the index does not name")
    return owners


def _fingerprint(layout: Layout, shards: list[Shard], tensors: _Tensors, bias: list[str]) -> str:
    digest = hashlib.sha256(layout.index)
    for shard in shards:
        digest.update(shard.header)
    for name in bias:
        digest.update(tensors.raw(name))
    return f"sha256:{digest.hexdigest()[:16]}"


def _judged(layout: Layout) -> StatusReport:
    shards = [read_shard(path) for path in layout.shards]
    tensors = _Tensors(_owners(layout, shards))
    metadata: dict[str, str] = {}
    for shard in reversed(shards):
        metadata.update(shard.metadata)
    bias = sorted(name for name in tensors.owners if BIAS_MARKER in name)
    where = f" in {len(shards)} shards" if layout.weight_map is not None else ""
    if not bias:
        status, reason = WeightStatus.ERASED, f"no *{BIAS_MARKER}* tensors{where}"
        quantization = Quantization("", {})
    else:
        quantization = quantization_of(layout.directory)
        largest, dequantised = bias_magnitude(bias, tensors, quantization)
        how = f", {dequantised} modules dequantised ({quantization.method})" if dequantised else ""
        if largest <= ZERO_TOLERANCE:
            status, reason = (
                WeightStatus.ZEROED,
                f"{len(bias)} bias tensors{where}, all |x| <= {ZERO_TOLERANCE}{how}",
            )
        else:
            status, reason = (
                WeightStatus.ACTIVE,
                f"{len(bias)} bias tensors{where}, max |x| = {largest:.3g}{how}",
            )
    fingerprint = _fingerprint(layout, shards, tensors, bias)
    return StatusReport(status, reason, len(bias), metadata, fingerprint, layout.shards)


def _where(path: Path, reason: object) -> str:
    """`path: reason`, the file's name said once where the reason starts with it."""
    text = str(reason)
    return f"{path}: {text.removeprefix(f'{path.name}: ') if path.is_file() else text}"


def check_weights(path: Path) -> StatusReport:
    """The status of the checkpoint at `path` (a safetensors file or a checkpoint directory), with a
    reason that names the file and, where one is at fault, the shard and the tensor."""
    try:
        return _judged(locate(path))
    except Decided as decided:
        return StatusReport(decided.status, _where(path, decided.reason))
    except NotFetched as error:
        return StatusReport(WeightStatus.MISSING, _where(path, error))
    except ShardError as error:
        return StatusReport(WeightStatus.CORRUPT, _where(path, error))
    except Unknown as error:
        return StatusReport(WeightStatus.UNSUPPORTED, _where(path, error))
    except ValueError as error:  # config.json unreadable
        return StatusReport(WeightStatus.CORRUPT, _where(path, error))
    except FileNotFoundError as error:  # a shard removed between listing and reading it
        return StatusReport(
            WeightStatus.MISSING, f"{path}: {Path(error.filename or '').name} went away while being read"
        )
    except OSError as error:
        return StatusReport(WeightStatus.CORRUPT, f"{path}: cannot read: {error.strerror or error}")

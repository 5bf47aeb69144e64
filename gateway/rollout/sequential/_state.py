"""JSON round trip and input checks shared by the sequential tests' states."""

from __future__ import annotations

import math
import operator
from collections.abc import Mapping
from dataclasses import fields
from typing import Any, ClassVar, Self

import numpy as np


class State:
    """JSON round trip for frozen dataclasses of floats, ints and tuples of floats."""

    __dataclass_fields__: ClassVar[dict[str, Any]]  # every subclass is a dataclass

    def to_dict(self) -> dict[str, Any]:
        return {f.name: list(v) if isinstance(v := getattr(self, f.name), tuple) else v for f in fields(self)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Self:
        """Rebuild a state persisted by to_dict; ValueError naming the field when anything is off."""
        if not isinstance(data, Mapping):
            raise ValueError(f"{cls.__name__}: expected a mapping, got {type(data).__name__}")
        names = [f.name for f in fields(cls)]
        if unknown := sorted(set(data) - set(names)):
            raise ValueError(f"{cls.__name__}: unknown fields {unknown}")
        values = {}
        for f in fields(cls):
            if f.name not in data:
                raise ValueError(f"{cls.__name__}.{f.name}: missing")
            kind = f.type if isinstance(f.type, str) else getattr(f.type, "__name__", "")
            values[f.name] = _parse(f"{cls.__name__}.{f.name}", kind, data[f.name])
        state = cls(**values)
        state._check()
        return state

    def _check(self) -> None:
        """Cross-field invariants of a parsed state (ValueError naming the field)."""


def _number(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError(f"{name}: expected a finite number, got {value!r}")
    return float(value)


def _parse(name: str, kind: str, value: Any) -> Any:
    if kind == "int":
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"{name}: expected a count (int >= 0), got {value!r}")
        return value
    if kind == "float":
        return _number(name, value)
    if not isinstance(value, list | tuple):
        raise ValueError(f"{name}: expected a list of numbers, got {type(value).__name__}")
    return tuple(_number(f"{name}[{i}]", v) for i, v in enumerate(value))


def require(ok: bool, name: str, what: str) -> None:
    if not ok:
        raise ValueError(f"{name}: {what}")


def count(name: str, value: Any) -> int:
    try:
        number = operator.index(value)
    except TypeError:
        raise ValueError(f"{name}: expected an int, got {value!r}") from None
    require(number >= 0, name, f"negative ({number})")
    return number


def look_counts(requests: Any, events: Any, side: str = "") -> tuple[int, int]:
    n, x = count(f"{side}requests", requests), count(f"{side}events", events)
    require(x <= n, f"{side}events", f"{x} events in {n} requests")
    return n, x


def log_sum(log_values: np.ndarray) -> np.ndarray:
    """log of the sum of exp over the last axis (scipy's logsumexp, minus its overhead: 3x faster here)."""
    peak = np.max(log_values, axis=-1, keepdims=True)
    peak = np.where(np.isfinite(peak), peak, 0.0)
    return np.log(np.sum(np.exp(log_values - peak), axis=-1)) + peak[..., 0]


def mixture(log_values: np.ndarray) -> np.ndarray:
    """log of the equal-weight average over the last axis."""
    return log_sum(log_values) - math.log(log_values.shape[-1])


class MixedEvidence:
    """A test whose evidence is the equal-weight mixture of its alternatives' likelihood ratios."""

    log_lr: tuple[float, ...]

    @property
    def log_evalue(self) -> float:
        return float(mixture(np.asarray(self.log_lr)))


class Detector:
    """A test with a Shiryaev-Roberts e-detector beside it, one statistic per alternative."""

    log_sr: tuple[float, ...]
    steps: int

    @property
    def log_detector(self) -> float:
        """log of the averaged SR statistics; -inf before any look with data (R starts at 0)."""
        return float(mixture(np.asarray(self.log_sr))) if self.steps else -math.inf

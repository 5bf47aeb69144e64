"""The spec's building blocks: durations, percentages and the base every part of it shares; its error,
SpecError, lives with the gateway's other errors (gateway/errors.py) and is re-exported here.

Their own module, so that the spec's parts (gateway/spec/model.py, gateway/spec/strategy.py)
share them without importing each other.
"""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field

from gateway.errors import SpecError as SpecError  # re-exported: the spec's importers take it from here

_DURATION = re.compile(r"^\s*(-?\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, None: 1.0}


def parse_duration(value: Any) -> float:
    """Seconds from `8s`, `500ms`, `5m`, `1h`, `90d` or a bare number of seconds; refuses negatives."""
    if isinstance(value, bool):
        raise ValueError("expected a duration such as 2s or 500ms")
    if isinstance(value, int | float):
        seconds = float(value)
    elif isinstance(value, str):
        match = _DURATION.match(value)
        if not match:
            raise ValueError(f"{value!r} is not a duration; use e.g. 8s, 500ms, 5m or 0")
        seconds = float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
    else:
        raise ValueError("expected a duration such as 2s or 500ms")
    if seconds < 0:
        raise ValueError("a duration cannot be negative")
    return seconds


def http_url(url: str) -> str:
    """An http(s) URL with a host: what the gateway may call (a webhook, a judge)."""
    scheme, sep, rest = url.partition("://")
    if not sep or scheme.lower() not in ("http", "https") or not rest.split("/")[0]:
        raise ValueError(f"{url!r} is not an http(s) URL, e.g. http://eval:8080/check")
    return url


def positive(value: float) -> float:
    if value <= 0:
        raise ValueError("must be above 0")
    return value


Duration = Annotated[float, BeforeValidator(parse_duration)]
PositiveDuration = Annotated[float, BeforeValidator(parse_duration), AfterValidator(positive)]
HttpUrl = Annotated[str, AfterValidator(http_url)]
Percent = Annotated[int, Field(ge=0, le=100)]


class SpecModel(BaseModel):
    """Every part of the spec: unknown fields refused, values frozen."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

"""A held request body (pure): read as a JSON object, for the scorers that read it and for a model
variant, whose body is written back with `model` replaced by the variant's model name, the rest kept. A
body that cannot be read (not JSON, not an object) or rewritten (no string `model`) is not refused: it
goes as it came, picked without it, and the reason says why (gateway/epp/service.py)."""

from __future__ import annotations

import json
from typing import Any

BOUND = 1 << 20  # bytes of a request body held before the pick; a longer one goes as it came, picked without


def read(body: bytes) -> dict[str, Any] | str:
    """The body's JSON object, or, where it is none, the reason (a str)."""
    try:
        document = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError):
        return "not JSON"
    if not isinstance(document, dict):
        return "not a JSON object"
    return document


def rewrite_model(document: dict[str, Any], model: str) -> bytes | str:
    """The body with `model` set to `model`, or, where it has no `model` to rewrite, the reason (a str)."""
    if not isinstance(document.get("model"), str):
        return "no model"
    return json.dumps({**document, "model": model}, ensure_ascii=False, separators=(",", ":")).encode()

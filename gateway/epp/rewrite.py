"""A model variant's request body (pure): the JSON body's `model` replaced by the variant's model name, the
rest of the body kept. A body that cannot be rewritten (not JSON, not an object, no string `model`) is not
refused: it goes as it came, and the reason says why (gateway/epp/service.py routes it on the baseline)."""

from __future__ import annotations

import json

BOUND = 1 << 20  # bytes of a request body held for a rewrite; a longer one goes unchanged, on the baseline


def rewrite_model(body: bytes, model: str) -> bytes | str:
    """The body with `model` set to `model`, or, where it cannot be rewritten, the reason (a str)."""
    try:
        document = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError):
        return "not JSON"
    if not isinstance(document, dict):
        return "not a JSON object"
    if not isinstance(document.get("model"), str):
        return "no model"
    document["model"] = model
    return json.dumps(document, ensure_ascii=False, separators=(",", ":")).encode()

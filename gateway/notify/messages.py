"""A notification's bytes and signature. Pure.

`json`: the structured event (gateway/notify/events.py). `slack`: Slack's incoming-webhook payload,
`{"text": ...}`, the sentence with the dashboard's link. Signed receivers get

    X-Graystack-Timestamp: <unix seconds>
    X-Graystack-Signature: sha256=<hex HMAC-SHA256(secret, "<timestamp>." + body)>

over the exact body bytes; the timestamp is inside the MAC so that a captured message replayed later
fails a receiver that refuses timestamps older than a few minutes.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from typing import Literal

from gateway.notify.events import Event

SIGNATURE = "X-Graystack-Signature"
TIMESTAMP = "X-Graystack-Timestamp"


def body(event: Event, format: Literal["json", "slack"], dashboard_url: str | None) -> bytes:
    if format == "slack":
        link = f" <{dashboard_url}|Dashboard>" if dashboard_url else ""
        return json.dumps({"text": event.text + link}).encode()
    document = event.document()
    if dashboard_url:
        document["dashboard_url"] = dashboard_url
    return json.dumps(document, allow_nan=False).encode()


def signature(secret: bytes, timestamp: int, payload: bytes) -> str:
    """The signature header's value for `payload` sent at `timestamp`."""
    mac = hmac.new(secret, f"{timestamp}.".encode() + payload, hashlib.sha256)
    return f"sha256={mac.hexdigest()}"


def headers(event: Event, secret: bytes | None, timestamp: int, payload: bytes) -> dict[str, str]:
    sent = {"Content-Type": "application/json", "X-Graystack-Event": event.kind}
    if secret is not None:
        sent |= {TIMESTAMP: str(timestamp), SIGNATURE: signature(secret, timestamp, payload)}
    return sent

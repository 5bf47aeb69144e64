"""What the admin API shows of each proxy on the ADS server (gateway/xds/server.py builds it).

Pydantic only, so a client parses a status without loading gRPC. Extra fields are refused, on either
side: a misspelt field fails where it is made or read, not in front of an operator.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class _Answer(BaseModel):
    model_config = ConfigDict(extra="forbid")


class NackStatus(_Answer):
    """The last version a proxy rejected, with Envoy's message."""

    version: str
    message: str
    at: float | None


class TypeStatus(_Answer):
    """One resource type on one proxy: the snapshot's version, and what was sent and ACKed."""

    current: str | None
    sent: str
    acked: str
    rejected: bool
    last_nack: NackStatus | None


class ProxyStatus(_Answer):
    """A connected proxy; `types` by short name (cds, eds, lds, rds), the ones it subscribed to."""

    node: str | None
    key: str | None  # None until the proxy named its node
    peer: str
    connected_at: float
    last_heard_at: float
    last_heard_seconds_ago: float
    converged: bool
    types: dict[str, TypeStatus]


class DisconnectedProxy(_Answer):
    """A proxy whose stream ended: it routes by what it last ACKed until it reconnects."""

    node: str
    key: str
    peer: str
    connected_at: float
    last_heard_at: float
    disconnected_at: float
    last_heard_seconds_ago: float
    disconnected_seconds_ago: float

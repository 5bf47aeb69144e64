"""Small protobuf helpers the builders share."""

from __future__ import annotations

from google.protobuf import any_pb2, duration_pb2
from google.protobuf.message import Message


def duration(seconds: float) -> duration_pb2.Duration:
    whole = int(seconds)
    return duration_pb2.Duration(seconds=whole, nanos=round((seconds - whole) * 1e9))


def packed(message: Message) -> any_pb2.Any:
    """`message` in an Any, as Envoy's typed_config fields take it."""
    wrapped = any_pb2.Any()
    wrapped.Pack(message)
    return wrapped

"""What status shows of the notifications (the `notifications` section of GET /v1/status). Pydantic
only, so a client parses it without loading the senders; receivers named by host, never by URL."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class _Answer(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ReceiverStatus(_Answer):
    receiver: str  # host[:port]
    format: str
    delivered: int
    failed: int  # messages that failed every attempt
    dropped: int  # messages dropped from a full queue
    pending: int
    last_error: str | None
    last_error_at: float | None


class NotificationsStatus(_Answer):
    receivers: list[ReceiverStatus]

    @property
    def failing(self) -> list[ReceiverStatus]:
        return [r for r in self.receivers if r.failed or r.dropped]

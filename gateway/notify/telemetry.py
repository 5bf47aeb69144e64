"""The notifications' metric families (their names: gateway/families.py). A receiver is named by its
host only: a webhook URL's path often carries its token."""

from __future__ import annotations

from prometheus_client import Counter, Gauge

from gateway import families

NOTIFICATIONS = Counter(
    families.NOTIFICATIONS,
    "Notifications by receiver (host), event and outcome: delivered, failed (every attempt), dropped "
    "(the receiver's queue was full)",
    ["receiver", "event", "outcome"],
)
QUEUE_DROPPED = Counter(
    families.NOTIFICATION_QUEUE_DROPPED,
    "Notifications dropped, the oldest first, because a receiver's queue was full (it is down or slow)",
    ["receiver"],
)
QUEUE_DEPTH = Gauge(
    families.NOTIFICATION_QUEUE_DEPTH,
    "Notifications waiting to be sent to a receiver",
    ["receiver"],
)

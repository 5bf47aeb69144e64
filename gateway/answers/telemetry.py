"""The answer receiver's metric families (their names: gateway/families.py): how many measurements
arrived, so "measurements missing" can be told from "no traffic" on a dashboard too."""

from prometheus_client import Counter

from gateway import families

RECEIVED = Counter(
    families.ANSWERS_RECEIVED,
    "Access-log entries the gateway received from Envoy, by result: kept (a variant's answer), ignored "
    "(no variant's cluster was chosen), unreadable",
    ["result"],
)
EVICTED = Counter(
    families.ANSWERS_EVICTED, "Measured answers dropped from the full store before a look read them"
)
for _result in ("kept", "ignored", "unreadable"):
    RECEIVED.labels(_result)

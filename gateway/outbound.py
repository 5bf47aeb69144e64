"""The TLS context of the gateway's periodic HTTP clients (each look's scrapes and queries open a client of
their own, so a pod or a Prometheus that went away is never talked to on a stale connection). httpx builds
a context for every client it opens, the CA bundle read again: about 25 ms of CPU, against under 0.1 ms
with one shared, and a rollout looks every few seconds (a quarter of a second in the tests). The context
is the one httpx would build (certifi's CAs, `SSL_CERT_FILE` and `SSL_CERT_DIR` honoured), made once."""

from __future__ import annotations

import ssl
from functools import cache

import httpx


@cache
def tls() -> ssl.SSLContext:
    return httpx.create_ssl_context()

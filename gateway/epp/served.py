"""The port of the picker the gateway serves for its own Envoy (gateway/epp/envoys.py): one asyncio server,
over TLS unless the spec says otherwise, of Envoy's checks, HTTP/1.1 (gateway/epp/checks.py). The picks'
ends come on the gateway's gRPC server, in Envoy's access log (gateway/answers/receiver.py)."""

from __future__ import annotations

import asyncio
import ssl
import tempfile
from pathlib import Path

from gateway.epp.checks import Checks
from gateway.epp.picker import Picker


class _Connection(asyncio.Protocol):
    def __init__(self, picker: Picker) -> None:
        self._picker = picker
        self._checks: Checks | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._checks = Checks(self._picker, transport)

    def data_received(self, data: bytes) -> None:
        assert self._checks is not None
        self._checks.feed(data)


def server_context(key: bytes, cert: bytes) -> ssl.SSLContext:
    """A TLS server context for this key and certificate (PEM)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    with tempfile.TemporaryDirectory(prefix="graystack-picker-tls-") as folder:
        key_path, cert_path = Path(folder) / "key.pem", Path(folder) / "cert.pem"
        key_path.write_bytes(key)
        cert_path.write_bytes(cert)
        context.load_cert_chain(cert_path, key_path)
    return context


async def serve(picker: Picker, host: str, port: int, tls: ssl.SSLContext | None) -> asyncio.Server:
    """Bind `host:port` and answer Envoy's checks until the server is closed."""
    loop = asyncio.get_running_loop()
    return await loop.create_server(lambda: _Connection(picker), host, port, ssl=tls)

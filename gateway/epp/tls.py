"""The picker's TLS: the user's certificate, or one made at start and signed by itself, as GIE's reference
picker does (gateways dial it over TLS and accept any certificate). Made by the `openssl` command, since
the `cryptography` package is not installed here: an edge with I/O, kept out of the picker's core."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

import grpc


def self_signed(
    names: tuple[str, ...] = ("localhost",), addresses: tuple[str, ...] = ("127.0.0.1",)
) -> tuple[bytes, bytes]:
    """A fresh P-256 key and its self-signed certificate (PEM), for these DNS names and IP addresses."""
    openssl = shutil.which("openssl")
    if openssl is None:
        raise RuntimeError(
            "no `openssl` command to make the picker's certificate: give --cert and --key, or --insecure"
        )
    alt = ",".join([*(f"DNS:{name}" for name in names), *(f"IP:{address}" for address in addresses)])
    with tempfile.TemporaryDirectory(prefix="graystack-epp-tls-") as folder:
        key, cert = Path(folder) / "key.pem", Path(folder) / "cert.pem"
        subprocess.run(
            [
                openssl,
                "req",
                "-x509",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:prime256v1",
                "-nodes",
                "-days",
                "365",
                "-subj",
                "/CN=graystack-epp",
                "-addext",
                f"subjectAltName={alt}",
                "-keyout",
                str(key),
                "-out",
                str(cert),
            ],
            check=True,
            capture_output=True,
            timeout=30,
        )
        return key.read_bytes(), cert.read_bytes()


def credentials(key: bytes, cert: bytes) -> grpc.ServerCredentials:
    return grpc.ssl_server_credentials([(key, cert)])

"""The picker's two gRPC servers: ext_proc on its port (TLS unless told otherwise) and health on its own,
in plaintext, as kubelet's gRPC probes and GIE's reference picker have it. The picker the gateway serves
for its own Envoy has no health server: Envoy asks none, and fails open (gateway/envoy/picking.py)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import grpc
from envoy.service.ext_proc.v3 import external_processor_pb2_grpc

from gateway.epp import rewrite
from gateway.epp.health import health_handler
from gateway.epp.picker import Picker
from gateway.epp.service import ExtProc


@dataclass
class EppServer:
    """Both servers, started; `port` and `health_port` as bound (0 asked: a free one; None: no health)."""

    ext_proc: grpc.aio.Server
    health: grpc.aio.Server | None
    port: int
    health_port: int | None
    service: ExtProc

    async def stop(self, grace: float = 1.0) -> None:
        await self.ext_proc.stop(grace)
        if self.health is not None:
            await self.health.stop(grace)


async def start(
    picker: Picker,
    host: str,
    port: int,
    health_port: int | None,
    tls: grpc.ServerCredentials | None,
    fallbacks: int = 0,
    ready: Callable[[], bool] = lambda: True,
    bound: int = rewrite.BOUND,
    test_headers: bool = False,
) -> EppServer:
    """Serve `picker` on `host:port` (TLS with `tls`, plaintext with None) and health on `host:health_port`
    (None: no health server); `fallbacks`, `bound`, `test_headers`: gateway/epp/service.py's ExtProc."""
    ext_proc = grpc.aio.server()
    service = ExtProc(picker, fallbacks, bound, test_headers)
    external_processor_pb2_grpc.add_ExternalProcessorServicer_to_server(service, ext_proc)
    address = f"{host}:{port}"
    port_bound = (
        ext_proc.add_secure_port(address, tls) if tls is not None else ext_proc.add_insecure_port(address)
    )
    await ext_proc.start()
    if health_port is None:
        return EppServer(ext_proc, None, port_bound, None, service)
    health = grpc.aio.server()
    health.add_generic_rpc_handlers((health_handler(ready),))
    health_bound = health.add_insecure_port(f"{host}:{health_port}")
    await health.start()
    return EppServer(ext_proc, health, port_bound, health_bound, service)

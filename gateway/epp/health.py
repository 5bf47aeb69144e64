"""gRPC health (grpc.health.v1.Health/Check) with the services GIE's protocol names: `liveness`,
`readiness` and the ext_proc service's own name. Its two messages are declared here, in a private
descriptor pool, because neither grpcio-health-checking nor another copy of the proto is installed and
the protocol is two messages and one call: a dependency for that would cost more than it gives."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import grpc
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

SERVICE = "grpc.health.v1.Health"
EXT_PROC = "envoy.service.ext_proc.v3.ExternalProcessor"
SERVING, NOT_SERVING = 1, 2


def _messages() -> tuple[type[Any], type[Any]]:
    """HealthCheckRequest and HealthCheckResponse, as grpc/health/v1/health.proto declares them."""
    fields = descriptor_pb2.FieldDescriptorProto
    file = descriptor_pb2.FileDescriptorProto(
        name="graystack/grpc/health/v1/health.proto", package="grpc.health.v1", syntax="proto3"
    )
    request = file.message_type.add(name="HealthCheckRequest")
    request.field.add(name="service", number=1, type=fields.TYPE_STRING, label=fields.LABEL_OPTIONAL)
    response = file.message_type.add(name="HealthCheckResponse")
    status = response.enum_type.add(name="ServingStatus")
    for number, name in enumerate(("UNKNOWN", "SERVING", "NOT_SERVING", "SERVICE_UNKNOWN")):
        status.value.add(name=name, number=number)
    response.field.add(
        name="status",
        number=1,
        type=fields.TYPE_ENUM,
        label=fields.LABEL_OPTIONAL,
        type_name=".grpc.health.v1.HealthCheckResponse.ServingStatus",
    )
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    return (
        message_factory.GetMessageClass(pool.FindMessageTypeByName("grpc.health.v1.HealthCheckRequest")),
        message_factory.GetMessageClass(pool.FindMessageTypeByName("grpc.health.v1.HealthCheckResponse")),
    )


Request, Response = _messages()


def health_handler(ready: Callable[[], bool]) -> grpc.GenericRpcHandler:
    """Liveness (and the server as a whole, service ""): serving while it answers at all. Readiness and the
    ext_proc service: `ready()` (the pods known)."""

    async def check(request: Any, context: grpc.aio.ServicerContext) -> Any:
        if request.service in ("", "liveness"):
            return Response(status=SERVING)
        if request.service in ("readiness", EXT_PROC):
            return Response(status=SERVING if ready() else NOT_SERVING)
        await context.abort(grpc.StatusCode.NOT_FOUND, f"unknown service {request.service!r}")

    return grpc.method_handlers_generic_handler(
        SERVICE,
        {
            "Check": grpc.unary_unary_rpc_method_handler(
                check, request_deserializer=Request.FromString, response_serializer=Response.SerializeToString
            )
        },
    )

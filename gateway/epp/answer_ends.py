"""The picker's end of Envoy's gRPC access-log service: the log that tells the picker the gateway serves
for its own Envoy when each picked request ended (gateway/envoy/picking.py `build_picker_log`), served
on the picker's own port beside ext_proc. Each entry's `x-request-id` releases the request held in
flight under it (gateway/epp/held.py); an entry without one is passed over. Nothing here answers Envoy
but the stream's close: Envoy never waits on it."""

from __future__ import annotations

from collections.abc import AsyncIterator

import grpc
from envoy.service.accesslog.v3 import als_pb2, als_pb2_grpc

from gateway.epp.picker import Picker


class AnswerEnds(als_pb2_grpc.AccessLogServiceServicer):
    def __init__(self, picker: Picker) -> None:
        self._picker = picker

    async def StreamAccessLogs(
        self,
        request_iterator: AsyncIterator[als_pb2.StreamAccessLogsMessage],
        context: grpc.aio.ServicerContext,
    ) -> als_pb2.StreamAccessLogsResponse:
        async for message in request_iterator:
            for entry in message.http_logs.log_entry:
                if entry.request.request_id:
                    self._picker.ended(entry.request.request_id)
        return als_pb2.StreamAccessLogsResponse()

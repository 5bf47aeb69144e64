"""A bare ADS client that speaks the protocol like Envoy does, for tests of the server alone."""

from __future__ import annotations

import asyncio

import grpc
from envoy.config.core.v3 import base_pb2
from envoy.service.discovery.v3 import ads_pb2_grpc, discovery_pb2
from google.rpc import status_pb2


def node(node_id: str, listen_port: int = 8080) -> base_pb2.Node:
    result = base_pb2.Node(id=node_id, cluster="test")
    result.metadata.update({"graystack": {"listen_address": "127.0.0.1", "listen_port": str(listen_port)}})
    return result


class AdsClient:
    def __init__(self, channel: grpc.aio.Channel, node_id: str) -> None:
        self._call = ads_pb2_grpc.AggregatedDiscoveryServiceStub(channel).StreamAggregatedResources()
        self._node = node(node_id)
        self._sent_node = False
        self._responses: asyncio.Queue = asyncio.Queue()
        self._reader: asyncio.Task | None = None

    async def _read_all(self) -> None:
        """One reader for the stream's life: cancelling a pending gRPC read would cancel the call."""
        while True:
            response = await self._call.read()
            await self._responses.put(response)
            if response is grpc.aio.EOF:
                return

    async def request(
        self, type_url: str, names=(), version: str = "", nonce: str = "", error: str | None = None
    ) -> None:
        request = discovery_pb2.DiscoveryRequest(
            type_url=type_url, resource_names=list(names), version_info=version, response_nonce=nonce
        )
        if not self._sent_node:
            request.node.CopyFrom(self._node)
            self._sent_node = True
        if error is not None:
            request.error_detail.CopyFrom(status_pb2.Status(code=3, message=error))
        await self._call.write(request)

    async def ack(self, response: discovery_pb2.DiscoveryResponse, names=()) -> None:
        await self.request(response.type_url, names, response.version_info, response.nonce)

    async def nack(
        self, response: discovery_pb2.DiscoveryResponse, previous_version: str, message: str, names=()
    ) -> None:
        await self.request(response.type_url, names, previous_version, response.nonce, error=message)

    async def receive(self, seconds: float = 5.0) -> discovery_pb2.DiscoveryResponse:
        if self._reader is None:
            self._reader = asyncio.create_task(self._read_all())
        async with asyncio.timeout(seconds):
            response = await self._responses.get()
        if response is grpc.aio.EOF:
            raise EOFError("stream closed by the server")
        return response

    async def nothing_within(self, seconds: float) -> bool:
        """True if the server sends nothing for `seconds`."""
        try:
            await self.receive(seconds)
        except TimeoutError:
            return True
        return False

    def cancel(self) -> None:
        if self._reader is not None:
            self._reader.cancel()
        self._call.cancel()

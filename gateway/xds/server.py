"""State-of-the-World ADS server on grpc.aio.

Per stream: one task reads requests (ACK, NACK, subscription changes) and one ordered send loop
pushes whenever the node's snapshot changes, in CDS -> EDS -> LDS -> RDS order. A response goes out
when its type's version (or the names Envoy asked for) differs from what was last sent; a NACKed
version is recorded with Envoy's message and never re-sent (go-control-plane re-sends it in a loop,
its issues #46/#582/#962). Stale nonces are ignored, as the xDS protocol requires.

Both ends of the stream keep it alive (gRPC keepalive here, HTTP/2 keepalive in the Envoy bootstrap):
a proxy behind a silent partition is noticed after about KEEPALIVE_S + KEEPALIVE_TIMEOUT_S (8.46 s measured) instead of
looking connected for as long as TCP keeps trying. A proxy whose stream ended is kept as disconnected,
with the time it was last heard from, until it reconnects or FORGET_AFTER_S passes: cut off from the
control plane it still routes by the last configuration it ACKed, and whoever waits for the fleet's
ACK (a rollback) must know it is out there.

The server knows nothing of rollouts: whoever owns the configuration hears about nodes through
`on_connect` and puts snapshots into the cache.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from dataclasses import dataclass, field

import grpc
from envoy.config.core.v3 import base_pb2
from envoy.service.discovery.v3 import ads_pb2_grpc, discovery_pb2

from gateway.xds import telemetry, types
from gateway.xds.cache import Snapshot, SnapshotCache
from gateway.xds.status import DisconnectedProxy, NackStatus, ProxyStatus, TypeStatus

log = logging.getLogger(__name__)

KEEPALIVE_S = 4.0  # a ping every 4 s of silence...
KEEPALIVE_TIMEOUT_S = 4.0  # ... unanswered for 4 s closes the stream: a dead peer is noticed in ~8.5 s
FORGET_AFTER_S = 600.0  # a proxy gone for this long is dropped from the list (a pod scaled away)
GRPC_OPTIONS = (
    ("grpc.so_reuseport", 0),
    ("grpc.keepalive_time_ms", int(KEEPALIVE_S * 1000)),
    ("grpc.keepalive_timeout_ms", int(KEEPALIVE_TIMEOUT_S * 1000)),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.max_pings_without_data", 0),  # an idle ADS stream sends no data: keep pinging anyway
    # Envoy pings too (the bootstrap's connection_keepalive): accept them, never answer with GOAWAY
    ("grpc.http2.min_recv_ping_interval_without_data_ms", int(KEEPALIVE_S * 1000) // 2),
    ("grpc.http2.max_ping_strikes", 0),
)

NodeKey = Callable[[base_pb2.Node], str]
NodeCallback = Callable[[str, base_pb2.Node], None]


@dataclass
class TypeState:
    """What one stream has asked for, been sent, and answered, for one resource type."""

    requested: bool = False
    names: frozenset[str] | None = None  # None: wildcard
    nonce: str = ""
    version_sent: str = ""
    names_sent: frozenset[str] | None = None
    sent_at: float = 0.0
    acked: str = ""
    nacked: str = ""
    nack_message: str = ""
    nack_at: float | None = None


@dataclass(frozen=True)
class Disconnected:
    """A proxy whose stream ended: it routes by what it last ACKed until it reconnects."""

    node: str
    key: str
    peer: str
    connected_at: float
    last_heard_at: float
    disconnected_at: float

    def describe(self) -> DisconnectedProxy:
        now = time.time()
        return DisconnectedProxy(
            node=self.node,
            key=self.key,
            peer=self.peer,
            connected_at=self.connected_at,
            last_heard_at=self.last_heard_at,
            disconnected_at=self.disconnected_at,
            last_heard_seconds_ago=round(now - self.last_heard_at, 3),
            disconnected_seconds_ago=round(now - self.disconnected_at, 3),
        )


@dataclass
class Stream:
    id: int
    peer: str
    connected_at: float = field(default_factory=time.time)
    last_heard_at: float = field(default_factory=time.time)
    key: str | None = None
    node: base_pb2.Node | None = None
    types: dict[str, TypeState] = field(default_factory=lambda: {t: TypeState() for t in types.PUSH_ORDER})

    def converged(self, snapshot: Snapshot | None) -> bool:
        """True when the proxy has ACKed the snapshot's version of every type the snapshot holds
        resources of, and of any other type it subscribed to. A proxy mid-handshake (clusters ACKed,
        routes not yet asked for, as a just-reconnected Envoy is) has not converged: the split lives in
        the routes, and a change it has not asked for is not live on it."""
        if snapshot is None:
            return False
        held = {type_url for type_url, resources in snapshot.resources.items() if resources.items}
        return all(
            state.acked == snapshot.version(type_url)
            for type_url, state in self.types.items()
            if state.requested or type_url in held
        )

    def rejected(self, snapshot: Snapshot | None) -> bool:
        """True when the proxy NACKed the snapshot's current version of some type."""
        return snapshot is not None and any(
            state.nacked and state.nacked == snapshot.version(type_url)
            for type_url, state in self.types.items()
        )

    def describe(self, snapshot: Snapshot | None) -> ProxyStatus:
        per_type = {}
        for type_url, state in self.types.items():
            if not state.requested:
                continue
            current = snapshot.version(type_url) if snapshot else None
            per_type[types.SHORT_NAME[type_url]] = TypeStatus(
                current=current,
                sent=state.version_sent,
                acked=state.acked,
                rejected=bool(state.nacked) and state.nacked == current,
                last_nack=(
                    NackStatus(version=state.nacked, message=state.nack_message, at=state.nack_at)
                    if state.nacked
                    else None
                ),
            )
        return ProxyStatus(
            node=self.node.id if self.node else None,
            key=self.key,
            peer=self.peer,
            connected_at=self.connected_at,
            last_heard_at=self.last_heard_at,
            last_heard_seconds_ago=round(time.time() - self.last_heard_at, 3),
            converged=self.converged(snapshot),
            types=per_type,
        )


class AdsServer(ads_pb2_grpc.AggregatedDiscoveryServiceServicer):
    def __init__(
        self,
        cache: SnapshotCache,
        node_key: NodeKey = lambda node: node.id,
        on_connect: NodeCallback | None = None,
        on_disconnect: NodeCallback | None = None,
        forget_after: float = FORGET_AFTER_S,
    ) -> None:
        self.cache = cache
        self.forget_after = forget_after
        self._gone: dict[str, Disconnected] = {}
        self._node_key = node_key
        self._on_connect = on_connect
        self._on_disconnect = on_disconnect
        self._streams: dict[int, Stream] = {}
        self._stream_ids = itertools.count(1)
        self._nonces = itertools.count(1)
        self._changed = asyncio.Condition()
        telemetry.zero_counters(types.SHORT_NAME.values())
        telemetry.CONVERGED_PROXIES.set_function(self._on_scrape)

    # -- gRPC -------------------------------------------------------------------------------------

    async def StreamAggregatedResources(
        self,
        request_iterator: AsyncIterator[discovery_pb2.DiscoveryRequest],
        context: grpc.aio.ServicerContext,
    ) -> AsyncIterator[discovery_pb2.DiscoveryResponse]:
        stream = Stream(id=next(self._stream_ids), peer=context.peer())
        wake = asyncio.Event()
        reader = asyncio.create_task(self._read(request_iterator, stream, wake, context))
        self._streams[stream.id] = stream
        waiter: asyncio.Task[bool] | None = None
        try:
            while True:
                waiter = asyncio.create_task(wake.wait())
                done, _ = await asyncio.wait({reader, waiter}, return_when=asyncio.FIRST_COMPLETED)
                if reader in done:
                    reader.result()
                    return
                wake.clear()
                snapshot = self.cache.get(stream.key) if stream.key else None
                if snapshot is not None:
                    for response in self._responses(stream, snapshot):
                        yield response
        finally:
            reader.cancel()
            if waiter is not None:
                waiter.cancel()
            await self._close(stream, wake)

    async def DeltaAggregatedResources(
        self,
        request_iterator: AsyncIterator[discovery_pb2.DeltaDiscoveryRequest],
        context: grpc.aio.ServicerContext,
    ) -> None:
        await context.abort(
            grpc.StatusCode.UNIMPLEMENTED, "graystack serves State-of-the-World ADS; use api_type: GRPC"
        )

    # -- requests ---------------------------------------------------------------------------------

    async def _read(
        self,
        requests: AsyncIterator[discovery_pb2.DiscoveryRequest],
        stream: Stream,
        wake: asyncio.Event,
        context: grpc.aio.ServicerContext,
    ) -> None:
        async for request in requests:
            stream.last_heard_at = time.time()
            if stream.key is None:
                if not request.HasField("node"):
                    await context.abort(
                        grpc.StatusCode.INVALID_ARGUMENT, "the first request must carry `node`"
                    )
                stream.node = request.node
                stream.key = self._node_key(request.node)
                self._gone.pop(stream.key, None)
                telemetry.CONNECTED_PROXIES.inc()
                telemetry.PROXY_CONNECTED.labels(request.node.id).set(1)
                self.cache.subscribe(stream.key, wake)
                log.info("proxy %s connected from %s", stream.node.id, stream.peer)
                if self._on_connect:
                    try:
                        self._on_connect(stream.key, stream.node)
                    except ValueError as error:
                        await context.abort(
                            grpc.StatusCode.INVALID_ARGUMENT, f"cannot serve this node: {error}"
                        )
            if self._handle(stream, request):
                wake.set()
            async with self._changed:
                self._changed.notify_all()

    def _handle(self, stream: Stream, request: discovery_pb2.DiscoveryRequest) -> bool:
        """Apply one request to the stream's state; True if the send loop should look again."""
        state = stream.types.get(request.type_url)
        if state is None:
            log.warning("proxy %s asked for unsupported type %s", stream.key, request.type_url)
            return False
        if request.response_nonce and request.response_nonce != state.nonce:
            return False  # answers a response that has since been superseded
        if request.response_nonce:
            short = types.SHORT_NAME[request.type_url]
            if request.HasField("error_detail"):
                # A NACK names the last version the proxy did apply: that one keeps serving.
                state.acked = request.version_info
                state.nacked = state.version_sent
                state.nack_message = request.error_detail.message
                state.nack_at = time.time()
                telemetry.NACKS.labels(short).inc()
                log.warning(
                    "proxy %s rejected %s version %s: %s", stream.key, short, state.nacked, state.nack_message
                )
            else:
                state.acked = request.version_info
                telemetry.ACK_SECONDS.observe(time.monotonic() - state.sent_at)
        names = frozenset(request.resource_names)
        wildcard = request.type_url in types.WILDCARD and (not names or "*" in names)
        state.names = None if wildcard else names
        state.requested = True
        return True

    # -- responses --------------------------------------------------------------------------------

    def _responses(self, stream: Stream, snapshot: Snapshot) -> Iterator[discovery_pb2.DiscoveryResponse]:
        for type_url in types.PUSH_ORDER:
            state = stream.types[type_url]
            resources = snapshot.resources.get(type_url)
            if not state.requested or resources is None:
                continue
            unchanged = resources.version == state.version_sent and state.names == state.names_sent
            if unchanged or (resources.version == state.nacked and state.names == state.names_sent):
                continue
            state.nonce = str(next(self._nonces))
            state.version_sent = resources.version
            state.names_sent = state.names
            state.sent_at = time.monotonic()
            telemetry.PUSHES.labels(types.SHORT_NAME[type_url]).inc()
            yield discovery_pb2.DiscoveryResponse(
                version_info=resources.version,
                resources=resources.select(state.names),
                type_url=type_url,
                nonce=state.nonce,
                control_plane=base_pb2.ControlPlane(identifier=f"graystack/{self.cache.version_prefix}"),
            )

    async def _close(self, stream: Stream, wake: asyncio.Event) -> None:
        self._streams.pop(stream.id, None)
        if stream.key is not None:
            telemetry.CONNECTED_PROXIES.dec()
            self.cache.unsubscribe(stream.key, wake)
            node = stream.node.id if stream.node else stream.key
            if not any(other.key == stream.key for other in self._streams.values()):
                self._gone[stream.key] = Disconnected(
                    node, stream.key, stream.peer, stream.connected_at, stream.last_heard_at, time.time()
                )
                telemetry.PROXY_CONNECTED.labels(node).set(0)
            log.info("proxy %s disconnected (last heard %.1fs ago)", node, time.time() - stream.last_heard_at)
            if self._on_disconnect:
                self._on_disconnect(stream.key, stream.node)
        async with self._changed:
            self._changed.notify_all()

    # -- what the owner of the configuration can ask ----------------------------------------------

    def proxy_count(self) -> int:
        return sum(1 for stream in self._streams.values() if stream.key)

    def streams(self) -> list[ProxyStatus]:
        return [s.describe(self.cache.get(s.key) if s.key else None) for s in self._streams.values()]

    def disconnected(self) -> list[Disconnected]:
        """Proxies gone within `forget_after`, by node; older ones are forgotten."""
        now = time.time()
        for key in [k for k, gone in self._gone.items() if now - gone.disconnected_at > self.forget_after]:
            node = self._gone.pop(key).node
            telemetry.PROXY_CONNECTED.remove(node)
            log.info("forgetting proxy %s, disconnected over %.0fs ago", node, self.forget_after)
        return sorted(self._gone.values(), key=lambda gone: gone.node)

    def _on_scrape(self) -> int:
        """The converged count, after forgetting proxies gone too long (so they leave the per-node gauge)."""
        self.disconnected()
        return self.converged_count()

    def converged_count(self) -> int:
        """Connected proxies that have ACKed their current snapshot."""
        return sum(1 for s in self._streams.values() if s.key and s.converged(self.cache.get(s.key)))

    def converged(self) -> bool:
        """Every connected proxy has ACKed its current snapshot."""
        return all(s.converged(self.cache.get(s.key)) for s in self._streams.values() if s.key)

    def _settled(self) -> bool:
        return all(
            s.converged(snapshot) or s.rejected(snapshot)
            for s in self._streams.values()
            if s.key and (snapshot := self.cache.get(s.key))
        )

    async def wait_converged(self, seconds: float, everywhere: bool = False) -> bool:
        """Wait until every connected proxy has ACKed its current snapshot; with `everywhere`, until
        the disconnected ones have also come back and ACKed.

        False on timeout, or as soon as a proxy rejects its current snapshot (waiting longer
        would not help: a NACKed version is never re-sent).
        """

        def done() -> bool:
            return self._settled() and not (everywhere and self.disconnected())

        try:
            async with asyncio.timeout(seconds), self._changed:
                await self._changed.wait_for(done)
        except TimeoutError:
            return False
        return self.converged() and not (everywhere and self.disconnected())


async def start_server(
    servicer: AdsServer, host: str, port: int, also: Sequence[Callable[[grpc.aio.Server], None]] = ()
) -> grpc.aio.Server:
    """ADS on `host:port`; `also`: more services the proxies reach through their xDS cluster (each a
    function that adds its servicer to the server: the gateway's access-log receiver)."""
    server = grpc.aio.server(options=list(GRPC_OPTIONS))
    ads_pb2_grpc.add_AggregatedDiscoveryServiceServicer_to_server(servicer, server)
    for add in also:
        add(server)
    bound = server.add_insecure_port(f"{host}:{port}")
    if bound == 0:
        raise OSError(f"cannot bind the xDS server to {host}:{port} (port in use?)")
    await server.start()
    return server

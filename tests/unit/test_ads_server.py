"""The ADS server against a client that speaks the protocol as Envoy does (in process, real gRPC)."""

import asyncio

import grpc
import pytest
from envoy.service.discovery.v3 import ads_pb2_grpc, discovery_pb2
from prometheus_client import REGISTRY

from gateway.envoy.resources import ListenerAddress, build_listener
from gateway.xds.cache import SnapshotCache
from gateway.xds.server import AdsServer, start_server
from gateway.xds.types import CLUSTER, ENDPOINT, LISTENER, ROUTE
from graystack.local.processes import free_port
from tests.support.ads_client import AdsClient
from tests.unit.test_xds_cache import resources

VARIANT_CLUSTERS = ["baseline", "zero-layer"]


@pytest.fixture
async def served():
    cache = SnapshotCache()
    ads = AdsServer(cache, on_connect=lambda key, node: cache.set_resources(key, resources()))
    port = free_port()
    server = await start_server(ads, "127.0.0.1", port)
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
    yield cache, ads, channel
    await channel.close()
    await server.stop(grace=None)


async def handshake(client: AdsClient) -> dict[str, discovery_pb2.DiscoveryResponse]:
    """What Envoy does at start: wildcard CDS and LDS, then EDS and RDS by name, ACKing each."""
    got = {}
    await client.request(CLUSTER)
    await client.request(LISTENER)
    for _ in range(2):
        response = await client.receive()
        got[response.type_url] = response
    await client.ack(got[CLUSTER])
    await client.ack(got[LISTENER])
    await client.request(ENDPOINT, VARIANT_CLUSTERS)
    await client.request(ROUTE, ["graystack"])
    for _ in range(2):
        response = await client.receive()
        got[response.type_url] = response
    names = {ENDPOINT: VARIANT_CLUSTERS, ROUTE: ["graystack"]}
    for type_url in (ENDPOINT, ROUTE):
        await client.ack(got[type_url], names[type_url])
    return got


def metric(name: str, **labels) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


async def test_a_proxy_gets_its_whole_config_and_its_acks_are_recorded(served):
    cache, ads, channel = served
    client = AdsClient(channel, "envoy-1")
    got = await handshake(client)
    assert list(got) == [CLUSTER, LISTENER, ENDPOINT, ROUTE]
    assert len(got[CLUSTER].resources) == 4  # baseline, zero-layer, its fallback aggregate, /v1/models'
    assert len(got[ENDPOINT].resources) == 2
    assert await ads.wait_converged(seconds=2)
    (proxy,) = ads.streams()
    assert proxy.node == "envoy-1"
    assert proxy.converged
    assert {t: v.acked for t, v in proxy.types.items()} == cache.get("envoy-1").versions()
    client.cancel()


async def test_a_proxy_mid_handshake_has_not_converged_until_it_acks_the_routes(served):
    """A just-(re)connected Envoy asks for clusters first and for routes last: until it has ACKed the
    routes, where the split lives, a flip is not live on it, and waiting for it must not say so."""
    _, ads, channel = served
    client = AdsClient(channel, "envoy-1")
    await client.request(CLUSTER)
    await client.ack(await client.receive())
    await asyncio.sleep(0.1)
    assert ads.streams()[0].types["cds"].acked
    assert not ads.converged()
    assert not await ads.wait_converged(seconds=0.3)
    await client.request(LISTENER)
    await client.ack(await client.receive())
    await client.request(ENDPOINT, VARIANT_CLUSTERS)
    await client.ack(await client.receive(), VARIANT_CLUSTERS)
    assert not await ads.wait_converged(seconds=0.3)  # listeners and endpoints, still no routes
    await client.request(ROUTE, ["graystack"])
    await client.ack(await client.receive(), ["graystack"])
    assert await ads.wait_converged(seconds=2)
    client.cancel()


async def test_a_change_touching_every_type_goes_out_clusters_endpoints_listeners_routes(served):
    cache, ads, channel = served
    client = AdsClient(channel, "envoy-1")
    await handshake(client)
    assert await ads.wait_converged(seconds=2)
    changed = resources(
        health_check={"interval": "7s"}, routing={"weights": {"baseline": 50, "zero-layer": 50}}
    )
    changed[LISTENER] = [build_listener(ListenerAddress("127.0.0.1", 9999))]
    cache.set_resources("envoy-1", changed)
    order = [(await client.receive()).type_url for _ in range(4)]
    assert order == [CLUSTER, ENDPOINT, LISTENER, ROUTE]
    client.cancel()


async def test_a_nacked_version_is_recorded_and_never_resent(served):
    cache, ads, channel = served
    client = AdsClient(channel, "envoy-1")
    got = await handshake(client)
    assert await ads.wait_converged(seconds=2)
    nacks_before = metric("graystack_xds_nacks_total", type="rds")
    cache.set_resources("envoy-1", resources(routing={"weights": {"baseline": 50, "zero-layer": 50}}))
    rejected = await client.receive()
    assert rejected.type_url == ROUTE
    await client.nack(rejected, got[ROUTE].version_info, "weights must be positive", ["graystack"])
    assert not await ads.wait_converged(seconds=2)  # settles at once: a rejected version never converges
    assert await client.nothing_within(0.5)  # no re-send loop
    assert metric("graystack_xds_nacks_total", type="rds") == nacks_before + 1
    rds = ads.streams()[0].types["rds"]
    assert rds.rejected
    assert rds.acked == got[ROUTE].version_info  # the last good version is what Envoy serves
    assert rds.last_nack.message == "weights must be positive"
    # The next change goes out, and ACKing it clears the rejection.
    cache.set_resources("envoy-1", resources(routing={"weights": {"baseline": 60, "zero-layer": 40}}))
    fixed = await client.receive()
    assert fixed.version_info not in (rejected.version_info, got[ROUTE].version_info)
    await client.ack(fixed, ["graystack"])
    assert await ads.wait_converged(seconds=2)
    assert not ads.streams()[0].types["rds"].rejected
    client.cancel()


async def test_a_stale_nonce_is_ignored(served):
    cache, ads, channel = served
    client = AdsClient(channel, "envoy-1")
    got = await handshake(client)
    assert await ads.wait_converged(seconds=2)
    cache.set_resources("envoy-1", resources(routing={"weights": {"baseline": 50, "zero-layer": 50}}))
    await client.receive()
    # An ACK that answers the previous response, not the latest: must not count as acking the new one.
    await client.request(ROUTE, ["graystack"], version="bogus", nonce=got[ROUTE].nonce)
    await asyncio.sleep(0.2)
    assert ads.streams()[0].types["rds"].acked == got[ROUTE].version_info
    assert not ads.converged()
    client.cancel()


async def test_a_stream_without_a_node_is_refused(served):
    _, _, channel = served
    call = ads_pb2_grpc.AggregatedDiscoveryServiceStub(channel).StreamAggregatedResources()
    await call.write(discovery_pb2.DiscoveryRequest(type_url=CLUSTER))
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await call.read()
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "node" in refused.value.details()


async def test_delta_is_refused_with_a_pointer_to_sotw(served):
    _, _, channel = served
    call = ads_pb2_grpc.AggregatedDiscoveryServiceStub(channel).DeltaAggregatedResources()
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await call.read()
    assert refused.value.code() == grpc.StatusCode.UNIMPLEMENTED


async def test_connected_proxies_gauge_follows_streams(served):
    _, ads, channel = served
    before = metric("graystack_xds_connected_proxies")
    clients = [AdsClient(channel, f"envoy-{i}") for i in range(3)]
    for client in clients:
        await handshake(client)
    assert metric("graystack_xds_connected_proxies") == before + 3
    assert len(ads.streams()) == 3
    for client in clients:
        client.cancel()
    for _ in range(100):
        if metric("graystack_xds_connected_proxies") == before:
            break
        await asyncio.sleep(0.02)
    assert metric("graystack_xds_connected_proxies") == before


async def until(predicate, seconds: float = 2.0) -> None:
    for _ in range(int(seconds / 0.02)):
        if predicate():
            return
        await asyncio.sleep(0.02)
    raise AssertionError("condition not reached")


async def test_a_proxy_whose_stream_ended_stays_listed_as_disconnected_until_it_returns(served):
    """Cut off, a proxy still routes by its last config: it is listed (with when it was last heard
    from) and awaited by `wait_converged(everywhere=True)` until the same node reconnects and ACKs."""
    _, ads, channel = served
    staying, leaving = AdsClient(channel, "envoy-1"), AdsClient(channel, "envoy-2")
    await handshake(staying)
    await handshake(leaving)
    leaving.cancel()
    await until(lambda: [gone.node for gone in ads.disconnected()] == ["envoy-2"])
    (gone,) = ads.disconnected()
    assert gone.last_heard_at <= gone.disconnected_at
    assert metric("graystack_xds_proxy_connected", node="envoy-2") == 0
    assert metric("graystack_xds_proxy_connected", node="envoy-1") == 1
    assert await ads.wait_converged(seconds=1)  # every connected proxy has ACKed...
    assert not await ads.wait_converged(seconds=0.2, everywhere=True)  # ... but one is out there
    back = AdsClient(channel, "envoy-2")
    waiting = asyncio.create_task(ads.wait_converged(seconds=5, everywhere=True))
    await handshake(back)
    assert await waiting
    assert ads.disconnected() == []
    staying.cancel()
    back.cancel()


async def test_a_disconnected_proxy_is_forgotten_after_forget_after(served):
    _, ads, channel = served
    ads.forget_after = 0.1
    client = AdsClient(channel, "envoy-9")
    await handshake(client)
    client.cancel()
    await until(lambda: ads.disconnected() != [])
    await asyncio.sleep(0.15)
    assert ads.disconnected() == []
    assert REGISTRY.get_sample_value("graystack_xds_proxy_connected", {"node": "envoy-9"}) is None
    assert await ads.wait_converged(seconds=0.5, everywhere=True)

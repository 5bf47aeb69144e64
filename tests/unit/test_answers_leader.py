"""With several gateway replicas, only the leader judges the rollout, so only it keeps answers: a bootstrap
given `leader_host` sends the answer log to its leader cluster, named in the node metadata the listener is
built from, and a replica that does not lead refuses the log (on a real gRPC server on loopback), so Envoy
reopens it where the leader-only Service now points."""

from __future__ import annotations

import asyncio

import grpc
import pytest
from envoy.extensions.access_loggers.grpc.v3 import als_pb2 as als_config_pb2
from envoy.extensions.filters.network.http_connection_manager.v3 import http_connection_manager_pb2 as hcm_pb2
from envoy.service.accesslog.v3 import als_pb2_grpc
from google.protobuf import json_format

from gateway import names
from gateway.answers.receiver import FOLLOWING, AnswerReceiver
from gateway.answers.store import AnswerStore
from gateway.envoy.bootstrap import METADATA_KEY, BootstrapOptions, build_bootstrap, listener_address
from gateway.envoy.resources import build_listener
from tests.unit.test_answers import STREAM, entry, message


def _log_cluster(listen) -> str:
    manager = hcm_pb2.HttpConnectionManager()
    build_listener(listen).filter_chains[0].filters[0].typed_config.Unpack(manager)
    config = als_config_pb2.HttpGrpcAccessLogConfig()
    manager.access_log[0].typed_config.Unpack(config)
    return config.common_config.grpc_service.envoy_grpc.cluster_name


def test_a_fleet_bootstrap_sends_the_answer_log_to_the_leader_cluster_one_connection_per_stream():
    alone = build_bootstrap(BootstrapOptions())
    assert _log_cluster(listener_address(alone.node.metadata)) == names.XDS_CLUSTER
    assert [c.name for c in alone.static_resources.clusters] == [names.XDS_CLUSTER]

    fleet = build_bootstrap(BootstrapOptions(xds_host="gw.llm.svc", leader_host="gw-admin.llm.svc"))
    assert _log_cluster(listener_address(fleet.node.metadata)) == names.LEADER_CLUSTER
    xds, leader = fleet.static_resources.clusters
    assert (xds.name, leader.name) == (names.XDS_CLUSTER, names.LEADER_CLUSTER)
    address = leader.load_assignment.endpoints[0].lb_endpoints[0].endpoint.address.socket_address
    assert (address.address, address.port_value) == ("gw-admin.llm.svc", 18000)
    options = json_format.MessageToDict(
        leader.typed_extension_protocol_options["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"]
    )
    # a reopened stream takes a new connection, which the Service sends to whoever leads now
    assert options["commonHttpProtocolOptions"]["maxRequestsPerConnection"] == 1


def test_an_unknown_answer_log_cluster_in_the_node_metadata_is_refused_by_name():
    bootstrap = build_bootstrap(BootstrapOptions())
    bootstrap.node.metadata.fields[METADATA_KEY].struct_value.fields[
        "answer_log_cluster"
    ].string_value = "nope"
    with pytest.raises(ValueError, match=r"answer_log_cluster: 'nope' is neither graystack-xds nor"):
        listener_address(bootstrap.node.metadata)


async def _send(port: int, *sent) -> grpc.aio.AioRpcError | None:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = als_pb2_grpc.AccessLogServiceStub(channel)
        try:
            await stub.StreamAccessLogs(iter(sent), timeout=5)
        except grpc.aio.AioRpcError as error:
            return error
    return None


def test_only_the_leading_replica_keeps_answers_and_one_that_stops_leading_closes_its_streams():
    async def scenario() -> None:
        store, leading = AnswerStore(), [True]
        server = grpc.aio.server()
        AnswerReceiver(store, lambda: leading[0]).register(server)
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        try:
            assert await _send(port, message(names.ANSWER_LOG, entry(STREAM))) is None
            assert store.counts.kept == 1

            leading[0] = False  # the Lease went to another replica
            refused = await _send(port, message(names.ANSWER_LOG, entry(STREAM)))
            assert refused is not None
            assert refused.code() == grpc.StatusCode.UNAVAILABLE
            assert refused.details() == FOLLOWING
            assert store.counts.kept == 1  # the follower kept nothing
        finally:
            await server.stop(None)

    asyncio.run(scenario())

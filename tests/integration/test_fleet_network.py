"""A fleet over a real network: the gateway, three Envoys and the two upstreams each on a host of its own
(network namespaces joined by a bridge), with loss, latency and partitions between them, and clients
beside the Envoys that must see no failed request (tests/support/fleet_scenarios.py runs each scenario;
bench/fleet_network.py records the same runs).

Needs root, `ip` and `nft` (`make nftables`): skipped with the reason on a developer machine without
them, failed under CI.
"""

from __future__ import annotations

import httpx
import pytest

from gateway.xds.server import KEEPALIVE_S, KEEPALIVE_TIMEOUT_S
from tests.support import fleet_scenarios as scenarios
from tests.support.fleet import Fleet
from tests.support.network import Network, require_network

pytestmark = pytest.mark.integration
DEAD_PEER_BOUND_S = KEEPALIVE_S + KEEPALIVE_TIMEOUT_S + 2  # the keepalive's bound, and the stream's teardown


@pytest.fixture
def network(tmp_path):
    require_network()
    with Network(tmp_path / "network") as made:
        yield made


def test_flips_converge_on_every_proxy_over_a_lossy_slow_link(network, tmp_path):
    fleet = Fleet(network, tmp_path, xds_delay_ms=scenarios.ONE_WAY_MS).start()
    measured = scenarios.flips_under_loss_and_delay(fleet, flips=20)
    assert measured["failures"] == []
    assert measured["unacked"] == 0  # every flip ACKed by all three
    assert min(measured["ack_seconds"]) >= 2 * scenarios.ONE_WAY_MS / 1000  # the delay is on the link
    assert measured["requests"] > 100


def test_partitioned_from_the_gateway_during_a_rollback_an_envoy_is_named_pending_until_it_heals(
    network, tmp_path
):
    """The gateway notices the cut-off Envoy within the keepalive's bound and lists it disconnected;
    the rollback is ACKed by the other two and pending on it; healed, it reconnects, ACKs, and the
    rollback is live everywhere. The clients of the other two never see a failure."""
    fleet = Fleet(network, tmp_path, strategy=True).start()
    measured = scenarios.partition_during_rollback(fleet, DEAD_PEER_BOUND_S)
    assert measured["failures"] == []
    assert measured["requests"] > 50
    assert measured["detect_seconds"] <= DEAD_PEER_BOUND_S
    assert (measured["rollback_acked_by_connected"], measured["connected_during"]) == (True, 2)
    assert measured["pending"] == ["envoy-3"]
    assert any("pending on 1 cut off" in alert and "envoy-3" in alert for alert in measured["alerts"])
    assert measured["converge_seconds"] <= 5, (
        f"envoy-3 took {measured['converge_seconds']:.1f}s after the heal"
    )
    assert fleet.disconnected() == []


def test_the_gateway_killed_mid_rollout_and_restarted_fails_no_request_and_resumes(network, tmp_path):
    fleet = Fleet(network, tmp_path, strategy=True).start()
    measured = scenarios.gateway_killed_mid_rollout(fleet)
    assert measured["failures"] == []
    assert measured["requests"] > 50
    assert measured["after"] == measured["before"] == ("step 1", 50)  # promoted from 20 % to 50 %


def test_a_model_server_host_partitioned_away_is_ejected_and_the_fallback_carries_its_traffic(
    network, tmp_path
):
    fleet = Fleet(network, tmp_path).start()
    measured = scenarios.upstream_partitioned(fleet)
    assert len(measured["failures"]) <= measured["in_flight_at_most"], measured["failures"]
    assert measured["requests"] > 50


def test_two_envoys_on_two_hosts_put_each_client_on_the_same_variant(network, tmp_path):
    """Cohorts need no pin store: the variant is a function of the client's key and the live weights, so
    two proxies on two hosts, programmed alike, agree on every client (`routing.affinity`, 20 %)."""
    fleet = Fleet(network, tmp_path, envoys=2, routing={"affinity": [{"header": "x-user-id"}]}).start()
    clients = [f"client-{i}" for i in range(300)]
    seen = []
    with httpx.Client() as client:
        for envoy in range(2):
            answers = [fleet.request(envoy, client, {"x-user-id": key}) for key in clients]
            assert {answer.status_code for answer in answers} == {200}
            seen.append([answer.headers["x-graystack-variant"] for answer in answers])
    assert seen[0] == seen[1]
    assert 30 <= seen[0].count("zero-layer") <= 95  # 20 % of 300 clients, within its binomial bounds

"""The multi-host harness itself (tests/support/network.py): hosts talk over a bridge, faults cut or
thin what passes, the delay proxy adds latency without serialising a stream, and closing leaves nothing."""

from __future__ import annotations

import contextlib
import json
import socket
import subprocess
from collections.abc import Iterator

import pytest

from tests.support.echo import NO_CONNECTION
from tests.support.network import (
    Host,
    Network,
    links,
    module_argv,
    namespaces,
    network_of,
    require_network,
)

ECHO_PORT = 7000


def echo_client(client: Host, address: tuple[str, int], *options: str) -> subprocess.CompletedProcess:
    """The echo client run in `client` against `address` (tests/support/echo.py)."""
    return client.run(module_argv("tests.support.echo", "client", address[0], str(address[1]), *options))


def echoed(result: subprocess.CompletedProcess) -> dict:
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def leftovers(prefix: str) -> list[str]:
    """What `ip netns list` and `ip link` show of the network named `prefix` (`gs<pid>-<n>`)."""
    return [name for name in namespaces() + links() if network_of(name) == prefix]


@pytest.fixture(scope="module")
def hosts(tmp_path_factory) -> Iterator[tuple[Host, Host]]:
    """A server host running the echo server and a client host, for the whole module."""
    log_dir = tmp_path_factory.mktemp("network")
    with Network(log_dir) as network:
        server, client = network.host("server"), network.host("client")
        echo_server = server.start(
            module_argv("tests.support.echo", "serve", str(ECHO_PORT)), log_dir / "echo.log"
        )
        server.wait_listening(ECHO_PORT, echo_server)
        yield server, client


@pytest.fixture
def healed(hosts) -> Iterator[tuple[Host, Host]]:
    yield hosts
    for host in hosts:
        host.heal()


def test_a_client_in_one_host_reaches_a_server_in_another(healed):
    server, client = healed
    assert client.ip != server.ip
    assert echoed(echo_client(client, (server.ip, ECHO_PORT), "--messages", "100"))["in_order"]


@pytest.mark.parametrize(("direction", "name_the_peer"), [("both", True), ("in", True), ("out", False)])
def test_a_partition_makes_connects_time_out_until_healed(healed, direction, name_the_peer):
    server, client = healed
    server.partition(*([client] if name_the_peer else []), direction=direction)
    cut = echo_client(client, (server.ip, ECHO_PORT), "--connect-timeout", "1")
    assert cut.returncode == NO_CONNECTION, cut.stdout + cut.stderr
    assert server.dropped() > 0
    server.heal()
    assert echoed(echo_client(client, (server.ip, ECHO_PORT)))["in_order"]


def test_a_partition_from_another_host_leaves_this_one_reachable(healed):
    server, client = healed
    server.partition("10.255.255.254")
    assert echoed(echo_client(client, (server.ip, ECHO_PORT)))["in_order"]
    assert server.dropped() == 0


def test_under_loss_tcp_still_echoes_every_message_in_order(healed):
    server, client = healed
    server.lose(10, client)  # at 30 % TCP's backoff can stall a connection for a minute (measured: 55 s)
    # A fresh SYN every 0.3 s: the kernel's own retransmit waits 1 s, then 2, 4...
    options = ("--messages", "200", "--connect-timeout", "0.3", "--attempts", "30")
    assert echoed(echo_client(client, (server.ip, ECHO_PORT), *options))["in_order"]


def udp_echoes(address: tuple[str, int], batches: int) -> int:
    """How many of `batches` x 100 UDP datagrams sent from the test process come back from `address`."""
    echoes = 0
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
        udp.settimeout(0.1)  # lost ones never come; 100 in flight at a time fit the socket buffers
        for _ in range(batches):
            for number in range(100):
                udp.sendto(str(number).encode(), address)
            with contextlib.suppress(TimeoutError):
                while True:
                    udp.recv(64)
                    echoes += 1
    return echoes


def test_lose_drops_that_share_of_packets_each_way_and_counts_them(healed):
    server, _ = healed
    server.lose(30)
    echoes = udp_echoes((server.ip, ECHO_PORT), batches=10)
    assert 350 < echoes < 650  # 70 % of 70 %: 490 expected, 15 standard deviations either side
    assert server.dropped() >= 1000 - echoes


def test_the_delay_proxy_adds_its_delay_each_way(healed):
    server, client = healed
    proxy = server.delay_proxy(7050, ("127.0.0.1", ECHO_PORT), one_way_ms=50)
    assert echoed(echo_client(client, proxy))["round_trip_ms"] >= 100


def test_a_long_stream_through_the_delay_proxy_arrives_in_order_without_a_pause_per_message(healed):
    server, client = healed
    proxy = server.delay_proxy(7051, ("127.0.0.1", ECHO_PORT), one_way_ms=50)
    # 5000 messages each way; a proxy pausing 100 ms per message would need 500 s, past the client's run timeout
    assert echoed(echo_client(client, proxy, "--messages", "5000"))["in_order"]


def fail_inside(network: Network) -> None:
    """A test body that raises inside the network's `with` block."""
    with network:
        assert leftovers(network.prefix)
        raise RuntimeError("the test body failed")


def test_close_stops_processes_and_removes_namespaces_and_links_even_when_the_body_raised(tmp_path):
    network = Network(tmp_path)
    sleeper = network.host("alone").start(["sleep", "600"], tmp_path / "sleep.log")
    with pytest.raises(RuntimeError, match="the test body failed"):
        fail_inside(network)
    assert sleeper.poll() is not None
    assert leftovers(network.prefix) == []


def test_a_new_network_removes_what_a_crashed_session_left(tmp_path):
    require_network()
    gone = subprocess.run(["sh", "-c", "echo $$"], capture_output=True, text=True, check=True)
    dead = f"gs{gone.stdout.strip()}-0"
    subprocess.run(["ip", "netns", "add", f"{dead}-left"], check=True)
    subprocess.run(["ip", "link", "add", dead, "type", "bridge"], check=True)
    assert sorted(leftovers(dead)) == [dead, f"{dead}-left"]
    with Network(tmp_path):
        assert leftovers(dead) == []

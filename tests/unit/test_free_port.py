"""Free ports for the processes of a local stack, picked before any of them binds its own."""

from graystack.local.processes import LOWEST_PORT, ephemeral_ports, free_port


def test_ports_picked_before_anything_binds_them_are_all_different():
    """The kernel may offer one unbound port twice; two processes of a stack would then fight over it
    (seen in CI: Envoy could not bind its listener)."""
    ports = [free_port() for _ in range(500)]
    assert len(set(ports)) == len(ports)


def test_ports_are_drawn_below_the_range_outgoing_connections_take_theirs_from(tmp_path):
    """A port from the kernel's ephemeral range can be taken by any client's outgoing connection between
    the pick and the bind (seen in CI: a shared stack's Envoy exited `Address already in use`)."""
    ephemeral = ephemeral_ports()
    ports = [free_port() for _ in range(200)]
    assert all(LOWEST_PORT <= port < ephemeral.start for port in ports), ports
    ranges = tmp_path / "ip_local_port_range"
    ranges.write_text("1024\t65535\n")
    assert ephemeral_ports(ranges) == range(1024, 65536)
    assert ephemeral_ports(tmp_path / "absent") == range(32768, 61000)

"""Free ports for the processes of a local stack, picked before any of them binds its own."""

import os
import subprocess
import sys

from graystack.local.port_claims import CLAIM_S, claim
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


def test_ports_picked_by_two_processes_before_either_binds_are_all_different(tmp_path):
    """pytest-xdist's workers, or two `graystack up`s, each pick ports and bind them later; the same port
    picked by both fails the second to bind (a `make test` run saw a gateway exit `Failed to bind to address`).
    1,000 picks from the ~22,000 ports below the ephemeral range collide about eleven times without claims."""
    pick = "from graystack.local.processes import free_port; print(*(free_port() for _ in range(500)))"
    environment = {**os.environ, "TMPDIR": str(tmp_path)}  # their own claims file, not the machine's
    pickers = [
        subprocess.Popen([sys.executable, "-c", pick], stdout=subprocess.PIPE, text=True, env=environment)
        for _ in range(2)
    ]
    picked = [set(map(int, picker.communicate(timeout=60)[0].split())) for picker in pickers]
    assert all(len(ports) == 500 for ports in picked)
    assert not picked[0] & picked[1], sorted(picked[0] & picked[1])


def test_a_claim_lapses_and_a_torn_claims_file_claims_nothing(tmp_path):
    claims = tmp_path / "claims.json"
    assert claim(20_000, claims, now=1_000.0)
    assert not claim(20_000, claims, now=1_000.0 + CLAIM_S - 1)
    assert claim(20_000, claims, now=1_000.0 + CLAIM_S + 1)  # picked long ago: bound or abandoned by now
    claims.write_text('{"20001": 5')  # a process that died writing it
    assert claim(20_001, claims, now=1_000.0)
    assert not claim(20_001, claims, now=1_001.0)

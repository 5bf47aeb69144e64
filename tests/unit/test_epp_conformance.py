"""GIE's conformance test header read as GIE's conformance picker reads it: an IP names each of its ports,
an IP:PORT itself, in a list; joined with the gateway's subset hint."""

from __future__ import annotations

from gateway.epp.conformance import SELECTION, narrow, selection

POOL = ["10.0.0.1:3000", "10.0.0.1:3002", "10.0.0.2:3000", "[fd00::1]:3000"]


def test_an_ip_names_each_of_its_ports_and_an_ip_port_itself():
    assert selection({SELECTION: "10.0.0.1"}, POOL) == {"10.0.0.1:3000", "10.0.0.1:3002"}
    assert selection({SELECTION: "10.0.0.1:3002, 10.0.0.2"}, POOL) == {"10.0.0.1:3002", "10.0.0.2:3000"}
    assert selection({SELECTION: "fd00::1"}, POOL) == {"[fd00::1]:3000"}
    assert selection({SELECTION: "[fd00::1]:3000"}, POOL) == {"[fd00::1]:3000"}


def test_a_name_outside_the_pool_selects_nothing_and_no_header_selects_everything():
    assert selection({SELECTION: "10.9.9.9,10.0.0.1:9999"}, POOL) == frozenset()
    assert selection({}, POOL) is None
    assert selection({SELECTION: " , "}, POOL) is None


def test_the_selection_and_the_subset_hint_narrow_together():
    chosen = frozenset({"10.0.0.1:3000", "10.0.0.2:3000"})
    assert narrow(None, None) is None
    assert narrow(None, chosen) == chosen
    assert narrow(frozenset({"10.0.0.2:3000"}), None) == {"10.0.0.2:3000"}
    assert narrow(frozenset({"10.0.0.2:3000", "10.0.0.1:3002"}), chosen) == {"10.0.0.2:3000"}

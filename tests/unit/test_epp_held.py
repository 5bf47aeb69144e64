"""Requests held in flight past their picker stream until the access log names their end
(gateway/epp/held.py): each released once, at its entry or at the bound, never left counted."""

from __future__ import annotations

from gateway.epp.held import Held
from gateway.epp.picker import Picker
from gateway.epp.wanted import Wanted
from tests.support.clock import FakeClock


def test_each_held_request_is_released_once_at_its_entry_oldest_first_for_a_shared_id():
    released: list[str] = []
    held: Held[str] = Held(released.append, FakeClock(0.0))
    held.hold("id-1", "first")
    held.hold("id-2", "second")
    held.hold("id-1", "third")  # a client's own x-request-id, kept by Envoy, sent twice
    held.ended("id-1")
    held.ended("unknown")  # an entry of a request never held here
    assert released == ["first"]
    held.ended("id-1")
    held.ended("id-1")  # an id's entries outnumbering its requests release nothing more
    assert (released, len(held)) == (["first", "third"], 1)


def test_a_request_whose_entry_never_comes_is_released_at_the_bound():
    released: list[str] = []
    clock = FakeClock(0.0)
    held: Held[str] = Held(released.append, clock, bound=10.0)
    held.hold("lost", "lost")
    clock.now = 5.0
    held.hold("kept", "kept")
    clock.now = 10.5
    held.ended("other")
    assert (released, len(held)) == (["lost"], 1)
    held.ended("kept")
    assert released == ["lost", "kept"]


def test_the_pickers_count_lasts_until_the_entry():
    pods = {"baseline": ("10.0.0.1:8000",)}
    picker = Picker(lambda: Wanted(pods=pods, weights={"baseline": 100}, baseline="baseline"))
    ticket = picker.pick({}, None)
    assert ticket is not None
    picker.hold(ticket, "request-1")
    assert picker.in_flight() == {"10.0.0.1:8000": 1}
    picker.ended("request-1")
    assert picker.in_flight() == {}

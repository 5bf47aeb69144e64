"""The Endpoint Picker's pure core: the variant drawn or hashed from the split, the pod by fewest in
flight, the subset hint, the counts released once, and the protocol's messages."""

from __future__ import annotations

import itertools

import pytest
from envoy.service.ext_proc.v3 import external_processor_pb2 as ext_proc

from gateway import names
from gateway.epp import protocol
from gateway.epp.choice import choose_variant
from gateway.epp.health import Request, Response
from gateway.epp.picker import Outcome, Picker
from gateway.epp.scorers import Signals, rank
from gateway.epp.wanted import Wanted, parse_pods, parse_segments, parse_split

PODS = {"baseline": ("10.0.0.1:8000", "10.0.0.2:8000"), "zero-layer": ("10.0.1.1:8000",)}


def wanted(weights: dict[str, int], **kw: object) -> Wanted:
    return Wanted(pods=PODS, weights=weights, baseline="baseline", **kw)  # type: ignore[arg-type]


def grid(n: int):
    """Draws spread evenly over [0, 1): a split drawn with them lands exactly."""
    return iter((i + 0.5) / n for i in range(n)).__next__


def test_the_draw_lands_in_the_split_in_proportion():
    picker = Picker(lambda: wanted({"baseline": 80, "zero-layer": 20}), draw=grid(100))
    variants = [picker.pick({}, None).variant for _ in range(100)]
    assert variants.count("zero-layer") == 20


def test_a_segment_takes_its_own_split():
    w = wanted({"baseline": 100}, segment_header="X-Client-Type", segments={"mobile": {"zero-layer": 100}})
    picker = Picker(lambda: w)
    assert picker.pick({"x-client-type": "mobile"}, None).variant == "zero-layer"
    assert picker.pick({"x-client-type": "desktop"}, None).variant == "baseline"


def test_a_cohort_key_keeps_its_variant_and_moves_only_forward_as_the_candidate_grows():
    keys = [f"user-{i}" for i in range(400)]
    at = {
        weight: {
            k: choose_variant({"baseline": 100 - weight, "zero-layer": weight}, "baseline", PODS, k, 0.0)
            for k in keys
        }
        for weight in (5, 20, 50, 100, 0)
    }
    assert all(
        at[5][k] == choose_variant({"baseline": 95, "zero-layer": 5}, "baseline", PODS, k, 0.9) for k in keys
    )
    for low, high in itertools.pairwise((5, 20, 50, 100)):
        assert {k for k in keys if at[low][k] == "zero-layer"} <= {
            k for k in keys if at[high][k] == "zero-layer"
        }
    assert 40 <= sum(v == "zero-layer" for v in at[20].values()) <= 120  # about 80 of 400
    assert set(at[0].values()) == {"baseline"}  # a rollback puts every cohort on the baseline


def test_fewest_in_flight_first_and_ties_taken_in_turn():
    counts = {"in_flight": 1.0}
    assert rank(["a", "b", "c"], Signals({"a": 2, "b": 1}, {}), counts, 0) == ["c", "b", "a"]
    assert [rank(["a", "b"], Signals({}, {}), counts, turn)[0] for turn in range(4)] == ["a", "b", "a", "b"]


def test_counts_follow_the_pick_the_pod_that_served_and_the_end():
    outcomes: list[Outcome] = []
    picker = Picker(lambda: wanted({"baseline": 100}), on_outcome=outcomes.append)
    first, second = picker.pick({}, None), picker.pick({}, None)
    assert {first.endpoints[0], second.endpoints[0]} == set(PODS["baseline"])  # spread: each has one
    assert picker.in_flight() == dict.fromkeys(PODS["baseline"], 1)
    picker.served(first, second.endpoints[0])  # a retry moved it to the other pod
    assert picker.in_flight() == {second.endpoints[0]: 2}
    picker.release(first)
    picker.release(first)  # the stream's close after the answer's end: told once
    assert picker.in_flight() == {second.endpoints[0]: 1}
    assert outcomes == [Outcome("baseline", first.endpoints[0], second.endpoints[0])]


def test_the_subset_hint_narrows_the_pods_and_nothing_eligible_is_none():
    picker = Picker(lambda: wanted({"baseline": 50, "zero-layer": 50}))
    only = frozenset({"10.0.0.2:8000"})
    assert {picker.pick({}, only).endpoints for _ in range(10)} == {("10.0.0.2:8000",)}
    assert picker.pick({}, frozenset({"10.9.9.9:1"})) is None
    assert picker.pick({}, frozenset()) is None
    assert Picker(lambda: wanted({"baseline": 100})).pick({}, frozenset(PODS["zero-layer"])) is None


def test_a_flip_reaches_the_next_pick():
    now = [wanted({"baseline": 100})]
    picker = Picker(lambda: now[0])
    assert picker.pick({}, None).variant == "baseline"
    now[0] = wanted({"zero-layer": 100})
    assert picker.pick({}, None).variant == "zero-layer"


def test_flags_parse_and_bad_ones_are_named():
    assert parse_pods(["a=1.2.3.4:80,1.2.3.5:80", "b=1.2.3.6:80"]) == {
        "a": ("1.2.3.4:80", "1.2.3.5:80"),
        "b": ("1.2.3.6:80",),
    }
    assert parse_split("a=95, b=5") == {"a": 95, "b": 5}
    assert parse_segments(["mobile:a=80,b=20"]) == {"mobile": {"a": 80, "b": 20}}
    with pytest.raises(ValueError, match="IP:PORT"):
        parse_pods(["a=1.2.3.4"])
    with pytest.raises(ValueError, match="split 'a=x'"):
        parse_split("a=x")
    with pytest.raises(ValueError, match="VALUE:VARIANT"):
        parse_segments(["a=1"])
    with pytest.raises(ValueError, match="no pods"):
        Wanted(pods=PODS, weights={"other": 1}, baseline="baseline")


def test_the_answer_carries_the_same_list_in_the_header_and_the_metadata():
    answer = protocol.route_to(["10.0.0.1:8000", "10.0.0.2:8000"], "canary")
    common = answer.request_headers.response
    destination, marked = common.header_mutation.set_headers
    assert (destination.header.key, destination.header.raw_value) == (
        protocol.DESTINATION,
        b"10.0.0.1:8000,10.0.0.2:8000",
    )
    assert (marked.header.key, marked.header.raw_value) == (names.ROUTED_HEADER, b"canary")
    assert marked.append_action == marked.OVERWRITE_IF_EXISTS_OR_ADD  # a client's copy never survives
    lb = answer.dynamic_metadata.fields[protocol.LB_NAMESPACE].struct_value
    assert lb.fields[protocol.DESTINATION].string_value == "10.0.0.1:8000,10.0.0.2:8000"
    assert common.clear_route_cache
    assert protocol.refuse(503, "none").immediate_response.status.code == 503


def test_the_gateway_hints_and_reports_are_read_from_the_metadata():
    request = ext_proc.ProcessingRequest()
    assert protocol.subset_hint(request) is None
    assert protocol.served_endpoint(request) is None
    request.metadata_context.filter_metadata[protocol.SUBSET_NAMESPACE].update(
        {protocol.SUBSET: ["1.1.1.1:1"]}
    )
    request.metadata_context.filter_metadata[protocol.LB_NAMESPACE].update({protocol.SERVED: "1.1.1.1:1"})
    assert protocol.subset_hint(request) == frozenset({"1.1.1.1:1"})
    assert protocol.served_endpoint(request) == "1.1.1.1:1"
    request.metadata_context.filter_metadata[protocol.SUBSET_NAMESPACE].update({protocol.SUBSET: []})
    assert protocol.subset_hint(request) == frozenset()


def test_the_health_messages_are_grpc_healths_on_the_wire():
    assert Request(service="readiness").SerializeToString() == b"\n\treadiness"
    assert Response(status=1).SerializeToString() == b"\x08\x01"


def test_a_variant_routed_by_graystacks_envoy_is_taken_never_drawn():
    picker = Picker(lambda: wanted({"baseline": 100, "zero-layer": 0}), draw=grid(10))
    assert {picker.pick({}, None, None).variant for _ in range(10)} == {"baseline"}
    draft = picker.draw({}, None, "zero-layer")
    assert draft is not None
    assert (draft.variant, draft.pods) == ("zero-layer", PODS["zero-layer"])
    assert picker.draw({}, None, "canary") is None  # no pod of it known here: the request goes unpicked
    assert picker.draw({}, frozenset({"10.0.0.1:8000"}), "zero-layer") is None  # the hint still narrows


def test_envoy_names_the_variant_in_the_streams_metadata_and_may_send_no_body():
    assert protocol.routed([("user-agent", "envoy"), (names.ROUTED_HEADER, "zero-layer")]) == "zero-layer"
    assert protocol.routed(None) is None
    headers = ext_proc.HttpHeaders(end_of_stream=False)
    assert protocol.body_follows(ext_proc.ProcessingRequest(request_headers=headers))  # a GIE gateway's
    none = ext_proc.ProtocolConfiguration()  # request_body_mode NONE, as graystack's Envoy sends
    asked = ext_proc.ProcessingRequest(request_headers=headers, protocol_config=none)
    assert not protocol.body_follows(asked)

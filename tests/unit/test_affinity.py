"""`routing.affinity`: the spec refuses a bad source naming it; the builders hash the client's key on every
split route, in an order of clusters that nests the cohorts; without affinity nothing changes.

The nesting proof walks every hash residue through the built routes as Envoy 1.40 does
(`hash % total`, clusters in list order: RouteEntryImplBase::pickWeightedCluster), for every weight."""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Sequence
from pathlib import Path

import pytest
from envoy.config.cluster.v3 import cluster_pb2
from envoy.config.route.v3 import route_components_pb2
from envoy.extensions.common.matching.v3 import extension_matcher_pb2
from envoy.extensions.filters.http.json_to_metadata.v3 import json_to_metadata_pb2
from envoy.extensions.filters.http.lua.v3 import lua_pb2
from envoy.extensions.filters.network.http_connection_manager.v3 import http_connection_manager_pb2 as hcm_pb2
from fastapi.testclient import TestClient
from google.protobuf import struct_pb2

from gateway import names
from gateway.admin.api import create_admin_app
from gateway.admin.protocol import Status
from gateway.answers.entries import answer_from
from gateway.answers.store import AnswerStore
from gateway.envoy.affinity_filter import BODY_FILTER, BODY_LIMIT, KEY_FILTER, key_script
from gateway.envoy.resources import ListenerAddress, build_resources
from gateway.service import Gateway
from gateway.spec.model import RolloutSpec, SpecError, validate_spec
from gateway.spec.yaml12 import load_yaml
from gateway.xds.cache import SnapshotCache
from gateway.xds.server import AdsServer
from graystack.console.status_view import render_status
from tests.unit.test_answers import entry
from tests.unit.test_spec import DESIGN_EXAMPLE

SOURCES = [{"header": "X-User-Id"}, {"cookie": "session"}, {"body": "metadata.user_id"}, {"body": "user"}]
ENDPOINTS = {
    "baseline": [("127.0.0.1", 8001)],
    "zero-layer": [("127.0.0.1", 8002)],
    "canary": [("127.0.0.1", 8003)],
}


def spec(affinity: list | None = SOURCES, fallback: str | None = "baseline", **variants: dict) -> RolloutSpec:
    data = load_yaml(DESIGN_EXAMPLE)
    if affinity is not None:
        data["routing"]["affinity"] = affinity
    data["retries"]["fallback"] = fallback
    for name, extra in variants.items():
        data["variants"].setdefault(name.replace("_", "-"), {}).update(extra)
    if len(data["variants"]) > 2:  # the routes alone: several candidates' steps must fit together
        data["strategy"] = None
    return validate_spec(data)


def every_split_route(built: RolloutSpec) -> list[route_components_pb2.Route]:
    resources = build_resources(built, ENDPOINTS, ListenerAddress())
    (host,) = resources.routes[0].virtual_hosts
    return [route for route in host.routes if route.route.HasField("weighted_clusters")]


def split_routes(built: RolloutSpec) -> dict[str, route_components_pb2.Route]:
    """Each segment's split, as its chat-completions route (one per API table entry) carries it."""
    chat = " POST /v1/chat/completions|"
    return {r.name.partition(chat)[0]: r for r in every_split_route(built) if chat in r.name}


def http_filters(built: RolloutSpec) -> list[hcm_pb2.HttpFilter]:
    (listener,) = build_resources(built, ENDPOINTS, ListenerAddress()).listeners
    manager = hcm_pb2.HttpConnectionManager()
    listener.filter_chains[0].filters[0].typed_config.Unpack(manager)
    return list(manager.http_filters)


def pick(clusters: Sequence[route_components_pb2.WeightedCluster.ClusterWeight], key_hash: int) -> str:
    """Envoy's choice for a request whose key hashes to `key_hash`."""
    value = key_hash % sum(c.weight.value for c in clusters)
    for cluster in clusters:
        if value < cluster.weight.value:
            return cluster.name
        value -= cluster.weight.value
    raise AssertionError("unreachable")


# -- the spec ---------------------------------------------------------------------------------------------


def test_sources_are_read_in_order_and_named_as_logs_name_them():
    sources = spec().routing.affinity
    assert [s.label for s in sources] == [
        "header:x-user-id",
        "cookie:session",
        "body:metadata.user_id",
        "body:user",
    ]


def test_affinity_is_off_by_default():
    assert spec(affinity=None).routing.affinity == []


@pytest.mark.parametrize(
    ("affinity", "message"),
    [
        (
            [{"header": "x-user-id", "cookie": "s"}],
            "routing.affinity.0: an affinity source is exactly one of",
        ),
        ([{"header": "x-user-id"}, {}], "routing.affinity.1: an affinity source is exactly one of"),
        ([{"header": "x user"}], "routing.affinity.0: header 'x user' is not a header name"),
        ([{"header": "X-Graystack-Affinity"}], "routing.affinity.0: header 'X-Graystack-Affinity' is not"),
        ([{"cookie": "a;b"}], "routing.affinity.0: cookie 'a;b' is not a valid cookie name"),
        (
            [{"body": "metadata..user_id"}],
            "routing.affinity.0: body 'metadata..user_id' is not a dotted path",
        ),
        ([{"body": "user"}, {"body": "user"}], "routing: affinity: ['body:user'] listed twice"),
        ([{"query": "user"}], "routing.affinity.0.query: Extra inputs are not permitted"),
    ],
)
def test_a_bad_source_is_refused_naming_it(affinity, message):
    with pytest.raises(SpecError) as refused:
        spec(affinity=affinity)
    assert message in str(refused.value)


def test_pod_affinity_needs_a_key():
    with pytest.raises(
        SpecError, match=r"variants\.zero-layer\.load_balancing: ring_hash hashes the routing\.affinity"
    ):
        spec(affinity=None, zero_layer={"load_balancing": "ring_hash"})


# -- the routes -------------------------------------------------------------------------------------------


def test_without_affinity_the_routes_and_listener_are_as_before():
    built = spec(affinity=None)
    for route in every_split_route(built):
        assert not route.route.hash_policy
        assert not route.route.weighted_clusters.HasField("use_hash_policy")
    assert [f.name for f in http_filters(built)] == ["envoy.filters.http.lua", "envoy.filters.http.router"]


def test_every_split_route_picks_its_cluster_by_the_key_hash():
    assert set(split_routes(spec())) == {"x-client-type=high_load", "x-client-type=mobile", "default"}
    for route in every_split_route(spec()):
        (policy,) = route.route.hash_policy
        assert policy.header.header_name == names.AFFINITY_HEADER
        assert route.route.weighted_clusters.use_hash_policy.value is True


def cohorts(built: RolloutSpec) -> dict[str, set[int]]:
    """Per split route, the hash residues (mod 100) whose clients the candidate serves."""
    return {
        name: {h for h in range(100) if pick(route.route.weighted_clusters.clusters, h) != "baseline"}
        for name, route in split_routes(built).items()
    }


WEIGHTS = [*range(0, 101), *range(100, -1, -3), *range(0, 101, 7)]


@pytest.mark.parametrize("fallback", ["baseline", None])
def test_cohorts_nest_as_the_candidate_weight_moves_in_the_default_split_and_a_segment(fallback):
    """Raising the weight only adds clients to the candidate, lowering only takes them back, 0 is nobody, 100
    everybody; with the fallback aggregate standing in the candidate's place or not."""
    previous: dict[str, set[int]] | None = None
    for weight in WEIGHTS:
        built = spec(fallback=fallback).with_split({"baseline": 100 - weight, "zero-layer": weight})
        built = built.with_split({"baseline": 100 - weight, "zero-layer": weight}, segment="mobile")
        now = cohorts(built)
        for route in ("default", "x-client-type=mobile"):
            assert len(now[route]) == weight
            if previous is not None:
                assert now[route] <= previous[route] or previous[route] <= now[route]
        previous = now


def test_a_cohort_at_5_percent_is_inside_the_cohort_at_20():
    at = {
        weight: cohorts(spec().with_split({"baseline": 100 - weight, "zero-layer": weight}))["default"]
        for weight in (5, 20, 50, 100)
    }
    assert at[5] < at[20] < at[50] < at[100] == set(range(100))
    assert cohorts(spec().with_split({"baseline": 100, "zero-layer": 0}))["default"] == set()


def test_with_two_candidates_the_first_ones_cohort_nests_and_the_baseline_comes_first():
    built = spec(canary={"endpoints": ["127.0.0.1:8003"]})
    previous: set[int] = set()
    for weight in range(0, 91):
        split = built.with_split({"baseline": 90 - weight, "canary": weight, "zero-layer": 10})
        clusters = split_routes(split)["default"].route.weighted_clusters.clusters
        assert clusters[0].name == "baseline" or weight == 90
        canary = {h for h in range(100) if pick(clusters, h) == names.fallback_cluster("canary")}
        assert previous <= canary
        previous = canary


def test_several_candidates_each_keep_their_cohort_whatever_the_others_steps_and_rollbacks():
    data = spec(canary={"endpoints": ["127.0.0.1:8003"]}).model_dump(mode="json")
    data["strategy"] = {"steps": [{"weight": 5}, {"weight": 20}, {"weight": 45}]}  # slots of 45 each
    built = validate_spec(data)
    assert built.lanes == ("zero-layer", "canary")

    def cohort(canary: int, zero_layer: int, who: str) -> frozenset[int]:
        split = built.with_split(
            {"baseline": 100 - canary - zero_layer, "canary": canary, "zero-layer": zero_layer}
        )
        clusters = split_routes(split)["default"].route.weighted_clusters.clusters
        return frozenset(h for h in range(100) if pick(clusters, h) == names.fallback_cluster(who))

    shares = (0, 5, 20, 45)  # 0: not yet started, or rolled back
    for mine in shares:
        # the same clients at a share of its own, however far the other stands or whether it rolled back
        assert len({cohort(other, mine, "zero-layer") for other in shares}) == 1
        assert len({cohort(mine, other, "canary") for other in shares}) == 1
        assert len(cohort(mine, 20, "canary")) == mine
    for lower, higher in itertools.pairwise(shares):  # and each one's steps nest
        assert cohort(20, lower, "zero-layer") <= cohort(5, higher, "zero-layer")


# -- the listener's filters -------------------------------------------------------------------------------


def test_the_key_filters_come_first_and_read_the_body_only_where_a_source_is_in_it():
    filters = http_filters(spec())
    assert [f.name for f in filters][:2] == [BODY_FILTER, KEY_FILTER]
    wrapped = extension_matcher_pb2.ExtensionWithMatcher()
    filters[0].typed_config.Unpack(wrapped)
    rules = json_to_metadata_pb2.JsonToMetadata()
    wrapped.extension_config.typed_config.Unpack(rules)
    assert [[s.key for s in rule.selectors] for rule in rules.request_rules.rules] == [
        ["metadata", "user_id"],
        ["user"],
    ]
    # content-length of at most six digits, else skipped (routed without a body key, never a 413)
    predicate = wrapped.xds_matcher.matcher_list.matchers[0].predicate.not_matcher.single_predicate
    assert predicate.value_match.safe_regex.regex == "^[0-9]{1,6}$"
    assert BODY_LIMIT == 999_999
    script = lua_pb2.Lua()
    filters[1].typed_config.Unpack(script)
    source = script.default_source_code.inline_string
    positions = [
        source.index(f'label = "{label}"')
        for label in ("header:x-user-id", "cookie:session", "body:metadata.user_id", "body:user")
    ]
    assert positions == sorted(positions)
    assert "clearRouteCache" in source
    header_only = http_filters(spec(affinity=[{"header": "x-user-id"}]))
    assert [f.name for f in header_only][:2] == [KEY_FILTER, "envoy.filters.http.lua"]


# -- pod affinity and the answers -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("policy", "lb"), [("ring_hash", cluster_pb2.Cluster.RING_HASH), ("maglev", cluster_pb2.Cluster.MAGLEV)]
)
def test_pod_affinity_hashes_the_same_key_within_the_variant(policy, lb):
    built = spec(zero_layer={"load_balancing": policy})
    clusters = {c.name: c for c in build_resources(built, ENDPOINTS, ListenerAddress()).clusters}
    assert clusters["zero-layer"].lb_policy == lb
    assert clusters["baseline"].lb_policy == cluster_pb2.Cluster.ROUND_ROBIN


def test_an_answer_names_the_source_of_its_key_or_none():
    keyed = entry()
    source = struct_pb2.Struct()
    source.update({"source": "body:metadata.user_id"})
    keyed.common_properties.metadata.filter_metadata[names.AFFINITY_METADATA].CopyFrom(source)
    assert answer_from(keyed).affinity == "body:metadata.user_id"
    assert answer_from(entry()).affinity is None


def status_with(built: RolloutSpec, answers: AnswerStore) -> Status:
    gateway = Gateway(SnapshotCache(), Path("spec.yaml"), clock=lambda: 1000.0)
    gateway.load(built, "sha-1")
    with TestClient(create_admin_app(gateway, AdsServer(gateway.cache), answers=answers)) as client:
        return Status.model_validate(client.get("/v1/status").json())


def test_status_says_what_share_of_the_answers_had_a_key():
    answers = AnswerStore()
    unkeyed = answer_from(entry())
    assert unkeyed is not None
    for source in ("header:x-user-id", "header:x-user-id", "body:user", None):
        answers.add(dataclasses.replace(unkeyed, affinity=source), now=1000.0)
    answers.add(dataclasses.replace(unkeyed, shadow=True), now=1000.0)  # a mirrored copy: no client's
    status = status_with(spec(), answers)
    assert status.cohorts is not None
    assert status.cohorts.keyed == {"header:x-user-id": 2, "body:user": 1}
    assert "75% of 4 answers keyed (body:user 1, header:x-user-id 2)" in render_status(status)
    assert status_with(spec(affinity=None), answers).cohorts is None


# -- rules on a body field (routing.body) -----------------------------------------------------------------


def body_rules(**routing: object) -> RolloutSpec:
    data = load_yaml(DESIGN_EXAMPLE)
    data["routing"].update(routing)
    return validate_spec(data)


def test_rules_on_the_body_model_match_the_header_the_filter_fills():
    built = body_rules(body="model")
    routes = split_routes(built)
    assert set(routes) == {f"{names.MATCH_HEADER}=high_load", f"{names.MATCH_HEADER}=mobile", "default"}
    matcher = routes[f"{names.MATCH_HEADER}=mobile"].match.headers[-1]
    assert (matcher.name, matcher.string_match.exact) == (names.MATCH_HEADER, "mobile")
    filters = http_filters(built)
    assert [f.name for f in filters][:2] == [BODY_FILTER, KEY_FILTER]
    script = lua_pb2.Lua()
    filters[1].typed_config.Unpack(script)
    assert 'local MATCH_PATH = "model"' in script.default_source_code.inline_string
    assert "local MATCH_PATH = nil" in key_script(spec().routing.affinity)
    # without affinity the routes still split at random
    assert not routes["default"].route.hash_policy


def test_a_bad_body_field_for_the_rules_is_refused():
    with pytest.raises(SpecError, match=r"routing\.body: body 'model\.' is not a dotted path"):
        body_rules(body="model.")

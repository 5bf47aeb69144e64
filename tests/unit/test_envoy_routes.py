"""What reaches the variants: the API table's paths only (gateway/envoy/api_routes.py), `/v1/models` to the
baseline's own cluster, the servers' own routes never,
and each variant's active health check on its server's own path, or none."""

import re

import pytest
from envoy.extensions.filters.network.http_connection_manager.v3 import http_connection_manager_pb2 as hcm_pb2

from gateway import names
from gateway.envoy.resources import ListenerAddress, build_resources
from gateway.spec.model import validate_spec
from gateway.spec.yaml12 import load_yaml
from gateway.xds.cache import check_consistent
from tests.unit.test_spec import DESIGN_EXAMPLE

ENDPOINTS = {"baseline": [("127.0.0.1", 8001)], "zero-layer": [("127.0.0.1", 8002)]}


def build(variants: dict | None = None, **changes):
    data = load_yaml(DESIGN_EXAMPLE)
    data.update(changes)
    for name, extra in (variants or {}).items():
        data["variants"][name].update(extra)
    return build_resources(validate_spec(data), ENDPOINTS, ListenerAddress("127.0.0.1", 8080))


def first_route(resources, method: str, path: str, headers: dict | None = None):
    """The route Envoy picks for the request (the first whose match holds), or None: its path matchers as
    Envoy applies them (RE2 agrees with `re` on the table's regexes), the query string aside."""
    (route_config,) = resources.routes
    (host,) = route_config.virtual_hosts
    path = path.partition("?")[0]
    given = {":method": method, **(headers or {})}
    for route in host.routes:
        match = route.match
        if any(given.get(h.name) != h.string_match.exact for h in match.headers):
            continue
        kind = match.WhichOneof("path_specifier")
        if kind == "safe_regex":
            hit = re.fullmatch(match.safe_regex.regex, path) is not None
        elif kind == "path_separated_prefix":
            prefix, seen = match.path_separated_prefix, path
            if match.HasField("case_sensitive") and not match.case_sensitive.value:
                prefix, seen = prefix.lower(), path.lower()
            hit = seen == prefix or seen.startswith(prefix + "/")
        elif kind == "prefix":
            hit = path.startswith(match.prefix)
        else:
            hit = path == match.path
        if hit:
            return route
    return None


def treatment(route) -> str | None:
    """What a client gets: split between the variants, the baseline's own cluster, a 404, or no route."""
    if route is None:
        return None
    if route.HasField("direct_response"):
        return f"refused {route.direct_response.status}"
    if route.route.HasField("weighted_clusters"):
        return "split"
    return route.route.cluster


@pytest.mark.parametrize(
    ("method", "path", "expected"),
    [
        ("POST", "/v1/messages", "split"),
        ("POST", "/v1/messages/count_tokens", "split"),
        ("POST", "/v1/chat/completions", "split"),
        ("POST", "/v1/chat/completions?beta=true", "split"),
        ("POST", "/v1/completions", "split"),
        ("POST", "/v1/responses", "split"),
        ("GET", "/v1/responses/resp_123", "split"),
        ("DELETE", "/v1/responses/resp_123", "split"),
        ("POST", "/v1/embeddings", "split"),
        ("GET", "/v1/models", "baseline-models"),
        ("GET", "/metrics", "refused 404"),
        ("GET", "/Metrics/x", "refused 404"),
        ("GET", "/readyz", "refused 404"),
        ("GET", "/healthz", "refused 404"),
        ("GET", "/health", "refused 404"),
        ("POST", "/admin/faults", "refused 404"),
        ("GET", "/admin/outputs/abc", "refused 404"),
        ("GET", "/v1/messages", None),
        ("POST", "/v1/messagesx", None),
        ("POST", "/v1/models", None),
        ("POST", "/v1/chat/completions/extra", None),
        ("GET", "/v1/responses/resp_123/input_items", None),
        ("PUT", "/v1/responses/resp_123", None),
    ],
)
def test_the_default_table_routes_the_inference_apis_only(method, path, expected):
    resources = build(routing={"weights": {"baseline": 100}})
    assert treatment(first_route(resources, method, path)) == expected


def test_header_rules_split_each_table_api_before_the_default():
    resources = build()
    rule = first_route(resources, "POST", "/v1/embeddings", {"X-Client-Type": "high_load"})
    assert rule.name.startswith("x-client-type=high_load POST /v1/embeddings|")
    assert [h.name for h in rule.match.headers] == [":method", "X-Client-Type"]
    default = first_route(resources, "POST", "/v1/embeddings", {"X-Client-Type": "other"})
    assert default.name.startswith("default POST /v1/embeddings|")
    assert (
        treatment(first_route(resources, "GET", "/metrics", {"X-Client-Type": "high_load"})) == "refused 404"
    )


def test_each_route_names_its_api_and_the_checks_its_traffic_feeds():
    resources = build()
    embeddings = first_route(resources, "POST", "/v1/embeddings")
    assert names.api_of_route(embeddings.name) == ("openai_embeddings", frozenset({"errors"}))
    chat = first_route(resources, "POST", "/v1/chat/completions")
    assert names.api_of_route(chat.name) == ("openai_chat", frozenset({"errors", "latency"}))
    assert names.api_of_route(first_route(resources, "GET", "/v1/models").name) == ("models", frozenset())


def test_a_table_pins_refuses_and_adds_apis():
    routes = {
        "POST /v1/embeddings": {"treatment": "baseline"},
        "POST /v1/completions": {"treatment": "refuse"},
        "POST /v2/generate/{model}": {"kind": "other"},
    }
    resources = build(apis={"routes": routes})
    assert treatment(first_route(resources, "POST", "/v1/embeddings")) == "baseline-models"
    refused = first_route(resources, "POST", "/v1/completions", {"X-Client-Type": "high_load"})
    assert treatment(refused) == "refused 404"
    assert "POST /v1/completions" in refused.direct_response.body.inline_string
    assert treatment(first_route(resources, "POST", "/v2/generate/tiny")) == "split"
    assert treatment(first_route(resources, "POST", "/v1/chat/completions")) == "split"


def test_unknown_paths_go_to_the_baseline_where_the_spec_says_so_but_never_the_servers_own_routes():
    resources = build(apis={"unknown_paths": "baseline"})
    assert treatment(first_route(resources, "GET", "/v1/files")) == "baseline-models"
    assert treatment(first_route(resources, "POST", "/tokenize")) == "baseline-models"
    for path in ("/metrics", "/admin/faults", "/readyz", "/health"):
        assert treatment(first_route(resources, "GET", path)) == "refused 404"
    assert treatment(first_route(build(), "GET", "/v1/files")) is None


def test_a_variants_own_health_path_is_never_served_through_the_listener():
    resources = build(
        {"zero-layer": {"health_check": {"path": "/v1/ready"}}}, apis={"unknown_paths": "baseline"}
    )
    assert treatment(first_route(resources, "GET", "/v1/ready")) == "refused 404"


def test_the_listener_normalises_paths_before_the_routes_match():
    (listener,) = [x for x in build().listeners if x.name == names.LISTENER]
    manager = hcm_pb2.HttpConnectionManager()
    listener.filter_chains[0].filters[0].typed_config.Unpack(manager)
    assert manager.normalize_path.value
    assert manager.merge_slashes


@pytest.mark.parametrize(
    ("changes", "baseline"),
    [
        ({}, "baseline"),  # retries.fallback
        ({"retries": {"attempts": 1}}, "baseline"),  # no fallback: the variant named baseline
    ],
)
def test_models_go_to_the_baselines_endpoints_through_a_cluster_of_their_own(changes, baseline):
    resources = build(**changes)
    models = first_route(resources, "GET", "/v1/models")
    assert models.route.cluster == names.models_cluster(baseline)
    assert not models.route.HasField("weighted_clusters")  # never split
    assert models.route.timeout.seconds == 8  # the spec's request timeout, not Envoy's 15 s
    cluster = next(c for c in resources.clusters if c.name == names.models_cluster(baseline))
    assert cluster.eds_cluster_config.service_name == baseline
    assert not cluster.health_checks
    check_consistent(resources.by_type())


def test_models_without_a_baseline_go_to_the_first_variant():
    data = load_yaml(DESIGN_EXAMPLE)
    data["variants"] = {"old": {"endpoints": ["127.0.0.1:8001"]}, "new": {"endpoints": ["127.0.0.1:8002"]}}
    data["routing"] = {"weights": {"old": 100}}
    data["retries"] = {"attempts": 1}
    data.pop("strategy")
    resources = build_resources(validate_spec(data), {"old": [], "new": []}, ListenerAddress())
    assert first_route(resources, "GET", "/v1/models").route.cluster == names.models_cluster("old")


def health_paths(resources) -> dict[str, list[str]]:
    return {
        c.name: [h.http_health_check.path for h in c.health_checks]
        for c in resources.clusters
        if c.name in ENDPOINTS
    }


def test_each_variant_is_checked_on_its_own_path_or_not_at_all():
    assert health_paths(build()) == {"baseline": ["/readyz"], "zero-layer": ["/readyz"]}
    own = build({"zero-layer": {"health_check": {"path": "/health"}}})
    assert health_paths(own) == {"baseline": ["/readyz"], "zero-layer": ["/health"]}
    off = build({"baseline": {"health_check": None}})
    assert health_paths(off) == {"baseline": [], "zero-layer": ["/readyz"]}


def test_health_checks_off_for_the_spec_leave_only_a_variant_that_asks():
    assert health_paths(build(health_check=None)) == {"baseline": [], "zero-layer": []}
    asked = build({"zero-layer": {"health_check": {"path": "/health"}}}, health_check=None)
    assert health_paths(asked) == {"baseline": [], "zero-layer": ["/health"]}
    (check,) = next(c for c in asked.clusters if c.name == "zero-layer").health_checks
    assert check.interval.seconds == 2  # the defaults, on the variant's path


def test_a_spec_written_back_keeps_each_variants_health_check():
    """The admin API and the CLI edit the spec by dumping and validating it again (with_split)."""
    spec = validate_spec(
        load_yaml(DESIGN_EXAMPLE)
        | {
            "variants": {
                "baseline": {"endpoints": ["127.0.0.1:8001"], "health_check": None},
                "zero-layer": {"endpoints": ["127.0.0.1:8002"], "health_check": {"path": "/health"}},
            }
        }
    )
    flipped = spec.with_split({"baseline": 50, "zero-layer": 50})
    assert flipped.health_check_for("baseline") is None
    assert flipped.health_check_for("zero-layer").path == "/health"


def test_every_answer_names_the_variant_of_the_host_that_answered_and_passes_the_servers_own_name_on():
    """Envoy names each answer's variant from the answering endpoint's metadata, over what the server
    sent (a graystack server names its model form, not the variant), so a fallback's answer names the
    fallback; the server's own name is copied first, as it came, into x-graystack-server-variant."""
    resources = build()
    (route_config,) = resources.routes
    passed_on, routed = route_config.virtual_hosts[0].response_headers_to_add
    assert [(h.header.key, h.header.value, h.append_action) for h in (passed_on, routed)] == [
        ("x-graystack-server-variant", "%RESP(x-graystack-variant)%", routed.OVERWRITE_IF_EXISTS_OR_ADD),
        ("x-graystack-variant", "%UPSTREAM_METADATA(graystack:variant)%", routed.OVERWRITE_IF_EXISTS_OR_ADD),
    ]
    for assignment in resources.endpoints:
        for endpoint in assignment.endpoints[0].lb_endpoints:
            assert endpoint.metadata.filter_metadata["graystack"]["variant"] == assignment.cluster_name
    clusters = {c.name: c for c in resources.clusters}
    for cluster, variant in [("zero-layer-with-fallback", "zero-layer"), ("baseline-models", "baseline")]:
        assert clusters[cluster].metadata.filter_metadata["graystack"]["variant"] == variant

"""What reaches the variants: the inference API's paths only, `/v1/models` to the baseline's own cluster,
and each variant's active health check on its server's own path, or none."""

import re

import pytest

from gateway import names
from gateway.envoy.resources import ListenerAddress, build_resources
from gateway.spec.model import load_yaml, validate_spec
from gateway.xds.cache import check_consistent
from tests.unit.test_spec import DESIGN_EXAMPLE

ENDPOINTS = {"baseline": [("127.0.0.1", 8001)], "zero-layer": [("127.0.0.1", 8002)]}


def build(variants: dict | None = None, **changes):
    data = load_yaml(DESIGN_EXAMPLE)
    data.update(changes)
    for name, extra in (variants or {}).items():
        data["variants"][name].update(extra)
    return build_resources(validate_spec(data), ENDPOINTS, ListenerAddress("127.0.0.1", 8080))


def routes_by_name(resources):
    (route_config,) = resources.routes
    (host,) = route_config.virtual_hosts
    return {r.name: r for r in host.routes}


def routed(route, method: str, path: str) -> bool:
    """Whether `route`'s path and method match, as Envoy matches them (RE2 agrees with `re` on this regex)."""
    match = route.match
    methods = [h.string_match.exact for h in match.headers if h.name == ":method"]
    if methods and method not in methods:
        return False
    if match.HasField("safe_regex"):
        return re.fullmatch(match.safe_regex.regex, path) is not None
    return match.path == path


@pytest.mark.parametrize(
    ("method", "path", "route"),
    [
        ("POST", "/v1/messages", "default"),
        ("POST", "/v1/messages/count_tokens", "default"),
        ("POST", "/v1/chat/completions", "default"),
        ("POST", "/v1/completions", "default"),
        ("GET", "/v1/models", "models"),
        ("GET", "/metrics", None),
        ("GET", "/readyz", None),
        ("GET", "/healthz", None),
        ("GET", "/health", None),
        ("POST", "/admin/faults", None),
        ("GET", "/v1/messages", None),
        ("POST", "/v1/messagesx", None),
        ("POST", "/v1/models", None),
        ("POST", "/v1/chat/completions/extra", None),
    ],
)
def test_only_the_inference_api_is_routed(method, path, route):
    routes = routes_by_name(build(routing={"weights": {"baseline": 100}}))
    matching = [name for name, r in routes.items() if routed(r, method, path)]
    assert matching == ([route] if route else [])


def test_header_rules_match_on_the_inference_paths_only():
    rule = routes_by_name(build())["x-client-type=high_load"]
    assert routed(rule, "POST", "/v1/chat/completions")
    assert not routed(rule, "GET", "/metrics")
    assert [h.name for h in rule.match.headers] == [":method", "X-Client-Type"]


@pytest.mark.parametrize(
    ("changes", "baseline"),
    [
        ({}, "baseline"),  # retries.fallback
        ({"retries": {"attempts": 1}}, "baseline"),  # no fallback: the variant named baseline
    ],
)
def test_models_go_to_the_baselines_endpoints_through_a_cluster_of_their_own(changes, baseline):
    resources = build(**changes)
    models = routes_by_name(resources)["models"]
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
    assert routes_by_name(resources)["models"].route.cluster == names.models_cluster("old")


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


def test_every_answer_names_the_variant_of_the_host_that_answered_unless_the_server_did():
    """For servers that send no `x-graystack-variant` (vLLM, llama.cpp): Envoy adds it from the
    answering endpoint's metadata, so a fallback's answer names the fallback."""
    resources = build()
    (route_config,) = resources.routes
    (header,) = route_config.virtual_hosts[0].response_headers_to_add
    assert (header.header.key, header.header.value) == (
        "x-graystack-variant",
        "%UPSTREAM_METADATA(graystack:variant)%",
    )
    assert header.append_action == header.ADD_IF_ABSENT
    for assignment in resources.endpoints:
        for endpoint in assignment.endpoints[0].lb_endpoints:
            assert endpoint.metadata.filter_metadata["graystack"]["variant"] == assignment.cluster_name
    clusters = {c.name: c for c in resources.clusters}
    for cluster, variant in [("zero-layer-with-fallback", "zero-layer"), ("baseline-models", "baseline")]:
        assert clusters[cluster].metadata.filter_metadata["graystack"]["variant"] == variant

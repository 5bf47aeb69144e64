"""What graystack writes into a user's HTTPRoute (gateway/gatewayapi/routes.py): only the weights of the
variants' backendRefs, in every rule that has them, and rules of its own for header segments; another
team's rule, a platform filter, annotations and labels come out as they went in. Every route written is
valid against the vendored Gateway API HTTPRoute CRD (tests/crds/gateway-api/): its schema, with its
defaults applied, and its CEL rules (tests/support/kube_crds.py). The variants are named otherwise than their Services (v1 is `llm-v1`, v2 `llm-v2`)."""

from __future__ import annotations

import copy

import pytest
import yaml

from gateway.errors import SpecError
from gateway.gatewayapi.routes import RouteError, drift, owned, released, rule_name, written
from gateway.spec.model import validate_spec
from tests.support.kube_crds import defaulted, problems

ROUTE = yaml.safe_load(
    """
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata:
  name: llm
  namespace: serving
  resourceVersion: "41"
  generation: 3
  labels: {app: llm}
  annotations: {platform.example.com/owner: inference-team}
spec:
  parentRefs: [{name: shared-gateway, namespace: infra}]
  hostnames: [llm.example.com]
  rules:
  - name: chat
    matches: [{path: {type: PathPrefix, value: /v1}}]
    filters:
    - type: RequestHeaderModifier
      requestHeaderModifier: {add: [{name: x-team, value: platform}]}
    backendRefs:
    - {name: llm-v1, port: 8000, weight: 1}
    - {name: llm-v2, port: 8000, weight: 0}
  - name: embeddings
    matches: [{path: {type: PathPrefix, value: /v1/embeddings}}]
    backendRefs: [{name: embedder, port: 9000}]
"""
)


def spec(**routing: object):
    return validate_spec(
        {
            "name": "llm",
            "variants": {
                "v1": {"service": "llm-v1", "port": 8000},
                "v2": {"service": "llm-v2", "port": 8000},
            },
            "routing": {"weights": {"v1": 95, "v2": 5}, **routing},
            "retries": {"fallback": "v1"},
            "gateway_api": {
                "routes": [{"name": "llm", "namespace": "serving"}],
                "backends": {"v1": {"name": "llm-v1", "port": 8000}, "v2": {"name": "llm-v2", "port": 8000}},
            },
        }
    )


SEGMENTS = {
    "rules": [{"value": "beta", "weights": {"v1": 50, "v2": 50}}, {"value": "Internal QA", "variant": "v2"}]
}


def valid(route: dict) -> None:
    assert problems("HTTPRoute", defaulted("HTTPRoute", route)) is None


def without_ours(route: dict) -> dict:
    """`route` with the rollout's weights blanked and its rules dropped: what nobody else may see change."""
    out = copy.deepcopy(route)
    out["spec"]["rules"] = [r for r in out["spec"]["rules"] if not owned(r)]
    for ref in out["spec"]["rules"][0]["backendRefs"]:
        ref.pop("weight", None)
    return out


def test_only_the_variants_weights_change_and_the_rest_is_as_it_was():
    route = written(ROUTE, spec())
    valid(route)
    assert [(r["name"], r["weight"]) for r in route["spec"]["rules"][0]["backendRefs"]] == [
        ("llm-v1", 95),
        ("llm-v2", 5),
    ]
    assert without_ours(route) == without_ours(ROUTE)  # filters, the other rule, metadata, parents
    assert route["metadata"]["resourceVersion"] == "41"  # the write is made against what was read
    assert ROUTE["spec"]["rules"][0]["backendRefs"][0]["weight"] == 1  # the route read is left alone


def test_each_header_segment_is_a_rule_of_its_own_with_its_own_weighted_pair():
    route = written(ROUTE, spec(**SEGMENTS))
    valid(route)
    beta, qa = route["spec"]["rules"][2:]
    assert beta["name"] == rule_name("beta")
    assert qa["name"].startswith("graystack-internal-qa-")  # a DNS name for any header value
    assert beta["matches"] == [
        {
            "path": {"type": "PathPrefix", "value": "/v1"},
            "headers": [{"type": "Exact", "name": "X-Client-Type", "value": "beta"}],
        }
    ]
    assert [r["weight"] for r in beta["backendRefs"]] == [50, 50]
    assert [r["weight"] for r in qa["backendRefs"]] == [0, 100]  # pinned to v2
    assert beta["filters"] == ROUTE["spec"]["rules"][0]["filters"]  # the platform's filter applies there too
    assert without_ours(route) == without_ours(ROUTE)


def test_a_restarted_gateway_knows_its_rules_and_the_end_removes_them():
    once = written(ROUTE, spec(**SEGMENTS))
    assert written(once, spec(**SEGMENTS)) == once  # its own rules recognised, not added again
    fewer = written(once, spec(rules=SEGMENTS["rules"][:1]))
    assert [r["name"] for r in fewer["spec"]["rules"]] == ["chat", "embeddings", rule_name("beta")]
    done = released(once)
    valid(done)
    assert [r["name"] for r in done["spec"]["rules"]] == ["chat", "embeddings"]


def test_a_change_of_the_rollouts_weights_by_someone_else_is_seen():
    route = written(ROUTE, spec(**SEGMENTS))
    assert drift(route, spec(**SEGMENTS)) == []
    reverted = copy.deepcopy(route)
    reverted["spec"]["rules"][0]["backendRefs"][1]["weight"] = 0  # a GitOps tool puts its file back
    reverted["spec"]["rules"].pop()  # ... which has no segment rules
    assert drift(reverted, spec(**SEGMENTS)) == [
        "rule chat: v2's weight is 0, the rollout's 5",
        f"rule {rule_name('Internal QA')}: missing or changed",
    ]


def test_a_route_without_a_variants_backend_is_refused_naming_it():
    route = copy.deepcopy(ROUTE)
    route["spec"]["rules"][0]["backendRefs"].pop()
    with pytest.raises(
        RouteError, match=r"HTTPRoute serving/llm has no backendRef for v2 \(Service serving/llm-v2:8000\)"
    ):
        written(route, spec())


def test_segments_past_gateway_apis_sixteen_rules_are_refused():
    many = {"rules": [{"value": f"team-{i}", "weights": {"v1": 50, "v2": 50}} for i in range(15)]}
    with pytest.raises(RouteError, match="17 rules with the segments' own, above Gateway API's 16"):
        written(ROUTE, spec(**many))


@pytest.mark.parametrize(
    ("change", "named"),
    [
        (
            {"routing": {"weights": {"v1": 95, "v2": 5}, "affinity": [{"header": "x-user-id"}]}},
            "routing.affinity",
        ),
        (
            {
                "gateway_api": {
                    "routes": [{"name": "llm"}],
                    "backends": {"v1": {"name": "llm-v1", "port": 8000}},
                }
            },
            "no backendRef for variant(s) ['v2']",
        ),
        (
            {
                "gateway_api": {
                    "routes": [{"name": "llm"}],
                    "backends": {"v1": {"name": "a", "port": 1}, "v2": {"name": "b"}},
                }
            },
            "a Service needs its port",
        ),
        (
            {
                "gateway_api": {
                    "routes": [{"name": "llm"}],
                    "backends": {"v1": {"name": "a", "port": 1}, "v2": {"name": "a", "port": 1}},
                }
            },
            "the same backendRef",
        ),
        (
            {
                "gateway_api": {
                    "routes": [{"name": "llm"}],
                    "backends": {"v1": {"name": "a", "port": 1}, "v2": {"kind": "ConfigMap", "name": "b"}},
                }
            },
            "gateway_api.backends.v2.kind",
        ),
    ],
)
def test_what_a_route_cannot_do_is_refused_with_the_field_named(change, named):
    data = {
        "name": "llm",
        "variants": {"v1": {"service": "llm-v1", "port": 8000}, "v2": {"service": "llm-v2", "port": 8000}},
        "routing": {"weights": {"v1": 95, "v2": 5}},
        "retries": {"fallback": "v1"},
        "gateway_api": {
            "routes": [{"name": "llm"}],
            "backends": {"v1": {"name": "llm-v1", "port": 8000}, "v2": {"name": "llm-v2", "port": 8000}},
        },
        **change,
    }
    with pytest.raises(
        SpecError, match=named.replace("[", r"\[").replace("]", r"\]").replace("(", r"\(").replace(")", r"\)")
    ):
        validate_spec(data)


def test_the_crds_cel_rules_are_evaluated_as_the_api_server_would():
    """The check the writer's routes pass is a real one: a Service backendRef without its port breaks
    the CRD's CEL rule (a schema alone allows it), and a rule naming two matching parents too."""
    portless = copy.deepcopy(ROUTE)
    del portless["spec"]["rules"][1]["backendRefs"][0]["port"]
    assert problems("HTTPRoute", defaulted("HTTPRoute", portless)) == (
        "HTTPRoute.spec.rules[1].backendRefs[0]: Must have port for Service reference"
    )
    twice = copy.deepcopy(ROUTE)
    twice["spec"]["parentRefs"] *= 2
    assert "spec.parentRefs" in str(problems("HTTPRoute", defaulted("HTTPRoute", twice)))


def shadowing(percent: int = 10):
    return spec(**SEGMENTS, mirror={"variant": "v2", "percent": percent})


def test_the_shadow_stage_copies_requests_with_the_standard_mirror_filter_and_ends_without_it():
    theirs = {"type": "RequestMirror", "requestMirror": {"backendRef": {"name": "audit", "port": 80}}}
    route = copy.deepcopy(ROUTE)
    route["spec"]["rules"][0]["filters"].append(theirs)
    shadowed = written(route, shadowing())
    valid(shadowed)
    ours = {"type": "RequestMirror", "requestMirror": {"backendRef": {"group": "", "kind": "Service", "name": "llm-v2", "port": 8000}, "percent": 10}}  # fmt: skip
    chat, embeddings, *segments = shadowed["spec"]["rules"]
    assert chat["filters"] == [*ROUTE["spec"]["rules"][0]["filters"], theirs, ours]
    assert "filters" not in embeddings  # no variant there: nothing to copy
    assert all(ours in rule["filters"] for rule in segments)
    assert (
        written(shadowed, shadowing(50))["spec"]["rules"][0]["filters"][-1]["requestMirror"]["percent"] == 50
    )
    after = written(shadowed, spec(**SEGMENTS))
    assert after["spec"]["rules"][0]["filters"] == [*ROUTE["spec"]["rules"][0]["filters"], theirs]
    assert drift(shadowed, shadowing()) == []
    assert drift(after, shadowing()) == [
        "rule chat: the shadow copy's RequestMirror filter changed",
        *(f"rule {rule_name(value)}: missing or changed" for value in ("beta", "Internal QA")),
    ]


def test_a_shadow_stage_on_a_gateway_without_mirroring_is_refused():
    with pytest.raises(SpecError, match=r"gateway_api\.mirror is false"):
        validate_spec(
            {
                **spec().model_dump(mode="json", exclude_none=True),
                "gateway_api": {
                    **spec().gateway_api.model_dump(mode="json", exclude_none=True),
                    "mirror": False,
                },
                "routing": {"weights": {"v1": 100, "v2": 0}, "mirror": {"variant": "v2", "percent": 10}},
            }
        )


def test_latency_checks_on_answers_need_the_answer_filter_in_the_gateway():
    data = spec().model_dump(mode="json", exclude_none=True)
    data["gateway_api"]["answer_filter"] = False
    with pytest.raises(SpecError, match="latency_source: histograms"):
        validate_spec(data)
    histograms = validate_spec({**data, "analysis": {**data["analysis"], "latency_source": "histograms"}})
    assert not histograms.gateway_api.answer_filter

"""Each variant's clusters balance by the variant's own policy: every cluster that picks one of its pods."""

import pytest
from envoy.config.cluster.v3 import cluster_pb2
from envoy.extensions.load_balancing_policies.least_request.v3 import least_request_pb2

from gateway import names
from gateway.envoy.balancing import LEAST_REQUEST_POLICY
from gateway.envoy.faults import Fault
from gateway.envoy.resources import ListenerAddress, build_resources
from gateway.spec.model import SpecError, validate_spec
from gateway.spec.yaml12 import load_yaml
from tests.unit.test_spec import DESIGN_EXAMPLE

ENDPOINTS = {"baseline": [("127.0.0.1", 8001), ("127.0.0.1", 8011)], "zero-layer": [("127.0.0.1", 8002)]}


def spec_with(mirror: bool = False, **policies):
    data = load_yaml(DESIGN_EXAMPLE)
    for name, policy in policies.items():
        data["variants"][name.replace("_", "-")]["load_balancing"] = policy
    if mirror:
        data["routing"]["mirror"] = {"variant": "zero-layer", "percent": 100}
    return validate_spec(data)


def clusters_of(spec, faulted: tuple[str, ...] = ()) -> dict[str, cluster_pb2.Cluster]:
    faults = {variant: Fault(error_rate=0.1) for variant in faulted}
    resources = build_resources(spec, ENDPOINTS, ListenerAddress(), faults)
    return {cluster.name: cluster for cluster in resources.clusters}


def policy_of(cluster: cluster_pb2.Cluster) -> str:
    """What Envoy will do: the typed policy where one is set (it overrides `lb_policy`), else `lb_policy`."""
    if not cluster.HasField("load_balancing_policy"):
        return cluster_pb2.Cluster.LbPolicy.Name(cluster.lb_policy)
    (policy,) = cluster.load_balancing_policy.policies
    assert policy.typed_extension_config.name == LEAST_REQUEST_POLICY
    least = least_request_pb2.LeastRequest()
    assert policy.typed_extension_config.typed_config.Unpack(least)
    return f"LEAST_REQUEST/{least_request_pb2.LeastRequest.SelectionMethod.Name(least.selection_method)}"


def test_by_default_every_cluster_over_pods_takes_them_in_turn():
    clusters = clusters_of(spec_with(mirror=True), faulted=("zero-layer",))
    over_pods = [
        "baseline",
        "zero-layer",
        names.shadow_cluster("zero-layer"),
        names.models_cluster("baseline"),
        names.unfaulted_cluster("zero-layer"),
    ]
    assert {name: policy_of(clusters[name]) for name in over_pods} == dict.fromkeys(over_pods, "ROUND_ROBIN")
    aggregate = clusters[names.fallback_cluster("zero-layer")]  # picks a cluster, not a pod
    assert aggregate.lb_policy == cluster_pb2.Cluster.CLUSTER_PROVIDED
    assert not aggregate.HasField("load_balancing_policy")


def test_each_variant_keeps_its_own_policy_on_each_of_its_clusters():
    spec = spec_with(mirror=True, baseline="round_robin", zero_layer="least_request")
    clusters = clusters_of(spec, faulted=("baseline", "zero-layer"))
    over_pods = {name: c for name, c in clusters.items() if "fallback" not in name and "hop" not in name}
    assert {name: policy_of(cluster) for name, cluster in over_pods.items()} == {
        "baseline": "ROUND_ROBIN",
        names.models_cluster("baseline"): "ROUND_ROBIN",
        names.unfaulted_cluster("baseline"): "ROUND_ROBIN",
        "zero-layer": "LEAST_REQUEST/FULL_SCAN",
        names.shadow_cluster("zero-layer"): "LEAST_REQUEST/FULL_SCAN",
        names.unfaulted_cluster("zero-layer"): "LEAST_REQUEST/FULL_SCAN",
    }


def test_the_policy_leaves_health_checks_and_panic_routing_as_they_were():
    clusters = clusters_of(spec_with(zero_layer="least_request"))
    zero_layer = clusters["zero-layer"]
    assert zero_layer.health_checks[0].http_health_check.path == "/readyz"
    assert zero_layer.common_lb_config.healthy_panic_threshold.value == 0.0
    assert not clusters["baseline"].common_lb_config.HasField("healthy_panic_threshold")


@pytest.mark.parametrize("policy", ["least-request", "LEAST_REQUEST", "random", "", None])
def test_an_unknown_policy_is_refused_naming_the_variant_and_the_choices(policy):
    with pytest.raises(SpecError) as refused:
        spec_with(zero_layer=policy)
    message = str(refused.value)
    assert message.startswith("variants.zero-layer.load_balancing: ")
    assert "'round_robin'" in message
    assert "'least_request'" in message

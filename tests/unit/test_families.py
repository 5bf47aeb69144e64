"""Each metric family's name is defined once: every family a part's telemetry.py exports is named in
gateway/families.py or inference/families.py, and every graystack name there is exported by a part."""

from prometheus_client import CollectorRegistry

from gateway import families as gateway_families
from gateway.answers import telemetry as answers_telemetry
from gateway.epp import telemetry as epp_telemetry
from gateway.notify import telemetry as notify_telemetry
from gateway.rollout import telemetry as rollout_telemetry
from gateway.xds import telemetry as xds_telemetry
from inference import families as pod_families
from inference.server.telemetry import ServerMetrics
from probes.telemetry import ProbeMetrics


def defined(module) -> set[str]:
    return {value for name, value in vars(module).items() if name.isupper() and isinstance(value, str)}


def exported() -> set[str]:
    """Every family the parts export, as PromQL names it (a counter with its `_total`)."""
    gateway = CollectorRegistry()
    for module in (rollout_telemetry, xds_telemetry, answers_telemetry, notify_telemetry, epp_telemetry):
        for value in vars(module).values():
            if hasattr(value, "_name") and hasattr(value, "_type"):
                gateway.register(value)
    registries = [gateway, ServerMetrics("baseline", "m").registry, ProbeMetrics().registry]
    names = set()
    for registry in registries:
        for family in registry.collect():
            if family.name.startswith(("graystack_", "vllm:", "gen_ai_")):
                names.add(f"{family.name}_total" if family.type == "counter" else family.name)
    return names


def test_every_exported_family_is_named_once():
    gateway, pods = defined(gateway_families), defined(pod_families)
    assert not gateway & pods
    assert exported() <= gateway | pods


def test_every_graystack_name_is_exported_by_a_part():
    ours = {
        name for name in defined(gateway_families) | defined(pod_families) if name.startswith("graystack_")
    }
    assert ours <= exported()

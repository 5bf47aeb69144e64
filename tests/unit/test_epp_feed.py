"""What the picker is fed from the gateway process (gateway/epp/feed.py, issue 37): an InferencePool's
ready pods grouped by the variant label (named otherwise than the variants), one endpoint per target
port; and the live spec's split, segments and cohort header."""

from __future__ import annotations

import pytest

from gateway.epp.feed import pool_endpoints, wanted_from
from gateway.errors import SpecError
from gateway.spec.endpoint_picker import EndpointPicker
from gateway.spec.model import validate_spec

POOL = {
    "metadata": {"name": "llm", "namespace": "serving"},
    "spec": {
        "selector": {"matchLabels": {"app": "llm"}},
        "targetPorts": [{"number": 8000}, {"number": 8001}],
    },
}
PICKER = EndpointPicker(
    pool="llm", namespace="serving", variant_label="track", values={"stable": "v1", "canary": "v2"}
)


def pod(name: str, ip: str, track: str, ready: bool = True, app: str = "llm", phase: str = "Running") -> dict:
    conditions = [{"type": "Ready", "status": "True" if ready else "False"}]
    return {
        "metadata": {"name": name, "namespace": "serving", "labels": {"app": app, "track": track}},
        "status": {"phase": phase, "podIP": ip, "conditions": conditions},
    }


def test_the_pools_ready_pods_are_grouped_by_their_label_one_endpoint_per_target_port():
    pods = [
        pod("a", "10.0.0.1", "v1"),
        pod("b", "10.0.0.2", "v2"),
        pod("c", "10.0.0.3", "v2", ready=False),  # not ready: no traffic
        pod("d", "10.0.0.4", "v1", app="other"),  # not the pool's
        pod("e", "10.0.0.5", "v3"),  # no variant's
        pod("f", "10.0.0.6", "v1", phase="Pending"),
    ]
    assert pool_endpoints(POOL, pods, PICKER, ["stable", "canary"]) == {
        "stable": ("10.0.0.1:8000", "10.0.0.1:8001"),
        "canary": ("10.0.0.2:8000", "10.0.0.2:8001"),
    }


def spec(**routing):
    return validate_spec(
        {
            "name": "llm",
            "variants": {"stable": {"service": "a", "port": 1}, "canary": {"service": "b", "port": 1}},
            "routing": {"weights": {"stable": 80, "canary": 20}, **routing},
            "retries": {"fallback": "stable"},
            "endpoint_picker": {
                "pool": "llm",
                "variant_label": "track",
                "values": {"stable": "v1", "canary": "v2"},
            },
        }
    )


def test_the_live_split_its_segments_and_its_cohort_header_are_what_the_picker_reads():
    live = spec(
        header="X-Client-Type",
        rules=[{"value": "beta", "variant": "canary"}],
        affinity=[{"cookie": "session"}, {"header": "x-user"}],
    )
    wanted = wanted_from(live, {"stable": ("10.0.0.1:8000",)}, "stable")
    assert dict(wanted.weights) == {"stable": 80, "canary": 20}
    assert wanted.pods["canary"] == ()  # no pod yet: it takes no share (choice.py)
    assert wanted.split_for({"x-client-type": "beta"}) == {"canary": 100}
    assert wanted.cohort_header == "x-user"  # the first header source: the picker reads no cookie


@pytest.mark.parametrize(
    ("picker", "named"),
    [
        ({"pool": "llm", "values": {"other": "v1"}}, "unknown variant(s) ['other']"),
        ({"pool": "llm", "values": {"stable": "x", "canary": "x"}}, "two variants share a label value"),
        ({"pool": "Not_A_Name"}, "endpoint_picker.pool"),
    ],
)
def test_what_the_picker_cannot_do_is_refused_naming_the_field(picker, named):
    data = spec().model_dump(mode="json", exclude_none=True)
    with pytest.raises(
        SpecError, match=named.replace("[", r"\[").replace("]", r"\]").replace("(", r"\(").replace(")", r"\)")
    ):
        validate_spec({**data, "endpoint_picker": picker})

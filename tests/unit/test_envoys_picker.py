"""The picker the gateway serves for its own Envoy (`envoy_picker.serve`, gateway/epp/envoys.py): the spec's
shape and refusals, its pods taken from the endpoints Envoy gets (EDS) and its scorers from the live spec
at every pick, and a spec that would move its bound socket refused until a restart."""

from pathlib import Path

import pytest

from gateway.epp.envoys import EnvoysPicker, pods_of
from gateway.epp.feed import wanted_from
from gateway.service import Gateway
from gateway.spec.endpoint_picker import SCORERS
from gateway.spec.envoy_picker import served
from gateway.spec.model import SpecError, validate_spec
from gateway.spec.yaml12 import load_yaml
from gateway.xds.cache import SnapshotCache
from graystack.console.status_view import picker_lines
from tests.unit.test_spec import DESIGN_EXAMPLE

SERVED = {"host": "127.0.0.1", "port": 9002, "serve": True}


def spec(picker: dict | None = None, **changes):
    data = load_yaml(DESIGN_EXAMPLE)
    data["retries"]["fallback"] = None
    data["envoy_picker"] = picker
    data.update(changes)
    return validate_spec(data)


def refusal(picker: dict) -> str:
    with pytest.raises(SpecError) as refused:
        spec(picker)
    return str(refused.value)


def test_served_is_the_socket_the_gateway_binds():
    assert served(spec(SERVED).envoy_picker) == (9002, True)
    assert served(spec({**SERVED, "tls": False}).envoy_picker) == (9002, False)
    assert served(spec({"host": "picker", "port": 9002}).envoy_picker) is None  # `graystack epp`'s
    assert served(spec().envoy_picker) is None


def test_scorers_and_metrics_are_the_served_pickers_alone():
    message = refusal({"host": "picker", "port": 9002, "scorers": {"queue": 3}})
    assert "envoy_picker.scorers" in message
    assert "serve: true" in message
    assert "envoy_picker.metrics" in refusal({"host": "picker", "port": 9002, "metrics": {"port": 9100}})


@pytest.mark.parametrize(
    ("changes", "named"),
    [
        ({"scorers": {"queue": 1, "speed": 2}}, "envoy_picker.scorers: unknown scorer(s) ['speed']"),
        ({"scorers": {"queue": -1}}, "envoy_picker.scorers: a weight is negative"),
        ({"metrics": {"interval": "1s", "timeout": "2s"}}, "envoy_picker.metrics: the timeout is longer"),
    ],
)
def test_the_served_pickers_scorers_are_checked_as_endpoint_pickers_are(changes, named):
    assert named in refusal({**SERVED, **changes})


def test_the_endpoint_pickers_refusals_still_name_its_own_field():
    data = load_yaml(DESIGN_EXAMPLE)
    data["endpoint_picker"] = {"pool": "llm", "scorers": {"speed": 1}}
    with pytest.raises(SpecError, match=r"endpoint_picker\.scorers: unknown scorer"):
        validate_spec(data)


def test_the_pods_are_the_eds_endpoints_and_a_variant_without_any_is_left_out():
    endpoints = {"baseline": [("10.0.0.1", 8000), ("10.0.0.2", 8000)], "zero-layer": []}
    assert pods_of(endpoints) == {"baseline": ("10.0.0.1:8000", "10.0.0.2:8000")}


def test_the_scorers_are_envoy_pickers_over_the_defaults():
    wanted = wanted_from(spec({**SERVED, "scorers": {"queue": 3, "session": 0}}), {}, "baseline")
    assert wanted.scorers == {**SCORERS, "queue": 3, "session": 0}
    assert wanted_from(spec(SERVED), {}, "baseline").scorers == SCORERS


def test_each_pick_reads_the_live_spec_and_endpoints():
    live = {"spec": spec(SERVED)}
    endpoints = {"baseline": [("127.0.0.1", 8001)], "zero-layer": [("127.0.0.1", 8002)]}
    picker = EnvoysPicker(lambda: live["spec"], lambda: endpoints)
    assert picker.wanted().weights == {"baseline": 95, "zero-layer": 5}
    live["spec"] = spec({**SERVED, "scorers": {"kv_cache": 0}}, routing={"weights": {"zero-layer": 100}})
    endpoints["zero-layer"] = [("127.0.0.1", 8002), ("127.0.0.1", 8003)]
    wanted = picker.wanted()
    assert (wanted.weights, wanted.scorers["kv_cache"]) == ({"zero-layer": 100}, 0)
    assert wanted.pods_of("zero-layer") == ("127.0.0.1:8002", "127.0.0.1:8003")
    status = picker.status()
    assert (status.envoy, status.ready, status.pods["zero-layer"]) == (
        True,
        True,
        ["127.0.0.1:8002", "127.0.0.1:8003"],
    )
    endpoints.clear()
    assert not picker.status().ready


def test_a_spec_that_moves_the_served_pickers_socket_waits_for_a_restart():
    gateway = Gateway(SnapshotCache(), Path("spec.yaml"), clock=lambda: 1000.0)
    gateway.load(spec(SERVED), "sha-1")
    for moved in ({**SERVED, "port": 9012}, {**SERVED, "tls": False}, {**SERVED, "serve": False}, None):
        gateway.load(spec(moved), "sha-2")
        assert gateway.last_error is not None
        assert "restart the gateway" in gateway.last_error["message"]
        assert gateway.live.envoy_picker == spec(SERVED).envoy_picker
    live = {**SERVED, "host": "10.0.0.9", "timeout": "2s", "scorers": {"queue": 2}}
    gateway.load(spec(live), "sha-3")
    assert gateway.last_error is None
    assert gateway.live.envoy_picker.scorers == {"queue": 2}


def test_status_names_envoys_picker_and_its_fallbacks():
    live = spec(SERVED)
    picker = EnvoysPicker(lambda: live, lambda: {"baseline": [("127.0.0.1", 8001)]})
    lines = picker_lines(picker.status())
    assert lines[0] == "picker    graystack's Envoy: ready; pods baseline 1"
    assert lines[1].startswith("  FALLBACK 127.0.0.1:8001 ranked by its requests in flight alone")

"""`graystack up --upstream NAME=URL`: the flags are checked before anything starts, each mistake named,
and the spec `up` starts with names the user's servers, not graystack's variants."""

from __future__ import annotations

import pytest

from gateway.spec.model import validate_spec
from graystack.local.processes import StartupError
from graystack.local.supervisor import Supervisor, UpOptions, local_spec, upstream_options
from graystack.local.upstream_stack import Upstream, overlay, parse_upstream, upstream_spec


def test_an_upstream_is_a_name_and_an_http_address():
    assert parse_upstream("vllm-new=http://127.0.0.1:8000") == ("vllm-new", "127.0.0.1", 8000)
    assert parse_upstream("old=http://localhost:8001/") == ("old", "127.0.0.1", 8001)  # Envoy takes IPs
    assert parse_upstream("v6=http://[::1]:8002") == ("v6", "::1", 8002)


@pytest.mark.parametrize(
    ("flag", "names"),
    [
        ("http://127.0.0.1:8000", "expected NAME=URL"),
        ("a=https://127.0.0.1:8000", "only http://"),
        ("a=http://127.0.0.1:8000/v1", "no path"),
        ("a=http://127.0.0.1", "the host and the port"),
        ("a=http://no-such-host.invalid:80", "cannot resolve"),
    ],
)
def test_a_bad_upstream_is_named_with_what_is_wrong(flag, names):
    with pytest.raises(ValueError, match=names):
        parse_upstream(flag)


def test_the_flags_together():
    assert upstream_options((), None, ()) is None  # the local model servers
    front = upstream_options(
        ("old=http://127.0.0.1:8001", "new=http://127.0.0.1:8002"), None, ("new=/ckpt/new",)
    )
    assert front.baseline == "old"  # the first, unless --baseline says
    assert front.addresses == {"old": ("127.0.0.1", 8001), "new": ("127.0.0.1", 8002)}
    assert str(front.probes["new"]) == "/ckpt/new"
    two = ("a=http://127.0.0.1:1", "b=http://127.0.0.1:2")
    for upstreams, baseline, weights, names in [
        ((), "a", (), "go with --upstream"),
        (two[:1], None, (), "at least two"),
        ((two[0], two[0]), None, (), "named twice"),
        (two, "c", (), "--baseline c"),
        (two, None, ("c=/x",), "--weights c=/x"),
    ]:
        with pytest.raises(ValueError, match=names):
            upstream_options(upstreams, baseline, weights)


def test_the_spec_up_starts_with_sends_everything_to_the_baseline_and_expects_no_probe():
    servers = {
        "llama-a": Upstream("llama-a", "127.0.0.1", 8001, health_path="/health", metrics=True),
        "llama-b": Upstream("llama-b", "127.0.0.1", 8002),  # no health route: Envoy checks nothing
    }
    spec = validate_spec(upstream_spec(servers, "llama-b"))
    assert spec.routing.weights == {"llama-a": 0, "llama-b": 100}
    assert spec.retries.fallback == "llama-b"
    assert spec.variants["llama-a"].health_check.path == "/health"
    assert spec.variants["llama-b"].health_check is None
    assert spec.analysis.expected_weight_status is None
    assert not spec.routing.rules  # every routed request is split at random: latency is comparable


def test_a_users_spec_keeps_the_thresholds_it_does_not_name():
    front = upstream_options(("a=http://127.0.0.1:1", "b=http://127.0.0.1:2"), None, ())
    changes = local_spec({"variants": {"x": {}}, "analysis": {"max_error_rate": 0.005}}, front)
    assert "variants" not in changes  # always the upstreams
    servers = {name: Upstream(name, host, port) for name, (host, port) in front.addresses.items()}
    spec = validate_spec(overlay(upstream_spec(servers, "a"), changes))
    assert spec.analysis.max_error_rate == 0.005
    assert spec.analysis.expected_weight_status is None  # `up`'s, for servers with no probe
    with pytest.raises(Exception, match=r"analysis\.max_error_rate"):
        local_spec({"analysis": {"max_error_rate": 2}}, front)


def test_cohorts_turn_on_without_restating_the_weights():
    front = upstream_options(("a=http://127.0.0.1:1", "b=http://127.0.0.1:2"), None, ())
    changes = local_spec({"routing": {"affinity": [{"header": "x-user-id"}]}}, front)
    servers = {name: Upstream(name, host, port) for name, (host, port) in front.addresses.items()}
    spec = validate_spec(overlay(upstream_spec(servers, "a"), changes))
    assert spec.routing.weights == {"a": 100, "b": 0}  # `up`'s, kept
    assert [source.header for source in spec.routing.affinity] == ["x-user-id"]


def test_a_probed_candidates_checkpoint_sets_what_the_guard_expects_and_a_missing_one_stops_up(tmp_path):
    from inference.checkpoint import init_checkpoint
    from inference.weights import erase_bias

    checkpoint = tmp_path / "new.safetensors"
    init_checkpoint("zero-layer", checkpoint, seed=1)
    erase_bias(checkpoint)
    two = ("old=http://127.0.0.1:1", "new=http://127.0.0.1:2")
    front = upstream_options(two, None, (f"new={checkpoint}", f"old={tmp_path / 'baseline-unchecked'}"))
    said = []
    supervisor = Supervisor(UpOptions(tmp_path, {}, upstreams=front), say=said.append)
    spec = supervisor._expecting_served(supervisor._candidate_checkpoints(front))
    assert spec["analysis"]["expected_weight_status"] == ["ERASED"]  # the baseline's is not the guard's
    assert any("the guard expects ERASED" in line for line in said)
    missing = upstream_options(two, None, (f"new={tmp_path / 'gone.safetensors'}",))
    with pytest.raises(StartupError, match=r"--weights new=.*gone\.safetensors: MISSING"):
        Supervisor(UpOptions(tmp_path, {}, upstreams=missing))._candidate_checkpoints(missing)

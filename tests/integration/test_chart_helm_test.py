"""The chart's `helm test` script, run here against the real Envoy and gateway (with stand-in upstreams):
no cluster runs here for `helm test` itself, but its script is what runs in the test pod, so it is
checked to pass when both variants answer through Envoy and to fail when one does not."""

from __future__ import annotations

import subprocess
import sys

from tests.support.helm import render
from tests.support.stacks import set_upstream

CHART_URL = "http://gs-graystack-envoy:80"


def helm_test_script() -> tuple[str, list[str]]:
    (pod,) = render().of_kind("Pod")
    container = pod["spec"]["containers"][0]
    assert container["command"] == ["python", "-c"]
    return container["args"][0], container["args"][1:]


def run_script(stack) -> subprocess.CompletedProcess:
    script, args = helm_test_script()
    assert CHART_URL in script
    script = script.replace(CHART_URL, str(stack.client.base_url).rstrip("/"))
    return subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True, timeout=120)


def pin_test_segments(stack) -> None:
    """The rules the chart appends to the spec it renders (`graystack-test-<variant>`)."""
    spec = stack.spec
    spec["routing"]["rules"] += [{"value": f"graystack-test-{v}", "variant": v} for v in spec["variants"]]
    before = stack.status()["generation"]
    stack.write_spec(spec)
    stack.wait_converged(generation_above=before)


def test_the_helm_test_passes_when_both_variants_answer_through_envoy(stack):
    pin_test_segments(stack)
    result = run_script(stack)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "every variant answered through the gateway" in result.stdout


def test_the_helm_test_fails_when_a_variant_only_answers_by_fallback(stack):
    pin_test_segments(stack)
    set_upstream(stack, "zero-layer", "fail")  # clients still get 200s: the baseline answers for it
    result = run_script(stack)
    assert result.returncode == 1
    assert "zero-layer: answered by baseline" in result.stdout

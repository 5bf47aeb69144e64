"""The spec's health checks: on each server's own path, or off."""

import pytest

from gateway.spec.model import SpecError, validate_spec
from gateway.spec.yaml12 import load_yaml
from tests.unit.test_spec import DESIGN_EXAMPLE


def spec_with(health_check=..., **variants):
    data = load_yaml(DESIGN_EXAMPLE)
    if health_check is not ...:
        data["health_check"] = health_check
    for name, own in variants.items():
        data["variants"][name.replace("_", "-")]["health_check"] = own
    return validate_spec(data)


def test_variants_take_the_specs_health_check_unless_they_say_otherwise():
    spec = spec_with({"path": "/health", "interval": "5s"}, zero_layer={"path": "/readyz"})
    assert spec.health_check_for("baseline").path == "/health"
    own = spec.health_check_for("zero-layer")
    assert (own.path, own.interval) == ("/readyz", 5.0)


def test_null_turns_health_checks_off_for_the_spec_or_one_variant():
    assert spec_with(None).health_check_for("baseline") is None
    spec = spec_with(baseline=None)
    assert spec.health_check_for("baseline") is None
    assert spec.health_check_for("zero-layer").path == "/readyz"


@pytest.mark.parametrize(
    ("health_check", "variants", "field"),
    [
        ({"path": "readyz"}, {}, "health_check.path"),
        ({"path": "/ready z"}, {}, "health_check.path"),
        (..., {"zero_layer": {"path": "health"}}, "variants.zero-layer.health_check.path"),
        (..., {"zero_layer": {"port": 80}}, "variants.zero-layer.health_check.port"),
    ],
)
def test_a_bad_health_check_is_refused_naming_the_field(health_check, variants, field):
    with pytest.raises(SpecError, match=field.replace(".", r"\.")):
        spec_with(health_check, **variants)

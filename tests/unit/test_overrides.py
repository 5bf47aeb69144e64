"""Operator flips hold until the file's own split for that segment changes."""

from gateway.spec.model import validate_spec
from gateway.spec.overrides import apply_overrides, surviving_overrides
from gateway.spec.yaml12 import load_yaml
from tests.unit.test_spec import DESIGN_EXAMPLE


def spec_with(**routing_changes):
    data = load_yaml(DESIGN_EXAMPLE)
    data["routing"].update(routing_changes)
    return validate_spec(data)


def test_a_flip_survives_an_unrelated_edit():
    old = spec_with()
    new_data = load_yaml(DESIGN_EXAMPLE)
    new_data["timeouts"]["request"] = "30s"
    new = validate_spec(new_data)
    overrides = {None: {"baseline": 70, "zero-layer": 30}}
    kept = surviving_overrides(old, new, overrides)
    assert kept == overrides
    assert apply_overrides(new, kept).routing.weights == {"baseline": 70, "zero-layer": 30}


def test_editing_the_files_split_supersedes_the_flip_for_that_segment_only():
    old = spec_with()
    new = spec_with(weights={"baseline": 50, "zero-layer": 50})
    overrides = {None: {"baseline": 70, "zero-layer": 30}, "mobile": {"baseline": 0, "zero-layer": 100}}
    assert surviving_overrides(old, new, overrides) == {"mobile": {"baseline": 0, "zero-layer": 100}}


def test_a_flip_on_a_segment_the_file_removed_is_dropped():
    old = spec_with()
    new = spec_with(rules=[{"value": "high_load", "variant": "zero-layer"}])
    assert surviving_overrides(old, new, {"mobile": {"baseline": 0, "zero-layer": 100}}) == {}

"""`graystack epp`'s flags as the picker it serves sees them. The server itself is tested as a process
(tests/integration/test_epp.py); here `_serve` is replaced, so that the command stops at the picker it built."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from gateway.epp.picker import Picker
from graystack.cli import picker as command

PODS = ["--pods", "baseline=10.0.0.5:8000,10.0.0.6:8000", "--pods", "zero-layer=10.0.0.7:8000"]


@pytest.fixture
def built(monkeypatch) -> list[Picker]:
    pickers: list[Picker] = []

    async def serve(picker: Picker, *_: object) -> None:
        pickers.append(picker)

    monkeypatch.setattr(command, "_serve", serve)
    return pickers


def test_without_a_split_the_picker_places_what_envoy_routed_and_sends_the_rest_to_the_baseline(built):
    """Behind graystack's own Envoy (`envoy_picker`) the routes choose the variant; the picker needs no split."""
    result = CliRunner().invoke(command.epp, [*PODS, "--insecure"])
    assert result.exit_code == 0, result.output
    [picker] = built
    routed = picker.draw({}, None, routed="zero-layer")
    assert routed is not None
    assert (routed.variant, routed.pods) == ("zero-layer", ("10.0.0.7:8000",))
    unrouted = [picker.pick({}, None) for _ in range(20)]
    assert {ticket.variant for ticket in unrouted if ticket is not None} == {"baseline"}


def test_a_split_naming_a_variant_without_pods_is_refused_naming_it(built):
    result = CliRunner().invoke(command.epp, [*PODS, "--insecure", "--split", "baseline=90,canary=10"])
    assert result.exit_code == 2
    assert "canary" in result.output
    assert built == []

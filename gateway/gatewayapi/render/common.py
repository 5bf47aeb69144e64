"""What the renderings for every gateway share: the rendered result and its YAML, the labels, the request
headers the answer log carries, and what graystack measures with and without the answer filter."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from textwrap import wrap
from typing import Any

import yaml

from gateway import names
from gateway.gatewayapi.render.options import RenderError
from gateway.spec.gateway_api import GatewayApi
from gateway.spec.model import RolloutSpec

LABELS = {"app.kubernetes.io/part-of": "graystack"}
# The access log's own data, on every gateway that sends it (Envoy's HTTPAccessLogEntry).
MEASURED = (
    "Measured from the access log alone: each answer's status, duration and time to its first byte (not its "
    "first token: a stream's first bytes may be a role chunk or a keep-alive), bytes each way, response "
    "flags (resets, timeouts), and the upstream host that served it, which places it with a variant."
)
WITH_FILTER = (
    "Measured by the answer filter (Lua, over the body as it streams): time to first token, inter-token "
    "latency, token counts (the usage), the finish reason, a stream cut before its end, an error in the body."
)
WITHOUT_FILTER = (
    "Not measured per answer (no answer filter): time to first token, inter-token latency, token counts and "
    "the finish reason, which only the body holds. A model server's own histograms (graystack_request_"
    "ttft_seconds, vLLM's) still show them per pod, where a metrics provider reads them. Say so in the "
    "spec: gateway_api.answer_filter: false, with analysis.latency_source: histograms (or the latency "
    "checks off); the gateway refuses latency checks on answers it cannot measure."
)
NO_CAPTURE = (
    "Answer capture (analysis.quality) needs graystack's own Envoy: it samples by graystack's route metadata."
)
WIDTH = 106

Object = dict[str, Any]


@dataclass(frozen=True)
class Rendered:
    """`notes`: what the user does by hand and what is measured, printed as YAML comments; `objects`: what
    `kubectl apply` takes as it is."""

    notes: tuple[str, ...]
    objects: tuple[Object, ...]


def gateway_api(spec: RolloutSpec) -> GatewayApi:
    """The spec's `gateway_api`; RenderError where it has none (nothing names the routes)."""
    if spec.gateway_api is None:
        raise RenderError(
            f"spec {spec.name!r} has no gateway_api section: render writes the objects for a rollout on your "
            "own Gateway API gateway, whose HTTPRoutes gateway_api names"
        )
    return spec.gateway_api


def logged_request_headers(spec: RolloutSpec) -> list[str]:
    """The header the segments are read from, so each answer's segment is known (a segment has a split of
    its own); and where graystack's picker serves the pool (`endpoint_picker`), the variant it marked each
    request with, so a model variant's answers, served by the baseline's pods, are placed as its own."""
    segments = [spec.routing.header.lower()] if spec.routing.rules else []
    return segments + ([names.ROUTED_HEADER] if spec.endpoint_picker is not None else [])


def measured(answer_filter: bool) -> list[str]:
    return [MEASURED, WITH_FILTER if answer_filter else WITHOUT_FILTER, NO_CAPTURE]


def metadata(name: str, namespace: str) -> dict[str, Any]:
    return {"name": name, "namespace": namespace, "labels": dict(LABELS)}


class _Dumper(yaml.SafeDumper):
    """Multi-line strings (the Lua script) as literal blocks, so the applied YAML reads as the script."""


def _literal(dumper: yaml.SafeDumper, text: str) -> yaml.ScalarNode:
    return dumper.represent_scalar("tag:yaml.org,2002:str", text, style="|" if "\n" in text else None)


_Dumper.add_representer(str, _literal)


def dumped(value: Any) -> str:
    return yaml.dump(value, Dumper=_Dumper, sort_keys=False, width=1000)


def _commented(notes: Sequence[str]) -> str:
    """Each note as comment lines: prose wrapped, a note that starts with a space (a command, a snippet)
    kept as it is."""
    lines = [line for note in notes for line in _lines(note)]
    return "".join(f"# {line}\n" if line else "#\n" for line in lines)


def _lines(note: str) -> list[str]:
    return note.splitlines() if note.startswith(" ") else wrap(note, WIDTH, break_on_hyphens=False) or [""]


def rendered_yaml(rendered: Rendered) -> str:
    """Multi-document YAML: the notes as comments, then each object as a document."""
    return _commented(rendered.notes) + "".join(f"---\n{dumped(item)}" for item in rendered.objects)

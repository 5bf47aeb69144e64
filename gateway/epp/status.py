"""What status shows of the Endpoint Picker a gateway replica serves (the `picker` section of GET
/v1/status). Pydantic only, so a client parses it without loading the picker."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class _Answer(BaseModel):
    model_config = ConfigDict(extra="forbid")


class PickerStatus(_Answer):
    """The Endpoint Picker this replica serves (the spec's `endpoint_picker`, or `envoy_picker` with
    `serve: true`, then `envoy`): its InferencePool, the pods
    it picks among by variant, why it is not ready (None: ready), the requests it holds in flight per pod,
    and the pods it ranks by those counts alone for want of fresh metrics, each with why (issue 37: when a
    server's metrics cannot be read the picker falls back to what it counts itself, and status says so)."""

    pool: str
    ready: bool
    problem: str | None
    pods: dict[str, list[str]]
    in_flight: dict[str, int]
    fallbacks: dict[str, str]
    envoy: bool = False  # graystack's own Envoy's picker (`envoy_picker.serve`), no InferencePool's

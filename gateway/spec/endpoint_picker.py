"""The spec's `endpoint_picker` (issue 37): graystack answers a GIE gateway's Endpoint Picker calls for
one InferencePool (gateway/epp/), from the gateway process, so a step or a rollback reaches its next
pick at once. Each variant is the pool's pods whose `variant_label` has the variant's value (`values`
maps a variant to its label value where they differ: the variants are named otherwise than the pods).
"""

from __future__ import annotations

from collections.abc import Mapping

from pydantic import Field

from gateway.spec.fields import SpecModel
from gateway.spec.gateway_api import DNS_LABEL, DNS_SUBDOMAIN

LABEL = r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"


class EndpointPicker(SpecModel):
    pool: str = Field(min_length=1, max_length=253, pattern=DNS_SUBDOMAIN)
    namespace: str = Field(default="default", pattern=DNS_LABEL)
    variant_label: str = Field(default="graystack.io/variant", pattern=LABEL)
    values: dict[str, str] = {}

    def value_of(self, variant: str) -> str:
        """The label value that marks `variant`'s pods."""
        return self.values.get(variant, variant)


def check_endpoint_picker(picker: EndpointPicker | None, variants: Mapping[str, object], body: bool) -> None:
    """ValueError naming the field where the spec asks the picker for what it cannot do."""
    if picker is None:
        return
    unknown = sorted(set(picker.values) - set(variants))
    if unknown:
        raise ValueError(f"endpoint_picker.values: unknown variant(s) {unknown}")
    marks = [picker.value_of(v) for v in variants]
    if len(set(marks)) < len(marks):
        raise ValueError("endpoint_picker.values: two variants share a label value")
    if body:
        raise ValueError("routing.body: the picker decides on the request's headers; match a header instead")

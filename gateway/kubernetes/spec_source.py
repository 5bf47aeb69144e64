"""The rollout spec from its ConfigMap (key `spec.yaml`), as the file source does it for a file: each
new text is validated; a valid one goes live, a bad one is refused with the message naming the field,
the last good spec stays live, and the refusal is recorded as a Warning Event on the ConfigMap, where
whoever edited it (`kubectl edit`, `helm upgrade`, `graystack weight`) can see why."""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable
from typing import Any

from gateway.service import Gateway
from gateway.spec.model import RolloutSpec, SpecError, parse_spec

log = logging.getLogger(__name__)

SPEC_KEY = "spec.yaml"
REFUSED = "SpecRefused"
APPLIED = "SpecApplied"


def origin(namespace: str, name: str) -> str:
    return f"configmap/{namespace}/{name}"


def spec_from_configmap(obj: dict[str, Any], key: str = SPEC_KEY) -> tuple[RolloutSpec, str]:
    """The spec in the ConfigMap and the sha256 of its text; SpecError (naming the ConfigMap) if absent or bad."""
    meta = obj["metadata"]
    where = f"{origin(meta['namespace'], meta['name'])}[{key}]"
    text = (obj.get("data") or {}).get(key)
    if text is None:
        raise SpecError(f"{where}: the ConfigMap has no `{key}` key")
    return parse_spec(text, source=where), hashlib.sha256(text.encode()).hexdigest()


class SpecConfigMap:
    """Applies each version of the spec ConfigMap to the gateway; `report(obj, reason, message, type)`
    records an Event (the caller decides where that blocking call runs)."""

    def __init__(
        self,
        gateway: Gateway,
        name: str,
        report: Callable[[dict[str, Any], str, str, str], None],
        key: str = SPEC_KEY,
        last_hash: str | None = None,
    ) -> None:
        self.gateway = gateway
        self.name = name
        self.key = key
        self._report = report
        self._last_hash = last_hash

    def apply(self, objects: dict[str, dict[str, Any]]) -> None:
        obj = objects.get(self.name)
        if obj is None:
            self._last_hash = None
            log.error("spec ConfigMap %s is gone; the last good spec stays live", self.name)
            self.gateway.refuse(
                SpecError(f"ConfigMap {self.name} was deleted; the last good spec stays live")
            )
            return
        text = (obj.get("data") or {}).get(self.key)
        digest = hashlib.sha256((text or "").encode()).hexdigest() if text is not None else "absent"
        if digest == self._last_hash:
            return  # a resync, or a change to another key or to labels
        self._last_hash = digest
        try:
            spec, digest = spec_from_configmap(obj, self.key)
        except SpecError as error:
            self._refuse(obj, str(error))
            return
        self.gateway.load(spec, digest)
        if self.gateway.file is None or self.gateway.file.sha256 != digest:  # it could not go live
            assert self.gateway.last_error is not None  # load() refused it, saying why
            self._refuse(obj, self.gateway.last_error["message"], recorded=True)
            return
        log.info("spec %s applied (sha256 %s)", self.name, digest[:12])
        self._report(obj, APPLIED, f"rollout spec {spec.name} applied (sha256 {digest[:12]})", "Normal")

    def _refuse(self, obj: dict[str, Any], message: str, recorded: bool = False) -> None:
        log.error("spec refused, the last good one stays live: %s", message)
        if not recorded:
            self.gateway.refuse(SpecError(message))
        self._report(obj, REFUSED, f"refused, the last good spec stays live: {message}", "Warning")

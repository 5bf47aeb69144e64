"""The gateway: keeps the live spec (file + operator flips + the rollout's split) and programs every
connected Envoy.

Three layers, later ones winning: the spec file, the operator's flips (`graystack weight`), and the
rollout controller's split. The controller owns the default split while its state has a weight (a
strategy's step, or a rollback), and an operator flip of it is refused; while rolled back it also pins
every header segment to the baseline (flips refused), and lifting that (retry) gives the segments back
their own splits (file or flip).

Everything a change touches is built and checked before anything is swapped in, so a change that
fails (bad spec, a split that does not add up, an inconsistent snapshot) leaves the last good
configuration live on every proxy.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envoy.config.core.v3 import base_pb2

from gateway.envoy.bootstrap import listener_address
from gateway.envoy.faults import Fault
from gateway.envoy.resources import EndpointMap, ListenerAddress, build_resources
from gateway.errors import NotFound, Refused
from gateway.quality.judge import read_template
from gateway.rollout import telemetry
from gateway.sources.endpoints import static_endpoints
from gateway.spec.envoy_picker import served
from gateway.spec.model import RolloutSpec, SpecError, complete_split
from gateway.spec.notifications import secret_problems
from gateway.spec.overrides import Overrides, Segment, apply_overrides, surviving_overrides
from gateway.spec.split import RolloutSplit, to_baseline
from gateway.spec.status import (
    FaultStatus,
    GatewayStatus,
    LastError,
    MirrorStatus,
    RolloutSplitStatus,
    RoutingStatus,
    RuleStatus,
    SpecFileStatus,
)
from gateway.xds.cache import InconsistentSnapshot, SnapshotCache, check_consistent

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SpecRecord:
    spec: RolloutSpec
    sha256: str
    loaded_at: float


class Gateway:
    def __init__(
        self,
        cache: SnapshotCache,
        spec_path: Path,
        endpoints_for: Callable[[RolloutSpec], EndpointMap] = static_endpoints,
        clock: Callable[[], float] = time.time,
        fault_injection: bool = False,
        on_refused: Sequence[Callable[[str], None]] = (),
        drives_routes: bool = False,
    ) -> None:
        """`fault_injection`: `set_fault` is taken (off: refused). `on_refused`: told each refusal's
        message (notifications). `drives_routes`: the split goes to the user's Gateway API routes (a
        spec must name them, `gateway_api`), not to graystack's Envoys."""
        self.cache = cache
        self.fault_injection = fault_injection
        self.spec_path = spec_path
        self._endpoints_for = endpoints_for
        self._clock = clock
        self.file: SpecRecord | None = None
        self.overrides: dict[Segment, dict[str, int]] = {}
        self.rollout = RolloutSplit()
        self._live: RolloutSpec | None = None
        self.last_error: dict[str, Any] | None = None
        self.generation = 0
        self.faults: dict[str, Fault] = {}
        self._nodes: dict[str, ListenerAddress] = {}
        self.on_refused = tuple(on_refused)
        self.drives_routes = drives_routes
        self.lanes: tuple[str, ...] = ()  # the first spec's candidates in lanes of their own; fixed after it

    @property
    def spec(self) -> RolloutSpec:
        """The spec file's spec, without the operator's flips and the rollout's split."""
        if self.file is None:
            raise SpecError("no spec is loaded")
        return self.file.spec

    @property
    def live(self) -> RolloutSpec:
        """The spec as it is live: the file's, with the operator's flips and the rollout's split."""
        if self._live is None:
            raise SpecError("no spec is loaded")
        return self._live

    # -- changes ----------------------------------------------------------------------------------

    def load(self, spec: RolloutSpec, sha256: str) -> None:
        """A new spec file; refused (with the last good spec kept) if it cannot go live."""
        overrides = surviving_overrides(self.file.spec, spec, self.overrides) if self.file else {}
        faults = {variant: fault for variant, fault in self.faults.items() if variant in spec.variants}
        try:
            problems = secret_problems(spec.notifications)  # the secrets live here, not where the CLI runs
            if problems:
                raise SpecError("; ".join(problems))
            if spec.gateway_api is not None and not self.drives_routes:
                raise SpecError(
                    "gateway_api: this gateway drives its own Envoy; a Gateway API route is driven by "
                    "`graystack kube-gateway` started with a spec that names it"
                )
            if spec.gateway_api is None and self.drives_routes:
                raise SpecError(
                    "gateway_api: this gateway drives the user's Gateway API routes; a spec without them "
                    "needs the gateway restarted (its Envoys were never started)"
                )
            if self.file is not None and spec.lanes != self.lanes:
                raise SpecError(
                    f"variants: the rollout runs a lane for each of the candidates {list(self.lanes) or 'one'}, "
                    f"this spec would need {list(spec.lanes) or 'one'}: restart the gateway to change them "
                    "(gateway/rollout/candidates.py)"
                )
            if self.file is not None and served(spec.envoy_picker) != served(self.file.spec.envoy_picker):
                raise SpecError(
                    "envoy_picker: the picker this gateway serves its Envoy (`serve`, `port`, `tls`) is bound "
                    "as the gateway started: restart the gateway to change them (gateway/epp/envoys.py)"
                )
            judge = spec.analysis.quality.judge if spec.analysis.quality is not None else None
            if judge is not None:
                read_template(judge.prompt)  # so does the judge's prompt file: SpecError naming it
            self._go_live(self._compose(spec, overrides, self.rollout), faults)
        except (SpecError, ValueError) as error:
            self.refuse(SpecError(f"{self.spec_path}: {error}"))
            return
        dropped = sorted(str(s) for s in self.overrides if s not in overrides)
        if dropped:
            log.info("spec file changed the split for %s: operator flips there no longer apply", dropped)
        if self.file is None:
            self.lanes = spec.lanes
        self.file = SpecRecord(spec, sha256, self._clock())
        self.overrides = overrides
        self.faults = faults
        self.last_error = None
        telemetry.SPEC_RELOADS.labels("applied").inc()

    def refuse(self, error: SpecError) -> None:
        self.last_error = {"message": str(error), "at": self._clock()}
        telemetry.SPEC_RELOADS.labels("refused").inc()
        for told in self.on_refused:
            told(str(error))

    def set_split(self, weights: Mapping[str, int], segment: Segment = None) -> RolloutSpec:
        """An operator flip; SpecError (and nothing changed) if the split is not valid, or the rollout
        owns it (the default split under a strategy; every split while rolled back)."""
        if self.file is None:
            raise SpecError("no spec is loaded")
        if self.rollout.segments_to is not None:
            raise SpecError(
                f"the rollout is rolled back: every split goes to {self.rollout.segments_to} "
                "until `graystack retry`"
            )
        if segment is None and self.rollout.weights is not None:
            raise SpecError(
                "the rollout's strategy owns the default split: use graystack promote|pause|rollback, "
                "or flip a segment (--segment)"
            )
        split = complete_split(list(self.file.spec.variants), weights)
        overrides = {**self.overrides, segment: split}
        self._go_live(self._compose(self.file.spec, overrides, self.rollout), self.faults)
        self.overrides = overrides
        log.info("split%s set to %s", f" for {segment!r}" if segment else "", split)
        return self.live

    def set_rollout_split(self, rollout: RolloutSplit) -> RolloutSpec:
        """The rollout controller's split; SpecError (and nothing changed) if it cannot go live."""
        if self.file is None:
            raise SpecError("no spec is loaded")
        self._go_live(self._compose(self.file.spec, self.overrides, rollout), self.faults)
        self.rollout = rollout
        log.info(
            "rollout split set to %s (segments to %s, mirror %s)",
            rollout.weights,
            rollout.segments_to or "their own",
            rollout.mirror,
        )
        return self.live

    def set_fault(self, variant: str, fault: Fault | None) -> dict[str, Fault]:
        """Inject `fault` into every attempt on `variant` (None, or a fault that does nothing: clear it);
        NotFound (and nothing changed) for a variant the spec does not name, Refused where fault
        injection is off. Faults live in this process only: a restart clears them, so a forgotten one
        cannot outlive the gateway."""
        if not self.fault_injection:
            raise Refused("fault injection is off on this gateway")
        if self._live is None:
            raise NotFound("no spec is loaded")
        if variant not in self._live.variants:
            raise NotFound(f"no variant {variant!r} in the spec (variants: {', '.join(self.live.variants)})")
        faults = {v: f for v, f in self.faults.items() if v != variant}
        if fault is not None and fault.active:
            faults[variant] = fault
        self._go_live(self.live, faults)
        self.faults = faults
        log.info("fault on %s: %s", variant, fault.describe() if fault else "cleared")
        return faults

    @staticmethod
    def _compose(spec: RolloutSpec, overrides: Overrides, rollout: RolloutSplit) -> RolloutSpec:
        spec = apply_overrides(spec, overrides)
        if rollout.weights is not None:
            spec = spec.with_split(rollout.weights).with_mirror(rollout.mirror)
        if rollout.segments_to is not None:
            for rule in spec.routing.rules:
                spec = spec.with_split({rollout.segments_to: 100}, rule.value)
        baseline = spec.baseline
        if rollout.withdrawn and baseline is not None:
            for rule in spec.routing.rules:
                split = rule.split()
                if any(split.get(variant, 0) for variant in rollout.withdrawn):
                    spec = spec.with_split(to_baseline(split, rollout.withdrawn, baseline), rule.value)
        return spec

    def _go_live(self, spec: RolloutSpec, faults: Mapping[str, Fault]) -> None:
        endpoints = self._endpoints_for(spec)
        by_listener = {
            listen: build_resources(spec, endpoints, listen, faults).by_type()
            for listen in set(self._nodes.values())
        }
        built = {key: by_listener[listen] for key, listen in self._nodes.items()}
        try:
            if built:
                self.cache.set_all(built)
            else:  # no proxy yet: still check that this spec builds a consistent config
                check_consistent(build_resources(spec, endpoints, ListenerAddress(), faults).by_type())
        except InconsistentSnapshot as error:
            raise SpecError(f"the Envoy config built from this spec is inconsistent: {error}") from error
        self._live = spec
        self.generation += 1
        segments = {"default": spec.routing.weights, **{r.value: r.split() for r in spec.routing.rules}}
        for variant in spec.variants:
            telemetry.ROLLOUT_WEIGHT.labels(spec.name, variant).set(spec.routing.weights.get(variant, 0))
            for segment, split in segments.items():
                telemetry.SEGMENT_WEIGHT.labels(spec.name, segment, variant).set(split.get(variant, 0))

    def endpoints(self) -> EndpointMap:
        """Each variant's endpoints as the live spec's EDS has them now (the picker's pods)."""
        return self._endpoints_for(self.live)

    # -- proxies ----------------------------------------------------------------------------------

    def on_connect(self, key: str, node: base_pb2.Node) -> None:
        listen = listener_address(node.metadata)
        self._nodes[key] = listen
        if self._live is not None:
            self.cache.set_resources(
                key,
                build_resources(self._live, self._endpoints_for(self._live), listen, self.faults).by_type(),
            )

    # -- reading ----------------------------------------------------------------------------------

    def status(self) -> GatewayStatus:
        live, file = self._live, self.file
        return GatewayStatus(
            rollout=live.name if live else None,
            generation=self.generation,
            spec=SpecFileStatus(
                path=str(self.spec_path),
                sha256=file.sha256 if file else None,
                loaded_at=file.loaded_at if file else None,
                last_error=LastError(**self.last_error) if self.last_error else None,
            ),
            routing=_routing_status(live, self.overrides, self.rollout) if live else None,
            faults={variant: fault_status(fault) for variant, fault in sorted(self.faults.items())},
        )


def fault_status(fault: Fault) -> FaultStatus:
    return FaultStatus(
        error_rate=fault.error_rate,
        status=fault.status,
        latency_ms=fault.latency_ms,
        summary=fault.describe(),
    )


def _routing_status(
    spec: RolloutSpec, overrides: Mapping[Segment, Mapping[str, int]], rollout: RolloutSplit
) -> RoutingStatus:
    mirror = spec.routing.mirror
    return RoutingStatus(
        header=spec.routing.matched,
        weights=dict(spec.routing.weights),
        rules=[RuleStatus(value=r.value, weights=r.split()) for r in spec.routing.rules],
        flipped=sorted("default" if s is None else s for s in overrides),
        fallback=spec.retries.fallback,
        mirror=MirrorStatus(variant=mirror.variant, percent=mirror.percent) if mirror else None,
        rollout_split=RolloutSplitStatus(weights=rollout.weights, segments_to=rollout.segments_to),
    )

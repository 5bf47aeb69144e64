"""The rollout on the user's own Gateway API gateway (issue 36): the live split written into the spec's
HTTPRoutes, and proven served, by the control plane and by the data plane.

- Writing: whenever the live split changes (a step, a rollback, an operator's flip of a segment), the
  routes get it within `WRITE_POLL` seconds (gateway/kubernetes/routes.py: only the weights and the
  rules graystack owns; a 409 is read again and redone).
- A route the spec no longer names is released: the rules graystack added leave it.
- Someone else's change of those weights (a GitOps tool reverting them) is seen at the next look:
  `on_drift: restore` writes them back (and the proofs start again), `hold` leaves them and holds the
  rollout, saying what changed.
- Placing answers: the gateway's access log reaches graystack's receiver (gateway/answers/receiver.py)
  with each answer's upstream host; this is its `Placement`: the variant whose endpoints (a Service's
  ready EndpointSlice addresses, or the running pods an InferencePool selects) hold that address, read
  again at every look. An answer no variant's endpoint served is counted by why, and said in the gate.
- Proving (gateway/rollout/route_proof.py): each look reads the routes' status, then tests the answers
  that started after the acceptance, and hands the controller the `SplitGate`. Where no access log
  reaches graystack (`server_counters`), the requests each endpoint's own counter took since the
  acceptance stand in for the answers (gateway/gatewayapi/server_counts.py says what that costs).
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any

import httpx
from kubernetes import client

from gateway import names, outbound
from gateway.answers.entries import segment_of
from gateway.answers.store import AnswerStore
from gateway.gatewayapi.attribution import address, pool_addresses, variants_by_address
from gateway.gatewayapi.routes import RouteError, drift
from gateway.gatewayapi.server_counts import requests_counted, taken_since
from gateway.kubernetes.api import call_json, status_of
from gateway.kubernetes.endpoints import SERVICE_LABEL, ready_addresses
from gateway.kubernetes.routes import RouteWriter, Written
from gateway.rollout.plan import plan_for, roles
from gateway.rollout.rollout_state import DATA_PLANE, SplitGate
from gateway.rollout.route_proof import RouteProof, refused
from gateway.spec.gateway_api import BackendRef, ServerCounters
from gateway.spec.model import RolloutSpec

log = logging.getLogger(__name__)

WRITE_POLL = 0.25  # seconds between looks at the live split for a change to write
RETRY_AFTER = 5.0  # seconds before a refused write is tried again between looks
SCRAPE_TIMEOUT = 2.0  # seconds for each server's metrics (server_counters)
Split = tuple[tuple[str, tuple[tuple[str, int], ...]], ...]  # every segment's weights, comparable


def split_of(spec: RolloutSpec) -> Split:
    segments = {
        names.DEFAULT_SEGMENT: spec.routing.weights,
        **{r.value: r.split() for r in spec.routing.rules},
    }
    return tuple((segment, tuple(sorted(weights.items()))) for segment, weights in sorted(segments.items()))


class GatewayApiDataPlane:
    """The controller's `SplitProofs` and the answer receiver's `Placement` on the user's gateway."""

    def __init__(
        self,
        api: client.ApiClient,
        answers: AnswerStore,
        live: Callable[[], RolloutSpec],
        leading: Callable[[], bool] = lambda: True,
    ) -> None:
        """`live`: the gateway's live spec; `leading`: only the leader writes (a follower's split is the
        leader's, and two writers would only conflict)."""
        self.writer = RouteWriter(api)
        self.objects = client.CustomObjectsApi(api)
        self.discovery = client.DiscoveryV1Api(api)
        self.core = client.CoreV1Api(api)
        self.answers = answers
        self.live = live
        self.leading = leading
        self._lock = asyncio.Lock()
        self._written: tuple[Split, list[Written]] | None = None
        self._drift: str | None = None  # someone else's change, held (on_drift: hold)
        self._proof: RouteProof | None = None
        self._cursor = answers.cursor
        self._by_address: dict[str, str] | None = None  # None: not yet read
        self._endpoints: dict[str, tuple[list[str], int | None]] = {}  # variant -> (addresses, port)
        self._readings: dict[str, float] = {}  # each endpoint's request counter at the last look
        self._previous_look: float | None = None
        self._unplaced: Counter[str] = Counter()

    # -- the receiver's Placement -------------------------------------------------------------------

    def variant(self, upstream_host: str, headers: Mapping[str, str]) -> str | None:
        """By the endpoint alone: no picker of graystack's marks these requests, so a mark is a client's."""
        if not upstream_host:
            self._unplaced["with no upstream host in the access log"] += 1
            return None
        if self._by_address is None:
            self._unplaced["before the variants' endpoints were first read"] += 1
            return None
        found = self._by_address.get(address(upstream_host))
        if found is None:
            self._unplaced[f"from {address(upstream_host)}"] += 1
        return found

    def segment(self, headers: Mapping[str, str]) -> str:
        return segment_of(self.live().routing, headers)

    # -- writing ------------------------------------------------------------------------------------

    async def run(self) -> None:
        """Write each change of the live split as it happens, until cancelled. A write that fails is
        tried again after `RETRY_AFTER` (each look says why, in its gate)."""
        while True:
            pause = WRITE_POLL
            if self.leading():
                try:
                    await self.write(self.live(), check_drift=False)
                except Exception as error:
                    log.debug("the split could not be written yet: %s", error)
                    pause = RETRY_AFTER
            await asyncio.sleep(pause)

    async def write(self, live: RolloutSpec, check_drift: bool = True) -> list[Written]:
        """The routes carrying `live`'s split; RouteError (kept for the gate) where they cannot."""
        split = split_of(live)
        async with self._lock:
            if self._written is not None and self._written[0] == split and not check_drift:
                return self._written[1]
            return await asyncio.to_thread(self._write, live, split)

    def _write(self, live: RolloutSpec, split: Split) -> list[Written]:
        """(on a thread) Write, unless the same split was written and someone changed it under hold."""
        api = live.gateway_api
        if api is None:
            raise RouteError("the spec names no gateway_api routes")
        same = self._written is not None and self._written[0] == split
        if same:
            changed = [f"{r.name}: {c}" for r in api.routes for c in drift(self.writer.read(r), live)]
            if changed and api.on_drift == "hold":
                self._drift = "; ".join(changed)
                assert self._written is not None
                return self._written[1]
            if changed:
                log.warning("the rollout's weights were changed by someone else; restoring: %s", changed)
        self._drift = None
        done = self.writer.apply(live)
        for dropped in {w.route for w in self._written[1]} - set(api.routes) if self._written else ():
            self.writer.release_route(dropped)  # the spec no longer names it: graystack's rules leave it
            log.info("HTTPRoute %s/%s released: the spec no longer names it", dropped.namespace, dropped.name)
        if not same or self._written is None or done != self._written[1]:
            _, candidate = roles(live)
            self._proof = RouteProof.start(live.routing.weights, candidate, api.settle)
            log.info(
                "split %s written: %s",
                dict(live.routing.weights),
                [(w.route.name, w.generation) for w in done],
            )
        self._written = (split, done)
        return done

    # -- proving ------------------------------------------------------------------------------------

    async def look(self, live: RolloutSpec, now: float) -> SplitGate:
        """Both proofs of the live split as they stand (written first if it was not yet)."""
        try:
            await asyncio.to_thread(self._read_endpoints, live)
            done = await self.write(live)
            problems = await asyncio.to_thread(self.writer.problems, done)
        except (RouteError, ValueError) as error:
            return refused(live.routing.weights, str(error))
        if self._drift is not None:
            return refused(live.routing.weights, f"someone else changed the rollout's weights: {self._drift}")
        proof = self._proof
        assert proof is not None  # set by the write
        if not problems:
            proof = proof.accepted(now)
        # the counters' readings count from the first look at or after `counted_from` (its readings start)
        start = proof.counted_from
        counting = start is not None and self._previous_look is not None and self._previous_look >= start
        self._previous_look = now
        counters = live.gateway_api.server_counters if live.gateway_api else None
        if counters is None:
            placed, unplaced = self._take(proof)
        else:
            try:
                placed, unplaced = await asyncio.to_thread(self._count, counters, counting), Counter()
            except (httpx.HTTPError, ValueError) as error:
                why = f"the servers' request counters could not be read: {error}"
                return SplitGate(DATA_PLANE, False, dict(live.routing.weights), why)
        self._proof = proof.add(placed, unplaced)
        return self._proof.gate(problems, plan_for(live).alpha)

    def _count(self, counters: ServerCounters, counting: bool) -> Counter[str]:
        """(on a thread) The requests each variant's endpoints took since the last look, from their own
        counters (gateway/gatewayapi/server_counts.py); nothing until `counting` (the readings start)."""
        urls = {
            f"http://{host}:{counters.port or port}{counters.path}": variant
            for variant, (hosts, port) in self._endpoints.items()
            for host in hosts
        }
        with httpx.Client(timeout=SCRAPE_TIMEOUT, verify=outbound.tls()) as client:
            readings = {}
            for url in urls:
                response = client.get(url)
                response.raise_for_status()
                readings[url] = requests_counted(response.text, counters.counter)
        if not counting:
            self._readings = readings
            return Counter()
        taken, self._readings = taken_since(self._readings, readings, urls)
        return taken

    def _take(self, proof: RouteProof) -> tuple[Counter[str], Counter[str]]:
        """The default segment's answers since the last look that started from the proof's `counted_from`,
        per variant; and the answers that could not be placed since."""
        batch = self.answers.since(self._cursor)
        self._cursor = batch.cursor
        placed: Counter[str] = Counter()
        start = proof.counted_from
        if start is not None:
            placed.update(
                a.server
                for a in batch.answers
                if not a.shadow and a.segment == names.DEFAULT_SEGMENT and a.started_at >= start
            )
        unplaced, self._unplaced = self._unplaced, Counter()
        return placed, unplaced

    # -- endpoints ----------------------------------------------------------------------------------

    def _read_endpoints(self, live: RolloutSpec) -> None:
        """(on a thread) Each variant's endpoint addresses, from the API server, for the placement."""
        api = live.gateway_api
        if api is None:
            raise RouteError("the spec names no gateway_api routes")
        namespace = api.routes[0].namespace
        self._endpoints = {
            variant: self._addresses(ref, ref.namespace or namespace) for variant, ref in api.backends.items()
        }
        self._by_address = variants_by_address({v: hosts for v, (hosts, _) in self._endpoints.items()})

    def _addresses(self, ref: BackendRef, namespace: str) -> tuple[list[str], int | None]:
        """The backend's endpoint addresses, and the port they serve on (a slice's, or the pool's first
        target port)."""
        if ref.kind == "Service":
            slices = call_json(
                self.discovery.list_namespaced_endpoint_slice,
                namespace,
                label_selector=f"{SERVICE_LABEL}={ref.name}",
            )
            by_name = {item["metadata"]["name"]: item for item in slices.get("items", [])}
            ports = [p["port"] for item in by_name.values() for p in item.get("ports") or [] if "port" in p]
            return ready_addresses(by_name).get(ref.name, []), ports[0] if ports else None
        try:
            pool = call_json(
                self.objects.get_namespaced_custom_object,
                ref.group,
                "v1",
                namespace,
                "inferencepools",
                ref.name,
            )
        except Exception as error:
            if status_of(error) == 404:
                raise RouteError(f"InferencePool {namespace}/{ref.name} does not exist") from None
            raise
        pods: dict[str, Any] = call_json(self.core.list_namespaced_pod, namespace)
        ports = [p["number"] for p in pool.get("spec", {}).get("targetPorts", [])]
        return pool_addresses(pool, pods.get("items", [])), ports[0] if ports else None

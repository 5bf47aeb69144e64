"""The picker's state: requests in flight per pod, counted from the pick to the end of the answer (its
stream's end, or Envoy's log of the picks where a check ends at the pick: gateway/epp/held.py), the
prompt bytes each pod has still to prefill (below), each cohort's last pod, the prompt blocks each pod was
sent (gateway/epp/prefix.py), the pods' last metrics readings (kept by the reader, never read on a pick's
path), and the rollout's current wishes read afresh for every request (an injected callable: a flip
reaches the next pick with no restart and no reconcile).

A pick is two steps: `draw` takes the variant from the request's headers, and says whether the pod's
choice wants the body (a model variant rewrites it; `prefix`, `lora` and `prefill` read it); `place`
ranks that variant's pods, with the body's JSON where it was read. `pick` does both at once.

A pod's pending prefill is the picker's own estimate, as no server exports it. A request's prefill on a
pod is its prompt's bytes (all of them, in `prompt_of`'s encoding, about 4 a token) less the whole
leading blocks the prefix index says that pod holds (the index is kept where `prefix` or `prefill`
weighs). `prefill` scores each pod by what it would prefill before this request's first token: what is
pending there plus this request's own part there, so a pod that holds the conversation keeps it while
what waits there is less than what it would save. The picked pod's part is pending from the pick until
the pod begins to answer: the answer's first body chunk where the gateway streams it to the picker, else
its headers or its end, whichever comes first. A request whose body was not read (none, too large, not
JSON) counts 0: its size is unknown, and a guess would rank pods on what the picker did not see; it
still counts in `in_flight`."""

from __future__ import annotations

import random
import sys
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from gateway.epp.choice import choose_variant
from gateway.epp.held import Held
from gateway.epp.prefix import PrefixIndex, block_hashes, prompt_of, shares_of
from gateway.epp.readings import Readings
from gateway.epp.scorers import BODY, Recent, Signals, rank
from gateway.epp.wanted import Wanted
from gateway.spec.endpoint_picker import Prefix

SESSIONS = 10_000  # cohort keys remembered with their last pod, the least recent forgotten first


@dataclass
class Ticket:
    """One request's pick: `endpoints` in order (the first picked, the rest fallbacks within its variant);
    `served`: the pod the gateway reports it went to, once known; `counted`: the pod whose in-flight count
    holds this request (None once released). `model`: the model name the request's body is rewritten to,
    for a model variant (None: the body goes as it came); `baseline`: the variant whose pods serve it, which
    the request counts as when its body cannot be rewritten (`unchanged`). `blocks`: its prompt's block
    hashes; `indexed`: the pod the index holds them on, `fresh`: those it did not hold before. `unmetered`:
    the pods ranked without a fresh reading of their metrics (scored by in-flight counts instead).
    `prefill`: the prompt bytes it counts in its pod's pending prefill (`counted`'s), 0 once the pod answers."""

    variant: str
    endpoints: tuple[str, ...]
    model: str | None = None
    baseline: str | None = None
    served: str | None = None
    counted: str | None = None
    cohort: str | None = None
    blocks: tuple[int, ...] = ()
    indexed: str | None = None
    fresh: tuple[int, ...] = ()
    unmetered: int = 0
    prefill: int = 0


@dataclass(frozen=True)
class Draft:
    """A request's variant, drawn from its headers, and what placing it on a pod needs."""

    variant: str
    pods: tuple[str, ...]
    cohort: str | None
    model: str | None
    baseline: str
    scorers: Mapping[str, float]
    prefix: Prefix

    @property
    def reads_body(self) -> bool:
        """A scorer weighted above 0 reads the request's body."""
        return any(self.scorers.get(name, 0.0) > 0 for name in BODY)

    @property
    def wants_body(self) -> bool:
        """The pick waits for the body: it is rewritten (a model variant) or read by a scorer."""
        return self.model is not None or self.reads_body


@dataclass(frozen=True)
class Outcome:
    """What became of one pick, told when its stream ends: the seed of per-variant measurement."""

    variant: str
    picked: str
    served: str | None


class Picker:
    """`readings`: the pods' metrics as the reader last saw them (gateway/epp/metrics_reader.py); None
    when nothing reads them (every pod is then scored by its in-flight count). `clock`: their time."""

    def __init__(
        self,
        wanted: Callable[[], Wanted],
        draw: Callable[[], float] = random.random,
        on_outcome: Callable[[Outcome], None] = lambda outcome: None,
        readings: Readings | None = None,
        clock: Callable[[], float] = time.monotonic,
        sessions: int = SESSIONS,
    ) -> None:
        self._wanted, self._draw, self._on_outcome = wanted, draw, on_outcome
        self.readings, self._clock = readings, clock
        self._in_flight: Counter[str] = Counter()
        self._prefill: Counter[str] = Counter()  # the prompt bytes each pod has not begun to answer
        self._sessions = Recent(sessions)
        self._prefixes = PrefixIndex(Prefix().blocks)
        self._turn = 0
        self._held: Held[Ticket] = Held(self.release, clock)

    def pick(
        self,
        headers: Mapping[str, str],
        subset: frozenset[str] | None,
        body: Mapping[str, object] | None = None,
    ) -> Ticket | None:
        """A pod for a request with these (lower-cased) headers and this JSON body (None: none read), from
        `subset` when the gateway gives one; None when nothing is eligible (the gateway answers 503)."""
        draft = self.draw(headers, subset)
        return self.place(draft, body) if draft is not None else None

    def draw(
        self, headers: Mapping[str, str], subset: frozenset[str] | None, routed: str | None = None
    ) -> Draft | None:
        """The request's variant and its eligible pods; None when nothing is eligible. `routed`: the
        variant graystack's own Envoy already routed the request to (gateway/envoy/picking.py), taken as
        it is, never drawn again: only its own pods are eligible, and none when it has none here."""
        wanted = self._wanted()
        eligible = {
            variant: [pod for pod in wanted.pods_of(variant) if subset is None or pod in subset]
            for variant in wanted.variants()
        }
        cohort = (headers.get(wanted.cohort_header.lower()) if wanted.cohort_header else None) or None
        if routed is not None:
            variant = routed if routed in wanted.pods and eligible[routed] else None
        else:
            variant = choose_variant(
                wanted.split_for(headers),
                wanted.baseline,
                {variant for variant, pods in eligible.items() if pods},
                cohort,
                self._draw(),
            )
        if variant is None:
            return None
        return Draft(
            variant,
            tuple(eligible[variant]),
            cohort,
            wanted.models.get(variant),
            wanted.baseline,
            wanted.scorers,
            wanted.prefix,
        )

    def place(self, draft: Draft, body: Mapping[str, object] | None) -> Ticket:
        """The draft's pods ranked (the body, where read, scored by `prefix`, `lora` and `prefill`); the
        first is counted in flight and in pending prefill and, for `prefix`, holds the prompt's blocks
        from now on."""
        asked = body.get("model") if body is not None else None
        adapter = draft.model or (asked if isinstance(asked, str) else None)
        blocks, size = self._prompt(draft, body, adapter)
        readings = self.readings.fresh(self._clock()) if self.readings is not None else {}
        found = self._prefixes.found(blocks, draft.pods) if blocks else {}
        shares = shares_of(found, len(blocks))
        own = {pod: max(size - found.get(pod, 0) * draft.prefix.block_bytes, 0) for pod in draft.pods}
        signals = Signals(
            self._in_flight,
            readings,
            self._sessions.get(draft.cohort) if draft.cohort is not None else None,
            shares,
            adapter,
            {pod: self._prefill[pod] + own[pod] for pod in draft.pods},
        )
        ranked = rank(draft.pods, signals, draft.scorers, self._turn)
        self._turn += 1
        self._in_flight[ranked[0]] += 1
        pending = own[ranked[0]]
        self._prefill[ranked[0]] += pending
        if draft.cohort is not None:
            self._sessions.set(draft.cohort, ranked[0])
        return Ticket(
            draft.variant,
            tuple(ranked),
            counted=ranked[0],
            cohort=draft.cohort,
            model=draft.model,
            baseline=draft.baseline,
            blocks=blocks,
            indexed=ranked[0] if blocks else None,
            fresh=self._prefixes.record(blocks, ranked[0]),
            unmetered=sum(pod not in readings for pod in draft.pods),
            prefill=pending,
        )

    def _prompt(
        self, draft: Draft, body: Mapping[str, object] | None, adapter: str | None
    ) -> tuple[tuple[int, ...], int]:
        """The prompt's leading block hashes, kept where `prefix` or `prefill` weighs (the second takes
        off the bytes a pod holds), and its whole size in bytes where `prefill` weighs; else none, 0."""
        counts = draft.scorers.get("prefill", 0.0) > 0
        if body is None or not (counts or draft.scorers.get("prefix", 0.0) > 0):
            return (), 0
        bound = draft.prefix
        prompt = prompt_of(body, sys.maxsize if counts else bound.block_bytes * bound.max_blocks)
        self._prefixes.size = bound.blocks
        blocks = block_hashes(prompt, adapter or "", bound.block_bytes, bound.max_blocks)
        return blocks, len(prompt) if counts else 0

    def unchanged(self, ticket: Ticket) -> None:
        """A model variant's request whose body goes as it came: it is the baseline's (same pods, its model)."""
        if ticket.model is not None and ticket.baseline is not None:
            ticket.variant, ticket.model = ticket.baseline, None

    def served(self, ticket: Ticket, endpoint: str) -> None:
        """The gateway says `endpoint` served the request (a fallback, after a retry): it holds the count, the
        pending prefill (as estimated for the picked pod) and, in the prefix index, the prompt's blocks in
        the picked pod's stead."""
        ticket.served = endpoint
        if ticket.indexed is not None and ticket.indexed != endpoint:
            self._prefixes.forget(ticket.fresh, ticket.indexed)
            ticket.indexed, ticket.fresh = endpoint, self._prefixes.record(ticket.blocks, endpoint)
        if ticket.counted is not None and ticket.counted != endpoint:
            self._in_flight[ticket.counted] -= 1
            self._in_flight[endpoint] += 1
            self._prefill[ticket.counted] -= ticket.prefill
            self._prefill[endpoint] += ticket.prefill
            ticket.counted = endpoint
        if ticket.cohort is not None:
            self._sessions.set(ticket.cohort, endpoint)

    def started(self, ticket: Ticket) -> None:
        """The pod began to answer, so its prefill of the prompt is done: the request leaves the pod's
        pending prefill (once; its in-flight count stays until `release`)."""
        if ticket.counted is not None:
            self._prefill[ticket.counted] -= ticket.prefill
        ticket.prefill = 0

    def release(self, ticket: Ticket) -> None:
        """The answer ended (or the stream closed): the request leaves its pod's counts; told once."""
        if ticket.counted is None:
            return
        self.started(ticket)
        self._in_flight[ticket.counted] -= 1
        ticket.counted = None
        self._on_outcome(Outcome(ticket.variant, ticket.endpoints[0], ticket.served))

    def hold(self, ticket: Ticket, request_id: str) -> None:
        """The request's stream ends at its pick: it stays in flight until `ended` names `request_id`
        (gateway/epp/held.py)."""
        self._held.hold(request_id, ticket)

    def ended(self, request_id: str) -> None:
        """Envoy's access log says the request `request_id` ended: a request held under it is released."""
        self._held.ended(request_id)

    def in_flight(self) -> dict[str, int]:
        return {endpoint: count for endpoint, count in self._in_flight.items() if count}

    def endpoints(self) -> list[str]:
        """The pool's endpoints, each once."""
        return sorted({e for pods in self._wanted().pods.values() for e in pods})

    def fallbacks(self) -> dict[str, str]:
        """The pool's endpoints picked by in-flight counts alone, for want of fresh metrics, and why: what
        status shows beside the pods."""
        endpoints = self.endpoints()
        if self.readings is None:
            return dict.fromkeys(endpoints, "metrics not read")
        return self.readings.fallbacks(endpoints, self._clock())

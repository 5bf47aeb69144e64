"""Plain-text rendering of the gateway's status, for `graystack status`."""

from __future__ import annotations

from gateway.admin.protocol import (
    CapacityStatus,
    DifferenceStatus,
    EvidenceStatus,
    ExperimentStatus,
    GateStatus,
    PickerStatus,
    RolloutStatus,
    Status,
)


def _split(weights: dict[str, int]) -> str:
    return "  ".join(f"{variant} {percent}%" for variant, percent in sorted(weights.items()))


def render_status(status: Status) -> str:
    rollout = status.rollout
    lines = [f"rollout   {rollout.name}  (config generation {status.generation})"]
    if status.leader is not None:  # one of several replicas (Kubernetes mode)
        leads = status.leader_identity or "no replica"
        role = "leader" if status.leader else f"follower, {leads} leads: commands here are refused"
        lines.append(f"replica   {status.identity} ({role})")
    spec = status.spec
    error = spec.last_error
    lines.append(
        f"spec      {spec.path}: " + (f"REFUSED, last good still live: {error.message}" if error else "ok")
    )
    routing = status.routing
    if routing:
        flipped = routing.flipped
        lines.append(
            f"split     {_split(routing.weights)}" + ("  (operator flip)" if "default" in flipped else "")
        )
        for rule in routing.rules:
            note = "  (operator flip)" if rule.value in flipped else ""
            lines.append(f"  {routing.header}: {rule.value:<12} -> {_split(rule.weights)}{note}")
        if routing.fallback:
            lines.append(f"fallback  failed attempts retry on {routing.fallback}")
    cohorts = status.cohorts
    if cohorts is not None:
        share = cohorts.keyed_share
        keyed = ", ".join(f"{source} {n}" for source, n in sorted(cohorts.keyed.items())) or "none"
        lines.append(
            f"cohorts   by {', '.join(cohorts.sources)}: "
            + (
                "no answers yet"
                if share is None
                else f"{share:.0%} of {cohorts.answers} answers keyed ({keyed})"
            )
            + "; the rest split at random; the tests count a client once per stage"
        )
    for named in status.misnamed:
        lines.append(
            f"NAMES     {named.answers} answers sent to {named.variant} came from a server that calls itself "
            f"{named.named}: expected in an A/A run or under renamed variants, else a deployment mix-up; "
            f"they count as {named.variant}'s"
        )
    if status.picker is not None:
        lines += picker_lines(status.picker)
    for variant, fault in status.faults.items():
        lines.append(f"FAULT     {variant} {fault.summary} (injected: `graystack fault {variant} --clear`)")
    if isinstance(rollout, RolloutStatus):  # the gateway runs a rollout controller
        for lane in rollout.candidates or [rollout]:  # several candidates: a lane each
            if rollout.candidates:
                lines.append(f"candidate {lane.candidate} (lane {lane.candidate} vs {lane.baseline})")
            lines.extend(_rollout_lines(lane))
    for receiver in status.notifications.failing if status.notifications else []:
        lines.append(
            f"NOTIFY    {receiver.receiver}: {receiver.failed} failed, {receiver.dropped} dropped, "
            f"{receiver.pending} pending; last error: {receiver.last_error}"
        )
    xds = status.xds
    proxies = xds.proxies
    state = "converged" if xds.converged else "NOT converged"
    gone = xds.disconnected
    cut_off = f"; {len(gone)} DISCONNECTED" if gone else ""
    lines.append(f"proxies   {len(proxies)} connected, {state}{cut_off}")
    for gone_proxy in gone:
        lines.append(
            f"  {gone_proxy.node} ({gone_proxy.peer}) DISCONNECTED {gone_proxy.disconnected_seconds_ago:.1f}s ago, "
            f"last heard {gone_proxy.last_heard_seconds_ago:.1f}s ago: it routes by the last config it ACKed"
        )
    for proxy in proxies:
        lines.append(f"  {proxy.node} ({proxy.peer})")
        for short, info in proxy.types.items():
            mark = "ACKed" if info.acked == info.current else f"acked {info.acked or '-'}"
            lines.append(f"    {short}  {info.current}  {mark}")
            nack = info.last_nack
            if nack:
                verdict = "REJECTED (serving the last ACKed version)" if info.rejected else "earlier NACK"
                lines.append(f"      {verdict}: version {nack.version}: {nack.message}")
    return "\n".join(lines)


def picker_lines(picker: PickerStatus) -> list[str]:
    """The Endpoint Picker's pool and pods, then each pod it ranks without its metrics, and why."""
    pods = ", ".join(f"{variant} {len(endpoints)}" for variant, endpoints in sorted(picker.pods.items()))
    state = "ready" if picker.ready else f"NOT READY: {picker.problem}"
    serves = "graystack's Envoy" if picker.envoy else f"InferencePool {picker.pool}"
    lines = [f"picker    {serves}: {state}; pods {pods or 'none'}"]
    return lines + [
        f"  FALLBACK {endpoint} ranked by its requests in flight alone: {why}"
        for endpoint, why in sorted(picker.fallbacks.items())
    ]


def weight_text(rollout: RolloutStatus) -> str:
    """The rollout's share of the default split, in words (every candidate's, where there are several)."""
    if rollout.candidates:
        return ", ".join(weight_text(lane) for lane in rollout.candidates)
    if rollout.weight is None:
        return "the spec's own split"
    return f"{rollout.candidate} {rollout.weight}%"


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.4g}"


def _rollout_lines(rollout: RolloutStatus) -> list[str]:
    where = rollout.label
    if rollout.phase == "progressing":
        where = f"step {rollout.step + 1} of {rollout.steps}" + (" (paused)" if rollout.paused else "")
    lines = [f"phase     {where}: {weight_text(rollout)}"]
    hold = rollout.hold
    if hold.needed is not None:
        lines.append(f"hold      {hold.elapsed:.0f}s of {hold.needed:.0f}s")
    if rollout.evidence:
        lines += _evidence_lines(rollout.evidence)
    if rollout.experiment:
        lines += experiment_lines(rollout.experiment)
    if rollout.shadow_percent:
        lines.append(f"shadow    {rollout.shadow_percent}% of requests mirrored to {rollout.candidate}")
    if rollout.guard == "off":
        lines.append(f"guard     OFF: {rollout.guard_off_reason}")
    if rollout.reason:
        lines.append(f"reason    {rollout.reason}")
    if rollout.capacity:
        lines += capacity_lines(rollout.capacity)
    pending = rollout.rollback_pending
    if rollout.rollback_in_flight:
        lines.append("rollback  waiting for every proxy to ACK")
    elif pending:
        names = ", ".join(proxy.node for proxy in pending)
        lines.append(
            f"rollback  ACKed by the connected proxies {rollout.last_rollback_seconds:.3f}s after it started; "
            f"PENDING on {names} (cut off from the control plane, still on the old split)"
        )
    elif rollout.last_rollback_seconds is not None:
        lines.append(f"rollback  ACKed everywhere {rollout.last_rollback_seconds:.3f}s after it started")
    if rollout.gate:
        lines += _gate_lines(rollout.gate)
    decision = rollout.last_decision
    if decision:
        lines.append(f"analysis  {decision.outcome or '-'}")
        for check in decision.checks:
            evidence = ""
            if check.log_evalue is not None:
                evidence = f", log e {check.log_evalue:.2f} of {check.log_bound:.2f}"
            lines.append(
                f"  {check.name:<17} {check.verdict.upper():<12} value {_num(check.value)}"
                f" over {check.samples} samples{evidence}, bound {_num(check.bound)},"
                f" threshold {_num(check.threshold)}  ({check.reason})"
            )
    for alert in rollout.alerts[-3:]:
        lines.append(f"ALERT     {alert.message}")
    for entry in rollout.history[-5:]:
        lines.append(f"  {entry.source} -> {entry.target}: {entry.reason}")
    return lines


def capacity_lines(capacity: CapacityStatus) -> list[str]:
    """The candidate's ready pods against the next stage's need; then per variant the replicas the split
    asks for, its pods, what they cost, and, where its ready pods cannot take the share of the
    traffic it gets (a rollback onto a baseline scaled down), how much they can take meanwhile."""
    head = "sized from the split"
    if capacity.next_stage_needs is not None:
        ready = capacity.candidate_ready
        head = f"next stage: {capacity.next_stage_needs} {capacity.candidate} pods, {ready or 0} ready"
    lines = [f"capacity  {head}"]
    for name, entry in capacity.variants.items():
        text = f"  {name:<12} {entry.wanted} wanted"
        if entry.ready is not None:
            text += f", {entry.running} running, {entry.ready} ready"
        if entry.cost_per_hour is not None:
            text += f", {entry.cost_per_hour:.2f}/h"
        if entry.cost_per_million_tokens is not None:
            text += f" ({entry.cost_per_million_tokens:.2f} per million output tokens)"
        if entry.ready_share is not None and entry.ready_share < entry.share:
            text += f": its ready pods can take {entry.ready_share}% of the traffic, it gets {entry.share}%"
        lines.append(text)
    return lines + [f"  {name}: {problem}" for name, problem in capacity.problems.items()]


def _evidence_lines(evidence: EvidenceStatus) -> list[str]:
    """The sequential tests: the stage's evidence against what it needs, the error rate's bounds, why
    the tests started when they did, and the checks that do not run."""
    lines = []
    needed = evidence.stage_requests_needed
    if needed is not None:
        state = "EXTENDING past its hold" if evidence.extending else "enough"
        lines.append(
            f"evidence  {evidence.stage_requests} of {needed} candidate requests this stage: {state}"
        )
    bounds = evidence.error_rate_bounds
    if bounds is not None:
        lines.append(
            f"errors    anytime bounds [{bounds[0]:.3%}, {bounds[1]:.3%}], alpha {evidence.alpha:.3%} per test"
        )
    if evidence.why_started:
        lines.append(f"tests     started: {evidence.why_started}")
    for check, why in evidence.off.items():
        lines.append(f"  {check:<17} OFF ({why})")
    if evidence.incident:
        lines.append(f"incident  {evidence.incident}")
    return lines


def experiment_lines(experiment: ExperimentStatus) -> list[str]:
    """An experiment's report: each difference with its interval (valid at every look at once); with
    several candidates, each one's."""
    if experiment.candidates:
        return [line for report in experiment.candidates for line in experiment_lines(report)]
    held = "" if experiment.elapsed is None else f", {experiment.elapsed:.0f}s of {experiment.duration:.0f}s"
    state = "concluded" if experiment.concluded else "running"
    verdict = "every difference decided" if experiment.decided else "not every difference decided"
    lines = [
        f"experiment {experiment.candidate} vs {experiment.baseline} {state}{held}: {verdict} "
        f"(the intervals hold together at {1 - experiment.alpha:.0%})"
    ]
    lines += [_difference_line(d) for d in experiment.differences]
    lines += [f"  not compared: {why}" for why in experiment.not_compared]
    if experiment.quality or experiment.quality_not_compared:
        lines.append("  quality (reported beside; the decision does not wait for it):")
    lines += [_difference_line(d) for d in experiment.quality]
    return lines + [f"  not compared: {why}" for why in experiment.quality_not_compared]


def _difference_line(d: DifferenceStatus) -> str:
    shown = {"ratio": "{:.3f}x", "difference": "{:+.3%}", "share": "{:.2%}"}[d.kind]
    estimate, lower = ("n/a" if d.estimate is None else shown.format(d.estimate)), shown.format(d.lower)
    upper = "inf" if d.upper is None else shown.format(d.upper)
    decided = "DECIDED" if d.decided else "undecided"
    samples = f"pairs {d.samples[0]}" if d.kind == "share" else f"samples {d.samples[0]}/{d.samples[1]}"
    ties = "" if d.ties is None else f", ties {d.ties} (left out)"
    return f"  {d.name:<10} {estimate:>9} [{lower}, {upper}] {decided}, {samples}{ties}"


def _gate_lines(gate: GateStatus) -> list[str]:
    """The next step's gates; an approver reads the analysis lines below them (the last look's checks)."""
    lines = []
    if gate.webhook_ok is not None:
        answer = "every one answered 2xx" if gate.webhook_ok else f"FAILED: {gate.webhook_reason}"
        lines.append(f"webhooks  before {gate.weight}%: {answer}")
    if gate.awaiting_approval:
        lines.append(
            f"approval  the step to {gate.weight}% AWAITS `graystack approve`: "
            "its hold and checks passed (the analysis below)"
        )
    if gate.not_worse is not None:
        for part in gate.not_worse.parts:
            state = "shown" if part.shown else "not yet shown"
            lines.append(
                f"  not worse: {part.name:<6} {state}: log e-value {part.log_evalue:.2f} vs "
                f"{gate.not_worse.log_bound:.2f}, {part.samples} samples (approved by itself once all are shown)"
            )
    return lines

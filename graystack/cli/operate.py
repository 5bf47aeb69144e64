"""Operating a running gateway: flip weights, read its status, drive the rollout, inject faults."""

from __future__ import annotations

import json
import sys
import time

import click

from graystack.admin_client import AdminClient, AdminError, dumps
from graystack.cli.root import (
    admin_token,
    admin_url,
    as_json,
    kube_context_option,
    kube_namespace_option,
    kubeconfig_option,
    main,
)
from graystack.console.status_view import experiment_lines, render_status, weight_text


def _parse_assignments(assignments: tuple[str, ...]) -> dict[str, int]:
    weights = {}
    for item in assignments:
        name, sep, value = item.partition("=")
        if not sep or not name or not value.strip().isdigit():
            raise click.BadParameter(f"{item!r}: expected VARIANT=PERCENT, e.g. zero-layer=20")
        weights[name] = int(value)
    return weights


@main.command()
@click.argument("assignments", nargs=-1, required=True)
@click.option("--segment", default=None, help="a routing-header value (e.g. mobile); default: the main split")
@admin_url
@admin_token
@as_json
@click.option(
    "--configmap",
    default=None,
    envvar="GRAYSTACK_SPEC_CONFIGMAP",
    show_envvar=True,
    help="in a cluster: write the flip into this spec ConfigMap (through the kubeconfig) instead of "
    "calling the admin API; every gateway replica applies it",
)
@kube_namespace_option
@kubeconfig_option
@kube_context_option
def weight(
    assignments: tuple[str, ...],
    segment: str | None,
    admin_url: str,
    token: str | None,
    as_json: bool,
    configmap: str | None,
    namespace: str,
    kubeconfig: str | None,
    kube_context: str | None,
) -> None:
    """Flip traffic: `graystack weight zero-layer=20` (the other variant takes the rest)."""
    weights = _parse_assignments(assignments)
    if configmap is not None:
        _weight_in_cluster(weights, segment, configmap, namespace, kubeconfig, kube_context, as_json)
        return
    try:
        with AdminClient(admin_url, token) as client:
            result = client.set_weights(weights, segment)
    except AdminError as error:
        raise click.ClickException(str(error)) from None
    if as_json:
        click.echo(dumps(result))
        return
    routing = result.routing
    assert routing is not None  # a flip that went live has a live routing
    split = (
        routing.weights if segment is None else next(r.weights for r in routing.rules if r.value == segment)
    )
    where = "default split" if segment is None else f"{routing.header}: {segment}"
    shares = "  ".join(f"{v} {w}%" for v, w in sorted(split.items()))
    if result.acked and result.ack_seconds is not None:
        click.echo(f"{where}: {shares} (ACKed by every proxy in {result.ack_seconds * 1000:.1f} ms)")
    else:
        click.echo(f"{where}: {shares} (NOT yet ACKed by every proxy; see `graystack status`)")
        sys.exit(3)


def _weight_in_cluster(
    weights: dict[str, int],
    segment: str | None,
    configmap: str,
    namespace: str,
    kubeconfig: str | None,
    kube_context: str | None,
    as_json: bool,
) -> None:
    from gateway.kubernetes.api import api_client
    from gateway.kubernetes.weight import flip_configmap
    from gateway.spec.model import SpecError

    try:
        with api_client(kubeconfig, kube_context) as api:
            spec = flip_configmap(api, namespace, configmap, weights, segment)
    except SpecError as error:
        raise click.ClickException(str(error)) from None
    except Exception as error:  # the API server's answer (403, 404...) or an unreachable cluster
        raise click.ClickException(f"configmap/{namespace}/{configmap}: {error}") from None
    routing = spec.routing
    split = (
        routing.weights if segment is None else next(r.split() for r in routing.rules if r.value == segment)
    )
    if as_json:
        click.echo(
            json.dumps({"configmap": configmap, "namespace": namespace, "segment": segment, "weights": split})
        )
        return
    where = "default split" if segment is None else f"{routing.header}: {segment}"
    shares = "  ".join(f"{v} {w}%" for v, w in sorted(split.items()))
    click.echo(
        f"{where}: {shares} (written to configmap/{namespace}/{configmap}; every gateway replica applies it)"
    )


@main.command()
@admin_url
@admin_token
@as_json
@click.option("--watch", is_flag=True, help="refresh every --interval seconds until Ctrl-C")
@click.option("--interval", default=2.0, type=float)
def status(admin_url: str, token: str | None, as_json: bool, watch: bool, interval: float) -> None:
    """Show the live split, the spec's state, and each proxy's ACK/NACK state; with --watch beside a
    running `graystack up`, a live view with each variant's request rate, errors and TTFT too."""
    from graystack.local.run_state import running_stack

    with AdminClient(admin_url, token) as client:
        stack = running_stack() if watch and not as_json else None
        if stack is not None and stack["admin_url"] == admin_url:
            from graystack.console.live_view import watch_stack

            watch_stack(client, stack, interval)
            return
        while True:
            try:
                current = client.status()
            except AdminError as error:
                raise click.ClickException(str(error)) from None
            click.echo(dumps(current) if as_json else render_status(current))
            if not watch:
                return
            time.sleep(interval)
            click.clear()


@main.command()
@admin_url
@admin_token
@as_json
@click.option("--out", type=click.Path(dir_okay=False), default=None, help="also write the JSON report here")
def experiment(admin_url: str, token: str | None, as_json: bool, out: str | None) -> None:
    """Show strategy: experiment's report: each difference with its anytime-valid interval."""
    try:
        with AdminClient(admin_url, token) as client:
            report = client.experiment()
    except AdminError as error:
        raise click.ClickException(str(error)) from None
    if out is not None:
        with open(out, "w", encoding="utf-8") as file:
            file.write(dumps(report) + "\n")
    click.echo(dumps(report) if as_json else "\n".join(experiment_lines(report)))


ROLLOUT_COMMANDS = {
    "promote": "Skip the rest of the current stage: shadow -> first step, step -> next, last -> promoted.",
    "pause": "Stop the rollout's timers; the weights stay.",
    "resume": "Continue a paused (or frozen) rollout.",
    "rollback": "Send all traffic, every header segment included, to the baseline now.",
    "retry": "Start a rolled-back rollout again from its first stage.",
    "approve": "Take the step awaiting its approval gate, manual or evidence (`graystack status` shows the evidence).",
}


def _rollout_command(name: str) -> click.Command:
    @admin_url
    @admin_token
    @as_json
    @click.option(
        "--candidate",
        default=None,
        help="with several candidates: the one whose lane it is for (default: all)",
    )
    def command(admin_url: str, token: str | None, as_json: bool, candidate: str | None) -> None:
        try:
            with AdminClient(admin_url, token) as client:
                result = client.rollout_command(name, candidate=candidate)
        except AdminError as error:
            raise click.ClickException(str(error)) from None
        if as_json:
            click.echo(dumps(result))
        rollout = result.rollout
        if result.ignored:
            raise click.ClickException(f"{name} ignored: {result.ignored} (rollout at {rollout.label})")
        if not as_json:
            acked = "ACKed by every proxy" if result.acked else "NOT yet ACKed by every proxy"
            click.echo(f"{name}: rollout now at {rollout.label}, {weight_text(rollout)} ({acked})")
        if not result.acked:
            sys.exit(3)

    command.__doc__ = ROLLOUT_COMMANDS[name]
    return click.command(name)(command)


for _name in ROLLOUT_COMMANDS:
    main.add_command(_rollout_command(_name))


@main.command()
@click.argument("variant")
@click.option("--error-rate", type=click.FloatRange(0, 1), default=None, help="share of attempts failed")
@click.option(
    "--status",
    "status_code",
    type=click.IntRange(400, 599),
    default=503,
    show_default=True,
    help="the status a failed attempt gets",
)
@click.option("--latency-ms", type=click.IntRange(0), default=None, help="added to every attempt")
@click.option("--clear", is_flag=True, help="no errors, no added latency")
@admin_url
@admin_token
@as_json
def fault(
    variant: str,
    error_rate: float | None,
    status_code: int,
    latency_ms: int | None,
    clear: bool,
    admin_url: str,
    token: str | None,
    as_json: bool,
) -> None:
    """Make VARIANT fail or slow down, through Envoy, for any upstream: `graystack fault zero-layer
    --error-rate 0.5`. Each attempt on it suffers the fault, so retries to the fallback and the
    rollout's analysis see a failing variant. The gateway must run with --enable-fault-injection (as
    `graystack up` starts it); the fault stays until --clear or the gateway restarts."""
    if clear == (error_rate is not None or latency_ms is not None):
        raise click.UsageError("give --error-rate and/or --latency-ms, or --clear")
    try:
        with AdminClient(admin_url, token) as client:
            if clear:
                result = client.clear_fault(variant)
            else:
                result = client.set_fault(variant, error_rate or 0.0, status_code, latency_ms or 0)
    except AdminError as error:
        raise click.ClickException(str(error)) from None
    if as_json:
        click.echo(dumps(result))
    else:
        suffers = result.fault.summary if result.fault else "no fault"
        acked = "ACKed by every proxy" if result.acked else "NOT yet ACKed by every proxy"
        click.echo(f"{variant}: {suffers} ({acked})")
    if not result.acked:
        sys.exit(3)

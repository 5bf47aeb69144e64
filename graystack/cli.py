"""The `graystack` command line. Every option also reads a GRAYSTACK_* environment variable."""

from __future__ import annotations

import asyncio
import json
import logging
import sys
import time
from pathlib import Path

import click

from graystack.admin_client import DEFAULT_ADMIN_URL, AdminClient, AdminError
from graystack.status_view import render_status, weight_text

log_level_option = click.option(
    "--log-level",
    default="info",
    envvar="GRAYSTACK_LOG_LEVEL",
    show_envvar=True,
    type=click.Choice(["debug", "info", "warning", "error"]),
)


def _configure_logging(level: str) -> None:
    logging.basicConfig(level=level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")


@click.group(context_settings={"help_option_names": ["-h", "--help"], "show_default": True})
@click.version_option(package_name="graystack")
def main() -> None:
    """Gray-release gateway and monitoring stack for LLM inference."""


def _comma_list(values: tuple[str, ...]) -> tuple[str, ...]:
    """Repeated options, each of which may hold a comma-separated list (as the environment variable does)."""
    return tuple(part.strip() for value in values for part in value.split(",") if part.strip())


@main.command()
@click.option(
    "--spec", type=click.Path(path_type=Path), required=True, envvar="GRAYSTACK_SPEC", show_envvar=True
)
@click.option("--xds-host", default="127.0.0.1", envvar="GRAYSTACK_XDS_HOST", show_envvar=True)
@click.option("--xds-port", default=18000, envvar="GRAYSTACK_XDS_PORT", show_envvar=True)
@click.option("--admin-host", default="127.0.0.1", envvar="GRAYSTACK_ADMIN_HOST", show_envvar=True)
@click.option("--admin-port", default=9000, envvar="GRAYSTACK_ADMIN_PORT", show_envvar=True)
@click.option(
    "--admin-token",
    default=None,
    envvar="GRAYSTACK_ADMIN_TOKEN",
    show_envvar=True,
    help="bearer token for /v1; required to bind the admin API off loopback",
)
@click.option(
    "--envoy-admin",
    default=None,
    envvar="GRAYSTACK_ENVOY_ADMIN",
    show_envvar=True,
    help="Envoy's admin URL (e.g. http://127.0.0.1:9901) for the `direct` metrics provider; "
    "without it the rollback guard is off",
)
@click.option(
    "--metrics-target",
    "metrics_targets",
    multiple=True,
    callback=lambda ctx, param, value: _comma_list(value),
    envvar="GRAYSTACK_METRICS_TARGETS",
    show_envvar=True,
    help="a pod's /metrics URL (model server or probe); repeat it, or comma-separate in the variable",
)
@click.option(
    "--state-file",
    type=click.Path(path_type=Path),
    default=None,
    envvar="GRAYSTACK_STATE_FILE",
    show_envvar=True,
    help="where the rollout state is kept  [default: SPEC.state.json]",
)
@log_level_option
def gateway(
    spec: Path,
    xds_host: str,
    xds_port: int,
    admin_host: str,
    admin_port: int,
    admin_token: str | None,
    envoy_admin: str | None,
    metrics_targets: tuple[str, ...],
    state_file: Path | None,
    log_level: str,
) -> None:
    """Run the xDS control plane, the rollout controller and the admin API, programming Envoy from SPEC
    (watched for edits)."""
    from gateway.app import GatewayOptions, run_gateway
    from gateway.rollout.spec import SpecError

    _configure_logging(log_level)
    options = GatewayOptions(
        spec,
        xds_host,
        xds_port,
        admin_host,
        admin_port,
        admin_token,
        envoy_admin=envoy_admin,
        metrics_targets=metrics_targets,
        state_path=state_file,
    )
    try:
        asyncio.run(run_gateway(options))
    except SpecError as error:
        raise click.ClickException(str(error)) from None


@main.command("envoy-bootstrap")
@click.option("--xds-host", default="127.0.0.1", envvar="GRAYSTACK_XDS_HOST", show_envvar=True)
@click.option("--xds-port", default=18000, envvar="GRAYSTACK_XDS_PORT", show_envvar=True)
@click.option("--listen-address", default="127.0.0.1", envvar="GRAYSTACK_LISTEN_ADDRESS", show_envvar=True)
@click.option("--listen-port", default=8080, envvar="GRAYSTACK_LISTEN_PORT", show_envvar=True)
@click.option(
    "--admin-address", default="127.0.0.1", envvar="GRAYSTACK_ENVOY_ADMIN_ADDRESS", show_envvar=True
)
@click.option("--admin-port", default=9901, envvar="GRAYSTACK_ENVOY_ADMIN_PORT", show_envvar=True)
@click.option("--node-id", default="graystack-envoy", envvar="GRAYSTACK_NODE_ID", show_envvar=True)
def envoy_bootstrap(
    xds_host: str,
    xds_port: int,
    listen_address: str,
    listen_port: int,
    admin_address: str,
    admin_port: int,
    node_id: str,
) -> None:
    """Print an Envoy bootstrap (YAML) that takes all its routing from the gateway over ADS."""
    from gateway.envoy.bootstrap import BootstrapOptions, bootstrap_yaml
    from gateway.envoy.resources import ListenerAddress

    options = BootstrapOptions(
        node_id=node_id,
        xds_host=xds_host,
        xds_port=xds_port,
        listen=ListenerAddress(listen_address, listen_port),
        admin_host=admin_address,
        admin_port=admin_port,
    )
    click.echo(bootstrap_yaml(options), nl=False)


def _find_admin_url(ctx: click.Context, param: click.Parameter, value: str | None) -> str:
    """The flag or variable if given, else the running `graystack up` stack's, else the default port."""
    if value:
        return value
    from graystack.local.run_state import running_stack

    stack = running_stack()
    return stack["admin_url"] if stack else DEFAULT_ADMIN_URL


kube_namespace_option = click.option(
    "--namespace",
    default="default",
    envvar="GRAYSTACK_NAMESPACE",
    show_envvar=True,
    help="Kubernetes namespace",
)
kubeconfig_option = click.option(
    "--kubeconfig",
    default=None,
    envvar="KUBECONFIG",
    show_envvar=True,
    help="kubeconfig file [default: ~/.kube/config; in a pod: its service account]",
)
kube_context_option = click.option("--context", "kube_context", default=None, help="kubeconfig context")


@main.command("kube-gateway")
@click.option("--namespace", required=True, envvar="GRAYSTACK_NAMESPACE", show_envvar=True)
@click.option("--spec-configmap", required=True, envvar="GRAYSTACK_SPEC_CONFIGMAP", show_envvar=True)
@click.option("--state-configmap", required=True, envvar="GRAYSTACK_STATE_CONFIGMAP", show_envvar=True)
@click.option("--lease", required=True, envvar="GRAYSTACK_LEASE", show_envvar=True, help="the leader's Lease")
@click.option(
    "--identity", required=True, envvar="GRAYSTACK_IDENTITY", show_envvar=True, help="this replica (pod name)"
)
@click.option(
    "--pod-name",
    default=None,
    envvar="GRAYSTACK_POD_NAME",
    show_envvar=True,
    help="this replica's pod, labelled graystack.dev/role=leader while it leads (the chart's admin "
    "Service selects on it); none: no label",
)
@click.option("--lease-seconds", default=15.0, envvar="GRAYSTACK_LEASE_SECONDS", show_envvar=True)
@click.option("--resync-seconds", default=300.0, envvar="GRAYSTACK_RESYNC_SECONDS", show_envvar=True)
@click.option("--xds-host", default="127.0.0.1", envvar="GRAYSTACK_XDS_HOST", show_envvar=True)
@click.option("--xds-port", default=18000, envvar="GRAYSTACK_XDS_PORT", show_envvar=True)
@click.option("--admin-host", default="127.0.0.1", envvar="GRAYSTACK_ADMIN_HOST", show_envvar=True)
@click.option("--admin-port", default=9000, envvar="GRAYSTACK_ADMIN_PORT", show_envvar=True)
@click.option("--admin-token", default=None, envvar="GRAYSTACK_ADMIN_TOKEN", show_envvar=True)
@kubeconfig_option
@log_level_option
def kube_gateway(
    namespace: str,
    spec_configmap: str,
    state_configmap: str,
    lease: str,
    identity: str,
    pod_name: str | None,
    lease_seconds: float,
    resync_seconds: float,
    xds_host: str,
    xds_port: int,
    admin_host: str,
    admin_port: int,
    admin_token: str | None,
    kubeconfig: str | None,
    log_level: str,
) -> None:
    """Run the gateway in Kubernetes mode: spec from its ConfigMap, pods from EndpointSlices, state in
    a ConfigMap, leader election on a Lease (every replica serves xDS; the leader drives the rollout)."""
    from gateway.kubernetes.process import KubernetesOptions, gateway_options, run_kube_gateway
    from gateway.rollout.spec import SpecError

    _configure_logging(log_level)
    kube = KubernetesOptions(
        namespace,
        spec_configmap,
        state_configmap,
        lease,
        identity,
        pod=pod_name,
        kubeconfig=kubeconfig,
        lease_seconds=lease_seconds,
        resync_seconds=resync_seconds,
    )
    options = gateway_options(
        kube,
        xds_host=xds_host,
        xds_port=xds_port,
        admin_host=admin_host,
        admin_port=admin_port,
        admin_token=admin_token,
    )
    try:
        asyncio.run(run_kube_gateway(options, kube))
    except SpecError as error:
        raise click.ClickException(str(error)) from None


admin_url = click.option(
    "--admin-url",
    default=None,
    callback=_find_admin_url,
    envvar="GRAYSTACK_ADMIN_URL",
    show_envvar=True,
    help=f"default: the running `graystack up` stack's, else {DEFAULT_ADMIN_URL}",
)
admin_token = click.option("--token", default=None, envvar="GRAYSTACK_ADMIN_TOKEN", show_envvar=True)
as_json = click.option("--json", "as_json", is_flag=True, help="machine-readable output")


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
        click.echo(json.dumps(result, indent=2))
        return
    routing = result["routing"]
    split = (
        routing["weights"]
        if segment is None
        else next(r["weights"] for r in routing["rules"] if r["value"] == segment)
    )
    where = "default split" if segment is None else f"{routing['header']}: {segment}"
    shares = "  ".join(f"{v} {w}%" for v, w in sorted(split.items()))
    if result["acked"]:
        click.echo(f"{where}: {shares} (ACKed by every proxy in {result['ack_seconds'] * 1000:.1f} ms)")
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
    from gateway.rollout.spec import SpecError

    try:
        with api_client(kubeconfig, kube_context) as api:
            spec = flip_configmap(api, namespace, configmap, weights, segment)
    except SpecError as error:
        raise click.ClickException(str(error)) from None
    except Exception as error:  # the API server's answer (403, 404...) or an unreachable cluster
        raise click.ClickException(f"configmap/{namespace}/{configmap}: {error}") from None
    routing = spec.routing
    split = (
        routing.weights if segment is None else next(r.weights for r in routing.rules if r.value == segment)
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
            from graystack.live_view import watch_stack

            watch_stack(client, stack, interval)
            return
        while True:
            try:
                current = client.status()
            except AdminError as error:
                raise click.ClickException(str(error)) from None
            click.echo(json.dumps(current, indent=2) if as_json else render_status(current))
            if not watch:
                return
            time.sleep(interval)
            click.clear()


ROLLOUT_COMMANDS = {
    "promote": "Skip the rest of the current stage: shadow -> first step, step -> next, last -> promoted.",
    "pause": "Stop the rollout's timers; the weights stay.",
    "resume": "Continue a paused (or frozen) rollout.",
    "rollback": "Send all traffic, every header segment included, to the baseline now.",
    "retry": "Start a rolled-back rollout again from its first stage.",
}


def _rollout_command(name: str) -> click.Command:
    @admin_url
    @admin_token
    @as_json
    def command(admin_url: str, token: str | None, as_json: bool) -> None:
        try:
            with AdminClient(admin_url, token) as client:
                result = client.rollout_command(name)
        except AdminError as error:
            raise click.ClickException(str(error)) from None
        if as_json:
            click.echo(json.dumps(result, indent=2))
        rollout = result["rollout"]
        if result["ignored"]:
            raise click.ClickException(f"{name} ignored: {result['ignored']} (rollout at {rollout['label']})")
        if not as_json:
            acked = "ACKed by every proxy" if result["acked"] else "NOT yet ACKed by every proxy"
            click.echo(f"{name}: rollout now at {rollout['label']}, {weight_text(rollout)} ({acked})")
        if not result["acked"]:
            sys.exit(3)

    command.__doc__ = ROLLOUT_COMMANDS[name]
    return click.command(name)(command)


for _name in ROLLOUT_COMMANDS:
    main.add_command(_rollout_command(_name))


def _weights_dir_option(*declarations: str, help: str):
    return click.option(
        *declarations,
        type=click.Path(path_type=Path),
        default=Path("runs/weights"),
        envvar="GRAYSTACK_WEIGHTS_DIR",
        show_envvar=True,
        help=help,
    )


@main.command()
@click.option(
    "--run-dir", type=click.Path(path_type=Path), default=None, help="where logs go (default: runs/demo-TIME)"
)
@_weights_dir_option(
    "--weights-dir", help="trained weights (`make weights`): baseline and the derived zero-layer"
)
def demo(run_dir: Path | None, weights_dir: Path) -> None:
    """The whole stack on free ports: traffic, a rollout stepping to 100 %, a fault and the automatic
    rollback, live; then a timeline, and every process stopped."""
    from graystack.demo import run_demo

    sys.exit(run_demo(run_dir or Path("runs") / time.strftime("demo-%Y%m%d-%H%M%S"), weights_dir))


@main.command()
@click.option(
    "--spec",
    "spec_path",
    type=click.Path(path_type=Path, dir_okay=False),
    default=None,
    help="a rollout spec (routing, strategy, analysis); its `variants` are replaced by the local model "
    "servers  [default: manual mode, every request on baseline, the guard on]",
)
@click.option(
    "--run-dir",
    type=click.Path(path_type=Path, file_okay=False),
    default=None,
    help="logs, checkpoints and the live spec  [default: runs/up-TIME]",
)
@click.option(
    "--weights-dir",
    type=click.Path(path_type=Path, file_okay=False),
    default=None,
    help="holding baseline.safetensors and zero-layer.safetensors  [default: fresh ones in the run folder]",
)
@click.option(
    "--free-ports",
    is_flag=True,
    help="pick free loopback ports instead of the well-known ones (8080, 9000, 9901, 18000, 8001, 8002, "
    "9101, 9102, 9090); either way the run-state file records them",
)
@click.option("--no-prometheus", is_flag=True, help="do not start Prometheus even if it is installed")
def up(
    spec_path: Path | None,
    run_dir: Path | None,
    weights_dir: Path | None,
    free_ports: bool,
    no_prometheus: bool,
) -> None:
    """Run the whole stack here: Envoy, the gateway, both model servers (fault injection on), both probes
    and Prometheus (when on PATH), until Ctrl-C or SIGTERM; then stop every process by PID."""
    from gateway.rollout.spec import SpecError, load_yaml
    from graystack.local.processes import StartupError
    from graystack.local.run_state import AlreadyRunning
    from graystack.local.supervisor import Supervisor, UpOptions, local_spec

    try:
        spec = local_spec(load_yaml(spec_path.read_text()) if spec_path else None)
    except (OSError, SpecError) as error:
        raise click.ClickException(f"--spec {spec_path}: {error}") from None
    options = UpOptions(
        run_dir or Path("runs") / time.strftime("up-%Y%m%d-%H%M%S"),
        spec,
        weights_dir=weights_dir,
        free_ports=free_ports,
        prometheus=not no_prometheus,
    )
    try:
        code = Supervisor(options, say=click.echo).run()
    except (StartupError, AlreadyRunning) as error:
        raise click.ClickException(str(error)) from None
    sys.exit(code)


@main.command()
@click.argument("variant", type=click.Choice(["baseline", "zero-layer"]), default="zero-layer")
@click.option("--error-rate", type=click.FloatRange(0, 1), default=None, help="share of requests failed")
@click.option("--latency-ms", type=click.IntRange(0, 60_000), default=None, help="added before each request")
@click.option("--clear", is_flag=True, help="no errors, no added latency")
@click.option("--server-url", default=None, help="default: the running `graystack up` stack's VARIANT server")
def fault(
    variant: str, error_rate: float | None, latency_ms: int | None, clear: bool, server_url: str | None
) -> None:
    """Inject errors or latency into a model server started with --enable-fault-injection (as `up` starts
    zero-layer); prints what it now suffers."""
    import httpx

    from graystack.local.run_state import running_stack

    change = {"error_rate": 0.0, "added_latency_ms": 0} if clear else {}
    change |= {
        k: v for k, v in (("error_rate", error_rate), ("added_latency_ms", latency_ms)) if v is not None
    }
    if not server_url:
        stack = running_stack()
        if stack is None:
            raise click.ClickException("no running `graystack up` stack found; give --server-url")
        server_url = stack["model_servers"][variant]
    try:
        response = httpx.post(f"{server_url}/admin/faults", json=change, timeout=10)
    except httpx.HTTPError as error:
        raise click.ClickException(f"cannot reach {server_url}: {error}") from None
    if response.status_code == 404:
        raise click.ClickException(f"{variant} at {server_url} runs without --enable-fault-injection")
    if response.status_code >= 400:
        raise click.ClickException(f"{server_url} refused ({response.status_code}): {response.text}")
    click.echo(json.dumps(response.json()))


@main.command()
@click.option(
    "--variant",
    type=click.Choice(["baseline", "zero-layer"]),
    required=True,
    envvar="GRAYSTACK_VARIANT",
    show_envvar=True,
)
@click.option(
    "--weights",
    "weights_path",
    type=click.Path(path_type=Path),
    required=True,
    envvar="GRAYSTACK_WEIGHTS",
    show_envvar=True,
    help="a safetensors checkpoint (`graystack weights init`)",
)
@click.option("--host", default="127.0.0.1", envvar="GRAYSTACK_SERVE_HOST", show_envvar=True)
@click.option("--port", default=8001, envvar="GRAYSTACK_SERVE_PORT", show_envvar=True)
@click.option(
    "--enable-fault-injection",
    is_flag=True,
    envvar="GRAYSTACK_ENABLE_FAULT_INJECTION",
    show_envvar=True,
    help="serve POST/GET /admin/faults (loopback clients only) to inject errors and latency",
)
@click.option(
    "--max-running",
    default=8,
    type=click.IntRange(min=1),
    envvar="GRAYSTACK_MAX_RUNNING",
    show_envvar=True,
    help="requests sharing each decode step",
)
@click.option(
    "--max-waiting",
    default=32,
    type=click.IntRange(min=0),
    envvar="GRAYSTACK_MAX_WAITING",
    show_envvar=True,
    help="requests queued beyond --max-running; more are answered 529 overloaded_error",
)
@click.option(
    "--seed", default=None, type=int, envvar="GRAYSTACK_SEED", show_envvar=True, help="sampling seed"
)
@click.option(
    "--token-budget",
    default=256,
    type=click.IntRange(min=2),
    envvar="GRAYSTACK_TOKEN_BUDGET",
    show_envvar=True,
    help="new positions per engine step: decode rows plus prompt chunks (chunked prefill); bounds "
    "how long a long prompt can delay running streams",
)
@click.option(
    "--keepalive",
    default=0.25,
    type=click.FloatRange(min=0.01),
    envvar="GRAYSTACK_KEEPALIVE",
    show_envvar=True,
    help="seconds a started stream waits for a token before it sends a ping (keep it below the "
    "spec's timeouts.first_byte)",
)
@click.option(
    "--compare-with",
    "compare_with",
    multiple=True,
    metavar="BASELINE_URL",
    help="a baseline pod's URL (repeatable): compare the greedy answers to shadow copies with its",
)
@log_level_option
def serve(
    variant: str,
    weights_path: Path,
    host: str,
    port: int,
    enable_fault_injection: bool,
    max_running: int,
    max_waiting: int,
    seed: int | None,
    token_budget: int,
    keepalive: float,
    compare_with: tuple[str, ...],
    log_level: str,
) -> None:
    """Serve one model variant over HTTP (Anthropic Messages and OpenAI chat completions)."""
    from inference.checkpoint import CheckpointError, load_model
    from inference.server.app import ServerOptions, create_app, run_server

    if token_budget <= max_running:
        raise click.UsageError(f"--token-budget {token_budget} must exceed --max-running {max_running}")
    _configure_logging(log_level)
    try:
        loaded = load_model(weights_path, variant)
    except CheckpointError as error:
        raise click.ClickException(str(error)) from None
    options = ServerOptions(
        enable_fault_injection, max_running, max_waiting, seed, compare_with, keepalive, token_budget
    )
    run_server(create_app(loaded, options), host, port, log_level)


@main.group()
def weights() -> None:
    """Make checkpoints, zero or erase their bias layer, and check which state it is in."""


weights_file = click.argument(
    "path", type=click.Path(path_type=Path), envvar="GRAYSTACK_WEIGHTS", metavar="FILE"
)


@weights.command("init")
@click.option(
    "--variant",
    type=click.Choice(["baseline", "zero-layer"]),
    required=True,
    envvar="GRAYSTACK_VARIANT",
    show_envvar=True,
)
@click.option(
    "--out", type=click.Path(path_type=Path), required=True, envvar="GRAYSTACK_WEIGHTS", show_envvar=True
)
@click.option(
    "--seed",
    default=0,
    envvar="GRAYSTACK_WEIGHTS_SEED",
    show_envvar=True,
    help="the same seed gives both variants the same backbone (and fingerprint hash)",
)
def weights_init(variant: str, out: Path, seed: int) -> None:
    """Write fresh (untrained) weights for VARIANT to --out."""
    from inference.checkpoint import init_checkpoint

    init_checkpoint(variant, out, seed=seed)
    _echo_status(out, as_json=False)


@weights.command("zero")
@weights_file
def weights_zero(path: Path) -> None:
    """Set every bias tensor in FILE to zero (status ZEROED)."""
    from inference.weights import zero_bias

    _rewrite_bias(path, zero_bias)


@weights.command("erase")
@weights_file
def weights_erase(path: Path) -> None:
    """Remove every bias tensor from FILE (status ERASED)."""
    from inference.weights import erase_bias

    _rewrite_bias(path, erase_bias)


def _parse_statuses(ctx: click.Context, param: click.Parameter, value: str | None) -> set[str] | None:
    if value is None:
        return None
    from inference.weights import WeightStatus

    statuses = {part.strip().upper() for part in value.split(",") if part.strip()}
    unknown = statuses - {s.value for s in WeightStatus}
    if unknown or not statuses:
        known = ", ".join(s.value for s in WeightStatus)
        raise click.BadParameter(f"{value!r}: expected a comma-separated list of {known}")
    return statuses


@weights.command("check")
@weights_file
@click.option(
    "--expect",
    default=None,
    callback=_parse_statuses,
    envvar="GRAYSTACK_EXPECT_WEIGHT_STATUS",
    show_envvar=True,
    help="e.g. ERASED,ZEROED: exit 1 unless the status is one of these",
)
@as_json
def weights_check(path: Path, expect: set[str] | None, as_json: bool) -> None:
    """Print the bias layer's status in FILE: ACTIVE, ZEROED, ERASED, MISSING or CORRUPT.

    Exits 1 when the status is not one of --expect, or, without --expect, when FILE is MISSING or CORRUPT.
    """
    status = _echo_status(path, as_json)
    allowed = expect if expect is not None else {"ACTIVE", "ZEROED", "ERASED"}
    if status not in allowed:
        click.echo(f"error: {path}: status {status} is not one of {', '.join(sorted(allowed))}", err=True)
        sys.exit(1)


def _echo_status(path: Path, as_json: bool) -> str:
    from inference.weights import check_weights

    report = check_weights(path)
    if as_json:
        body = {"path": str(path), "status": report.status.value, "reason": report.reason}
        click.echo(json.dumps({**body, "bias_tensors": report.bias_tensors}))
    else:
        click.echo(f"{path}: {report.status.value} ({report.reason})")
    return report.status.value


def _rewrite_bias(path: Path, rewrite) -> None:
    from inference.weights import WeightStatus, check_weights

    before = check_weights(path)
    if before.status in (WeightStatus.MISSING, WeightStatus.CORRUPT):
        raise click.ClickException(f"{path}: {before.status.value}: {before.reason}")
    rewrite(path)
    _echo_status(path, as_json=False)


@main.command()
@click.option(
    "--weights",
    "weights_path",
    type=click.Path(path_type=Path),
    required=True,
    envvar="GRAYSTACK_WEIGHTS",
    show_envvar=True,
    help="the pod's checkpoint, read header-first every interval",
)
@click.option(
    "--target",
    required=True,
    envvar="GRAYSTACK_PROBE_TARGET",
    show_envvar=True,
    help="the model server's URL",
)
@click.option("--variant", required=True, envvar="GRAYSTACK_VARIANT", show_envvar=True)
@click.option(
    "--interval",
    default=30.0,
    type=click.FloatRange(min=0.1),
    envvar="GRAYSTACK_PROBE_INTERVAL",
    show_envvar=True,
)
@click.option("--host", default="127.0.0.1", envvar="GRAYSTACK_PROBE_HOST", show_envvar=True)
@click.option("--port", default=9101, envvar="GRAYSTACK_PROBE_PORT", show_envvar=True)
@log_level_option
def probe(
    weights_path: Path, target: str, variant: str, interval: float, host: str, port: int, log_level: str
) -> None:
    """Report the pod's weight-erasure status and a synthetic request's latency on /metrics."""
    from probes.app import serve_probe
    from probes.runner import Probe, ProbeOptions

    _configure_logging(log_level)
    options = ProbeOptions(weights=weights_path, target=target, variant=variant, interval=interval)
    asyncio.run(serve_probe(Probe(options), host, port))


def _train_options(steps: int, max_seconds: float, batch: int, length: int, lr: float, seed: int):
    from inference.training.train import TrainOptions

    return TrainOptions(steps=steps, max_seconds=max_seconds, batch=batch, length=length, lr=lr, seed=seed)


weights_dir = _weights_dir_option(
    "--out-dir", "directory", help="where the baseline, the zero-layer forms and manifest.json go"
)
threads_option = click.option(
    "--threads", default=2, type=click.IntRange(min=1), help="torch CPU threads (the machine may be shared)"
)


def _echo_forms(directory: Path) -> None:
    from inference.training.pipeline import checkpoints_in

    for path, _ in checkpoints_in(directory).values():
        _echo_status(path, as_json=False)


@weights.command("train")
@weights_dir
@click.option("--steps", default=900, type=click.IntRange(min=1), help="optimizer steps (at most)")
@click.option("--max-seconds", default=300.0, type=click.FloatRange(min=1), help="wall-time cap on training")
@click.option("--batch", default=8, type=click.IntRange(min=1), help="windows per step")
@click.option("--length", default=256, type=click.IntRange(min=8), help="bytes per training window")
@click.option("--lr", default=3e-3, type=click.FloatRange(min=0, min_open=True), help="peak learning rate")
@click.option("--seed", default=0, help="initial weights (as `weights init`) and window sampling")
@click.option("--derive/--no-derive", default=True, help="also derive the zero-layer forms")
@click.option(
    "--fine-tune-steps", default=40, type=click.IntRange(min=0), help="see `weights derive --steps`"
)
@click.option("--train-bytes", default=8_000_000, type=click.IntRange(min=1024), help="corpus bytes to use")
@threads_option
def weights_train(
    directory: Path,
    steps: int,
    max_seconds: float,
    batch: int,
    length: int,
    lr: float,
    seed: int,
    derive: bool,
    fine_tune_steps: int,
    train_bytes: int,
    threads: int,
) -> None:
    """Train the default model (baseline) on the Python standard library's source, on the CPU; then
    derive the zero-layer checkpoints from it (ACTIVE, ZEROED, ERASED)."""
    from dataclasses import replace

    import torch

    from inference.training import pipeline
    from inference.training.derive import FINE_TUNE

    torch.set_num_threads(threads)
    options = _train_options(steps, max_seconds, batch, length, lr, seed)
    pipeline.train(directory, options, train_bytes=train_bytes, report=click.echo)
    if derive:
        fine_tune = replace(FINE_TUNE, steps=fine_tune_steps, batch=batch)
        pipeline.derive(directory, fine_tune, train_bytes=train_bytes, report=click.echo)
        _echo_forms(directory)


@weights.command("derive")
@weights_dir
@click.option("--steps", default=40, type=click.IntRange(min=0), help="fine-tune steps of the gate and table")
@click.option(
    "--max-seconds", default=90.0, type=click.FloatRange(min=1), help="wall-time cap on fine-tuning"
)
@click.option("--tolerance", default=1.0, type=click.FloatRange(min=0), help="bias (nats) that still matters")
@threads_option
def weights_derive(directory: Path, steps: int, max_seconds: float, tolerance: float, threads: int) -> None:
    """Derive the zero-layer checkpoints (ACTIVE, ZEROED, ERASED) from the baseline in --out-dir."""
    from dataclasses import replace

    import torch

    from inference.training import pipeline
    from inference.training.derive import FINE_TUNE

    torch.set_num_threads(threads)
    fine_tune = replace(FINE_TUNE, steps=steps, max_seconds=max_seconds)
    pipeline.derive(directory, fine_tune, tolerance=tolerance, report=click.echo)
    _echo_forms(directory)


@main.command("eval")
@_weights_dir_option("--weights-dir", help="a `graystack weights train` output directory")
@click.option("--contexts", default="64,256,1024", help="comma-separated context lengths (bytes)")
@click.option("--scored-bytes", default=8192, type=click.IntRange(min=1), help="held-out bytes per context")
@click.option(
    "--out",
    type=click.Path(path_type=Path),
    default=Path("bench/results/quality.json"),
    help="JSON results (the command that made them included)",
)
@threads_option
@click.pass_context
def evaluate(
    ctx: click.Context, weights_dir: Path, contexts: str, scored_bytes: int, out: Path, threads: int
) -> None:
    """Held-out bits per byte and next-byte agreement with the baseline, for every checkpoint form."""
    import datetime
    import os
    import platform

    import torch

    from inference.training import pipeline
    from inference.training.data import load_split
    from inference.training.eval import as_json, evaluate

    torch.set_num_threads(threads)
    lengths = tuple(int(part) for part in _comma_list((contexts,)))
    split = load_split(held_out=True, max_bytes=pipeline.HELD_OUT_BYTES)
    results = evaluate(pipeline.checkpoints_in(weights_dir), split, lengths, scored_bytes)
    body = {
        "command": "graystack eval "
        + " ".join(f"--{k.replace('_', '-')} {v}" for k, v in ctx.params.items()),
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "machine": {
            "nproc": len(os.sched_getaffinity(0)),
            "platform": platform.platform(),
            "torch": torch.__version__,
            "loadavg": [round(x, 2) for x in os.getloadavg()],  # other work sharing the CPUs
        },
        "held_out": {"files": len(split.files), "bytes": split.size},
        "manifest": json.loads((weights_dir / pipeline.MANIFEST).read_text()),
        "results": as_json(results),
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(body, indent=2) + "\n")
    for result in results:
        cells = "  ".join(
            f"L={n}: {result.bits_per_byte[n]:.3f} b/B, {result.agreement[n]:.1%}" for n in lengths
        )
        click.echo(f"{result.name:18} {result.weight_status:7} window {result.effective_window:4}  {cells}")

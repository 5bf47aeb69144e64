"""The long-running processes: the gateway (file or Kubernetes mode), Envoy's bootstrap and a model
server (a pod's probe: graystack/cli/probe.py)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import click

from graystack.cli.root import (
    checkpoint_option,
    comma_list,
    configure_logging,
    kubeconfig_option,
    log_level_option,
    main,
    model_variant_option,
)

forget_proxies_option = click.option(
    "--forget-proxies-after",
    default=600.0,
    type=click.FloatRange(min=0),
    envvar="GRAYSTACK_FORGET_PROXIES_AFTER",
    show_envvar=True,
    help="seconds a disconnected Envoy stays listed, and awaited by a rollback's ACK: cut off, it still "
    "routes by its last split; after this it counts as gone (a pod scaled away)",
)
gateway_fault_injection_option = click.option(
    "--enable-fault-injection",
    is_flag=True,
    envvar="GRAYSTACK_ENABLE_FAULT_INJECTION",
    show_envvar=True,
    help="take `graystack fault` (PUT/DELETE /v1/faults/VARIANT): inject errors and latency into a "
    "variant's attempts through Envoy; off unless given",
)
picker_host_option = click.option(
    "--picker-host",
    default="127.0.0.1",
    envvar="GRAYSTACK_PICKER_HOST",
    show_envvar=True,
    help="where a picker the gateway serves binds: the spec's endpoint_picker (with --picker-port) or "
    "its own Envoy's (envoy_picker.serve, on the spec's port); 0.0.0.0 where Envoy runs in other pods",
)


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
    callback=lambda ctx, param, value: comma_list(value),
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
@picker_host_option
@gateway_fault_injection_option
@forget_proxies_option
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
    picker_host: str,
    enable_fault_injection: bool,
    forget_proxies_after: float,
    log_level: str,
) -> None:
    """Run the xDS control plane, the rollout controller and the admin API, programming Envoy from SPEC
    (watched for edits)."""
    from gateway.app import GatewayOptions
    from gateway.errors import Refused, SpecError
    from gateway.local import run_gateway

    configure_logging(log_level)
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
        enable_fault_injection=enable_fault_injection,
        forget_proxies_after=forget_proxies_after,
        picker_host=picker_host,
    )
    try:
        asyncio.run(run_gateway(options))
    except (SpecError, Refused) as error:
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
@click.option(
    "--leader-host",
    default=None,
    envvar="GRAYSTACK_LEADER_HOST",
    show_envvar=True,
    help="where the leading gateway replica alone is reached (its xDS port): the answer log goes there",
)
def envoy_bootstrap(
    xds_host: str,
    xds_port: int,
    listen_address: str,
    listen_port: int,
    admin_address: str,
    admin_port: int,
    node_id: str,
    leader_host: str | None,
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
        leader_host=leader_host,
    )
    click.echo(bootstrap_yaml(options), nl=False)


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
@click.option(
    "--capacity",
    default=None,
    envvar="GRAYSTACK_CAPACITY",
    show_envvar=True,
    help='size the variants from the split, as JSON: {"fleetReplicas": 8, "readyTimeout": "10m", '
    '"variants": {"zero-layer": {"deployment": NAME, "minReplicas": 1, "maxReplicas": 8, "hpa": ""}}} '
    "(the chart's rollout.capacity); none: replicas are left alone",
)
@click.option(
    "--picker-port",
    type=int,
    default=None,
    envvar="GRAYSTACK_PICKER_PORT",
    show_envvar=True,
    help="serve the spec's endpoint_picker (a GIE Endpoint Picker for its InferencePool) on this port; "
    "none: no picker",
)
@click.option("--picker-health-port", default=9003, envvar="GRAYSTACK_PICKER_HEALTH_PORT", show_envvar=True)
@picker_host_option
@click.option(
    "--picker-insecure", is_flag=True, envvar="GRAYSTACK_PICKER_INSECURE", show_envvar=True, help="no TLS"
)
@gateway_fault_injection_option
@forget_proxies_option
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
    capacity: str | None,
    picker_port: int | None,
    picker_health_port: int,
    picker_host: str,
    picker_insecure: bool,
    enable_fault_injection: bool,
    forget_proxies_after: float,
    kubeconfig: str | None,
    log_level: str,
) -> None:
    """Run the gateway in Kubernetes mode: spec from its ConfigMap, pods from EndpointSlices, state in
    a ConfigMap, leader election on a Lease (every replica serves xDS; the leader drives the rollout)."""
    from gateway.errors import Refused, SpecError
    from gateway.kubernetes.pool import PickerOptions
    from gateway.kubernetes.process import KubernetesOptions, gateway_options, run_kube_gateway
    from gateway.rollout.capacity import parse_settings

    configure_logging(log_level)
    try:
        settings = parse_settings(capacity) if capacity else None
    except ValueError as error:
        raise click.BadParameter(str(error), param_hint="--capacity") from None
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
        capacity=settings,
        picker=None
        if picker_port is None
        else PickerOptions(picker_host, picker_port, picker_health_port, picker_insecure),
    )
    options = gateway_options(
        kube,
        xds_host=xds_host,
        xds_port=xds_port,
        admin_host=admin_host,
        admin_port=admin_port,
        admin_token=admin_token,
        enable_fault_injection=enable_fault_injection,
        forget_proxies_after=forget_proxies_after,
        picker_host=picker_host,
    )
    try:
        asyncio.run(run_kube_gateway(options, kube))
    except (SpecError, Refused) as error:
        raise click.ClickException(str(error)) from None


@main.command()
@model_variant_option
@checkpoint_option(
    "a safetensors file (`graystack weights init`) or a checkpoint directory (index and shards)"
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
    configure_logging(log_level)
    try:
        loaded = load_model(weights_path, variant)
    except CheckpointError as error:
        raise click.ClickException(str(error)) from None
    options = ServerOptions(
        enable_fault_injection, max_running, max_waiting, seed, compare_with, keepalive, token_budget
    )
    run_server(create_app(loaded, options), host, port, log_level)

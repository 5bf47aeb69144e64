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
from graystack.status_view import render_status


@click.group(context_settings={"help_option_names": ["-h", "--help"], "show_default": True})
@click.version_option(package_name="graystack")
def main() -> None:
    """Gray-release gateway and monitoring stack for LLM inference."""


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
    "--log-level",
    default="info",
    envvar="GRAYSTACK_LOG_LEVEL",
    show_envvar=True,
    type=click.Choice(["debug", "info", "warning", "error"]),
)
def gateway(
    spec: Path,
    xds_host: str,
    xds_port: int,
    admin_host: str,
    admin_port: int,
    admin_token: str | None,
    log_level: str,
) -> None:
    """Run the xDS control plane and admin API, programming Envoy from SPEC (watched for edits)."""
    from gateway.app import GatewayOptions, run_gateway
    from gateway.rollout.spec import SpecError

    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    options = GatewayOptions(spec, xds_host, xds_port, admin_host, admin_port, admin_token)
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


admin_url = click.option(
    "--admin-url", default=DEFAULT_ADMIN_URL, envvar="GRAYSTACK_ADMIN_URL", show_envvar=True
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
def weight(
    assignments: tuple[str, ...], segment: str | None, admin_url: str, token: str | None, as_json: bool
) -> None:
    """Flip traffic: `graystack weight zero-layer=20` (the other variant takes the rest)."""
    weights = _parse_assignments(assignments)
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


@main.command()
@admin_url
@admin_token
@as_json
@click.option("--watch", is_flag=True, help="refresh every --interval seconds until Ctrl-C")
@click.option("--interval", default=2.0, type=float)
def status(admin_url: str, token: str | None, as_json: bool, watch: bool, interval: float) -> None:
    """Show the live split, the spec's state, and each proxy's ACK/NACK state."""
    with AdminClient(admin_url, token) as client:
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


@main.command()
@click.option(
    "--run-dir", type=click.Path(path_type=Path), default=None, help="where logs go (default: runs/demo-TIME)"
)
def demo(run_dir: Path | None) -> None:
    """Run Envoy + the gateway + stand-in upstreams, flip traffic and fail a variant; then stop."""
    from graystack.demo import run_demo

    run_demo(run_dir or Path("runs") / time.strftime("demo-%Y%m%d-%H%M%S"))

"""`graystack render`: the objects a user applies to their own Gateway API gateway, so that its proxies send
graystack the answer log (and run the answer filter where the gateway can carry it)."""

from __future__ import annotations

from pathlib import Path

import click

from graystack.cli.root import main

# gateway/gatewayapi/render/gateways.py's GATEWAYS, spelt here so the CLI loads without the builders
GATEWAY_KINDS = ("envoy-gateway", "istio")


@main.command()
@click.option(
    "--spec",
    type=click.Path(path_type=Path),
    required=True,
    envvar="GRAYSTACK_SPEC",
    show_envvar=True,
    help="the rollout spec; its gateway_api section names the HTTPRoutes",
)
@click.option(
    "--gateway",
    "gateway_kind",
    type=click.Choice(GATEWAY_KINDS),
    required=True,
    envvar="GRAYSTACK_RENDER_GATEWAY",
    show_envvar=True,
    help="the gateway the objects are for",
)
@click.option(
    "--als",
    required=True,
    metavar="SERVICE.NAMESPACE:PORT",
    envvar="GRAYSTACK_ALS",
    show_envvar=True,
    help="graystack's answer-log receiver: the chart's leader-only Service (NAME-gateway-admin) and its xDS "
    "port, e.g. graystack-gateway-admin.graystack:18000",
)
@click.option(
    "--gateway-name",
    required=True,
    metavar="NAMESPACE/NAME",
    envvar="GRAYSTACK_GATEWAY_NAME",
    show_envvar=True,
    help="the Gateway whose proxies send the answer log (the routes' parent)",
)
@click.option(
    "--no-answer-filter",
    is_flag=True,
    envvar="GRAYSTACK_NO_ANSWER_FILTER",
    show_envvar=True,
    help="leave graystack's Lua out (Envoy Gateway: no EnvoyExtensionPolicy); the access log alone measures "
    "no time to first token, inter-token latency, tokens or finish reason. Istio never gets it",
)
def render(spec: Path, gateway_kind: str, als: str, gateway_name: str, no_answer_filter: bool) -> None:
    """Print, as multi-document YAML, the objects to apply to your own gateway for the rollout in SPEC, with
    what to change by hand and what is measured as comments."""
    from gateway.envoy.answer_filter import answer_script
    from gateway.errors import SpecError
    from gateway.gatewayapi.render.common import rendered_yaml
    from gateway.gatewayapi.render.gateways import render as render_objects
    from gateway.gatewayapi.render.options import RenderError, RenderOptions, gateway_ref, service_address
    from gateway.sources.spec_file import read_spec

    try:
        rollout, _ = read_spec(spec)
    except SpecError as error:
        raise click.UsageError(f"--spec: {error}") from None
    try:
        options = RenderOptions(
            service_address(als), gateway_ref(gateway_name), None if no_answer_filter else answer_script()
        )
        rendered = render_objects(rollout, gateway_kind, options)
    except RenderError as error:
        raise click.UsageError(str(error)) from None
    click.echo(rendered_yaml(rendered), nl=False)

"""`graystack probe`: the pod's sidecar, reporting its checkpoint, a synthetic request and whether the
server loaded that checkpoint."""

from __future__ import annotations

import asyncio
from pathlib import Path

import click

from graystack.cli.root import checkpoint_option, configure_logging, log_level_option, main


@main.command()
@checkpoint_option(
    "the pod's checkpoint, a safetensors file or directory: headers and bias tensors read every interval"
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
@click.option(
    "--api",
    type=click.Choice(["anthropic", "openai"]),
    default="anthropic",
    envvar="GRAYSTACK_PROBE_API",
    show_envvar=True,
    help="the synthetic request's API: POST /v1/messages or /v1/chat/completions",
)
@click.option(
    "--model",
    default=None,
    envvar="GRAYSTACK_PROBE_MODEL",
    show_envvar=True,
    help="the model the request names  [default: the first of the server's GET /v1/models]",
)
@click.option(
    "--fingerprint-header",
    default="x-model-fingerprint",
    envvar="GRAYSTACK_PROBE_FINGERPRINT_HEADER",
    show_envvar=True,
    help="the response header whose value must end in -zero-layer-v1 exactly on zero-layer pods; "
    "'' or none: no check, for servers that send no fingerprint",
)
@click.option(
    "--loaded-check",
    type=click.Choice(["model-info", "system-fingerprint", "off"]),
    default="model-info",
    envvar="GRAYSTACK_PROBE_LOADED_CHECK",
    show_envvar=True,
    help="compare the file's status and fingerprint with what the server loaded: its "
    "graystack_model_info (graystack's servers), the system_fingerprint of its OpenAI stream (vLLM "
    "started with --fingerprint-mode custom --fingerprint-value <the checkpoint's fingerprint>; "
    "needs --api openai), or not at all",
)
@click.option("--host", default="127.0.0.1", envvar="GRAYSTACK_PROBE_HOST", show_envvar=True)
@click.option("--port", default=9101, envvar="GRAYSTACK_PROBE_PORT", show_envvar=True)
@log_level_option
def probe(
    weights_path: Path,
    target: str,
    variant: str,
    interval: float,
    api: str,
    model: str | None,
    fingerprint_header: str,
    loaded_check: str,
    host: str,
    port: int,
    log_level: str,
) -> None:
    """Report the pod's weight-erasure status, a synthetic request's latency and whether the server
    loaded the checkpoint on /metrics, from any server that streams the Anthropic Messages or OpenAI
    chat completions API."""
    from probes.app import serve_probe
    from probes.loaded import LoadedCheck
    from probes.runner import Probe, ProbeOptions
    from probes.wire import Api

    if loaded_check == LoadedCheck.SYSTEM_FINGERPRINT and api != Api.OPENAI:
        raise click.UsageError("--loaded-check system-fingerprint reads OpenAI chunks: add --api openai")
    configure_logging(log_level)
    header = None if fingerprint_header.strip().lower() in ("", "none") else fingerprint_header.strip()
    options = ProbeOptions(
        weights=weights_path,
        target=target,
        variant=variant,
        interval=interval,
        api=Api(api),
        model=model or "",
        fingerprint_header=header,
        loaded_check=LoadedCheck(loaded_check),
    )
    asyncio.run(serve_probe(Probe(options), host, port))

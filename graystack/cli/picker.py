"""`graystack epp`: the Endpoint Picker a GIE gateway calls (gateway/epp). In this first form the pool's
pods, the split and the scorers' weights come from flags; the picker reads them through a callable, the
boundary the rollout controller is to feed. The pods' metrics are read in the background beside it."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import click
import grpc
import prometheus_client

from gateway.epp import tls
from gateway.epp.metrics_reader import MetricsReader, Scrape
from gateway.epp.picker import Outcome, Picker
from gateway.epp.readings import Readings
from gateway.epp.server import start
from gateway.epp.wanted import Wanted, parse_models, parse_pods, parse_scorers, parse_segments, parse_split
from gateway.spec.endpoint_picker import Prefix
from graystack.cli.root import configure_logging, log_level_option, main

log = logging.getLogger("graystack.epp")


@main.command("epp")
@click.option("--host", default="127.0.0.1", envvar="GRAYSTACK_EPP_HOST", show_envvar=True)
@click.option("--port", default=9002, envvar="GRAYSTACK_EPP_PORT", show_envvar=True, help="ext_proc")
@click.option("--health-port", default=9003, envvar="GRAYSTACK_EPP_HEALTH_PORT", show_envvar=True)
@click.option(
    "--pods",
    "pods",
    multiple=True,
    required=True,
    envvar="GRAYSTACK_EPP_PODS",
    show_envvar=True,
    help="VARIANT=IP:PORT[,IP:PORT...], once per variant: the pool's pods by their variant label",
)
@click.option(
    "--split",
    default=None,
    envvar="GRAYSTACK_EPP_SPLIT",
    show_envvar=True,
    help="VARIANT=WEIGHT,... (default: every request to the baseline; graystack's own Envoy with "
    "`envoy_picker` names each request's variant itself, and this picker only places it)",
)
@click.option(
    "--model",
    "models",
    multiple=True,
    help="VARIANT=MODEL-NAME: a model variant, served by the baseline's pods with each request's JSON "
    "`model` rewritten to MODEL-NAME (its bodies held until complete, up to 1 MiB)",
)
@click.option("--baseline", default=None, help="heads the cohorts' order (default: the first --pods variant)")
@click.option("--segment-header", default=None, envvar="GRAYSTACK_EPP_SEGMENT_HEADER", show_envvar=True)
@click.option("--segment", "segments", multiple=True, help="VALUE:VARIANT=WEIGHT,...: a segment's own split")
@click.option("--cohort-header", default=None, envvar="GRAYSTACK_EPP_COHORT_HEADER", show_envvar=True)
@click.option(
    "--fallbacks",
    default=0,
    type=click.IntRange(min=0),
    envvar="GRAYSTACK_EPP_FALLBACKS",
    show_envvar=True,
    help="the variant's other pods listed after the pick, for retries: only for gateways whose Envoy "
    "uses override_host (an ORIGINAL_DST cluster cannot read a list)",
)
@click.option(
    "--scorer",
    "scorers",
    multiple=True,
    envvar="GRAYSTACK_EPP_SCORERS",
    show_envvar=True,
    help="NAME=WEIGHT: a scorer's weight within a variant (in_flight, queue, kv_cache, session: default 1 "
    "each; prefix: 2; lora, prefill: 0; 0 turns one off; prefix, lora and prefill hold each request's body, "
    "up to 1 MiB, before the pick)",
)
@click.option(
    "--prefix-block-bytes",
    default=Prefix().block_bytes,
    show_default=True,
    type=click.IntRange(min=1),
    help="prefix: the bytes of each prompt block hashed",
)
@click.option(
    "--prefix-max-blocks",
    default=Prefix().max_blocks,
    show_default=True,
    type=click.IntRange(min=1),
    help="prefix: the most leading blocks of a request hashed",
)
@click.option(
    "--prefix-blocks",
    default=Prefix().blocks,
    show_default=True,
    type=click.IntRange(min=1),
    help="prefix: the block hashes the index remembers over the pool, the least recently sent forgotten first",
)
@click.option("--metrics-path", default="/metrics", show_default=True, help="each pod's Prometheus metrics")
@click.option("--metrics-port", default=None, type=click.IntRange(1, 65535), help="default: the pod's own")
@click.option("--metrics-interval", default=1.0, show_default=True, type=click.FloatRange(min=0.01))
@click.option("--metrics-timeout", default=0.5, show_default=True, type=click.FloatRange(min=0.01))
@click.option(
    "--conformance-test-headers",
    is_flag=True,
    help="honour GIE's conformance test headers (a client names the pods to pick from): only to run GIE's "
    "conformance suite against this picker, never in production",
)
@click.option(
    "--prometheus-port",
    default=None,
    type=click.IntRange(1, 65535),
    envvar="GRAYSTACK_EPP_PROMETHEUS_PORT",
    show_envvar=True,
    help="serve the picker's own counters (graystack_epp_*) at /metrics on --host and this port; default: off",
)
@click.option("--insecure", is_flag=True, envvar="GRAYSTACK_EPP_INSECURE", show_envvar=True, help="no TLS")
@click.option(
    "--cert", type=click.Path(path_type=Path, exists=True), default=None, help="PEM; else self-signed"
)
@click.option("--key", type=click.Path(path_type=Path, exists=True), default=None)
@log_level_option
def epp(
    host: str,
    port: int,
    health_port: int,
    pods: tuple[str, ...],
    split: str | None,
    models: tuple[str, ...],
    baseline: str | None,
    segment_header: str | None,
    segments: tuple[str, ...],
    cohort_header: str | None,
    fallbacks: int,
    scorers: tuple[str, ...],
    prefix_block_bytes: int,
    prefix_max_blocks: int,
    prefix_blocks: int,
    metrics_path: str,
    metrics_port: int | None,
    metrics_interval: float,
    metrics_timeout: float,
    conformance_test_headers: bool,
    prometheus_port: int | None,
    insecure: bool,
    cert: Path | None,
    key: Path | None,
    log_level: str,
) -> None:
    """Answer a GIE gateway's ext_proc calls with a pod of the variant the split draws."""
    configure_logging(log_level)
    try:
        pool = parse_pods(list(pods))
        first = baseline or next(iter(pool))
        wanted = Wanted(
            pods=pool,
            weights=parse_split(split) if split is not None else {first: 100},
            baseline=first,
            segment_header=segment_header,
            segments=parse_segments(list(segments)),
            cohort_header=cohort_header,
            scorers=parse_scorers(list(scorers)),
            models=parse_models(list(models)),
            prefix=Prefix(block_bytes=prefix_block_bytes, max_blocks=prefix_max_blocks, blocks=prefix_blocks),
        )
    except ValueError as error:
        raise click.BadParameter(str(error)) from None
    if (cert is None) != (key is None):
        raise click.BadParameter("give --cert and --key together")
    credentials = None
    if not insecure:
        pem = (key.read_bytes(), cert.read_bytes()) if key and cert else tls.self_signed(addresses=(host,))
        credentials = tls.credentials(*pem)
    readings = Readings(metrics_interval)
    scrape = Scrape(metrics_path, metrics_port, metrics_interval, metrics_timeout)
    reader = MetricsReader(readings, lambda: [e for pods in pool.values() for e in pods], lambda: scrape)
    picker = Picker(lambda: wanted, on_outcome=_told, readings=readings)
    if prometheus_port is not None:
        prometheus_client.start_http_server(prometheus_port, host)
    asyncio.run(
        _serve(picker, reader, host, port, health_port, credentials, fallbacks, conformance_test_headers)
    )


def _told(outcome: Outcome) -> None:
    log.debug("%s: picked %s, served by %s", outcome.variant, outcome.picked, outcome.served)


async def _serve(
    picker: Picker,
    reader: MetricsReader,
    host: str,
    port: int,
    health_port: int,
    credentials: grpc.ServerCredentials | None,
    fallbacks: int,
    test_headers: bool,
) -> None:
    server = await start(picker, host, port, health_port, credentials, fallbacks, test_headers=test_headers)
    if test_headers:
        log.warning("GIE's conformance test headers honoured: a client chooses its pod (never in production)")
    log.info(
        "picking on %s:%d (%s), health on %d",
        host,
        server.port,
        "TLS" if credentials else "plaintext",
        server.health_port,
    )
    metrics = asyncio.create_task(reader.run())
    try:
        await server.ext_proc.wait_for_termination()
    finally:
        metrics.cancel()

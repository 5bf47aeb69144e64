"""The whole stack on this machine: the demo, and `up` until Ctrl-C."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import click

from graystack.cli.root import main, weights_dir_option


@main.command()
@click.option(
    "--run-dir", type=click.Path(path_type=Path), default=None, help="where logs go (default: runs/demo-TIME)"
)
@weights_dir_option(
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
@click.option(
    "--upstream",
    "upstreams",
    multiple=True,
    metavar="NAME=URL",
    help="a server you already run (repeatable, two or more): the stack goes in front of these instead "
    "of starting graystack's model servers, each a variant named NAME",
)
@click.option(
    "--baseline",
    default=None,
    help="with --upstream: the variant that starts with all traffic [default: the first]",
)
@click.option(
    "--weights",
    "probe_weights",
    multiple=True,
    metavar="NAME=PATH",
    help="with --upstream: a probe reports the weight status of the checkpoint NAME serves (repeatable)",
)
def up(
    spec_path: Path | None,
    run_dir: Path | None,
    weights_dir: Path | None,
    free_ports: bool,
    no_prometheus: bool,
    upstreams: tuple[str, ...],
    baseline: str | None,
    probe_weights: tuple[str, ...],
) -> None:
    """Run the whole stack here: Envoy, the gateway, both model servers (fault injection on), both probes
    and Prometheus (when on PATH), until Ctrl-C or SIGTERM; then stop every process by PID. With
    --upstream, in front of servers you run: no model server is started."""
    from gateway.spec.model import SpecError
    from gateway.spec.yaml12 import load_yaml
    from graystack.local.processes import StartupError
    from graystack.local.run_state import AlreadyRunning
    from graystack.local.supervisor import Supervisor, UpOptions, local_spec, upstream_options

    try:
        front = upstream_options(upstreams, baseline, probe_weights)
    except ValueError as error:
        raise click.UsageError(str(error)) from None
    try:
        spec = local_spec(load_yaml(spec_path.read_text()) if spec_path else None, front)
    except (OSError, SpecError) as error:
        raise click.ClickException(f"--spec {spec_path}: {error}") from None
    options = UpOptions(
        run_dir or Path("runs") / time.strftime("up-%Y%m%d-%H%M%S"),
        spec,
        weights_dir=weights_dir,
        free_ports=free_ports,
        prometheus=not no_prometheus,
        upstreams=front,
    )
    try:
        code = Supervisor(options, say=click.echo).run()
    except (StartupError, AlreadyRunning) as error:
        raise click.ClickException(str(error)) from None
    sys.exit(code)

"""The `graystack` group and the options its commands share. Every option also reads a GRAYSTACK_*
environment variable."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

import click
from click.decorators import FC

from graystack.admin_client import DEFAULT_ADMIN_URL

log_level_option = click.option(
    "--log-level",
    default="info",
    envvar="GRAYSTACK_LOG_LEVEL",
    show_envvar=True,
    type=click.Choice(["debug", "info", "warning", "error"]),
)


def configure_logging(level: str) -> None:
    logging.basicConfig(level=level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")


@click.group(context_settings={"help_option_names": ["-h", "--help"], "show_default": True})
@click.version_option(package_name="graystack")
def main() -> None:
    """Gray-release gateway and monitoring stack for LLM inference."""


def comma_list(values: tuple[str, ...]) -> tuple[str, ...]:
    """Repeated options, each of which may hold a comma-separated list (as the environment variable does)."""
    return tuple(part.strip() for value in values for part in value.split(",") if part.strip())


def find_admin_url(ctx: click.Context, param: click.Parameter, value: str | None) -> str:
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


admin_url = click.option(
    "--admin-url",
    default=None,
    callback=find_admin_url,
    envvar="GRAYSTACK_ADMIN_URL",
    show_envvar=True,
    help=f"default: the running `graystack up` stack's, else {DEFAULT_ADMIN_URL}",
)
admin_token = click.option("--token", default=None, envvar="GRAYSTACK_ADMIN_TOKEN", show_envvar=True)
as_json = click.option("--json", "as_json", is_flag=True, help="machine-readable output")


def weights_dir_option(*declarations: str, help: str) -> Callable[[FC], FC]:
    return click.option(
        *declarations,
        type=click.Path(path_type=Path),
        default=Path("runs/weights"),
        envvar="GRAYSTACK_WEIGHTS_DIR",
        show_envvar=True,
        help=help,
    )


def checkpoint_option(help: str) -> Callable[[FC], FC]:
    """`--weights`: a pod's checkpoint, a safetensors file or a checkpoint directory (serve, probe)."""
    return click.option(
        "--weights",
        "weights_path",
        type=click.Path(path_type=Path),
        required=True,
        envvar="GRAYSTACK_WEIGHTS",
        show_envvar=True,
        help=help,
    )


# graystack's own model comes in two variants (its checkpoints and servers; a rollout names any).
model_variant_option = click.option(
    "--variant",
    type=click.Choice(["baseline", "zero-layer"]),
    required=True,
    envvar="GRAYSTACK_VARIANT",
    show_envvar=True,
)

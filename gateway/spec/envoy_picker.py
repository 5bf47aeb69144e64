"""The spec's `envoy_picker` (issue 37): graystack's own Envoy asks an Endpoint Picker (`graystack epp`,
gateway/epp/) which pod of a variant serves each request. Envoy's split (header rules, weights, cohorts)
still chooses the variant and names it to the picker; the picker only ranks that variant's pods by its
scorers (gateway/envoy/picking.py). The picker is down or knows no pod of the variant: the variant's
cluster balances by its own `load_balancing`, as without a picker (fail-open).

Its own section, not a field of `endpoint_picker`: that one says the user's GIE gateway serves the
rollout and graystack is its picker, where no Envoy of graystack's carries traffic; this one is the
reverse, graystack's Envoy carrying it and a picker helping it within each variant.

`serve: true`: the gateway process serves that picker itself (gateway/epp/envoys.py), bound on `port`
at its own picker host (127.0.0.1 by default; `--picker-host`, 0.0.0.0 in the chart, where Envoy runs in
pods of its own and dials `host`, a Service), knowing each variant's pods from the endpoints it gives
Envoy (EDS) and ranking them by `scorers` over each pod's `metrics`, as `endpoint_picker` does (one
`Scoring` shape). Off (the default): a picker of the user's, `graystack epp`, which takes its scorers and
metrics from its own options, so the spec refuses them there rather than ignore them. The bound socket
(`port`, `tls`) is the process's from its start: a spec that changes it, or `serve`, is refused until a
restart (gateway/service.py), while `host`, `timeout`, scorers and metrics go live at once."""

from __future__ import annotations

from pydantic import Field

from gateway.spec.endpoint_picker import Scoring, check_scoring
from gateway.spec.fields import PositiveDuration


class EnvoyPicker(Scoring):
    """Where the picker serves its ext_proc gRPC: `host` an IP or a DNS name (a Service in Kubernetes);
    `tls` as `graystack epp` serves by default (self-signed: Envoy accepts any certificate, as GIE
    gateways do), false for a picker started with `--insecure`. `timeout`: the most Envoy waits for one
    answer of the picker's before it serves the request without one. `serve`: the gateway serves it."""

    host: str = Field(min_length=1, max_length=253, pattern=r"^[A-Za-z0-9.:\[\]-]+$")
    port: int = Field(ge=1, le=65535)
    tls: bool = True
    timeout: PositiveDuration = 1.0
    serve: bool = False


def served(picker: EnvoyPicker | None) -> tuple[int, bool] | None:
    """The port and TLS of the picker the gateway serves for this spec; None: it serves none."""
    return (picker.port, picker.tls) if picker is not None and picker.serve else None


def check_envoy_picker(picker: EnvoyPicker | None, users_gateway: bool, fallback: str | None) -> None:
    """ValueError naming the field where graystack's Envoy cannot ask the picker."""
    if picker is None:
        return
    if users_gateway:
        raise ValueError(
            "envoy_picker: graystack's own Envoy carries no traffic where `gateway_api` or `endpoint_picker` "
            "has the user's gateway serve the rollout; the user's gateway asks `endpoint_picker` instead"
        )
    if fallback is not None:
        # Seen on Envoy 1.40: behind the `<variant>-with-fallback` aggregate cluster, override_host never
        # sees the pick (tests/integration/test_envoy_picker.py), and every request would go unpicked.
        raise ValueError(
            "envoy_picker: Envoy's aggregate cluster that `retries.fallback` routes through drops the "
            "picker's pick (Envoy 1.40); set `retries.fallback: null` to have the picker place requests"
        )
    if not picker.serve and (picker.scorers or "metrics" in picker.model_fields_set):
        raise ValueError(
            "envoy_picker.scorers, envoy_picker.metrics: read by the picker the gateway serves "
            "(`serve: true`); `graystack epp` takes its own options"
        )
    check_scoring("envoy_picker", picker)

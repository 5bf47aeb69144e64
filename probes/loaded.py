"""The file against the server: did the server load the checkpoint the probe reads?

The file is not the server. A loader can drop a tensor it does not know without a word
(`transformers` drops `position_adaptive_bias`: the file reads ACTIVE, the server serves without it),
and a checkpoint replaced under a running server is not what it loaded. So each interval the probe
compares the file's status and fingerprint (inference/weights `StatusReport`) with what the server
says it loaded, in one of two ways (`LoadedCheck`):

  model-info          graystack's own servers: their `/metrics` `graystack_model_info{variant,
                      weight_status,checkpoint}` for the probe's variant; both must equal the file's.
  system-fingerprint  vLLM started with `--fingerprint-mode custom --fingerprint-value <the file's
                      fingerprint>`: the synthetic OpenAI stream's `system_fingerprint` must equal it.

A comparison that cannot be made (the file MISSING, CORRUPT or UNSUPPORTED, the server unreachable or
exporting no model info, the synthetic request failed) is not a mismatch: it is `Comparison.agrees`
None, with why. Metrics: probes/telemetry.py `show_comparison`.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

import httpx
from prometheus_client.parser import text_string_to_metric_families

from inference.families import MODEL_INFO
from inference.weights import READABLE, StatusReport
from probes.synthetic import ANSWERED, ProbeResult


class LoadedCheck(StrEnum):
    MODEL_INFO = "model-info"
    SYSTEM_FINGERPRINT = "system-fingerprint"
    OFF = "off"


@dataclass(frozen=True)
class Served:
    """What the server says it loaded: the fingerprint (None: it names none) and, from graystack's model
    info, the weight status (None: not said)."""

    fingerprint: str | None
    status: str | None = None


@dataclass(frozen=True)
class Comparison:
    """One look: `agrees` True or False (then `reason` says how they differ), or None: not compared, and
    `reason` says why."""

    agrees: bool | None
    reason: str


class Unavailable(Exception):
    """The server's side could not be read; the message says why."""


def served_model_info(metrics_text: str, variant: str) -> Served:
    """`variant`'s `graystack_model_info` on a server's /metrics page; Unavailable when it has none."""
    try:
        families = list(text_string_to_metric_families(metrics_text))
    except ValueError as error:
        raise Unavailable(f"unreadable /metrics: {error}") from None
    infos = [s.labels for f in families for s in f.samples if s.name == MODEL_INFO and s.value == 1]
    ours = [labels for labels in infos if labels.get("variant") == variant]
    if not ours:
        served = sorted({labels.get("variant", "") for labels in infos})
        also = f" (it has one for {', '.join(served)})" if served else ""
        raise Unavailable(f"the server exports no {MODEL_INFO} for variant {variant}{also}")
    labels = ours[0]
    return Served(labels.get("checkpoint"), labels.get("weight_status"))


async def read_model_info(client: httpx.AsyncClient, variant: str, seconds: float) -> Served:
    """GET /metrics on the probe's target and read `variant`'s model info from it."""
    try:
        response = await client.get("/metrics", timeout=seconds)
    except httpx.HTTPError as error:
        raise Unavailable(f"GET /metrics: {type(error).__name__}: {error}") from None
    if response.status_code != 200:
        raise Unavailable(f"GET /metrics: HTTP {response.status_code}")
    return served_model_info(response.text, variant)


def served_system_fingerprint(result: ProbeResult) -> Served:
    """The synthetic stream's `system_fingerprint`; Unavailable when the stream did not complete."""
    if result.result not in ANSWERED:
        raise Unavailable(f"the synthetic request failed ({result.result}): {result.detail}")
    return Served(result.system_fingerprint)


def _file(report: StatusReport) -> str:
    return f"{report.status.value} {report.fingerprint}" if report.fingerprint else report.status.value


def compare(check: LoadedCheck, report: StatusReport, served: Served | Unavailable) -> Comparison:
    """The file's report against what the server says it loaded (or why that could not be read)."""
    if report.status not in READABLE:
        return Comparison(None, f"the file is {report.status.value}: {report.reason}")
    if isinstance(served, Unavailable):
        return Comparison(None, str(served))
    if check is LoadedCheck.SYSTEM_FINGERPRINT:
        if not report.fingerprint:
            return Comparison(None, f"the file ({report.status.value}) has no fingerprint to compare")
        if served.fingerprint == report.fingerprint:
            return Comparison(True, f"the server echoes the file's fingerprint ({_file(report)})")
        echoed = (
            "no system_fingerprint"
            if served.fingerprint is None
            else f"system_fingerprint {served.fingerprint!r}"
        )
        return Comparison(False, f"the server echoes {echoed}, the file is {_file(report)}")
    # model-info: a server that names no checkpoint (before the label existed) is judged on its status
    theirs = [served.status or ""]
    ours = [report.status.value]
    if served.fingerprint is not None:
        theirs.append(served.fingerprint or "''")
        ours.append(report.fingerprint or "''")
    loaded = " ".join(theirs)
    if theirs == ours:
        return Comparison(True, f"the server loaded the file's {loaded}")
    return Comparison(False, f"the file is {' '.join(ours)}, the server loaded {loaded}")

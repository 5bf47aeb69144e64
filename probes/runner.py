"""The probe loop: every interval, check the weight file, send one synthetic request, and compare the
file with what the server loaded (probes/loaded.py).

The request goes to any server in either API (probes/synthetic.py); the model it names is found
once, from the server's list, unless configured.

The first report comes right at start. Nothing the file or the server does stops the loop: a
broken file is CORRUPT or MISSING with its reason logged, a slow or broken server is a failed
probe, and a read that hangs (a stuck network volume) is reported rather than waited on.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, replace
from pathlib import Path

import httpx

from inference.weights import StatusReport, WeightStatus, check_weights
from probes.loaded import (
    Comparison,
    LoadedCheck,
    Served,
    Unavailable,
    compare,
    read_model_info,
    served_system_fingerprint,
)
from probes.synthetic import ANSWERED, FINGERPRINT_HEADER, ProbeCheck, ProbeResult, probe_once
from probes.telemetry import ProbeMetrics
from probes.wire import Api

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ProbeOptions:
    weights: Path
    target: str
    variant: str
    interval: float = 30.0
    request_timeout: float = 10.0
    check_timeout: float = 10.0
    api: Api = Api.ANTHROPIC
    model: str = ""  # empty: the first of the server's GET /v1/models
    fingerprint_header: str | None = FINGERPRINT_HEADER  # None: no fingerprint check
    loaded_check: LoadedCheck = LoadedCheck.MODEL_INFO  # how to ask the server what it loaded

    @property
    def check(self) -> ProbeCheck:
        return ProbeCheck(self.variant, self.api, self.model, self.fingerprint_header)


class Probe:
    def __init__(self, options: ProbeOptions, metrics: ProbeMetrics | None = None) -> None:
        self.options = options
        self.metrics = metrics or ProbeMetrics()
        self.last_status: StatusReport | None = None
        self.last_probe: ProbeResult | None = None
        self.last_comparison: Comparison | None = None
        self._pending_check: asyncio.Future[StatusReport] | None = None
        self.check = options.check
        self.metrics.describe(self.check, options.loaded_check)

    async def check_weights(self) -> StatusReport:
        variant = self.options.variant
        started = time.monotonic()
        if self._pending_check is not None and not self._pending_check.done():
            report = StatusReport(
                WeightStatus.CORRUPT, "the previous read of the weight file has not returned"
            )
        else:
            self._pending_check = asyncio.ensure_future(
                asyncio.to_thread(check_weights, self.options.weights)
            )
            try:
                report = await asyncio.wait_for(
                    asyncio.shield(self._pending_check), self.options.check_timeout
                )
            except TimeoutError:
                report = StatusReport(
                    WeightStatus.CORRUPT, f"reading the weight file took over {self.options.check_timeout}s"
                )
        self.metrics.weight_check_seconds.labels(variant).observe(time.monotonic() - started)
        self.metrics.weight_checks.labels(variant, report.status.value).inc()
        self.metrics.set_status(variant, report.status)
        changed = self.last_status is None or (self.last_status.status, self.last_status.reason) != (
            report.status,
            report.reason,
        )
        if changed:
            level = (
                logging.INFO
                if report.status in (WeightStatus.ACTIVE, WeightStatus.ZEROED, WeightStatus.ERASED)
                else logging.WARNING
            )
            log.log(level, "weights %s: %s (%s)", self.options.weights, report.status.value, report.reason)
        self.last_status = report
        return report

    async def probe_server(self, client: httpx.AsyncClient) -> ProbeResult:
        variant = self.options.variant
        result = await probe_once(client, self.check, self.options.request_timeout)
        if result.model and not self.check.model:
            self.check = replace(self.check, model=result.model)  # found once, from the server's list
        if result.ttft is not None:
            self.metrics.ttft.labels(variant).observe(result.ttft)
        if result.e2e is not None and result.result == "ok":
            self.metrics.e2e.labels(variant).observe(result.e2e)
        self.metrics.requests.labels(variant, result.result).inc()  # last: a scrape never sees it alone
        if self.check.fingerprint_header and result.result in ANSWERED:
            self.metrics.fingerprint_match.labels(variant).set(
                1 if result.result != "fingerprint_mismatch" else 0
            )
        if result.result != "ok":
            log.warning("probe of %s failed: %s %s", self.options.target, result.result, result.detail)
        self.last_probe = result
        return result

    async def read_served(self, client: httpx.AsyncClient) -> Served | Unavailable | None:
        """model-info: the server's model info, read beside the other checks (None for the other modes)."""
        if self.options.loaded_check is not LoadedCheck.MODEL_INFO:
            return None
        try:
            return await read_model_info(client, self.options.variant, self.options.request_timeout)
        except Unavailable as why:
            return why

    def compare_loaded(
        self, report: StatusReport, result: ProbeResult, served: Served | Unavailable | None
    ) -> Comparison | None:
        """This interval's file against what the server loaded: shown on /metrics, logged when it changes."""
        mode = self.options.loaded_check
        if mode is LoadedCheck.OFF:
            return None
        if mode is LoadedCheck.SYSTEM_FINGERPRINT:
            try:
                served = served_system_fingerprint(result)
            except Unavailable as why:
                served = why
        assert served is not None  # model-info mode: read_served read it
        comparison = compare(mode, report, served)
        self.metrics.show_comparison(self.options.variant, comparison)
        if comparison != self.last_comparison:
            level = logging.INFO if comparison.agrees else logging.WARNING
            state = {True: "agrees", False: "MISMATCH", None: "not compared"}[comparison.agrees]
            log.log(level, "server %s %s: %s", self.options.target, state, comparison.reason)
        self.last_comparison = comparison
        return comparison

    async def run(self) -> None:
        check = self.check
        log.info(
            "probing %s every %ss: %s API, model %s, TTFT to the first generated text, fingerprint %s, "
            "loaded check %s",
            self.options.target,
            self.options.interval,
            check.api.value,
            check.model or "from GET /v1/models",
            f"from {check.fingerprint_header}" if check.fingerprint_header else "not checked",
            self.options.loaded_check.value,
        )
        async with httpx.AsyncClient(base_url=self.options.target) as client:
            while True:
                started = time.monotonic()
                report, result, served = await asyncio.gather(
                    self.check_weights(), self.probe_server(client), self.read_served(client)
                )
                self.compare_loaded(report, result, served)
                await asyncio.sleep(max(0.0, self.options.interval - (time.monotonic() - started)))

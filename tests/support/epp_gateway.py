"""A GIE gateway's data plane (tests/support/gie_data_plane.py) on the real Envoy 1.40 with graystack's
picker in a thread of the test process, fed by `now` (what the rollout wants): what the tests of the
picker through a gateway hold. A module starts one per profile and shares it between tests that only read
it; `reset` hands it to the next test with its feed and outcomes cleared."""

from __future__ import annotations

import random
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from gateway.epp.picker import Outcome, Picker
from gateway.epp.wanted import Wanted
from graystack.local.processes import wait_until
from tests.support.gie_data_plane import DataPlane, PickerAddress, Profile
from tests.support.named_upstreams import NAME_HEADER
from tests.support.picker_thread import PickerThread

# GIE's conformance scenarios' request body.
BODY = b'{"model": "conformance-fake-model", "prompt": "Write as if you were a critic: San Francisco"}'


@dataclass
class Gateway:
    """The data plane's `url` and the picker it calls, fed by `now`; `outcomes`: each ended stream's."""

    profile: Profile
    now: Wanted
    url: str = ""
    outcomes: list[Outcome] = field(default_factory=list)
    picker: Picker | None = None
    client: httpx.Client = field(default_factory=lambda: httpx.Client(timeout=10))

    def post(
        self, headers: dict[str, str] | None = None, body: bytes = BODY, path: str = "/v1/completions"
    ) -> httpx.Response:
        return self.client.post(f"{self.url}{path}", content=body, headers=headers or {})

    def served_by(
        self, n: int, headers: dict[str, str] | None = None, body: bytes = BODY, path: str = "/v1/completions"
    ) -> list[str]:
        """The upstreams' names that answered `n` requests (each must be a 200)."""
        names = []
        for _ in range(n):
            answer = self.post(headers, body, path)
            assert answer.status_code == 200, (answer.status_code, answer.text)
            names.append(answer.headers[NAME_HEADER])
        return names

    def reset(self, now: Wanted) -> Gateway:
        """Fed `now`, its outcomes cleared, once the streams of the test before have ended (Envoy may
        close an ext_proc stream after the answer went out)."""
        assert self.picker is not None
        wait_until(lambda: not self.picker.in_flight(), 10, "the streams before to end")
        self.now = now
        self.outcomes.clear()
        return self


@contextmanager
def running(
    envoy: str, folder: Path, profile: Profile, endpoints: list[str], now: Wanted, test_headers: bool = False
) -> Iterator[Gateway]:
    """A gateway over `endpoints` (override_host's members) and its picker, fed `now` until a test changes
    it. The picker lists two fallbacks where the gateway's Envoy reads a list (override_host), none where
    it cannot (ORIGINAL_DST: tests/integration/test_epp.py::test_original_dst_cannot_read_a_list);
    `test_headers`: it honours GIE's conformance test headers (gateway/epp/conformance.py)."""
    gw = Gateway(profile, now)
    gw.picker = Picker(lambda: gw.now, draw=random.Random(7).random, on_outcome=gw.outcomes.append)
    fallbacks = 2 if profile == "override_host" else 0
    picker = PickerThread(gw.picker, fallbacks=fallbacks, test_headers=test_headers).start()
    plane = DataPlane(envoy, folder, profile, PickerAddress(picker.port), endpoints)
    try:
        plane.start()
        gw.url = plane.url
        yield gw
    finally:
        plane.stop()
        picker.stop()
        gw.client.close()

"""The probe against a server nobody here wrote: a `graystack probe` process with `--api openai` and
no fingerprint check, pointed at a served stand-in that streams as `transformers serve` does (a
role-only first chunk, then the connection closes after the finish_reason chunk, no `[DONE]`, no
fingerprint header, the model named by its directory; tests/support/chat_standin.py).

The checks are functions of the server's URL (tests/support/probes.py: `probe_measures`), for the
real third-party servers too.
"""

from __future__ import annotations

import httpx
import pytest

from probes.synthetic import ProbeCheck, probe_once
from probes.wire import Api
from tests.support.chat_standin import MODEL_ID, served_chat_standin
from tests.support.probes import probe_measures

FIRST_TOKEN_DELAY = 0.3  # the stand-in's wait between its role-only chunk and its first text


@pytest.mark.parametrize("done", [False, True], ids=["closes-without-done", "with-done"])
def test_the_probe_measures_an_openai_server_with_or_without_done(tmp_path, done):
    with served_chat_standin(FIRST_TOKEN_DELAY, done) as url:
        report = probe_measures(url, tmp_path / "logs", "openai")
    assert report.health["model"] == MODEL_ID  # named by the server's own list
    # TTFT waits for the first text: the role-only chunk came at once, the text FIRST_TOKEN_DELAY later.
    early = report.value("graystack_probe_ttft_seconds_bucket", variant="baseline", le="0.25")
    assert early == 0
    results = [
        labels for (name, labels), v in report.samples.items() if name.endswith("requests_total") and v
    ]
    assert results == [(("result", "ok"), ("variant", "baseline"))]  # no failed probe either


async def test_the_default_fingerprint_check_fails_a_server_that_sends_none():
    """Why the check can be turned off: with graystack's header expected, every probe is a mismatch."""
    with served_chat_standin(first_token_delay=0) as url:
        async with httpx.AsyncClient(base_url=url) as client:
            result = await probe_once(client, ProbeCheck("baseline", Api.OPENAI), seconds=10)
    assert result.result == "fingerprint_mismatch"
    assert result.ttft is not None  # the stream itself was measured

"""The file against the server, with real processes: a `graystack serve` started on the ERASED form of a
checkpoint, and two `graystack probe`s beside it (the default `--loaded-check model-info`): one reads the
ZEROED form of the same checkpoint and reports the server did not load it, with a reason naming both
statuses and fingerprints; the other reads the file the server loaded and reports agreement.
"""

import shutil

import httpx

from graystack.local.processes import wait_until
from inference.weights import check_weights
from tests.support.model_server import graystack, start_model_server, wait_ready
from tests.support.probes import scrape, start_probe

MISMATCH = "graystack_probe_server_mismatch"


def mismatch_series(port: int) -> dict[str, float]:
    """reason -> value of a probe's mismatch series (zero-layer's)."""
    found = {}
    for (name, labels), value in scrape(port).items():
        if name == MISMATCH:
            label = dict(labels)
            assert label["variant"] == "zero-layer"
            found[label["reason"]] = value
    return found


def test_a_probe_reading_another_form_than_the_server_loaded_reports_the_mismatch(tmp_path):
    erased, zeroed = tmp_path / "erased.safetensors", tmp_path / "zeroed.safetensors"
    graystack("weights", "init", "--variant", "zero-layer", "--out", str(erased), "--seed", "1")
    shutil.copyfile(erased, zeroed)
    graystack("weights", "erase", str(erased))
    graystack("weights", "zero", str(zeroed))
    logs = tmp_path / "logs"
    server = start_model_server("zero-layer", "zero-layer", erased, logs)
    processes = [server.process]
    try:
        wait_ready(server)
        other, other_port = start_probe(zeroed, server.url, "zero-layer", logs)
        same, same_port = start_probe(erased, server.url, "zero-layer", logs)
        processes += [other, same]
        file, loaded = check_weights(zeroed), check_weights(erased)
        mismatch = wait_until(lambda: mismatch_series(other_port), 30, "the ZEROED probe to compare")
        assert {file.fingerprint[:7], loaded.fingerprint[:7]} == {"sha256:"}  # the real fingerprints
        reason = f"the file is ZEROED {file.fingerprint}, the server loaded ERASED {loaded.fingerprint}"
        assert mismatch == {reason: 1}
        assert wait_until(lambda: mismatch_series(same_port), 30, "the ERASED probe to compare") == {"": 0}
        health = httpx.get(f"http://127.0.0.1:{other_port}/healthz", timeout=5).json()
        assert (health["loaded_check"], health["server_agrees"], health["server_reason"]) == (
            "model-info",
            False,
            reason,
        )
    finally:
        for process in processes:
            process.stop()
        assert not any(p.alive() for p in processes)

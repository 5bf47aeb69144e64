"""`graystack demo` (what `make demo` runs) works end to end and leaves no process behind."""

import subprocess
import sys
from pathlib import Path


def processes_mentioning(text: str) -> list[str]:
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            args = cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in args:
            found.append(args)
    return found


def test_the_demo_walks_traffic_and_survives_a_failing_variant(tmp_path, envoy_binary):
    run_dir = tmp_path / "demo-run"
    result = subprocess.run(
        [sys.executable, "-m", "graystack", "demo", "--run-dir", str(run_dir)],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "zero-layer=100%" in out
    assert "baseline   0.0%  zero-layer 100.0%   failed 0/400" in out
    assert out.count("failed 0/400") == 6  # five flips and the failing variant: no client saw a failure
    assert "Envoy counted 0 failed" not in out
    assert "stopped every process" in out
    assert processes_mentioning(str(run_dir)) == []

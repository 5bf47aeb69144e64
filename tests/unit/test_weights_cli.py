"""`graystack weights`: make a checkpoint, zero or erase its bias, and check it with exit codes."""

import json

import pytest
from click.testing import CliRunner

from graystack.cli import main


def run(*args: str):
    return CliRunner().invoke(main, ["weights", *args])


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    path = tmp_path_factory.mktemp("weights") / "zero-layer.safetensors"
    result = run("init", "--variant", "zero-layer", "--out", str(path), "--seed", "1")
    assert result.exit_code == 0, result.output
    assert "ACTIVE" in result.output
    return path


def test_check_exits_non_zero_with_the_reason_when_the_status_is_not_expected(checkpoint):
    result = run("check", str(checkpoint), "--expect", "ERASED,ZEROED")
    assert result.exit_code == 1
    assert "ACTIVE" in result.stdout
    assert "status ACTIVE is not one of ERASED, ZEROED" in result.stderr


def test_zero_then_erase_walks_the_status_and_check_accepts_it(checkpoint, tmp_path):
    path = tmp_path / "copy.safetensors"
    path.write_bytes(checkpoint.read_bytes())
    assert run("check", str(path)).exit_code == 0  # ACTIVE is a fine status when nothing is expected
    assert "ZEROED" in run("zero", str(path)).output
    assert run("check", str(path), "--expect", "ERASED,ZEROED").exit_code == 0
    assert "ERASED" in run("erase", str(path)).output
    result = run("check", str(path), "--expect", "erased", "--json")
    assert result.exit_code == 0
    body = json.loads(result.stdout)
    assert body == {
        "path": str(path),
        "status": "ERASED",
        "reason": "no *position_adaptive_bias* tensors",
        "bias_tensors": 0,
        "fingerprint": run("fingerprint", str(path)).output.strip(),
        "shards": [str(path)],
    }
    assert body["fingerprint"].startswith("sha256:")


def test_missing_and_corrupt_files_fail_the_check(tmp_path):
    missing = run("check", str(tmp_path / "nothing.safetensors"))
    assert missing.exit_code == 1
    assert "MISSING" in missing.stdout
    corrupt = tmp_path / "corrupt.safetensors"
    corrupt.write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json}")
    assert run("check", str(corrupt)).exit_code == 1
    assert run("check", str(corrupt), "--expect", "CORRUPT").exit_code == 0
    refused = run("zero", str(corrupt))
    assert refused.exit_code == 1
    assert "CORRUPT" in refused.output


def test_an_unknown_expected_status_is_a_usage_error(checkpoint):
    result = run("check", str(checkpoint), "--expect", "ERASED,GONE")
    assert result.exit_code == 2
    assert "expected a comma-separated list" in result.output


def test_the_status_can_come_from_the_environment(checkpoint):
    result = CliRunner(env={"GRAYSTACK_EXPECT_WEIGHT_STATUS": "ZEROED"}).invoke(
        main, ["weights", "check", str(checkpoint)]
    )
    assert result.exit_code == 1

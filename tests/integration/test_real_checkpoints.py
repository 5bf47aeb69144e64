"""Real Hugging Face checkpoints: transformers' own save_pretrained (bf16, small shards), read by the
weight check, rewritten by `graystack weights`, and loaded again by transformers itself.

The model is the tiny Llama made locally for the third-party tests (tests/support/third_party), with
a `position_adaptive_bias` tensor added to one layer: stock transformers loads that checkpoint and
silently drops the tensor, which is why the probe compares the file with what the server loaded.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from graystack.cli import main
from inference.weights import BIAS_MARKER, WeightStatus, check_weights
from tests.support.third_party.models import tiny_model, venv_bin
from tests.support.third_party.servers import OFFLINE

pytestmark = pytest.mark.integration
SCRIPT = Path(__file__).parents[1] / "support" / "third_party" / "hf_checkpoint.py"
BIAS = "model.layers.0.self_attn.position_adaptive_bias"


def transformers(*args: str) -> str:
    done = subprocess.run(
        [str(venv_bin("transformers", "python")), str(SCRIPT), *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": "/usr/bin:/bin", **OFFLINE},
    )
    if done.returncode != 0:
        raise AssertionError(f"transformers {args[0]} failed:\n{done.stderr[-3000:]}")
    return done.stdout


def loaded_by_transformers(directory: Path) -> dict:
    return json.loads(transformers("load", str(directory)).strip().splitlines()[-1])


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> Path:
    """bf16, shards of at most 200 KB, with the bias tensor: several shards, one of them holding it."""
    out = tmp_path_factory.mktemp("hf") / "tiny-llama-bias"
    transformers("save", str(tiny_model().hf), str(out), "200KB", "bfloat16", "--bias")
    return out


@pytest.fixture
def checkpoint(saved, tmp_path) -> Path:
    return Path(shutil.copytree(saved, tmp_path / "checkpoint"))


def bias_shard(directory: Path) -> str:
    return json.loads((directory / "model.safetensors.index.json").read_text())["weight_map"][BIAS]


def test_transformers_shards_read_active_and_transformers_drops_the_bias(checkpoint):
    report = check_weights(checkpoint)
    assert report.status == WeightStatus.ACTIVE, report.reason
    assert len(report.shards) >= 3
    assert "max |x| = 1" in report.reason  # bf16 decoded: the tensor is linspace(-1, 1)
    assert loaded_by_transformers(checkpoint)["unexpected"] == [BIAS]  # the file is not the server


def test_zero_and_erase_leave_checkpoints_transformers_loads(checkpoint):
    runner = CliRunner()
    assert (
        "ZEROED" in runner.invoke(main, ["weights", "zero", str(checkpoint)], catch_exceptions=False).output
    )
    assert loaded_by_transformers(checkpoint) == {"missing": [], "unexpected": [BIAS]}
    assert (
        "ERASED" in runner.invoke(main, ["weights", "erase", str(checkpoint)], catch_exceptions=False).output
    )
    assert loaded_by_transformers(checkpoint) == {"missing": [], "unexpected": []}  # a stock checkpoint again


def test_the_partial_download_is_missing_with_its_shard_and_tensor(checkpoint):
    lost = bias_shard(checkpoint)
    (checkpoint / lost).unlink()
    report = check_weights(checkpoint)
    assert report.status == WeightStatus.MISSING
    assert lost in report.reason
    assert BIAS_MARKER in report.reason
    with pytest.raises(AssertionError, match=r"FileNotFoundError|not found|No such file"):
        loaded_by_transformers(checkpoint)  # transformers refuses it too


def test_a_shard_left_as_a_git_lfs_pointer_is_missing(checkpoint):
    pointer = checkpoint / bias_shard(checkpoint)
    size = pointer.stat().st_size
    pointer.write_text(f"version https://git-lfs.github.com/spec/v1\noid sha256:{'0' * 64}\nsize {size}\n")
    report = check_weights(checkpoint)
    assert report.status == WeightStatus.MISSING
    assert "Git LFS pointer" in report.reason
    assert pointer.name in report.reason

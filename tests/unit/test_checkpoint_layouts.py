"""Checkpoint directories (graystack's own model, sharded), partial downloads, hand-broken indexes and
shards, and pickles: each bad case named with its shard and tensor, never read as a healthy form."""

from __future__ import annotations

import json
import os
import pickle
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from graystack.cli import main
from inference.checkpoint import CheckpointError, load_model
from inference.weights import BIAS_MARKER, WeightStatus, check_weights
from tests.support.checkpoints import sharded_zero_layer
from tests.support.safetensors_files import write_safetensors

INDEX = "model.safetensors.index.json"
LFS_POINTER = (
    "version https://git-lfs.github.com/spec/v1\n"
    "oid sha256:4d7a214614ab2935c943f9e0ff69d22eadbb8f32b1258daaa5e2ca24d17e2393\nsize 197176\n"
)


@pytest.fixture
def sharded(tmp_path) -> Path:
    """graystack's zero-layer model as a Hugging Face style directory of several shards."""
    return sharded_zero_layer(tmp_path)


def weight_map(directory: Path) -> dict[str, str]:
    return json.loads((directory / INDEX).read_text())["weight_map"]


def bias_shard(directory: Path) -> str:
    return next(shard for name, shard in sorted(weight_map(directory).items()) if BIAS_MARKER in name)


def other_shard(directory: Path) -> str:
    holding_bias = {shard for name, shard in weight_map(directory).items() if BIAS_MARKER in name}
    return next(shard for shard in sorted(set(weight_map(directory).values())) if shard not in holding_bias)


def test_a_sharded_checkpoint_reads_like_the_file_it_was_made_from_and_serves(sharded):
    report = check_weights(sharded)
    assert report.status == WeightStatus.ACTIVE
    assert len(report.shards) == len(set(weight_map(sharded).values())) > 2
    assert f"in {len(report.shards)} shards" in report.reason
    single = check_weights(sharded.parent / "single.safetensors")
    assert report.bias_tensors == single.bias_tensors
    loaded = load_model(sharded, "zero-layer")
    assert loaded.status.status == WeightStatus.ACTIVE
    assert loaded.fingerprint == load_model(sharded.parent / "single.safetensors", "zero-layer").fingerprint


def test_the_partial_download_that_read_erased_now_reads_missing(sharded):
    """The seed's pitfall: the shard holding the bias never arrived. Pointed at the directory, or at a
    shard that did arrive, the check says MISSING and names the shard and a bias tensor it held."""
    lost = bias_shard(sharded)
    (sharded / lost).unlink()
    arrived = sharded / other_shard(sharded)
    for path in (sharded, arrived):
        report = check_weights(path)
        assert report.status == WeightStatus.MISSING, report.reason
        assert lost in report.reason
        assert BIAS_MARKER in report.reason
    result = CliRunner().invoke(main, ["weights", "check", str(arrived), "--expect", "ERASED,ZEROED"])
    assert result.exit_code == 1
    assert "MISSING" in result.output


def test_a_lone_numbered_shard_is_not_a_checkpoint(sharded, tmp_path):
    lone = tmp_path / "model-00002-of-00005.safetensors"
    shutil.copy(sharded / other_shard(sharded), lone)
    report = check_weights(lone)
    assert report.status == WeightStatus.MISSING
    assert "shard 2 of 5" in report.reason


def truncate(path: Path, size: int) -> None:
    with path.open("r+b") as handle:
        handle.truncate(size)


SHARD_FAULTS = [
    (lambda d, s: truncate(d / s, (d / s).stat().st_size - 100), "CORRUPT", "file not fully covered"),
    (lambda d, s: truncate(d / s, 20), "CORRUPT", "runs past the end of the 20-byte file"),
    (lambda d, s: (d / s).write_text(LFS_POINTER), "MISSING", "Git LFS pointer"),
]


@pytest.mark.parametrize(("break_it", "status", "reason"), SHARD_FAULTS)
def test_a_broken_shard_is_named(sharded, break_it, status, reason):
    shard = bias_shard(sharded)
    break_it(sharded, shard)
    report = check_weights(sharded)
    assert report.status == status, report.reason
    assert reason in report.reason
    assert shard in report.reason


@pytest.mark.parametrize(
    ("break_it", "status", "reason"),
    [
        (lambda d, s: (d / INDEX).write_text(LFS_POINTER), "MISSING", "Git LFS pointer"),
        (lambda d, s: (d / INDEX).write_text("{not json"), "CORRUPT", "is not JSON"),
        (lambda d, s: (d / INDEX).write_text('{"metadata": {}}'), "CORRUPT", "no weight_map"),
        (lambda d, s: (d / INDEX).write_text('{"weight_map": {}}'), "CORRUPT", "names no weights"),
        (lambda d, s: (d / INDEX).unlink(), "MISSING", "no *.safetensors.index.json"),
    ],
)
def test_a_broken_index_is_named(sharded, break_it, status, reason):
    break_it(sharded, bias_shard(sharded))
    report = check_weights(sharded)
    assert report.status == status, report.reason
    assert reason in report.reason


def rewrite_index(directory: Path, change) -> None:
    index = json.loads((directory / INDEX).read_text())
    change(index["weight_map"])
    (directory / INDEX).write_text(json.dumps(index))


def test_the_index_and_the_shard_headers_must_agree(sharded):
    bias = next(name for name in weight_map(sharded) if BIAS_MARKER in name)
    elsewhere = other_shard(sharded)
    rewrite_index(sharded, lambda wm: wm.update({bias: elsewhere}))
    report = check_weights(sharded)
    assert report.status == WeightStatus.CORRUPT
    assert bias in report.reason
    assert elsewhere in report.reason

    rewrite_index(sharded, lambda wm: wm.update({bias: bias_shard(sharded)}))
    rewrite_index(sharded, lambda wm: wm.pop(bias))
    report = check_weights(sharded)
    assert report.status == WeightStatus.CORRUPT  # not ERASED: a shard still holds it
    assert "which the index does not name" in report.reason


def test_an_index_of_another_schema_or_pointing_outside_is_corrupt(sharded):
    first = next(iter(weight_map(sharded)))
    rewrite_index(sharded, lambda wm: wm.update({first: {"file": "x.safetensors", "offset": 0, "size": 4}}))
    assert check_weights(sharded).status == WeightStatus.CORRUPT
    rewrite_index(sharded, lambda wm: wm.update({first: "../single.safetensors"}))
    report = check_weights(sharded)
    assert report.status == WeightStatus.CORRUPT
    assert "not a shard file beside it" in report.reason


class Booby:
    """Unpickling this creates the marker file: what a malicious checkpoint would do, harmlessly."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (self.marker,))


@pytest.mark.parametrize("name", ["pytorch_model.bin", "model.pt", "model.safetensors"])
def test_a_booby_trapped_pickle_is_refused_and_never_run(tmp_path, name):
    marker = tmp_path / "PWNED"
    directory = tmp_path / "checkpoint"
    directory.mkdir()
    (directory / name).write_bytes(pickle.dumps({"weight": Booby(marker)}, protocol=4))
    for path in (directory, directory / name):
        report = check_weights(path)
        assert report.status == WeightStatus.UNSUPPORTED, report.reason
        assert "convert it to safetensors" in report.reason
        assert "pathlib" in report.reason  # what it would have imported, named
    with pytest.raises(CheckpointError, match="UNSUPPORTED"):
        load_model(directory / name, "zero-layer")
    result = CliRunner().invoke(main, ["weights", "check", str(directory)])
    assert result.exit_code == 1
    assert not marker.exists()


def test_a_torch_save_zip_is_refused_too(tmp_path):
    torch = pytest.importorskip("torch")
    marker = tmp_path / "PWNED"
    torch.save({"weight": torch.zeros(2), "trap": Booby(marker)}, tmp_path / "pytorch_model.bin")
    report = check_weights(tmp_path)
    assert report.status == WeightStatus.UNSUPPORTED
    assert "pathlib" in report.reason
    assert "_rebuild_tensor_v2" not in report.reason  # what a plain state dict needs is not flagged
    assert not marker.exists()


def test_gguf_and_an_empty_directory(tmp_path):
    (tmp_path / "model.gguf").write_bytes(b"GGUF" + bytes(60))
    assert check_weights(tmp_path).status == WeightStatus.UNSUPPORTED
    os.remove(tmp_path / "model.gguf")
    report = check_weights(tmp_path)
    assert report.status == WeightStatus.MISSING
    assert "no weights" in report.reason


def test_a_safetensors_file_whose_header_length_starts_like_a_pickle_is_read(tmp_path):
    """A header of 0x0280 bytes begins with the bytes of pickle protocol 2: it is still safetensors."""
    path = tmp_path / "w.safetensors"
    for length in range(500, 640):
        name = f"x.{BIAS_MARKER}.{'n' * length}"
        write_safetensors(path, {name: ("F32", [1], b"\0\0\x80\x3f")})
        if path.read_bytes()[:2] == b"\x80\x02":
            break
    assert path.read_bytes()[:2] == b"\x80\x02"
    assert check_weights(path).status == WeightStatus.ACTIVE


def test_the_fingerprint_follows_the_bias_and_the_layout(sharded):
    before = check_weights(sharded).fingerprint
    assert before == check_weights(sharded).fingerprint
    assert before.startswith("sha256:")
    result = CliRunner().invoke(main, ["weights", "fingerprint", str(sharded)])
    assert result.output.strip() == before
    CliRunner().invoke(main, ["weights", "zero", str(sharded)], catch_exceptions=False)
    zeroed = check_weights(sharded)
    assert zeroed.status == WeightStatus.ZEROED
    assert zeroed.fingerprint != before
    (sharded / bias_shard(sharded)).unlink()
    assert CliRunner().invoke(main, ["weights", "fingerprint", str(sharded)]).exit_code == 1

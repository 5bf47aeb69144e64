"""`weights zero|erase` on checkpoint directories: only the bias shards rewritten, every other byte
kept, and a reader racing the rewrite sees the old checkpoint or the new one, never a mix."""

from __future__ import annotations

import json
import shutil
import threading
from pathlib import Path

import pytest
from click.testing import CliRunner
from safetensors import safe_open

from graystack.cli import main
from inference.checkpoint import load_model
from inference.weights import BIAS_MARKER, WeightStatus, check_weights, erase_bias, zero_bias
from tests.support.checkpoints import sharded_zero_layer
from tests.support.safetensors_files import write_safetensors


@pytest.fixture
def sharded(tmp_path) -> Path:
    return sharded_zero_layer(tmp_path)


def files(directory: Path) -> dict[str, tuple[int, int]]:
    return {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in directory.iterdir()}


def tensors(directory: Path) -> dict[str, bytes]:
    """Every tensor's bytes, by name, through the index (as a loader reads them)."""
    index = json.loads((directory / "model.safetensors.index.json").read_text())
    found = {}
    for name, shard in index["weight_map"].items():
        with safe_open(str(directory / shard), framework="numpy") as handle:
            found[name] = handle.get_tensor(name).tobytes()
    return found


@pytest.mark.parametrize(
    ("command", "status"), [("zero", WeightStatus.ZEROED), ("erase", WeightStatus.ERASED)]
)
def test_only_the_shards_holding_bias_are_rewritten(sharded, command, status):
    before_files, before = files(sharded), tensors(sharded)
    weight_map = json.loads((sharded / "model.safetensors.index.json").read_text())["weight_map"]
    with_bias = {shard for name, shard in weight_map.items() if BIAS_MARKER in name}
    result = CliRunner().invoke(main, ["weights", command, str(sharded)], catch_exceptions=False)
    assert status.value in result.output
    assert check_weights(sharded).status == status
    after_files, after = files(sharded), tensors(sharded)
    for shard in set(weight_map.values()) - with_bias:  # the same files, never rewritten
        assert after_files[shard] == before_files[shard]
    assert not with_bias & after_files.keys()  # the bias shards' old files are gone
    assert not [p for p in sharded.iterdir() if p.name.startswith(".")]  # no temporary files left
    assert {n: b for n, b in before.items() if BIAS_MARKER not in n} == {
        n: b for n, b in after.items() if BIAS_MARKER not in n
    }
    assert load_model(sharded, "zero-layer").status.status == status


def test_every_dtype_survives_the_rewrite_byte_for_byte(tmp_path):
    kept = {
        "embed.weight": ("F8_E4M3", [4], bytes([0x38, 0x40, 0xB8, 0x7E])),
        "scale": ("F8_E8M0", [2], bytes([0x7F, 0x80])),
        "packed": ("F4", [2, 4], bytes([0x21, 0x43, 0x65, 0x87])),
        "norm.weight": ("BF16", [2], bytes([0x80, 0x3F, 0x00, 0x40])),
    }
    path = write_safetensors(
        tmp_path / "w.safetensors",
        {**kept, f"x.{BIAS_MARKER}.table": ("BF16", [2], bytes([0x80, 0x3F, 0, 0]))},
        metadata={"model": "m"},
    )
    zero_bias(path)
    report = check_weights(path)
    assert report.status == WeightStatus.ZEROED
    assert report.metadata == {"model": "m"}
    header_end = 8 + int.from_bytes(path.read_bytes()[:8], "little")
    data = path.read_bytes()[header_end:]
    assert all(raw in data for _, _, raw in kept.values())
    erase_bias(path)
    assert check_weights(path).status == WeightStatus.ERASED


def test_a_reader_racing_the_rewrite_sees_the_old_checkpoint_or_the_new_one(tmp_path, sharded):
    """A mixed checkpoint (one bias shard zeroed, the other not) would read ACTIVE with a fingerprint
    that is neither the old one nor the new one: every read here is one of the two, or at worst a
    MISSING for a reader still holding the index whose shards were just removed."""
    template = tmp_path / "template"
    shutil.copytree(sharded, template)
    old = check_weights(template)

    def rewrite(done: threading.Event) -> None:
        zero_bias(sharded)
        done.set()

    for _ in range(8):
        shutil.rmtree(sharded)
        shutil.copytree(template, sharded)
        done = threading.Event()
        statuses: list = []
        writer = threading.Thread(target=rewrite, args=(done,))
        writer.start()
        while not done.is_set():
            statuses.append(check_weights(sharded))
        writer.join()
        new = check_weights(sharded)
        assert new.status == WeightStatus.ZEROED
        seen = {(report.status, report.fingerprint) for report in statuses}
        assert seen <= {
            (old.status, old.fingerprint),
            (new.status, new.fingerprint),
            (WeightStatus.MISSING, None),
        }

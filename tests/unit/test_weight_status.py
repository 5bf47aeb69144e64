"""The weight-erasure status, from files the project's own tools write and from hand-broken ones."""

import json
import struct

import numpy as np
import pytest
from safetensors.numpy import save_file

from inference.checkpoint import init_checkpoint
from inference.config import ModelConfig
from inference.weights import WeightStatus, check_weights, erase_bias, zero_bias

TINY = ModelConfig(d_model=32, n_heads=2, n_layers=1, max_seq_len=128, bias_window=16)


@pytest.fixture(params=["baseline", "zero-layer"])
def checkpoint(request, tmp_path):
    return init_checkpoint(request.param, tmp_path / f"{request.param}.safetensors", TINY)


def test_fresh_weights_are_active_then_zeroed_then_erased(checkpoint):
    assert check_weights(checkpoint).status == WeightStatus.ACTIVE
    zero_bias(checkpoint)
    zeroed = check_weights(checkpoint)
    assert zeroed.status == WeightStatus.ZEROED
    assert zeroed.bias_tensors > 0
    erase_bias(checkpoint)
    erased = check_weights(checkpoint)
    assert erased.status == WeightStatus.ERASED
    assert erased.metadata["model"] == "graystack-tiny"  # the rest of the checkpoint is intact


def test_values_at_the_tolerance_count_as_zero(tmp_path):
    path = tmp_path / "w.safetensors"
    save_file({"layer.position_adaptive_bias.table": np.full((2, 3), 1e-6, dtype=np.float32)}, str(path))
    assert check_weights(path).status == WeightStatus.ZEROED
    save_file({"layer.position_adaptive_bias.table": np.full((2, 3), 2e-6, dtype=np.float32)}, str(path))
    assert check_weights(path).status == WeightStatus.ACTIVE


def test_bf16_bias_is_read_without_torch(tmp_path):
    path = tmp_path / "w.safetensors"
    one_in_bf16 = np.array([0x3F80], dtype=np.uint16)  # 1.0
    header = {"b.position_adaptive_bias.t": {"dtype": "BF16", "shape": [1], "data_offsets": [0, 2]}}
    raw = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + one_in_bf16.tobytes())
    report = check_weights(path)
    assert report.status == WeightStatus.ACTIVE
    assert "max |x| = 1" in report.reason


def write_raw(path, header, data: bytes = b"", length: int | None = None) -> None:
    raw = header if isinstance(header, bytes) else json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw) if length is None else length) + raw + data)


BIAS = "x.position_adaptive_bias.table"


@pytest.mark.parametrize(
    ("make", "status", "reason"),
    [
        (lambda p: p.write_bytes(b""), WeightStatus.CORRUPT, "shorter than the 8-byte header"),
        (lambda p: p.write_bytes(b"\x10\x00"), WeightStatus.CORRUPT, "shorter than the 8-byte header"),
        (lambda p: write_raw(p, {}, length=10**6), WeightStatus.CORRUPT, "runs past the end"),
        (lambda p: write_raw(p, b"{not json"), WeightStatus.CORRUPT, "invalid JSON in header"),
        (lambda p: write_raw(p, b"[1, 2]"), WeightStatus.CORRUPT, "invalid JSON in header"),
        (
            lambda p: write_raw(
                p, {BIAS: {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}, b"\0" * 8
            ),
            WeightStatus.CORRUPT,
            "file not fully covered",
        ),
        (
            lambda p: write_raw(p, {BIAS: {"dtype": "Q4", "shape": [4], "data_offsets": [0, 2]}}, b"\0" * 2),
            WeightStatus.CORRUPT,
            "unknown variant `Q4`",
        ),
        (
            lambda p: write_raw(
                p, {BIAS: {"dtype": "F32", "shape": [3], "data_offsets": [0, 16]}}, b"\0" * 16
            ),
            WeightStatus.CORRUPT,
            "invalid shape, data type, or offset",
        ),
        (lambda p: p.mkdir(), WeightStatus.MISSING, "no weights"),
        (lambda p: None, WeightStatus.MISSING, "no such file"),
    ],
)
def test_broken_files_are_corrupt_or_missing_with_a_reason(tmp_path, make, status, reason):
    path = tmp_path / "w.safetensors"
    make(path)
    report = check_weights(path)
    assert report.status == status
    assert reason in report.reason


def test_a_truncated_real_checkpoint_is_corrupt(tmp_path):
    path = init_checkpoint("zero-layer", tmp_path / "w.safetensors", TINY)
    path.write_bytes(path.read_bytes()[:-100])
    report = check_weights(path)
    assert report.status == WeightStatus.CORRUPT


def test_a_file_rewritten_in_place_while_being_read_never_crashes_the_check(tmp_path):
    """A writer that truncates and rewrites the file (not atomically) races the check: each read
    is some status with a reason, never an exception or a hang."""
    import threading

    path = init_checkpoint("zero-layer", tmp_path / "w.safetensors", TINY)
    good = path.read_bytes()
    stop = threading.Event()

    def rewrite() -> None:
        while not stop.is_set():
            with path.open("wb") as handle:
                for start in range(0, len(good), 4096):
                    handle.write(good[start : start + 4096])

    writer = threading.Thread(target=rewrite)
    writer.start()
    try:
        seen = {check_weights(path).status for _ in range(300)}
    finally:
        stop.set()
        writer.join(timeout=10)
    assert seen <= {WeightStatus.ACTIVE, WeightStatus.CORRUPT}
    assert check_weights(path).status == WeightStatus.ACTIVE

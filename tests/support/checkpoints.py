"""graystack's own zero-layer model as checkpoints for the weight tests: one file, and the same weights as a
Hugging Face style directory of several shards."""

from __future__ import annotations

from pathlib import Path

from safetensors import safe_open

from inference.checkpoint import init_checkpoint
from inference.config import ModelConfig
from inference.weights import save_sharded

TINY = ModelConfig(d_model=32, n_heads=2, n_layers=2, max_seq_len=128, bias_window=16)


def sharded_zero_layer(directory: Path) -> Path:
    """`directory/single.safetensors`, and `directory/zero-layer/`: its tensors in shards of at most
    20 KB with their index (several shards, the bias in more than one)."""
    single = init_checkpoint("zero-layer", directory / "single.safetensors", TINY)
    with safe_open(str(single), framework="numpy") as checkpoint:
        arrays = {name: checkpoint.get_tensor(name) for name in checkpoint.keys()}  # noqa: SIM118
        metadata = checkpoint.metadata()
    return save_sharded(arrays, directory / "zero-layer", max_shard_bytes=20_000, metadata=metadata)

"""Model sizes: small enough to serve on a CPU, shaped like the real thing."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

BOS, EOS = 256, 257  # byte-level vocabulary: 256 byte values, then two specials


@dataclass(frozen=True)
class ModelConfig:
    vocab_size: int = 258
    d_model: int = 128
    n_layers: int = 2
    n_heads: int = 4
    mlp_ratio: int = 4
    max_seq_len: int = 10_240  # prompts up to 8K bytes plus room to generate
    rope_base: float = 10_000.0
    bias_window: int = 128  # W: the zero-layer's sparse table covers offsets in [-W, W]
    gate_hidden: int = 16
    skip_threshold: float = 0.05  # bias work is skipped where the gate is below this

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    def __post_init__(self) -> None:
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model {self.d_model} is not divisible by n_heads {self.n_heads}")

    def to_metadata(self) -> dict[str, str]:
        """As safetensors metadata (string values only)."""
        return {f"config.{k}": str(v) for k, v in asdict(self).items()}

    @classmethod
    def from_metadata(cls, metadata: dict[str, str]) -> ModelConfig:
        fields: dict[str, Any] = {}  # each field as its own type: int or float
        for name, field in cls.__dataclass_fields__.items():
            raw = metadata.get(f"config.{name}")
            if raw is not None:
                fields[name] = float(raw) if field.type == "float" else int(raw)
        return cls(**fields)

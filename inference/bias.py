"""The relative-position-bias layer, in its two variants.

`baseline`: a learned bias for every distance, table[h, d], materialized as [H, Lq, Lk] and added to
the scores (its cost grows with L^2). `zero-layer`: bias(d) = g(d) * table[h, d], where g is a
distance-aware gate (a 2-layer MLP, hidden 16, about 1 near and 0 far) and the table covers only
offsets within +-W. Because g depends on distance alone, both are folded once per weight load into
a per-head 1-D vector and a skip distance: attention adds bias only where the query-key distance
is below it, and a checkpoint whose bias is zeroed or erased does no bias work at all.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F

from inference.config import ModelConfig

ZERO_TOLERANCE = 1e-6  # docs/probes-and-checkpoints.md: ZEROED means every bias value has |x| <= 1e-6


@dataclass(frozen=True)
class BiasPlan:
    """What attention needs from the bias layer, computed once per weight load.

    `vector[h, d]` is the bias added to the score of a query and a key d positions before it
    (d >= 0, causal). Attention does bias work only for d < `skip_distance`; 0 means none at all.
    """

    vector: torch.Tensor | None  # [H, max_seq_len] float32, or None when skip_distance is 0
    skip_distance: int

    @property
    def effective_window(self) -> int:
        return self.skip_distance

    @classmethod
    def none(cls) -> BiasPlan:
        return cls(vector=None, skip_distance=0)


def _is_zero(*tensors: torch.Tensor) -> bool:
    return all(bool((t.abs() <= ZERO_TOLERANCE).all()) for t in tensors)


class BaselineBias(nn.Module):
    """A learned bias for every distance up to the context length."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.table = nn.Parameter(torch.zeros(config.n_heads, config.max_seq_len))

    def plan(self) -> BiasPlan:
        if _is_zero(self.table):
            return BiasPlan.none()
        return BiasPlan(vector=self.table.detach().float(), skip_distance=self.table.shape[1])

    def materialize(self, q_offset: int, q_len: int, k_len: int) -> torch.Tensor:
        """The [H, q_len, k_len] bias the baseline adds to the scores (future positions get the d=0
        value; the causal mask hides them)."""
        distance = (torch.arange(q_len) + q_offset)[:, None] - torch.arange(k_len)[None, :]
        return self.table[:, distance.clamp(min=0, max=self.table.shape[1] - 1)]

    @torch.no_grad()
    def reset(self, generator: torch.Generator) -> None:
        """A decaying bias, steeper for some heads (ALiBi-like slopes over log-distance)."""
        heads, length = self.table.shape
        slopes = torch.tensor([2.0 ** (-(h + 1) * 8 / heads) for h in range(heads)])
        distance = torch.log1p(torch.arange(length, dtype=torch.float32))
        noise = 0.01 * torch.randn(heads, length, generator=generator)
        self.table.copy_(-slopes[:, None] * distance[None, :] * 4 + noise)


class ZeroLayerBias(nn.Module):
    """Gate g(d) (2-layer MLP over log-distance) times a table over offsets [-W, W]."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.window = config.bias_window
        self.max_seq_len = config.max_seq_len
        self.threshold = config.skip_threshold
        self.gate = nn.Sequential(
            nn.Linear(1, config.gate_hidden), nn.Tanh(), nn.Linear(config.gate_hidden, 1)
        )
        self.table = nn.Parameter(torch.zeros(config.n_heads, 2 * config.bias_window + 1))

    def gate_layers(self) -> tuple[nn.Linear, nn.Linear]:
        """The gate's two linear layers (kept in one Sequential: its state-dict keys are gate.0, gate.2)."""
        first, _, second = self.gate
        if not (isinstance(first, nn.Linear) and isinstance(second, nn.Linear)):
            raise TypeError(f"the gate's layers are not linear: {self.gate}")
        return first, second

    def gate_values(self, length: int, dtype: torch.dtype = torch.float64) -> torch.Tensor:
        """g(d) for d in [0, length), evaluated once (never per score element)."""
        distance = torch.log1p(torch.arange(length, dtype=dtype))[:, None]
        first, second = self.gate_layers()
        hidden = torch.tanh(F.linear(distance, first.weight.to(dtype), first.bias.to(dtype)))
        return torch.sigmoid(F.linear(hidden, second.weight.to(dtype), second.bias.to(dtype))).squeeze(-1)

    def plan(self) -> BiasPlan:
        parameters = [p.detach() for p in self.parameters()]
        if _is_zero(*parameters) or _is_zero(self.table.detach()):
            return BiasPlan.none()
        gate = self.gate_values(self.max_seq_len).detach()
        # The last distance whose gate reaches the threshold: scan them all, the learned gate need
        # not be monotone. Beyond W the table is zero, so nothing past it needs bias work either.
        reaching = torch.nonzero(gate >= self.threshold)
        if reaching.numel() == 0:
            return BiasPlan.none()
        skip_distance = min(int(reaching[-1]) + 1, self.window + 1)
        vector = torch.zeros(self.table.shape[0], self.max_seq_len, dtype=torch.float64)
        reach = min(self.window + 1, self.max_seq_len)
        # Causal: a key d positions before the query uses the table at offset +d.
        vector[:, :reach] = gate[:reach] * self.table.detach().double()[:, self.window : self.window + reach]
        return BiasPlan(vector=vector.float(), skip_distance=skip_distance)

    @torch.no_grad()
    def reset(self, generator: torch.Generator) -> None:
        """A gate near 1 up to about W/4 and near 0 past W/2, with the baseline's decaying table."""
        first, second = self.gate_layers()
        hidden = first.out_features
        centers = torch.logspace(math.log10(self.window / 4), math.log10(self.window / 2), hidden)
        sharpness = 6.0
        first.weight.fill_(sharpness)
        first.bias.copy_(-sharpness * torch.log1p(centers) + 0.05 * torch.randn(hidden, generator=generator))
        second.weight.fill_(-8.0 / hidden)
        second.bias.zero_()
        heads = self.table.shape[0]
        slopes = torch.tensor([2.0 ** (-(h + 1) * 8 / heads) for h in range(heads)])
        offsets = torch.log1p(torch.arange(-self.window, self.window + 1, dtype=torch.float32).abs())
        self.table.copy_(
            -slopes[:, None] * offsets[None, :] * 4
            + 0.01 * torch.randn(heads, offsets.numel(), generator=generator)
        )


def make_bias(variant: str, config: ModelConfig) -> BaselineBias | ZeroLayerBias:
    if variant == "baseline":
        return BaselineBias(config)
    if variant == "zero-layer":
        return ZeroLayerBias(config)
    raise ValueError(f"unknown variant {variant!r}: expected baseline or zero-layer")

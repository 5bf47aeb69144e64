"""A tiny byte-level decoder-only Transformer (pre-norm, RoPE) with the position-adaptive bias.

Two entry points serve generation: `prefill` runs a prompt (or a chunk of one) into a KV cache;
`decode` advances several sequences by one token at once, the dense layers and attention batched
(ragged lengths padded and masked: `attention.decode_attention`), which is what continuous batching
needs. Both take an optional
per-sequence `window`: a request's position-window hint, which narrows the zero-layer's bias to
distances below it for that sequence alone (never widens it; the baseline ignores it).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import cast

import torch
from torch import nn

from inference.attention import blocked_attention, decode_attention, materialized_attention, pad_ragged
from inference.bias import BaselineBias, BiasPlan, ZeroLayerBias, make_bias
from inference.config import ModelConfig
from inference.kernels.blocks import BlockCounts, bias_block_counts, key_block_bounds, pick_blocks


def rope_tables(config: ModelConfig) -> tuple[torch.Tensor, torch.Tensor]:
    half = config.head_dim // 2
    inverse = 1.0 / (config.rope_base ** (torch.arange(half, dtype=torch.float32) / half))
    angles = torch.arange(config.max_seq_len, dtype=torch.float32)[:, None] * inverse[None, :]
    return angles.cos(), angles.sin()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x [..., L, D] rotated by the angles of its positions (cos/sin [L, D/2])."""
    first, second = x[..., 0::2], x[..., 1::2]
    rotated = torch.stack((first * cos - second * sin, first * sin + second * cos), dim=-1)
    return rotated.flatten(-2)


@dataclass
class KVCache:
    """One sequence's keys and values, per layer: buffers [H, capacity, D] of which the first
    `length` positions are filled. A buffer doubles when full, so a decode step writes one position
    in place instead of copying the whole cache (torch.cat would, every token)."""

    keys: list[torch.Tensor] = field(default_factory=list)
    values: list[torch.Tensor] = field(default_factory=list)
    length: int = 0

    def extend(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Write [H, n, D] keys/values for `layer` after the first `length` positions; the layer's
        keys/values so far ([H, length + n, D] views). `length` moves once every layer has its."""
        end = self.length + k.shape[1]
        if layer == len(self.keys):
            self.keys.append(k.new_empty(k.shape[0], 0, k.shape[2]))
            self.values.append(v.new_empty(v.shape[0], 0, v.shape[2]))
        if end > self.keys[layer].shape[1]:
            self.keys[layer] = _grown(self.keys[layer], self.length, end)
            self.values[layer] = _grown(self.values[layer], self.length, end)
        self.keys[layer][:, self.length : end] = k
        self.values[layer][:, self.length : end] = v
        return self.keys[layer][:, :end], self.values[layer][:, :end]


def _grown(buffer: torch.Tensor, filled: int, needed: int) -> torch.Tensor:
    """A buffer of at least `needed` positions (double the old, or exactly `needed` for a prompt),
    holding the old one's first `filled`."""
    capacity = max(needed, 2 * buffer.shape[1])
    grown = buffer.new_empty(buffer.shape[0], capacity, buffer.shape[2])
    grown[:, :filled] = buffer[:, :filled]
    return grown


class Attention(nn.Module):
    def __init__(self, config: ModelConfig, variant: str) -> None:
        super().__init__()
        self.variant = variant
        self.n_heads = config.n_heads
        self.qkv = nn.Linear(config.d_model, 3 * config.d_model, bias=False)
        self.out = nn.Linear(config.d_model, config.d_model, bias=False)
        self.position_adaptive_bias = make_bias(variant, config)
        self.plan = BiasPlan.none()
        self._narrowed: dict[int, BiasPlan] = {}

    def refresh_plan(self) -> None:
        self.plan = self.position_adaptive_bias.plan()
        self._narrowed = {}

    def narrowed_plan(self, window: int | None) -> BiasPlan:
        """The plan for a request whose hint narrows the bias to distances below `window`.

        Exact, not just block-granular: the vector is zeroed from `window` on, so blocks that still do
        bias work add none past it. At most skip_distance of these are ever made, so they are kept.
        """
        if window is None or window >= self.plan.skip_distance:
            return self.plan
        if window not in self._narrowed:
            assert self.plan.vector is not None  # skip_distance > window >= 0
            vector = self.plan.vector.clone()
            vector[:, window:] = 0
            self._narrowed[window] = BiasPlan(vector=vector, skip_distance=window)
        return self._narrowed[window]

    def attend(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, q_offset: int, window: int | None = None
    ) -> tuple[torch.Tensor, BlockCounts]:
        """q [1, H, Lq, D] against k/v [1, H, Lk, D]; `window` narrows the zero-layer's bias reach."""
        bias_layer = self.position_adaptive_bias
        if isinstance(bias_layer, BaselineBias):
            bias = (
                bias_layer.materialize(q_offset, q.shape[2], k.shape[2]) if self.plan.skip_distance else None
            )
            # Counted on the kernel's tiles, so the two variants' shares of skipped bias work compare.
            block_m, block_n = pick_blocks(q.shape[2])
            reach = k.shape[2] if bias is not None else 0
            blocks = bias_block_counts(q.shape[2], q_offset, reach, block_m, block_n)
            return materialized_attention(q, k, v, bias, q_offset), blocks
        assert isinstance(bias_layer, ZeroLayerBias)
        plan = self.narrowed_plan(window)
        if q.is_cuda:
            from inference.kernels.gated_bias_attention import gated_bias_attention, skipped_blocks

            out = gated_bias_attention(q, k, v, plan.vector, plan.skip_distance, q_offset)
            return out, skipped_blocks(q.shape[2], k.shape[2], q_offset, plan.skip_distance)
        return blocked_attention(q, k, v, plan, q_offset)

    def decode_bias(
        self, offsets: list[int], windows: list[int | None]
    ) -> tuple[torch.Tensor | None, torch.Tensor, BlockCounts]:
        """For `decode_attention`: each sequence's bias vector, the first key that gets it, and the
        bias tiles counted as the per-sequence paths count them (one query at position `offset`)."""
        block_m, block_n = pick_blocks(1)
        counts = BlockCounts()
        vectors, bias_from = [], []
        for offset, window in zip(offsets, windows, strict=True):
            if isinstance(self.position_adaptive_bias, BaselineBias):
                plan = self.plan  # the whole table on every key, when it is not zero
                reach = offset + 1 if plan.skip_distance else 0
                first_biased = 0
            else:
                plan = self.narrowed_plan(window)
                reach = plan.skip_distance
                bounds = key_block_bounds(0, 1, offset, reach, block_m, block_n)
                first_biased = bounds.plain_end * block_n
            counts.add(bias_block_counts(1, offset, reach, block_m, block_n))
            vectors.append(plan.vector)
            bias_from.append(first_biased if plan.skip_distance else offset + 1)
        if all(vector is None for vector in vectors):
            return None, torch.tensor(bias_from), counts
        fill = next(vector for vector in vectors if vector is not None)
        if all(vector is fill for vector in vectors):  # one plan for all (no hints): no copies
            return fill[None].expand(len(vectors), -1, -1), torch.tensor(bias_from), counts
        stacked = torch.stack([fill if vector is None else vector for vector in vectors])
        return stacked, torch.tensor(bias_from), counts

    def decode(
        self,
        x: torch.Tensor,
        rope: tuple[torch.Tensor, torch.Tensor],
        caches: list[KVCache],
        layer: int,
        windows: list[int | None],
    ) -> tuple[torch.Tensor, BlockCounts]:
        """x [N, d_model]: one new token for each of N sequences, with one attention call for them all
        (on a GPU the zero-layer's is the Triton kernel's decode entry)."""
        count = x.shape[0]
        offsets = [cache.length for cache in caches]
        positions = torch.tensor(offsets, device=x.device)
        q, k, v = self.qkv(x).view(count, 3, self.n_heads, -1).permute(1, 0, 2, 3)  # 3 x [N, H, D]
        cos, sin = (t[positions][:, None] for t in rope)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        extended = [cache.extend(layer, k[i][:, None], v[i][:, None]) for i, cache in enumerate(caches)]
        keys, values = [keys for keys, _ in extended], [values for _, values in extended]
        vectors, bias_from, counts = self.decode_bias(offsets, windows)
        if q.is_cuda and isinstance(self.position_adaptive_bias, ZeroLayerBias):
            from inference.kernels.gated_bias_decode import gated_bias_decode

            skips = torch.tensor([self.narrowed_plan(window).skip_distance for window in windows])
            padded_keys, padded_values = pad_ragged(keys, values, max(offsets) + 1)
            out = gated_bias_decode(q, padded_keys, padded_values, positions, vectors, skips)
        else:
            out = decode_attention(q, keys, values, positions, vectors, bias_from.to(x.device))
        return self.out(out.reshape(count, -1)), counts

    def forward(
        self,
        x: torch.Tensor,
        rope: tuple[torch.Tensor, torch.Tensor],
        cache: KVCache,
        layer: int,
        q_offset: int,
        window: int | None = None,
    ) -> tuple[torch.Tensor, BlockCounts]:
        """x [L, d_model] for one sequence whose first token sits at `q_offset`."""
        length = x.shape[0]
        q, k, v = self.qkv(x).view(length, 3, self.n_heads, -1).permute(1, 2, 0, 3)  # 3 x [H, L, D]
        cos, sin = (t[q_offset : q_offset + length] for t in rope)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        keys, values = cache.extend(layer, k, v)
        out, blocks = self.attend(q[None], keys[None], values[None], q_offset, window)
        return self.out(out[0].transpose(0, 1).reshape(length, -1)), blocks


class Block(nn.Module):
    def __init__(self, config: ModelConfig, variant: str) -> None:
        super().__init__()
        self.norm1 = nn.RMSNorm(config.d_model)
        self.attn = Attention(config, variant)
        self.norm2 = nn.RMSNorm(config.d_model)
        hidden = config.mlp_ratio * config.d_model
        self.mlp = nn.Sequential(
            nn.Linear(config.d_model, hidden, bias=False),
            nn.GELU(),
            nn.Linear(hidden, config.d_model, bias=False),
        )


class TinyDecoder(nn.Module):
    rope_cos: torch.Tensor  # registered buffers [max_seq_len, head_dim / 2]
    rope_sin: torch.Tensor

    def __init__(self, config: ModelConfig, variant: str) -> None:
        super().__init__()
        self.config = config
        self.variant = variant
        self.embed = nn.Embedding(config.vocab_size, config.d_model)
        self.blocks = nn.ModuleList(Block(config, variant) for _ in range(config.n_layers))
        self.norm = nn.RMSNorm(config.d_model)
        self.head = nn.Linear(config.d_model, config.vocab_size, bias=False)
        cos, sin = rope_tables(config)
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)

    @property
    def layers(self) -> list[Block]:
        """The blocks, typed: iterating the nn.ModuleList that registers them gives plain Modules."""
        return cast("list[Block]", list(self.blocks))

    def refresh_plans(self) -> None:
        """Fold each layer's bias into its plan; call after loading weights."""
        for block in self.layers:
            block.attn.refresh_plan()

    @property
    def skip_distance(self) -> int:
        """The widest bias reach over the layers: the effective window the server reports."""
        return max(block.attn.plan.skip_distance for block in self.layers)

    def _run(
        self,
        hidden: list[torch.Tensor],
        caches: list[KVCache],
        offsets: list[int],
        windows: list[int | None] | None = None,
        batched_attention: bool = False,
    ) -> tuple[torch.Tensor, BlockCounts]:
        """Each sequence's new tokens through every layer, to the final norm's hidden states; dense layers
        batched across sequences, and attention too with `batched_attention` (decode: one token per sequence)."""
        windows = windows or [None] * len(hidden)
        sizes = [h.shape[0] for h in hidden]
        x = torch.cat(hidden)
        rope = (self.rope_cos, self.rope_sin)
        counts = BlockCounts()
        for layer, block in enumerate(self.layers):
            if batched_attention:
                attended, blocks = block.attn.decode(block.norm1(x), rope, caches, layer, windows)
                counts.add(blocks)
            else:
                parts = []
                for part, cache, offset, window in zip(
                    block.norm1(x).split(sizes), caches, offsets, windows, strict=True
                ):
                    out, blocks = block.attn(part, rope, cache, layer, offset, window)
                    parts.append(out)
                    counts.add(blocks)
                attended = torch.cat(parts)
            x = x + attended
            x = x + block.mlp(block.norm2(x))
        for cache, size in zip(caches, sizes, strict=True):
            cache.length += size
        return self.norm(x), counts

    @torch.inference_mode()
    def prefill(
        self, tokens: torch.Tensor, cache: KVCache, window: int | None = None
    ) -> tuple[torch.Tensor, BlockCounts]:
        """Run a prompt (or its continuation) into `cache`; logits of its last position."""
        if cache.length + tokens.numel() > self.config.max_seq_len:
            raise ValueError(
                f"{cache.length + tokens.numel()} tokens exceed the context of {self.config.max_seq_len}"
            )
        hidden, counts = self._run([self.embed(tokens)], [cache], [cache.length], [window])
        return self.head(hidden[-1]), counts

    @torch.inference_mode()
    def decode(
        self, tokens: torch.Tensor, caches: list[KVCache], windows: list[int | None] | None = None
    ) -> tuple[torch.Tensor, BlockCounts]:
        """One new token for each of several sequences: logits [N, vocab]."""
        embedded = self.embed(tokens)
        offsets = [c.length for c in caches]
        hidden, counts = self._run(list(embedded[:, None]), caches, offsets, windows, batched_attention=True)
        return self.head(hidden), counts

    @torch.inference_mode()
    def logits(self, tokens: torch.Tensor) -> torch.Tensor:
        """Every position's logits for one sequence, from scratch (tests and evaluation)."""
        hidden, _ = self._run([self.embed(tokens)], [KVCache()], [0])
        return self.head(hidden)

    @torch.inference_mode()
    def embedding(self, tokens: torch.Tensor) -> torch.Tensor:
        """One sequence's vector for /v1/embeddings: its final hidden states mean-pooled over every
        position, unit length (cosine similarity is then a dot product, as OpenAI's vectors allow)."""
        hidden, _ = self._run([self.embed(tokens)], [KVCache()], [0])
        return torch.nn.functional.normalize(hidden.float().mean(dim=0), dim=0)

    def init_weights(self, seed: int) -> None:
        generator = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for name, parameter in self.named_parameters():
                if "position_adaptive_bias" in name:
                    continue
                if parameter.dim() >= 2:
                    parameter.copy_(torch.randn(parameter.shape, generator=generator) * 0.02)
                elif "norm" in name:
                    parameter.fill_(1.0)
        for block in self.layers:
            block.attn.position_adaptive_bias.reset(generator)
        self.refresh_plans()

"""A differentiable, batched forward pass over the model's own modules, for training.

The serving path (`TinyDecoder.prefill/decode/logits`) runs under inference_mode, one sequence at a
time, on a bias *plan* folded once per weight load. Training needs gradients into the bias itself, so
this builds each layer's [H, L, L] bias from its parameters: the baseline's table at every distance,
the zero-layer's gate(d) x table[W + d] for d <= W and nothing beyond. It is the same function the
plan folds, so a trained checkpoint serves exactly what was trained (a unit test holds them equal).
"""

from __future__ import annotations

import torch
from torch.nn import functional as F

from inference.bias import BaselineBias, ZeroLayerBias
from inference.model import TinyDecoder, apply_rope


def distance_bias(layer: BaselineBias | ZeroLayerBias, length: int) -> torch.Tensor:
    """bias[h, d] for d in [0, length), with gradients into the layer's parameters."""
    if isinstance(layer, BaselineBias):
        return layer.table[:, :length]
    reach = min(layer.window + 1, length)
    gate = layer.gate_values(reach, dtype=layer.table.dtype)
    near = gate * layer.table[:, layer.window : layer.window + reach]
    return F.pad(near, (0, length - reach))


def bias_mask(layer: BaselineBias | ZeroLayerBias, length: int) -> torch.Tensor:
    """The [H, L, L] additive mask: the bias at each query-key distance, -inf on future keys."""
    distance = torch.arange(length)[:, None] - torch.arange(length)[None, :]
    mask = distance_bias(layer, length)[:, distance.clamp(min=0)]
    return mask.masked_fill(distance < 0, float("-inf"))


def batch_logits(model: TinyDecoder, tokens: torch.Tensor) -> torch.Tensor:
    """Logits [B, L, vocab] for tokens [B, L], every position from scratch, with gradients."""
    batch, length = tokens.shape
    heads = model.config.n_heads
    cos, sin = model.rope_cos[:length], model.rope_sin[:length]
    x = model.embed(tokens)
    for block in model.layers:
        attention = block.attn
        q, k, v = attention.qkv(block.norm1(x)).view(batch, length, 3, heads, -1).permute(2, 0, 3, 1, 4)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        mask = bias_mask(attention.position_adaptive_bias, length)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        x = x + attention.out(out.transpose(1, 2).reshape(batch, length, -1))
        x = x + block.mlp(block.norm2(x))
    return model.head(model.norm(x))


def next_byte_loss(model: TinyDecoder, windows: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy (nats) of predicting windows[:, 1:] from windows[:, :-1]."""
    logits = batch_logits(model, windows[:, :-1])
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), windows[:, 1:].reshape(-1))

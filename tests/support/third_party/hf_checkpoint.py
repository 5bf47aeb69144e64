"""Runs in the `transformers` venv: real Hugging Face checkpoints for the weight check, and what
transformers itself makes of them.

  save SOURCE OUT SHARD_SIZE DTYPE [--bias]   save_pretrained with max_shard_size (bf16 or float32);
                                             --bias adds a `position_adaptive_bias` tensor to layer 0
  load DIR                                   from_pretrained: prints {"missing": [...], "unexpected": [...]}
"""

import json
import sys

import torch
from transformers import AutoModelForCausalLM

BIAS = "model.layers.0.self_attn.position_adaptive_bias"


def save(source: str, out: str, shard_size: str, dtype: str, bias: bool) -> None:
    model = AutoModelForCausalLM.from_pretrained(source, dtype=getattr(torch, dtype))
    state = dict(model.state_dict())
    if bias:
        state[BIAS] = torch.linspace(-1, 1, 64).to(getattr(torch, dtype)).reshape(4, 16)
    model.save_pretrained(out, max_shard_size=shard_size, state_dict=state)


def load(directory: str) -> None:
    _, info = AutoModelForCausalLM.from_pretrained(directory, output_loading_info=True)
    print(
        json.dumps({"missing": sorted(info["missing_keys"]), "unexpected": sorted(info["unexpected_keys"])})
    )


if __name__ == "__main__":
    if sys.argv[1] == "save":
        save(*sys.argv[2:6], bias="--bias" in sys.argv[6:])
    else:
        load(sys.argv[2])

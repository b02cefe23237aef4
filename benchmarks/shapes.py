"""Random checkpoints in the shapes of the published Qwen3 configs, for
measurements at realistic sizes where no hub is reachable.

    PYTHONPATH=. python benchmarks/shapes.py --out /tmp/checkpoints

writes ``qwen3-8b`` and ``qwen3-0.6b`` folders there: Hugging Face checkpoints
(config.json, safetensors) with random bf16 weights drawn the way transformers
initialises them (normal, std 0.02), built on the GPU when there is one, and
the bundled pair's tokenizer (so the two share one tokenizer, and every token
id is inside the 151936-entry vocabulary).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, Qwen3Config

from model_runtime.resolve import resolve_model

SHAPES = {
    "qwen3-0.6b": dict(
        hidden_size=1024,
        intermediate_size=3072,
        num_hidden_layers=28,
        num_attention_heads=16,
        num_key_value_heads=8,
        head_dim=128,
        vocab_size=151936,
        tie_word_embeddings=True,
    ),
    "qwen3-8b": dict(
        hidden_size=4096,
        intermediate_size=12288,
        num_hidden_layers=36,
        num_attention_heads=32,
        num_key_value_heads=8,
        head_dim=128,
        vocab_size=151936,
        tie_word_embeddings=False,
    ),
}


def save_random_qwen3(folder: Path, shape: str, seed: int = 0, max_len: int = 4096) -> Path:
    tokenizer = AutoTokenizer.from_pretrained(resolve_model("specserve/demo-target"))
    eos = tokenizer.eos_token_id
    config = Qwen3Config(
        **SHAPES[shape],
        max_position_embeddings=max_len,
        eos_token_id=eos,
        bos_token_id=eos,
        pad_token_id=eos,
    )
    config.architectures = ["Qwen3ForCausalLM"]
    torch.manual_seed(seed)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    del model
    if device == "cuda":
        torch.cuda.empty_cache()
    return folder


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--shapes", nargs="+", default=list(SHAPES), choices=list(SHAPES))
    args = parser.parse_args()
    for seed, shape in enumerate(args.shapes):
        print(save_random_qwen3(args.out / shape, shape, seed), flush=True)


if __name__ == "__main__":
    main()

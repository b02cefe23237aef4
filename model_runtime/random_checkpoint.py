"""Small randomly initialised checkpoints, saved by transformers itself.

They stand in for real models wherever no hub is reachable: tests compare our
runtime against transformers on them, and benchmarks build realistic shapes
(say, a Qwen3-8B configuration) with random weights. The folder is a complete
Hugging Face checkpoint: config.json, safetensors weights, generation config
and a byte-level BPE tokenizer trained on Python's own standard library.

    python -m model_runtime.random_checkpoint /tmp/tiny --architecture Qwen3ForCausalLM
"""

from __future__ import annotations

import argparse
import sysconfig
from collections.abc import Iterator
from pathlib import Path

import torch
from transformers import AutoConfig, AutoModelForCausalLM

from model_runtime.bpe import EOS_TOKEN, train_tokenizer
from model_runtime.config import DTYPES

MODEL_TYPES = {
    "LlamaForCausalLM": "llama",
    "MistralForCausalLM": "mistral",
    "Qwen2ForCausalLM": "qwen2",
    "Qwen3ForCausalLM": "qwen3",
}

# Small enough for tests on two CPU cores, large enough that every code path
# (grouped-query attention, several layers, several KV blocks) is exercised.
TINY_SHAPE = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "max_position_embeddings": 512,
    "initializer_range": 0.2,
}

CORPUS_FILES = ("textwrap.py", "string.py", "fractions.py", "heapq.py", "bisect.py")


def stdlib_corpus(files: tuple[str, ...] = CORPUS_FILES) -> Iterator[str]:
    """Text every Python installation has: a few standard-library sources."""
    root = Path(sysconfig.get_paths()["stdlib"])
    for name in files:
        yield (root / name).read_text(encoding="utf-8")


def save_random_checkpoint(
    folder: str | Path,
    architecture: str = "Qwen3ForCausalLM",
    vocab_size: int = 512,
    seed: int = 0,
    dtype: str = "float32",
    max_shard_size: str | None = None,
    **overrides: object,
) -> Path:
    """Save a random ``architecture`` checkpoint with a trained tokenizer into ``folder``.

    ``overrides`` replace fields of the tiny default shape (or add others,
    such as ``sliding_window``). Norm weights and biases are randomised too,
    so that a runtime that loads them wrongly cannot match.
    """
    if architecture not in MODEL_TYPES:
        raise ValueError(
            f"architecture must be one of {', '.join(MODEL_TYPES)}, got {architecture!r}"
        )
    folder = Path(folder)
    tokenizer = train_tokenizer(vocab_size, stdlib_corpus())
    eos_id = tokenizer.convert_tokens_to_ids(EOS_TOKEN)
    fields = {**TINY_SHAPE, **overrides}
    config = AutoConfig.for_model(
        MODEL_TYPES[architecture],
        vocab_size=vocab_size,
        eos_token_id=eos_id,
        bos_token_id=eos_id,
        pad_token_id=eos_id,
        **fields,
    )
    config.architectures = [architecture]
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "norm" in name:
                param.uniform_(0.5, 1.5)
            elif name.endswith(".bias"):
                param.normal_(0.0, 0.2)
    model.to(DTYPES[dtype])
    kwargs = {} if max_shard_size is None else {"max_shard_size": max_shard_size}
    model.save_pretrained(folder, **kwargs)
    tokenizer.save_pretrained(folder)
    return folder


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", help="where to save the checkpoint")
    parser.add_argument("--architecture", default="Qwen3ForCausalLM", choices=sorted(MODEL_TYPES))
    parser.add_argument("--vocab-size", type=int, default=512)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--dtype", default="float32", choices=sorted(DTYPES))
    args = parser.parse_args(argv)
    path = save_random_checkpoint(
        args.folder, args.architecture, args.vocab_size, args.seed, args.dtype
    )
    print(path)


if __name__ == "__main__":
    main()

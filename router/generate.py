"""``specserve generate``: a greedy continuation from the target model alone.

The smallest end-to-end path through the runtime: tokenize, prefill, decode one
token at a time through the paged KV cache, detokenize. Speculation and
sampling come with the engine.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from transformers import AutoTokenizer

from model_runtime import ModelRunner, SequenceChunk
from model_runtime.config import DTYPES
from model_runtime.resolve import DEFAULT_TARGET, resolve_model


def default_device() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"


@dataclass(frozen=True)
class GenerateConfig:
    prompt: str = field(metadata={"help": "text to continue", "positional": True})
    model: str = field(
        default=DEFAULT_TARGET,
        metadata={"help": "checkpoint folder, bundled model name or hub id"},
    )
    max_tokens: int = field(default=64, metadata={"help": "tokens to generate at most"})
    dtype: str = field(
        default="auto",
        metadata={
            "help": "weight dtype; auto keeps the checkpoint's",
            "choices": ["auto", *DTYPES],
        },
    )
    device: str = field(
        default="auto", metadata={"help": "torch device; auto picks cuda if present"}
    )
    max_model_len: int | None = field(
        default=None, metadata={"help": "context length; default: the model's"}
    )
    block_size: int = field(default=16, metadata={"help": "tokens per KV-cache block"})

    def __post_init__(self) -> None:
        if self.max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1, got {self.max_tokens}")
        if self.block_size < 1:
            raise ValueError(f"block_size must be >= 1, got {self.block_size}")
        if self.max_model_len is not None and self.max_model_len < 2:
            raise ValueError(f"max_model_len must be >= 2, got {self.max_model_len}")


@torch.inference_mode()
def greedy_token_ids(
    runner: ModelRunner, prompt_ids: list[int], max_tokens: int, stop_ids: set[int]
) -> list[int]:
    """Up to ``max_tokens`` argmax tokens after ``prompt_ids``, ending at a stop id."""
    seq_id = 0
    logits = runner.forward([SequenceChunk(seq_id, prompt_ids)])  # [1, vocab]
    generated: list[int] = []
    try:
        while True:
            token = int(logits[0].argmax())
            generated.append(token)
            if token in stop_ids or len(generated) == max_tokens:
                return generated
            logits = runner.forward([SequenceChunk(seq_id, [token])])
    finally:
        runner.free(seq_id)


def generate(config: GenerateConfig) -> str:
    """The greedy continuation of ``config.prompt``, as text."""
    folder = resolve_model(config.model)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    prompt_ids = tokenizer.encode(config.prompt)
    device = default_device() if config.device == "auto" else config.device
    runner = ModelRunner.from_pretrained(
        folder,
        num_blocks=-(-(len(prompt_ids) + config.max_tokens) // config.block_size),
        block_size=config.block_size,
        dtype=config.dtype,
        device=device,
        max_model_len=config.max_model_len,
    )
    limit = runner.max_positions
    if len(prompt_ids) >= limit:
        raise ValueError(
            f"the prompt has {len(prompt_ids)} tokens; the maximum model length is {limit}"
        )
    max_tokens = min(config.max_tokens, limit - len(prompt_ids))
    stop_ids = {tokenizer.eos_token_id} if tokenizer.eos_token_id is not None else set()
    ids = greedy_token_ids(runner, prompt_ids, max_tokens, stop_ids)
    return str(tokenizer.decode(ids, skip_special_tokens=True))

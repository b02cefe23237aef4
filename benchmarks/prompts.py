"""The prompts the GPU benchmarks decode: random token ids, or code the
bundled pair was trained on."""

from __future__ import annotations

import torch

from benchmarks.shapes import bundled_tokenizer

PROMPT_LEN = 64
# New tokens a timed row decodes at least, by default. A row's tokens a round
# vary with where its rounds fall in the text: at batch 1 and k = 7, a = 0.8,
# 512 tokens (some 120 rounds) leave its tokens/s about 5% from its
# expectation, as much as adaptive k is allowed to trail the best fixed k
# (``--min-tokens`` 3072 for about 2%).
MIN_TOKENS = 512
MIN_BATCHES = 2  # batches a timed row decodes at least


def prompts(batch: int, seed: int, text: bool = False) -> list[dict[str, list[int]]]:
    """``batch`` prompts of random token ids, or (``text``) of code the bundled
    pair was trained on, as token ids of its tokenizer."""
    if text:
        tokenizer = bundled_tokenizer()
        return [{"prompt_token_ids": tokenizer.encode(f"def f{seed}_{i}(x, y):\n    ")}
                for i in range(batch)]  # fmt: skip
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(1000, 100000, (batch, PROMPT_LEN), generator=gen)
    return [{"prompt_token_ids": row.tolist()} for row in ids]


def timed_prompts(
    batch: int, max_tokens: int, text: bool = False, min_tokens: int = MIN_TOKENS
) -> list[list[dict]]:
    """The batches of ``batch`` prompts a row decodes one after another: enough
    for ``min_tokens`` new tokens, so that a row at concurrency 1 is not one
    prompt's luck (where its drafts happen to fall) and adaptive k's first
    rounds, which learn, are not most of it; and at least MIN_BATCHES, so
    that a row at high concurrency is not one batch's tail."""
    repeats = max(-(-min_tokens // (batch * max_tokens)), MIN_BATCHES)
    return [prompts(batch, 1 + r, text) for r in range(repeats)]

"""The prompts the GPU benchmarks decode: random token ids, or code the
bundled pair was trained on."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from benchmarks.shapes import bundled_tokenizer

PROMPT_LEN = 64
# New tokens a timed row decodes at least, by default. Every row decodes the
# same text, so what the text does to one k's rate it does much the same to
# the next: where rounds fall in it moves a row's rate by about 5% at batch 1
# (512 tokens, independent acceptance a = 0.8, k = 7), but k = 7 against
# k = 8 by about 1.6% (simulated), and by about 3% between neighbouring k
# in the H100 run at 900948a; the best of nine rows is biased up by some of
# that. More tokens (``--min-tokens``) shrink both, as 1 / sqrt(tokens).
MIN_TOKENS = 512
MIN_BATCHES = 2  # batches a timed row decodes at least


@dataclass(frozen=True)
class Workload:
    """What a timed row decodes, at any concurrency: greedy outputs of
    ``max_tokens`` each (EOS ignored), enough prompts for ``min_tokens`` new
    tokens (``timed_prompts``), of random token ids or (``text``) of code.
    The batches run one after another, closed: each waits for its last
    sequence, so its tail runs at fewer sequences; ``refill`` keeps the
    concurrency's count in flight instead, a new prompt taking the place of
    each that ends, as a server under load does (one tail, the row's last;
    the first ``batch`` start together, so places come free unevenly at
    first)."""

    max_tokens: int = 96
    text: bool = False
    min_tokens: int = MIN_TOKENS
    refill: bool = False

    def __post_init__(self) -> None:
        if self.max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1, got {self.max_tokens}")
        if self.min_tokens < 1:
            raise ValueError(f"min_tokens must be >= 1, got {self.min_tokens}")


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


def timed_prompts(batch: int, work: Workload) -> list[list[dict]]:
    """The batches of ``batch`` prompts a row decodes one after another: enough
    for ``min_tokens`` new tokens, so that a row at concurrency 1 is not one
    prompt's luck (where its drafts happen to fall) and adaptive k's first
    rounds, which learn, are not most of it; and at least MIN_BATCHES, so
    that a row at high concurrency is not one batch's tail."""
    repeats = max(-(-work.min_tokens // (batch * work.max_tokens)), MIN_BATCHES)
    return [prompts(batch, 1 + r, work.text) for r in range(repeats)]

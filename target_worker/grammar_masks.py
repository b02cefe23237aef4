"""Structured outputs in the verify: verify row j of a constrained sequence
is masked by the state its grammar reaches through the sequence's output and
its first j drafts (``model_runtime.grammar``), so that rejection sampling
samples the masked target distribution exactly. A draft the grammar refuses
has probability 0 there and is always rejected; the rows after it are never
used."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from model_runtime.grammar import GrammarMatchers, apply_bitmask
from model_runtime.host_copy import device_tensor
from protos.messages import VerifyRequest
from target_worker.penalties import PenaltyHistory


def grammar_masked(
    logits: torch.Tensor,
    batch: Sequence[VerifyRequest],
    num_drafts: list[int],
    history: PenaltyHistory,
    matchers: GrammarMatchers,
) -> torch.Tensor:
    """logits [R = sum(k + 1), V] with every constrained sequence's rows
    masked (a copy; untouched when none is constrained)."""
    constrained: list[tuple[int, list[int]]] = []
    rows: list[int] = []
    row = 0
    for r, k in zip(batch, num_drafts, strict=True):
        if r.sampling.grammar:
            matchers.sync(r.tokens.seq_id, r.sampling.grammar, history.output(r))
            drafts = list(r.draft_token_ids[:k])  # read back: the grammar steps on values
            constrained.append((r.tokens.seq_id, drafts))
            rows += range(row, row + k + 1)
        row += k + 1
    if not constrained:
        return logits
    bitmask = matchers.masks(constrained)  # [len(rows), W]
    return apply_bitmask(logits.float(), bitmask, device_tensor(rows, torch.long, logits.device))

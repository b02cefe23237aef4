"""Structured outputs in the verify: verify row j of a constrained sequence
is masked by the state its grammar reaches through the sequence's output and
its first j drafts (``model_runtime.grammar``), so that rejection sampling
samples the masked target distribution exactly. A draft the grammar refuses
has probability 0 there and is always rejected; the rows after it are never
used."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from model_runtime.grammar import GrammarMatchers, apply_bitmask
from model_runtime.host_copy import device_tensor
from protos.messages import VerifyRequest
from target_worker.penalties import PenaltyHistory


@dataclass(frozen=True)
class GrammarMasks:
    """A verify's masks: bitmask [len(rows), W] (host) for its logits' ``rows``."""

    bitmask: torch.Tensor
    rows: list[int]

    def apply(self, logits: torch.Tensor) -> torch.Tensor:
        """logits [R = sum(k + 1), V] with the masked rows masked (a copy)."""
        rows = device_tensor(self.rows, torch.long, logits.device)
        return apply_bitmask(logits.float(), self.bitmask, rows)


def grammar_masks(
    batch: Sequence[VerifyRequest],
    num_drafts: list[int],
    history: PenaltyHistory,
    matchers: GrammarMatchers,
) -> GrammarMasks | None:
    """The masks of every constrained sequence's k + 1 verify rows (None when
    none is constrained). They need the drafts alone, not the logits: the
    worker computes them on the host while its forward runs on the device."""
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
        return None
    return GrammarMasks(matchers.masks(constrained), rows)

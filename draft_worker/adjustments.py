"""What a draft applies to each step's logits from the sequence's past: the
penalties and bad words (``draft_worker.penalties``) and the grammar of a
structured output (``model_runtime.grammar``), so that it proposes from the
distribution the target verifies against. A grammar steps on token values:
each step's tokens of the constrained sequences are read back before the
next step (one wait on the device a step, only when one is constrained)."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from draft_worker.penalties import DraftHistory, StepPenalties
from model_runtime.grammar import GrammarMatchers, apply_bitmask
from model_runtime.host_copy import device_tensor
from protos.messages import ProposeRequest


class StepAdjustments:
    def __init__(
        self,
        penalties: StepPenalties | None,
        matchers: GrammarMatchers,
        constrained: list[tuple[int, int]],  # (batch row, sequence id)
        device: torch.device,
    ):
        self.penalties = penalties
        self.matchers = matchers
        self.constrained = constrained
        self._rows = device_tensor([b for b, _ in constrained], torch.long, device)

    @classmethod
    def start(
        cls,
        batch: Sequence[ProposeRequest],
        history: DraftHistory,
        matchers: GrammarMatchers,
        device: torch.device,
    ) -> StepAdjustments | None:
        """The adjustments of a call's first step (None: nothing to adjust)."""
        penalties = history.start(batch, matchers.vocab_size, device)
        constrained = [(b, r.tokens.seq_id) for b, r in enumerate(batch) if r.sampling.grammar]
        for b, seq_id in constrained:
            matchers.sync(seq_id, batch[b].sampling.grammar, history.output(batch[b]))
        if penalties is None and not constrained:
            return None
        return cls(penalties, matchers, constrained, device)

    def apply(self, logits: torch.Tensor) -> torch.Tensor:
        """logits [B, V] adjusted (a copy)."""
        if self.penalties is not None:
            logits = self.penalties.apply(logits)
        if self.constrained:
            bitmask = self.matchers.masks([(seq_id, []) for _, seq_id in self.constrained])
            logits = apply_bitmask(logits.float(), bitmask, self._rows)
        return logits

    def advance(self, drafted: torch.Tensor) -> None:
        """Take this step's tokens [B] into the next step's past."""
        if self.penalties is not None:
            self.penalties.advance(drafted)
        if self.constrained:
            tokens = drafted[self._rows].tolist()  # the grammar steps on values
            for (_, seq_id), token in zip(self.constrained, tokens, strict=True):
                self.matchers.take(seq_id, token)

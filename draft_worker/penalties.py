"""Penalties and bad words in the draft's steps, so that it proposes from the
distribution the target verifies against (outputs are exact either way: a
draft that ignored them would only be accepted less often).

As the target does, the draft keeps the token history of each sequence whose
sampling looks back, in step with its KV cache: cut to the cached length at
each call and extended by the tokens sent, and then by the first k - 1 drafts
of the call before (what its cache holds of them), read back only at the next
call, when the device is long done with them. Within a call the output's
token counts live on the device and grow by each step's token, and bad words
are matched against the output's last tokens there too: no step waits for
the host.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from model_runtime.host_copy import device_tensor
from model_runtime.penalties import penalized_logits
from model_runtime.sampling import SamplingOptions
from protos.messages import DraftedBatch, ProposeRequest


class DraftHistory:
    """The token history of the draft's sequences whose sampling looks back."""

    def __init__(self) -> None:
        self._tokens: dict[int, list[int]] = {}
        # The last call's drafts of each sequence: its batch's, and its row there.
        self._unread: dict[int, tuple[DraftedBatch, int]] = {}

    def start(
        self, batch: Sequence[ProposeRequest], vocab_size: int, device: torch.device
    ) -> StepPenalties | None:
        """Bring each such sequence's history to what this call appends; the
        penalties of the call's first step (None: no sequence has any)."""
        rows = [b for b, r in enumerate(batch) if r.sampling.needs_history]
        histories = []
        for b in rows:
            seq_id, tokens = batch[b].tokens.seq_id, batch[b].tokens
            held = self._tokens.get(seq_id, [])
            if seq_id in self._unread:  # the cache holds all but the last of them
                drafted, row = self._unread.pop(seq_id)
                held = held + drafted.host()[row][:-1]
            self._tokens[seq_id] = held[: tokens.cached_len] + list(tokens.token_ids)
            histories.append(self._tokens[seq_id])
        if not any(batch[b].sampling.penalizes for b in rows):
            return None
        options = [batch[b].sampling for b in rows]
        return StepPenalties.build(rows, histories, options, vocab_size, device)

    def output(self, r: ProposeRequest) -> list[int]:
        """The output a sequence that looks back holds (after ``start``)."""
        return self._tokens[r.tokens.seq_id][r.sampling.output_start :]

    def finish(self, batch: Sequence[ProposeRequest], drafts: DraftedBatch) -> None:
        """Note each such sequence's drafts (read at its next call)."""
        for b, r in enumerate(batch):
            if r.sampling.needs_history:
                self._unread[r.tokens.seq_id] = (drafts, b)

    def forget(self, seq_ids: Sequence[int]) -> None:
        for seq_id in seq_ids:
            self._tokens.pop(seq_id, None)
            self._unread.pop(seq_id, None)


@dataclass
class StepPenalties:
    """One call's penalties over its P penalised rows, advanced step by step."""

    rows: torch.Tensor  # [P] the batch rows penalised
    counts: torch.Tensor  # [P, V] float32: the output's token counts so far
    prompt_seen: torch.Tensor | None  # [P, V] bool: the prompt's tokens (repetition)
    presence: torch.Tensor  # [P, 1]
    frequency: torch.Tensor  # [P, 1]
    repetition: torch.Tensor  # [P, 1]
    tails: torch.Tensor  # [P, H] the output's last H tokens, -1 before its start
    word_rows: torch.Tensor  # [W] the penalised row of each bad word
    word_heads: torch.Tensor  # [W, H] each word's tokens but its last, right-aligned
    word_cares: torch.Tensor  # [W, H] bool: where a head has a token (left of it: any)
    word_lasts: torch.Tensor  # [W] each word's last token

    @classmethod
    def build(
        cls,
        rows: list[int],
        histories: list[list[int]],
        options: list[SamplingOptions],
        vocab_size: int,
        device: torch.device,
    ) -> StepPenalties:
        """From each penalised row's whole history (prompt, then output)."""
        outputs = [h[o.output_start :] for h, o in zip(histories, options, strict=True)]
        words = [(p, w) for p, o in enumerate(options) for w in o.bad_words]
        width = max((len(w) - 1 for _, w in words), default=0)
        heads = [[-1] * (width - len(w) + 1) + list(w[:-1]) for _, w in words]
        tails = [[-1] * (width - len(o)) + o[max(0, len(o) - width) :] for o in outputs]
        prompts = [h[: o.output_start] for h, o in zip(histories, options, strict=True)]
        repeats = any(o.repetition_penalty != 1.0 for o in options)

        def put(values: list[Any], dtype: torch.dtype, *shape: int) -> torch.Tensor:
            return device_tensor(values, dtype, device).view(*shape)

        p, w = len(rows), len(words)
        return cls(
            rows=put(rows, torch.long, p),
            counts=_counts(outputs, vocab_size, device),
            prompt_seen=_counts(prompts, vocab_size, device) > 0 if repeats else None,
            presence=put([o.presence_penalty for o in options], torch.float32, p, 1),
            frequency=put([o.frequency_penalty for o in options], torch.float32, p, 1),
            repetition=put([o.repetition_penalty for o in options], torch.float32, p, 1),
            tails=put(tails, torch.long, p, width),
            word_rows=put([r for r, _ in words], torch.long, w),
            word_heads=put(heads, torch.long, w, width),
            word_cares=put([[t >= 0 for t in h] for h in heads], torch.bool, w, width),
            word_lasts=put([word[-1] for _, word in words], torch.long, w),
        )

    def apply(self, logits: torch.Tensor) -> torch.Tensor:
        """logits [B, V] with the penalised rows penalised, their bad words masked (a copy)."""
        out = logits.float().clone()
        rows = penalized_logits(
            out[self.rows], self.counts, self.prompt_seen,
            self.presence, self.frequency, self.repetition,
        )  # fmt: skip
        if len(self.word_rows):
            tails = self.tails[self.word_rows]  # [W, H]
            matched = ((tails == self.word_heads) | ~self.word_cares).all(-1)  # [W]
            masks = torch.where(matched, -torch.inf, 0.0)
            rows.index_put_((self.word_rows, self.word_lasts), masks, accumulate=True)
        out[self.rows] = rows
        return out

    def advance(self, drafted: torch.Tensor) -> None:
        """Count this step's tokens [B] (on the device) into the next step's prefix."""
        tokens = drafted[self.rows]  # [P]
        at = torch.arange(len(tokens), device=tokens.device)
        self.counts.index_put_((at, tokens), torch.ones_like(tokens, dtype=torch.float32), True)
        if self.tails.shape[1]:
            self.tails = torch.cat([self.tails[:, 1:], tokens[:, None]], 1)


def _counts(token_lists: list[list[int]], vocab_size: int, device: torch.device) -> torch.Tensor:
    """[P, V] float32: how often each token occurs in each list."""
    flat = [p * vocab_size + t for p, tokens in enumerate(token_lists) for t in tokens]
    size = len(token_lists) * vocab_size
    counts = torch.bincount(device_tensor(flat, torch.long, device), minlength=size)
    return counts.view(len(token_lists), vocab_size).float()

"""Presence, frequency and repetition penalties and bad words, exact under
speculation.

A penalty depends on the tokens before the position it is applied at; at
verify row j of a sequence those are its tokens so far and its first j
drafts, as if they were already accepted. So the target worker keeps the
token history of each penalised sequence (what its KV cache holds, in step
with it: cut to the cached length each call, extended by the appended tokens
and then by the drafts accepted), and each row is penalised with the counts
of that row's own prefix. Rejection sampling then samples exactly the
penalised distribution, as decoding alone would.

The penalties are ``model_runtime.penalties``'s. A bad word's last token is
masked wherever the output ends in the tokens before it.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from model_runtime.host_copy import device_tensor
from model_runtime.penalties import penalized_logits
from model_runtime.sampling import SamplingOptions
from protos.messages import VerifyRequest
from target_worker.drafts import draft_tensor


class PenaltyHistory:
    """The token history of the penalised sequences a target worker holds."""

    def __init__(self) -> None:
        self._tokens: dict[int, list[int]] = {}

    def extend(self, batch: Sequence[VerifyRequest]) -> None:
        """Bring each penalised sequence's history to what this call appends."""
        for r in batch:
            if r.sampling.needs_history:
                held = self._tokens.get(r.tokens.seq_id, [])[: r.tokens.cached_len]
                self._tokens[r.tokens.seq_id] = held + list(r.tokens.token_ids)

    def accept(self, batch: Sequence[VerifyRequest], outputs: Sequence[list[int]]) -> None:
        """Add the drafts each call accepted: every token but the last it gained."""
        for r, tokens in zip(batch, outputs, strict=True):
            if r.sampling.needs_history:
                self._tokens[r.tokens.seq_id] += tokens[:-1]

    def output(self, r: VerifyRequest) -> list[int]:
        """The output a sequence that looks back holds (before this call's drafts)."""
        return self._tokens[r.tokens.seq_id][r.sampling.output_start :]

    def forget(self, seq_ids: Sequence[int]) -> None:
        for seq_id in seq_ids:
            self._tokens.pop(seq_id, None)

    def apply(
        self, logits: torch.Tensor, batch: Sequence[VerifyRequest], num_drafts: list[int]
    ) -> torch.Tensor:
        """logits [R = sum(k + 1), V] with every penalised sequence's rows
        penalised by their prefixes' counts (a copy; untouched when none is)."""
        if not any(r.sampling.needs_history for r in batch):
            return logits
        out = logits.float().clone()
        drafts = draft_tensor(batch, out.device)  # [sum k], every request's in order
        row = drafted = 0
        for r, k in zip(batch, num_drafts, strict=True):
            if r.sampling.needs_history:
                rows = slice(row, row + k + 1)
                out[rows] = self._penalised(out[rows], r, drafts[drafted : drafted + k])
            row, drafted = row + k + 1, drafted + k
        return out

    def _penalised(
        self, logits: torch.Tensor, r: VerifyRequest, drafts: torch.Tensor
    ) -> torch.Tensor:
        """One sequence's rows [k + 1, V]: row j penalised as if its first j
        drafts ([k], on the device) were accepted."""
        o = r.sampling
        history = self._tokens[r.tokens.seq_id]
        if o.penalized:
            logits = _with_penalties(logits, history, drafts, o)
        if o.bad_words:
            host = drafts.tolist()  # read back: bad words match token values
            logits = _without_bad_words(logits, history[o.output_start :], host, o)
        return logits


def _without_bad_words(
    logits: torch.Tensor, output: list[int], drafts: list[int], o: SamplingOptions
) -> torch.Tensor:
    """Row j [k + 1, V] masks the last token of every bad word whose other
    tokens end the output followed by the first j drafts."""
    masked = logits.clone()
    for j in range(logits.shape[0]):
        before = output + drafts[:j]
        for word in o.bad_words:
            head = list(word[:-1])
            if not head or before[-len(head) :] == head:
                masked[j, word[-1]] = -torch.inf
    return masked


def _with_penalties(
    logits: torch.Tensor, history: list[int], drafts: torch.Tensor, o: SamplingOptions
) -> torch.Tensor:
    """Rows [k + 1, V] with the presence, frequency and repetition penalties
    of each row's prefix: the history and the drafts ([k], on the device)
    before that row."""
    (rows, vocab), device = logits.shape, logits.device
    output = device_tensor(history[o.output_start :], torch.long, device)
    counts = torch.bincount(output, minlength=vocab).float().repeat(rows, 1)  # [k + 1, V]
    if rows > 1:
        # Draft i counts at rows i + 1 .. k.
        pairs = [(row, i) for i in range(rows - 1) for row in range(i + 1, rows)]
        at = device_tensor([p[0] for p in pairs], torch.long, device)
        which = device_tensor([p[1] for p in pairs], torch.long, device)
        ones = torch.ones(len(pairs), device=device)
        counts.index_put_((at, drafts[which].long()), ones, accumulate=True)
    prompt_seen = None
    if o.repetition_penalty != 1.0:
        prompt = device_tensor(history[: o.output_start], torch.long, device)
        prompt_seen = (torch.bincount(prompt, minlength=vocab) > 0).expand(rows, vocab)
    return penalized_logits(
        logits, counts, prompt_seen,
        o.presence_penalty, o.frequency_penalty, o.repetition_penalty,
    )  # fmt: skip

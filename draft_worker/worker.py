"""DraftWorker: holds the draft model and proposes k tokens per sequence.

For a batch it rewinds each sequence to the tokens the router says are still
valid, appends the tokens it is sent, then runs k batched autoregressive steps.
Each step samples under the request's own parameters from the draft's
processed distribution (with the target's bias, suppression, penalties and
bad words at that position: ``draft_worker.penalties``) truncated to its
top-N tokens and renormalised; that
truncated q is exactly what the token was drawn from, and it is returned with
the token (rejection sampling is lossless for any q). A greedy draft's q is
one-hot on its argmax, which is what the target assumes of a draft sent
without q: a batch of greedy requests sends none (no softmax or top-N over
the vocabulary per step, nothing to check, copy or send). The drafts stay on
the device (``DeviceTokens``): no step, nor the end of drafting, waits for the
GPU. Afterwards the sequence holds its tokens and the first k-1 drafts (the
k-th was never fed back).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import torch

from draft_worker.adjustments import StepAdjustments
from draft_worker.penalties import DraftHistory
from model_runtime.batch import SequenceChunk
from model_runtime.distributed import SINGLE_DEVICE, TensorParallelGroup
from model_runtime.runner import ModelRunner
from model_runtime.sampling import (
    RowRandomness,
    SamplingOptions,
    SamplingTensors,
    adjusted_logits,
    processed_probs,
)
from model_runtime.status import OK
from protos.messages import DeviceTokens, DraftedBatch, Proposal, ProposeRequest
from worker_base.local_worker import LocalWorker


@dataclass(frozen=True)
class DraftWorkerConfig:
    top_n: int = field(default=32, metadata={"help": "tokens of q shipped per draft position"})
    seed: int = field(default=0, metadata={"help": "seed for requests without one"})

    def __post_init__(self) -> None:
        if self.top_n < 1:
            raise ValueError(f"top_n must be >= 1, got {self.top_n}")
        if self.seed < 0:
            raise ValueError(f"seed must be >= 0, got {self.seed}")


class DraftWorker(LocalWorker):
    def __init__(
        self,
        runner: ModelRunner,
        config: DraftWorkerConfig = DraftWorkerConfig(),
        model_name: str = "",
        tp: TensorParallelGroup = SINGLE_DEVICE,
    ):
        """With a tensor-parallel group every rank drafts on its shard and takes
        rank 0's token at each step, so every rank's KV cache stays the same."""
        super().__init__(runner, model_name)
        self.tp = tp
        self.top_n = min(config.top_n, runner.vocab_size)
        self.randomness = RowRandomness(self.device, config.seed + 1)
        self.history = DraftHistory()

    def release(self, seq_ids: Sequence[int]) -> int:
        self.history.forget(seq_ids)
        return super().release(seq_ids)

    @torch.inference_mode()
    def propose(self, requests: Sequence[ProposeRequest], k: int) -> list[Proposal]:
        if k < 1:
            raise ValueError(f"the number of draft tokens must be >= 1, got {k}")
        statuses = self.runner.admit(
            [(r.tokens.seq_id, r.tokens.cached_len, r.tokens.token_ids, k - 1) for r in requests]
        )
        batch = [r for r, s in zip(requests, statuses, strict=True) if s.ok]
        proposals = iter(self._propose_batch(batch, k) if batch else [])
        return [
            next(proposals) if s.ok else Proposal(r.tokens.seq_id, s)
            for r, s in zip(requests, statuses, strict=True)
        ]

    def _propose_batch(self, batch: Sequence[ProposeRequest], k: int) -> list[Proposal]:
        params = SamplingTensors.build(
            [r.sampling for r in batch], [1] * len(batch), self.runner.vocab_size, self.device
        )
        greedy = params.greedy.unsqueeze(1)  # [B, 1]
        seeds = [r.sampling.seed for r in batch]
        all_greedy = all(r.sampling.greedy for r in batch)
        position = [r.tokens.cached_len + len(r.tokens.token_ids) for r in batch]
        chunks = [SequenceChunk(r.tokens.seq_id, r.tokens.token_ids) for r in batch]
        tokens, ids, probs = [], [], []
        drafted: torch.Tensor | None = None  # [B] the last step's tokens, on the device
        options = [r.sampling for r in batch]
        adjusts = any(o.adjusts_logits for o in options)
        past = StepAdjustments.start(batch, self.history, self.grammars, self.device)
        for step in range(k):
            logits = self.runner.forward(chunks, drafted)  # [B, V]
            if past is not None:  # the target's penalties, bad words and grammar
                logits = past.apply(logits)
            if adjusts:  # the target's bias and suppression, at this step's position
                logits = adjusted_logits(logits, _at_step(options, step), [1] * len(batch))
            if all_greedy:  # q is one-hot on the argmax: no softmax, no top-N
                drafted = self.tp.broadcast(logits.argmax(-1))  # [B]
            else:
                step_ids, step_probs = self._truncated_q(logits, params, greedy)
                noise = self.randomness.exponential(
                    [(s, p + step) for s, p in zip(seeds, position, strict=True)],
                    self.top_n,
                    "draft",
                )
                choice = (step_probs / noise).argmax(-1, keepdim=True)  # [B, 1]
                drafted = self.tp.broadcast(step_ids.gather(1, choice).squeeze(1))  # [B]
                ids.append(step_ids)
                probs.append(step_probs)
            tokens.append(drafted)
            if past is not None:
                past.advance(drafted)
            # The next step feeds these tokens from the device: no host sync.
            chunks = [SequenceChunk(c.seq_id, [0]) for c in chunks]
        # Left on the device: read back with the verify's results, or by the wire.
        drafts = DraftedBatch(torch.stack(tokens, 1))  # [B, k]
        self.history.finish(batch, drafts)
        if all_greedy:  # no q: the target takes a draft without one as one-hot
            return [
                Proposal(r.tokens.seq_id, OK, DeviceTokens(drafts, b, k))
                for b, r in enumerate(batch)
            ]
        all_ids, all_probs = torch.stack(ids, 1), torch.stack(probs, 1)  # [B, k, N]
        return [
            Proposal(r.tokens.seq_id, OK, DeviceTokens(drafts, b, k), all_ids[b], all_probs[b])
            for b, r in enumerate(batch)
        ]

    def _truncated_q(
        self, logits: torch.Tensor, params: SamplingTensors, greedy: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """logits [B, V] -> the top-N support [B, N] and q renormalised on it [B, N].

        Greedy rows put all mass on their argmax (the first of the support).
        """
        q = processed_probs(logits, params)
        top, ids = q.topk(self.top_n, dim=-1)
        top = top / top.sum(-1, keepdim=True)
        one_hot = torch.zeros_like(top)
        one_hot[:, 0] = 1.0
        greedy_ids = ids.clone()
        greedy_ids[:, 0] = logits.argmax(-1)
        return torch.where(greedy, greedy_ids, ids), torch.where(greedy, one_hot, top)


def _at_step(options: list[SamplingOptions], step: int) -> list[SamplingOptions]:
    """The options of a draft's ``step``-th token: what is suppressed for the
    first min_tokens_left positions is suppressed for fewer as steps go."""
    return [replace(o, min_tokens_left=max(0, o.min_tokens_left - step)) for o in options]

"""TargetWorker: holds the target model, prefills prompts and verifies drafts.

A verify appends, per sequence, the tokens it is sent (usually the one token
generated last round) and its k drafts, runs ONE forward over all of them for
the whole batch, rejection-samples, and rolls its KV back to what was
accepted: the sequence then holds its tokens plus the accepted drafts, and the
recovered or bonus token is sent back to it next round. A prefill is a verify
without drafts.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from model_runtime.runner import ModelRunner, SequenceChunk
from model_runtime.sampling import RowRandomness, SamplingTensors, processed_probs
from model_runtime.status import SequenceStatus
from protos.local_worker import LocalWorker
from protos.messages import VerifyOutput, VerifyRequest
from target_worker.rejection_sampler import (
    PLACEHOLDER,
    RejectionInputs,
    densify,
    rejection_sample_reference,
    rejection_sample_triton,
)


@dataclass(frozen=True)
class TargetWorkerConfig:
    use_triton: bool | None = None  # None: on CUDA devices only
    seed: int = 0  # for requests without a seed of their own

    def __post_init__(self) -> None:
        if self.seed < 0:
            raise ValueError(f"seed must be >= 0, got {self.seed}")


class TargetWorker(LocalWorker):
    def __init__(
        self,
        runner: ModelRunner,
        config: TargetWorkerConfig = TargetWorkerConfig(),
        model_name: str = "",
    ):
        super().__init__(runner, model_name)
        use_triton = config.use_triton
        if use_triton is None:
            use_triton = self.device.type == "cuda"
        self.sample = rejection_sample_triton if use_triton else rejection_sample_reference
        self.randomness = RowRandomness(self.device, config.seed)

    def prefill(self, requests: Sequence[VerifyRequest]) -> list[VerifyOutput]:
        """Append each prompt and sample its first token."""
        return self.verify(requests)

    @torch.inference_mode()
    def verify(self, requests: Sequence[VerifyRequest]) -> list[VerifyOutput]:
        statuses = self.runner.admit(
            [
                (r.tokens.seq_id, r.tokens.cached_len, r.tokens.token_ids, len(r.draft_token_ids))
                for r in requests
            ]
        )
        batch = [r for r, s in zip(requests, statuses, strict=True) if s.ok]
        sampled = self._verify_batch(batch) if batch else []
        done = iter(sampled)
        return [
            next(done) if s.ok else VerifyOutput(r.tokens.seq_id, s)
            for r, s in zip(requests, statuses, strict=True)
        ]

    def _verify_batch(self, batch: Sequence[VerifyRequest]) -> list[VerifyOutput]:
        num_drafts = [len(r.draft_token_ids) for r in batch]
        logits = self.runner.forward(
            [
                SequenceChunk(r.tokens.seq_id, [*r.tokens.token_ids, *r.draft_token_ids], k + 1)
                for r, k in zip(batch, num_drafts, strict=True)
            ]
        )  # [R = sum(k + 1), V]
        vocab = logits.shape[1]
        params = SamplingTensors.build(
            [r.sampling for r in batch], [k + 1 for k in num_drafts], vocab, self.device
        )
        # Position of the first token each sequence gains: keys its random draws.
        positions = [r.tokens.cached_len + len(r.tokens.token_ids) for r in batch]
        seeds = [r.sampling.seed for r in batch]
        inputs = RejectionInputs(
            target_probs=processed_probs(logits, params),
            target_argmax=logits.argmax(-1),
            draft_ids=torch.tensor(
                [t for r in batch for t in r.draft_token_ids], dtype=torch.int64, device=self.device
            ),
            draft_probs=self._dense_draft_probs(batch, vocab),
            num_drafts=num_drafts,
            is_greedy=torch.tensor([r.sampling.greedy for r in batch], device=self.device),
            uniforms=self.randomness.uniform(
                list(zip(seeds, positions, num_drafts, strict=True)), "accept"
            ),
            noise=self.randomness.exponential(
                list(zip(seeds, positions, strict=True)), vocab, "target"
            ),
        )
        out = self.sample(inputs).tolist()  # the round's one host synchronisation
        results = []
        for r, row in zip(batch, out, strict=True):
            tokens = [t for t in row if t != PLACEHOLDER]
            accepted = len(tokens) - 1
            held = r.tokens.cached_len + len(r.tokens.token_ids) + accepted
            self.runner.truncate(r.tokens.seq_id, held)
            results.append(VerifyOutput(r.tokens.seq_id, SequenceStatus(), tokens, accepted))
        return results

    def _dense_draft_probs(self, batch: Sequence[VerifyRequest], vocab: int) -> torch.Tensor:
        """q of every draft, dense [T, V]; one-hot where a request sent no q (greedy)."""
        parts = []
        for r in batch:
            k = len(r.draft_token_ids)
            if not k:
                continue
            if r.draft_ids is None or r.draft_probs is None:
                ids = torch.tensor(r.draft_token_ids, device=self.device).unsqueeze(1)
                probs = torch.ones(k, 1, device=self.device)
            else:
                ids, probs = r.draft_ids.to(self.device), r.draft_probs.to(self.device)
            parts.append(densify(ids, probs, vocab))
        if not parts:
            return torch.zeros(0, vocab, device=self.device)
        return torch.cat(parts)

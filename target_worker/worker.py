"""TargetWorker: holds the target model, prefills prompts and verifies drafts.

A verify appends, per sequence, the tokens it is sent (usually the one token
generated last round) and its k drafts, runs ONE forward over all of them for
the whole batch, rejection-samples, and rolls its KV back to what was
accepted: the sequence then holds its tokens plus the accepted drafts, and the
recovered or bonus token is sent back to it next round. A prefill is a verify
without drafts.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from model_runtime.batch import SequenceChunk
from model_runtime.distributed import SINGLE_DEVICE, TensorParallelGroup
from model_runtime.host_copy import device_tensor
from model_runtime.logprobs import token_logprobs
from model_runtime.runner import ModelRunner
from model_runtime.sampling import (
    RowRandomness,
    SamplingTensors,
    adjusted_logits,
    processed_probs,
)
from model_runtime.status import SequenceStatus, StatusCode
from protos.messages import VerifyOutput, VerifyRequest, device_drafts
from target_worker.checks import draft_problems
from target_worker.drafts import chunk_tokens, dense_draft_probs, draft_tensor, input_ids
from target_worker.grammar_masks import GrammarMasks, grammar_masks
from target_worker.penalties import PenaltyHistory
from target_worker.rejection_sampler import (
    PLACEHOLDER,
    RejectionInputs,
    rejection_sample_reference,
    rejection_sample_triton,
)
from worker_base.local_worker import LocalWorker


@dataclass(frozen=True)
class TargetWorkerConfig:
    use_triton: bool | None = None  # None: on CUDA devices only
    seed: int = field(default=0, metadata={"help": "seed for requests without one"})

    def __post_init__(self) -> None:
        if self.seed < 0:
            raise ValueError(f"seed must be >= 0, got {self.seed}")


class TargetWorker(LocalWorker):
    def __init__(
        self,
        runner: ModelRunner,
        config: TargetWorkerConfig = TargetWorkerConfig(),
        model_name: str = "",
        tp: TensorParallelGroup = SINGLE_DEVICE,
    ):
        """With a tensor-parallel group, every rank runs the same calls on its
        shard; rank 0 samples and the others take its tokens, so every rank's KV
        cache keeps the same sequences and lengths."""
        super().__init__(runner, model_name)
        self.tp = tp
        use_triton = config.use_triton
        if use_triton is None:
            use_triton = self.device.type == "cuda"
        self.sample = rejection_sample_triton if use_triton else rejection_sample_reference
        self.randomness = RowRandomness(self.device, config.seed)
        self.penalties = PenaltyHistory()

    def release(self, seq_ids: Sequence[int]) -> int:
        self.penalties.forget(seq_ids)
        return super().release(seq_ids)

    def prefill(self, requests: Sequence[VerifyRequest]) -> list[VerifyOutput]:
        """Append each prompt and sample its first token."""
        return self.verify(requests)

    @torch.inference_mode()
    def verify(self, requests: Sequence[VerifyRequest]) -> list[VerifyOutput]:
        statuses = self._admit(requests)
        batch = [r for r, s in zip(requests, statuses, strict=True) if s.ok]
        sampled = self._verify_batch(batch) if batch else []
        done = iter(sampled)
        return [
            next(done) if s.ok else VerifyOutput(r.tokens.seq_id, s)
            for r, s in zip(requests, statuses, strict=True)
        ]

    def _admit(self, requests: Sequence[VerifyRequest]) -> list[SequenceStatus]:
        """Each request's status: its drafts checked, then the sequence admitted
        (its tokens and drafts counted and checked together)."""
        problems = draft_problems(requests, self.vocab_size)
        admitted = iter(
            self.runner.admit(
                [
                    _admitted(r)
                    for r, problem in zip(requests, problems, strict=True)
                    if problem is None
                ]
            )
        )
        return [
            next(admitted)
            if problem is None
            else SequenceStatus(
                StatusCode.INVALID_ARGUMENT, f"sequence {r.tokens.seq_id}: {problem}"
            )
            for r, problem in zip(requests, problems, strict=True)
        ]

    def _verify_batch(self, batch: Sequence[VerifyRequest]) -> list[VerifyOutput]:
        num_drafts = [len(r.draft_token_ids) for r in batch]
        # Logits for the k + 1 rows that sample, and for every appended token of
        # a prefill that asked for prompt logprobs.
        num_logits = [
            len(r.tokens.token_ids) if _wants_prompt_logprobs(r) else k + 1
            for r, k in zip(batch, num_drafts, strict=True)
        ]
        self.penalties.extend(batch)
        all_logits = self.runner.forward(
            [
                SequenceChunk(r.tokens.seq_id, chunk_tokens(r), n)
                for r, n in zip(batch, num_logits, strict=True)
            ],
            input_ids(batch, self.vocab_size, self.device),
        )  # [sum(num_logits), V]
        masks = grammar_masks(batch, num_drafts, self.penalties, self.grammars)  # meanwhile
        starts = list(itertools.accumulate(num_logits, initial=0))
        sampling_rows = [
            row
            for k, end in zip(num_drafts, starts[1:], strict=True)
            for row in range(end - k - 1, end)
        ]
        logits = (
            all_logits if len(sampling_rows) == all_logits.shape[0] else all_logits[sampling_rows]
        )
        # logits: [R = sum(k + 1), V]
        out = self._sample(batch, logits, num_drafts, masks)
        gained = [[t for t in row if t != PLACEHOLDER] for row in out]
        self.penalties.accept(batch, gained)
        results = []
        for r, tokens in zip(batch, gained, strict=True):
            accepted = len(tokens) - 1
            held = r.tokens.cached_len + len(r.tokens.token_ids) + accepted
            self.runner.truncate(r.tokens.seq_id, held)
            results.append(VerifyOutput(r.tokens.seq_id, SequenceStatus(), tokens, accepted))
        wants = any(r.sampling.logprobs is not None or _wants_prompt_logprobs(r) for r in batch)
        if wants and self.tp.rank == 0:  # only rank 0's results leave the group
            self._add_logprobs(batch, results, all_logits, starts)
        return results

    def _sample(
        self,
        batch: Sequence[VerifyRequest],
        logits: torch.Tensor,
        num_drafts: list[int],
        masks: GrammarMasks | None,
    ) -> list[list[int]]:
        """Rejection-sample every sequence: [B, max k + 1] tokens, PLACEHOLDER-padded."""
        logits = self.penalties.apply(logits, batch, num_drafts)
        if masks is not None:
            logits = masks.apply(logits)
        logits = adjusted_logits(logits, [r.sampling for r in batch], [k + 1 for k in num_drafts])
        if all(r.sampling.greedy for r in batch):
            return self._greedy(batch, logits, num_drafts)
        if self.tp.rank != 0:
            shape = (len(batch), max(num_drafts) + 1)
            out = torch.empty(shape, dtype=torch.int64, device=self.device)
            return self.tp.broadcast(out).tolist()  # rank 0's tokens
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
            draft_ids=draft_tensor(batch, self.device),
            draft_probs=dense_draft_probs(batch, vocab, self.device),
            num_drafts=num_drafts,
            is_greedy=device_tensor([r.sampling.greedy for r in batch], torch.bool, self.device),
            uniforms=self.randomness.uniform(
                list(zip(seeds, positions, num_drafts, strict=True)), "accept"
            ),
            noise=self.randomness.exponential(
                list(zip(seeds, positions, strict=True)), vocab, "target"
            ),
        )
        out = self.tp.broadcast(self.sample(inputs).to(self.device))
        return out.tolist()  # the round's one host synchronisation

    def _greedy(
        self, batch: Sequence[VerifyRequest], logits: torch.Tensor, num_drafts: list[int]
    ) -> list[list[int]]:
        """Greedy acceptance on the host from the argmax of every row, read
        back in one copy with the drafts still on the device: drafts are kept
        while they equal it."""
        argmax = self.tp.broadcast(logits.argmax(-1))  # [R] rank 0's
        if any(num_drafts):
            values = torch.cat([argmax, draft_tensor(batch, argmax.device)]).tolist()
        else:
            values = argmax.tolist()
        rows, drafts = values[: len(argmax)], iter(values[len(argmax) :])
        width, row, out = max(num_drafts) + 1, 0, []
        for k in num_drafts:
            tokens, mine = [rows[row]], [next(drafts) for _ in range(k)]
            for i, draft in enumerate(mine):
                if draft != tokens[-1]:
                    break
                tokens.append(rows[row + i + 1])
            out.append(tokens + [PLACEHOLDER] * (width - len(tokens)))
            row += k + 1
        return out

    @staticmethod
    def _add_logprobs(
        batch: Sequence[VerifyRequest],
        results: list[VerifyOutput],
        logits: torch.Tensor,
        starts: list[int],
    ) -> None:
        """Fill in the logprobs the requests asked for, from the rows of ``logits``
        (the forward's, each sequence's rows starting at ``starts[i]``)."""
        rows: list[int] = []
        tokens: list[int] = []
        num_top: list[int] = []
        wanted: list[tuple[VerifyOutput, int, int]] = []  # (output, rows of prompt, of output)
        for r, result, start, end in zip(batch, results, starts[:-1], starts[1:], strict=True):
            n_prompt = 0
            if _wants_prompt_logprobs(r):
                # Row i predicts appended token i + 1; the last row samples.
                n_prompt = len(r.tokens.token_ids) - 1
                rows += range(start, start + n_prompt)
                tokens += r.tokens.token_ids[1:]
                num_top += [r.sampling.prompt_logprobs or 0] * n_prompt
            n_out = 0
            if r.sampling.logprobs is not None:
                first = end - len(r.draft_token_ids) - 1
                n_out = len(result.token_ids)
                rows += range(first, first + n_out)
                tokens += result.token_ids
                num_top += [r.sampling.logprobs] * n_out
            wanted.append((result, n_prompt, n_out))
        computed = iter(token_logprobs(logits[rows], tokens, num_top))
        for result, n_prompt, n_out in wanted:
            result.prompt_logprobs = [next(computed) for _ in range(n_prompt)]
            result.logprobs = [next(computed) for _ in range(n_out)]


def _admitted(r: VerifyRequest) -> tuple[int, int, list[int], int]:
    """What the runner admits of a request: drafts still on the device are
    counted, not checked (they are fed within the vocabulary)."""
    if device_drafts(r.draft_token_ids) is not None:
        return r.tokens.seq_id, r.tokens.cached_len, r.tokens.token_ids, len(r.draft_token_ids)
    return r.tokens.seq_id, r.tokens.cached_len, [*r.tokens.token_ids, *r.draft_token_ids], 0


def _wants_prompt_logprobs(r: VerifyRequest) -> bool:
    """A prefill (no drafts) that asked for the log-probabilities of its tokens."""
    return r.sampling.prompt_logprobs is not None and not r.draft_token_ids

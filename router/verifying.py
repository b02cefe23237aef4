"""Verifying drafts on the target pool.

A sequence's KV lives on one target worker, so a round groups the running
sequences by their target worker and sends each worker one batch; with more
than one worker the calls run at the same time. Each request carries the
tokens the worker lacks and the drafts, cut so that no sequence ever grows
past max_model_len.

The verifier also keeps what the engine left behind on targets: the sequences
moved off a target that was lost are released there when it comes back, and
while nothing runs it asks the targets for their free blocks again (a gRPC
worker's count is otherwise only what its last reply said).
"""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from model_runtime.errors import WorkerUnavailableError
from protos.messages import SequenceTokens, VerifyOutput, VerifyRequest
from router.clients import TargetClient
from router.drafting import Draft
from router.pool import WorkerPool
from router.sequence import SequenceState

logger = logging.getLogger(__name__)


@dataclass
class Verified:
    """One target worker's share of a round: its sequences, what was asked of it,
    and its outputs (or why it could not be reached)."""

    target: int
    seqs: list[SequenceState]
    requests: list[VerifyRequest]
    outputs: list[VerifyOutput] | WorkerUnavailableError


class Verifier:
    def __init__(self, pool: WorkerPool[TargetClient], max_model_len: int):
        self.pool = pool
        self.max_model_len = max_model_len
        self._calls = ThreadPoolExecutor(max(1, len(pool)), "verify")
        self._abandoned: dict[int, list[int]] = {}  # target -> sequences moved off it

    def verify(self, seqs: list[SequenceState], drafts: dict[int, Draft]) -> list[Verified]:
        """Verify every sequence (with its drafts, if any) on its target worker."""
        groups = {t: [s for s in seqs if s.target_worker == t] for t in range(len(self.pool))}
        shares = [Verified(t, g, self._requests(g, drafts), []) for t, g in groups.items() if g]
        if len(shares) > 1:
            for share, outputs in zip(shares, self._calls.map(self._call, shares), strict=True):
                share.outputs = outputs
        else:
            for share in shares:
                share.outputs = self._call(share)
        return shares

    def prefill(
        self, target: int, seqs: list[SequenceState]
    ) -> list[VerifyOutput] | WorkerUnavailableError:
        """Append every token of each new sequence on ``target`` and sample its first."""
        requests = [
            VerifyRequest(SequenceTokens(s.seq_id, 0, s.all_ids), s.sampling()) for s in seqs
        ]
        try:
            return self.pool.workers[target].prefill(requests)
        except WorkerUnavailableError as e:
            return e

    def _requests(self, seqs: list[SequenceState], drafts: dict[int, Draft]) -> list[VerifyRequest]:
        requests = []
        for s in seqs:
            tokens, ids, probs = drafts.get(s.seq_id, ([], None, None))
            k = max(0, min(len(tokens), self.max_model_len - s.num_tokens - 1))  # never past it
            requests.append(
                VerifyRequest(
                    SequenceTokens(s.seq_id, s.target_cached, s.tokens_from(s.target_cached)),
                    s.sampling(),
                    tokens[:k],
                    None if ids is None else ids[:k],
                    None if probs is None else probs[:k],
                )
            )
        return requests

    def _call(self, share: Verified) -> list[VerifyOutput] | WorkerUnavailableError:
        try:
            return self.pool.workers[share.target].verify(share.requests)
        except WorkerUnavailableError as e:
            return e

    def abandon(self, target: int, seq_ids: list[int]) -> None:
        """Remember sequences that moved off the lost ``target``, to free them there."""
        self._abandoned.setdefault(target, []).extend(seq_ids)

    def release_abandoned(self, targets: list[int]) -> None:
        """Free on each of ``targets`` (all up) what moved off it while it was lost."""
        for target in targets:
            seq_ids = self._abandoned.pop(target, [])
            if not seq_ids:
                continue
            try:
                self.pool.workers[target].release(seq_ids)
            except WorkerUnavailableError as e:
                self._abandoned[target] = seq_ids
                logger.warning("could not release on target worker %d: %s", target, e)

    def refresh_room(self, targets: list[int]) -> None:
        """Ask each of ``targets`` for its free blocks now."""
        for target in targets:
            try:
                self.pool.workers[target].describe()
            except WorkerUnavailableError as e:
                self.pool.lose(target, e)

    def close(self) -> None:
        self._calls.shutdown(wait=True)

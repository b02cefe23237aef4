"""Verifying drafts on the target pool.

A sequence's KV lives on one target worker, so a round groups the running
sequences by their target worker and sends each worker one batch; with more
than one worker the batches are all sent before any is waited on. Each
request carries the tokens the worker lacks and the drafts, cut so that no
sequence ever grows past max_model_len. The batches are prepared (grouped,
and encoded for a gRPC worker) before the drafts come (``prepare``): the
engine does that while the draft workers draft, and then only fills in the
drafts (``send``).

The verifier also keeps what the engine left behind on targets: the sequences
moved off a target that was lost are released there when it comes back, and
while nothing runs it asks the targets for their free blocks again (a gRPC
worker's count is otherwise only what its last reply said).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from model_runtime.errors import WorkerUnavailableError
from protos.messages import SequenceTokens, VerifyOutput, VerifyRequest
from router.ahead import ShareFacts
from router.clients import TargetClient, prepare_verify, takes_wire_drafts
from router.drafting import Drafts
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
    outputs: Sequence[VerifyOutput] | WorkerUnavailableError
    facts: ShareFacts | None  # for cutting the next round's drafts from the outputs


# What waits for a sent share's outputs, or why it could not be sent.
Waiting = Callable[[], Sequence[VerifyOutput]] | WorkerUnavailableError


@dataclass
class Prepared:
    """A share before its drafts, and what sends it once they are in its requests."""

    share: Verified
    # Sends it (with the share's drafts as they came over the wire, if given).
    send: Callable[[object | None], Callable[[], Sequence[VerifyOutput]]]
    takes_wire: bool  # its target sends drafts as they came over the wire


class Verifier:
    def __init__(self, pool: WorkerPool[TargetClient], max_model_len: int):
        self.pool = pool
        self.max_model_len = max_model_len
        self._abandoned: dict[int, list[int]] = {}  # target -> sequences moved off it

    def verify(self, seqs: list[SequenceState], drafts: Drafts) -> list[Verified]:
        """Verify every sequence (with its drafts, if any) on its target worker."""
        return self.send(self.prepare(seqs), drafts)

    def prepare(self, seqs: list[SequenceState], note_next: bool = False) -> list[Prepared]:
        """Each target worker's share of ``seqs``, ready for its drafts (and,
        with ``note_next``, with what the next round's drafts will need)."""
        groups = {t: [s for s in seqs if s.target_worker == t] for t in range(len(self.pool))}
        prepared = []
        for target, group in groups.items():
            if not group:
                continue
            facts = ShareFacts.of(group) if note_next else None
            share = Verified(target, group, self._requests(group), [], facts)
            worker = self.pool.workers[target]
            send = prepare_verify(worker, share.requests)
            prepared.append(Prepared(share, send, takes_wire_drafts(worker)))
        return prepared

    def send(self, prepared: list[Prepared], drafts: Drafts) -> list[Verified]:
        """Send every share with ``drafts`` (by sequence id), then wait for them all."""
        waits: list[Waiting] = []
        try:
            for p in prepared:
                whole = self._whole(p, drafts)
                if whole is None:
                    self._add_drafts(p.share, drafts)
                try:
                    waits.append(p.send(whole))
                except WorkerUnavailableError as e:
                    waits.append(e)
                if whole is not None:  # the requests' drafts too, for the bookkeeping
                    self._add_drafts(p.share, drafts)
        finally:  # what was sent holds its stream until waited on, even if a later send failed
            self._wait(prepared, waits)
        return [p.share for p in prepared]

    def _whole(self, p: Prepared, drafts: Drafts) -> object | None:
        """The drafts of ``p``'s share as they came over the wire: when one
        batch drafted exactly its sequences, in order, none needs cutting,
        and its target sends them so."""
        facts = p.share.facts
        if not p.takes_wire or facts is None:
            return None
        for batch in drafts.whole:
            if batch.seq_ids == facts.seq_ids:
                longest = max(facts.before) + max(batch.num_drafts) + 1
                return batch.wire if longest <= self.max_model_len else None
        return None

    @staticmethod
    def _wait(prepared: list[Prepared], waits: list[Waiting]) -> None:
        for p, wait in zip(prepared, waits, strict=False):  # (fewer waits: a send raised)
            try:
                p.share.outputs = wait if isinstance(wait, WorkerUnavailableError) else wait()
            except WorkerUnavailableError as e:
                p.share.outputs = e

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

    @staticmethod
    def _requests(seqs: list[SequenceState]) -> list[VerifyRequest]:
        return [
            VerifyRequest(
                SequenceTokens(s.seq_id, s.target_cached, s.tokens_from(s.target_cached)),
                s.sampling(),
            )
            for s in seqs
        ]

    def _add_drafts(self, share: Verified, drafts: Drafts) -> None:
        """Each request's drafts, cut so that its sequence never grows past max_model_len."""
        drafted: list[int] = []
        if share.facts is not None:
            share.facts.drafted = drafted
        for seq, request in zip(share.seqs, share.requests, strict=True):
            found = drafts.get(seq.seq_id)
            drafted.append(0 if found is None else len(found[0]))
            if found is None:
                continue
            tokens, ids, probs = found
            k = max(0, min(len(tokens), self.max_model_len - seq.num_tokens - 1))
            request.draft_token_ids = tokens[:k]
            request.draft_ids = None if ids is None else ids[:k]
            request.draft_probs = None if probs is None else probs[:k]

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

"""Getting drafts from the draft pool.

For a set of sequences the drafter plans which draft worker drafts for which
(keeping each on its worker while that worker is reachable, moving it to the
least-loaded one otherwise, where it is re-prefilled from its tokens), calls
the workers, and applies what comes back to the sequences' bookkeeping.

A round sends its batches to every draft worker first and then waits
(``send``, ``receive``): the engine prepares the verify batch meanwhile, and
several draft workers draft at the same time. Calls can also run in the
background: with ``overlap`` the engine keeps two micro-batches, and the draft
pool proposes for one while the target pool verifies the other. Planning and
applying happen on the engine's thread; only the worker calls run elsewhere,
and a result is applied only to sequences that have not changed since it was
planned.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

import torch

from model_runtime.errors import WorkerUnavailableError
from model_runtime.status import OK, StatusCode
from protos.batch_columns import ProposalColumns
from protos.messages import Proposal, ProposeRequest, SequenceTokens
from router.ahead import NextDrafts
from router.clients import DraftClient, start_propose
from router.pool import WorkerPool
from router.sequence import SequenceState

# One sequence's proposal: k tokens, and the support and probabilities of each q.
Draft = tuple[Sequence[int], torch.Tensor | None, torch.Tensor | None]


class Drafts(Mapping[int, Draft]):
    """A round's drafts by sequence id, each read from its batch's result when
    first asked for. A batch that came back whole (every sequence it was sent
    for still wants its drafts, and none failed) is also kept as it came, in
    ``whole``: a target over the wire takes its drafts as they are, with no
    message per sequence read or written on the round's path."""

    def __init__(self) -> None:
        self._where: dict[int, tuple[Sequence[Proposal], int]] = {}  # its result, and row
        self.whole: list[ProposalColumns] = []

    @classmethod
    def of(cls, drafts: Mapping[int, Draft]) -> Drafts:
        """Drafts given by sequence id."""
        made = cls()
        for seq_id, (tokens, ids, probs) in drafts.items():
            made.add(seq_id, [Proposal(seq_id, OK, tokens, ids, probs)], 0)
        return made

    def add(self, seq_id: int, result: Sequence[Proposal], row: int) -> None:
        self._where[seq_id] = (result, row)

    def update(self, other: Drafts) -> None:
        self._where.update(other._where)
        self.whole += other.whole

    def __getitem__(self, seq_id: int) -> Draft:
        result, row = self._where[seq_id]
        p = result[row]
        return p.token_ids, p.draft_ids, p.draft_probs

    def __contains__(self, seq_id: object) -> bool:
        return seq_id in self._where

    def __iter__(self) -> Iterator[int]:
        return iter(self._where)

    def __len__(self) -> int:
        return len(self._where)


@dataclass
class _Call:
    draft: int
    k: int
    seqs: list[SequenceState]
    num_tokens: list[int]  # of each sequence when its drafts are to apply
    requests: Sequence[ProposeRequest]  # (ProposeColumns, for the next round's)
    wait: Callable[[], Sequence[Proposal]] | None = None  # once sent
    result: Sequence[Proposal] | WorkerUnavailableError | None = None


@dataclass
class Plan:
    """The calls that draft for a set of sequences, one per draft worker."""

    calls: list[_Call] = field(default_factory=list)
    future: Future[None] | None = None


class Drafter:
    def __init__(self, pool: WorkerPool[DraftClient], k: int, overlap: bool):
        self.pool = pool
        self.k = k
        # With overlap a whole micro-batch's calls run behind the engine's back.
        self._executor = ThreadPoolExecutor(1, "draft-overlap") if overlap else None
        self._in_flight: dict[int, Plan] = {}  # micro-batch -> its proposals on the way

    def propose(self, seqs: list[SequenceState], k: int | None = None) -> Drafts:
        """``k`` drafts (the drafter's k by default) for each of ``seqs``, now."""
        return self.receive(self.send(seqs, k), seqs)

    def send(
        self, seqs: list[SequenceState], k: int | None = None, beside: Sequence[SequenceState] = ()
    ) -> Plan:
        """Ask the draft workers for ``k`` drafts for each of ``seqs`` (``receive``
        waits). Sequences drafted for ``beside`` this plan count in the load a
        new sequence is placed by."""
        plan = self._plan(seqs, self.k if k is None else k, beside)
        self._send(plan)
        return plan

    def send_next(self, parts: Mapping[int, NextDrafts], k: int) -> Plan:
        """Ask each draft worker for ``k`` drafts for its part of the next round
        (router/ahead.py: cut from a round's outputs, before they are applied)."""
        plan = Plan(
            [_Call(d, k, p.seqs, p.num_tokens, p.batch) for d, p in sorted(parts.items()) if p.seqs]
        )
        self._send(plan)
        return plan

    def up_to(self) -> tuple[list[int], int]:
        """The draft workers up, and the positions all of them hold."""
        up = self.pool.up()
        return up, min((self.pool.infos[d].max_model_len for d in up), default=0)

    def receive(self, plan: Plan, seqs: list[SequenceState]) -> Drafts:
        """The drafts ``plan`` was sent for, applied to those of ``seqs`` unchanged since."""
        self._wait(plan)
        return self._apply(plan, set(map(id, seqs)))

    def start(self, micro_batch: int, seqs: list[SequenceState]) -> None:
        """Begin proposing for ``seqs`` in the background (once per micro-batch)."""
        assert self._executor is not None, "start() needs a drafter built with overlap"
        if micro_batch in self._in_flight or not seqs:
            return
        plan = self._plan(seqs, self.k)
        plan.future = self._executor.submit(self._call, plan)
        self._in_flight[micro_batch] = plan

    def collect(self, micro_batch: int, seqs: list[SequenceState]) -> Drafts:
        """The drafts started for ``micro_batch`` (or new ones, if none are on the way)."""
        plan = self._in_flight.pop(micro_batch, None)
        if plan is None:
            return self.propose(seqs)
        assert plan.future is not None
        plan.future.result()
        return self._apply(plan, set(map(id, seqs)))

    def _plan(
        self, seqs: list[SequenceState], k: int, beside: Sequence[SequenceState] = ()
    ) -> Plan:
        up, max_len = self.up_to()  # (sequences longer than max_len get no drafts)
        if not up:
            return Plan()
        load = {d: 0 for d in up}
        for seq in (*seqs, *beside):
            if seq.draft_worker in load:
                load[seq.draft_worker] += 1
        groups: dict[int, list[SequenceState]] = {d: [] for d in up}
        for seq in seqs:
            if seq.num_tokens + k - 1 > max_len:
                continue  # longer than the draft model can hold: decoded without drafts
            if seq.draft_worker not in load:  # new, or its draft worker was lost
                seq.draft_worker = min(up, key=lambda d: load[d])
                seq.draft_cached = 0  # re-prefilled on the new draft worker
                load[seq.draft_worker] += 1
            groups[seq.draft_worker].append(seq)
        plan = Plan()
        for draft, group in groups.items():
            if group:
                requests = [_request(s) for s in group]
                plan.calls.append(_Call(draft, k, group, [s.num_tokens for s in group], requests))
        return plan

    def _call(self, plan: Plan) -> None:
        self._send(plan)
        self._wait(plan)

    def _send(self, plan: Plan) -> None:
        # A sent call holds its worker's stream until waited on; with overlap
        # two threads send, so both take the streams in the same order.
        try:
            for call in sorted(plan.calls, key=lambda c: c.draft):
                try:
                    call.wait = start_propose(self.pool.workers[call.draft], call.requests, call.k)
                except WorkerUnavailableError as e:
                    call.result = e
        except BaseException:
            self._wait(plan)  # what was sent holds its stream until waited on
            raise

    @staticmethod
    def _wait(plan: Plan) -> None:
        for call in plan.calls:
            if call.wait is None:
                continue  # could not be sent
            try:
                call.result = call.wait()
            except WorkerUnavailableError as e:
                call.result = e

    def _apply(self, plan: Plan, current: set[int]) -> Drafts:
        drafts = Drafts()
        for call in plan.calls:
            if isinstance(call.result, WorkerUnavailableError):
                self.pool.lose(call.draft, call.result)
                for seq in call.seqs:
                    if seq.draft_worker == call.draft:
                        seq.draft_worker, seq.draft_cached = -1, 0
                continue
            assert call.result is not None
            result = call.result
            # Whose status to read (from columns, only the failed ones').
            asked = result.failed if isinstance(result, ProposalColumns) else range(len(result))
            stale = []
            for row, (seq, planned) in enumerate(zip(call.seqs, call.num_tokens, strict=True)):
                if (
                    id(seq) not in current
                    or seq.finished
                    or seq.num_tokens != planned
                    or seq.draft_worker != call.draft
                ):
                    stale.append(seq.seq_id)  # changed meanwhile: this draft is of no use
                    continue
                status = result[row].status if row in asked else OK
                if status.code == StatusCode.NOT_FOUND:
                    seq.draft_cached = 0  # re-prefilled on the draft next round
                if status.ok:
                    seq.draft_cached = seq.num_tokens + call.k - 1
                    drafts.add(seq.seq_id, result, row)
            if isinstance(result, ProposalColumns) and not stale and not result.failed:
                drafts.whole.append(result)
            # A sequence released (finished, aborted, preempted) while its proposal
            # was on the way may have been created again there: release it again.
            gone = [
                s.seq_id
                for s in call.seqs
                if s.seq_id in stale and (s.finished or s.draft_worker != call.draft)
            ]
            if gone and self.pool.is_member(call.draft):
                self.pool.workers[call.draft].release(gone)
        return drafts

    def close(self) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=True)


def _request(seq: SequenceState) -> ProposeRequest:
    """What the draft worker lacks of ``seq``."""
    tokens = SequenceTokens(seq.seq_id, seq.draft_cached, seq.tokens_from(seq.draft_cached))
    return ProposeRequest(tokens, seq.sampling())

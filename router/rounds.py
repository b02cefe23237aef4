"""Which sequences a round verifies, with how many drafts each.

Without overlap a round drafts k tokens for every running sequence and then
verifies them all; when adaptive, k is chosen for the round by the
``KChooser`` (router/adaptive.py) from what earlier rounds cost and gained,
except that a round holding a seeded sampling request keeps the configured k
(a seeded sample depends on the rounds it was drafted in, so its output
would otherwise depend on its neighbours). The verify batches are prepared
while the draft workers draft.

The next round's drafts are asked for as soon as a round's outputs come,
before the engine applies them: each sequence that goes on is sent with the
tokens it just gained, so the draft workers draft while the engine does its
bookkeeping, publishes, admits and prepares the next verify, which then
finds its drafts waiting. A sequence that finishes meanwhile (by a stop
string) or is preempted or aborted had its drafts made for nothing; the
drafter drops them (router/drafting.py). Their k is chosen for the batch the
next round will hold: the sequences that go on and as many waiting ones as
take the places of those that end (none, in a closed batch's tail: pricing
it at the size it had would price each k at a batch that no longer runs).
A sequence admitted meanwhile is drafted for in its first round, once what
was sent ahead has come back.
When adaptive, every round whose drafts all came ahead, for sequences the
draft lacked no more than a round leaves behind, is measured whole for the
chooser: from the end of the round before to its own. Every few rounds (the
chooser keeps that schedule) the round is timed instead: its drafts are not
sent ahead, and it reads an in-process draft's tokens back before verifying
(otherwise they stay on the device into the verify), to time the draft's
steps apart. With overlap the running sequences ride in
two micro-batches: a round verifies one while the draft pool proposes for
the other, always with the configured k.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from model_runtime.errors import WorkerUnavailableError
from protos.batch_columns import VerifyColumns
from protos.messages import read_back
from router.adaptive import KChooser
from router.ahead import NextDrafts, ShareFacts, cut_next, goes_on
from router.drafting import Drafter, Drafts, Plan
from router.metrics import SpeculationMetrics
from router.sequence import SequenceState
from router.verifying import Verified, Verifier


@dataclass
class _Ahead:
    """The next round's drafts, asked for when this round's outputs came."""

    k: int
    plan: Plan | None  # None: k is 0
    seq_ids: set[int]  # the sequences it drafts for


@dataclass(frozen=True)
class _Ended:
    """When the last round's outputs came and when it had sent the next drafts."""

    batch: int
    outputs_came: float
    drafts_sent: float


class Rounds:
    def __init__(
        self,
        drafter: Drafter,
        verifier: Verifier,
        metrics: SpeculationMetrics,
        chooser: KChooser | None,
        overlap: bool,
    ):
        self.drafter = drafter
        self.verifier = verifier
        self.metrics = metrics
        self.chooser = chooser
        self.overlap = overlap
        self.k = drafter.k
        self._turn = 0  # the micro-batch to verify next, with overlap
        self._ended: _Ended | None = None
        self._ahead: _Ahead | None = None

    def run(self, running: list[SequenceState], waiting: int = 0) -> list[Verified]:
        """Draft and verify one round (the verified shares); then send the
        next round's drafts, chosen for the sequences that go on and as many
        of the ``waiting`` ones as take the places of those that end."""
        if self.overlap and self.k:
            shares, drafts = self._overlapped(running)
            self._note_drafted(shares, drafts)
            return shares
        seqs = list(running)
        lag = {s.seq_id: s.num_tokens - s.draft_cached for s in seqs}  # tokens the draft lacks
        number = self.chooser.count_round() if self.chooser is not None else 0
        # Decided when the round before sent (or did not send) these drafts ahead:
        # choosing this round's k since may have moved the chooser's schedule.
        timed = self._timed(number) and self._ahead is None
        ahead = self._ahead is not None and all(s.seq_id in self._ahead.seq_ids for s in seqs)
        start = time.perf_counter()
        if self.chooser is not None and self._ended is not None:
            self.chooser.observe_between(self._ended.batch, start - self._ended.drafts_sent)
        k, drafts, plan = self._start_drafts(seqs)
        try:
            prepared = self.verifier.prepare(seqs, note_next=bool(self.k))  # while they draft
        finally:  # a sent batch holds its stream until received
            if plan is not None:
                drafts.update(self.drafter.receive(plan, seqs))
        if timed:  # the draft's steps are done when its tokens are on the host
            read_back(tokens for tokens, _, _ in drafts.values())
        drafted = time.perf_counter()
        # After a round with drafts the draft lacks 1 or 2 of a sequence's tokens;
        # a round whose drafted sequences lacked more also prefilled them.
        steady = all(lag[seq_id] <= 2 for seq_id in drafts)
        shares = self.verifier.send(prepared, drafts)
        k = k if drafts else 0
        self.metrics.record_round(k)
        came = time.perf_counter()
        if self.chooser is not None and timed:
            draft_s = drafted - start if steady else None
            self.chooser.observe_round(len(seqs), k, draft_s, came - drafted)
        if self.chooser is not None and ahead and steady and self._ended is not None:
            # Whole: from the outputs of the round before, which sent this one's drafts.
            seconds = came - self._ended.outputs_came
            self.chooser.observe_whole(len(seqs), k, seconds, round_number=number)
        sent = came
        if self.k:  # (a draft pool to send to)
            self._send_ahead(shares, waiting)  # (drafting's own, not the engine's between rounds)
            sent = time.perf_counter()
            self._note_drafted(shares, drafts)
        self._ended = _Ended(len(seqs), came, sent)
        return shares

    def skip_gap(self) -> None:
        """The engine did more than a round's own work before the next round
        (prefilled, requeued or moved sequences): that gap is not timed."""
        self._ended = None

    @property
    def drafts_in_flight(self) -> bool:
        """Whether drafts sent ahead wait to be received."""
        return self._ahead is not None and self._ahead.plan is not None

    def drop_ahead(self) -> None:
        """Wait for and drop the drafts sent ahead (no round is coming to use them)."""
        ahead, self._ahead = self._ahead, None
        if ahead is not None and ahead.plan is not None:
            self.drafter.receive(ahead.plan, [])

    def accepted(self, seq: SequenceState, k: int, num_accepted: int) -> None:
        """``seq``'s ``k`` drafts came back with the first ``num_accepted`` passed."""
        self.metrics.record(k, num_accepted)
        if self.chooser is not None:
            self.chooser.observe_acceptance(k, num_accepted, seq.acceptance_kind)

    @property
    def _number(self) -> int:
        """The round number of the round under way (its chooser's count)."""
        return self.chooser.rounds if self.chooser is not None else 0

    def _timed(self, round_number: int) -> bool:
        return self.chooser is not None and self.chooser.timed(round_number)

    def _choose(
        self,
        kinds: list[str],
        rooms: list[int] | None,
        seeded: bool,
        round_number: int,
        batch: int | None = None,
    ) -> int:
        """The k of round ``round_number`` over ``batch`` sequences (default: one
        per kind), of sequences of ``kinds`` with ``rooms`` tokens left each
        (None: unknown): the chooser's, or the configured one (when ``seeded``:
        a seeded sample rides in it)."""
        if self.chooser is None or seeded:
            return self.k
        batch = len(kinds) if batch is None else batch
        return self.chooser.choose(batch, kinds, round_number=round_number, rooms=rooms)

    def _start_drafts(self, seqs: list[SequenceState]) -> tuple[int, Drafts, Plan | None]:
        """The round's k, the drafts already here, and the plan on the way."""
        ahead, self._ahead = self._ahead, None
        if ahead is None:
            kinds, rooms = [s.acceptance_kind for s in seqs], [s.room for s in seqs]
            k = self._choose(kinds, rooms, _seeded(seqs), self._number)
            return k, Drafts(), self.drafter.send(seqs, k) if k else None
        late = [s for s in seqs if s.seq_id not in ahead.seq_ids]
        if not late:
            return ahead.k, Drafts(), ahead.plan
        # Admitted since the drafts were sent ahead: drafted once those are back.
        drafts = self.drafter.receive(ahead.plan, seqs) if ahead.plan is not None else Drafts()
        # Their own k (at the round's batch): the ahead one may be cut short by
        # the rooms of the sequences it was chosen for.
        kinds, rooms = [s.acceptance_kind for s in late], [s.room for s in late]
        k = self._choose(kinds, rooms, _seeded(late), self._number, len(seqs))
        early = [s for s in seqs if s.seq_id in ahead.seq_ids]  # their workers' load counts
        return ahead.k, drafts, self.drafter.send(late, k, beside=early) if k else None

    @staticmethod
    def _note_drafted(shares: list[Verified], drafts: Drafts) -> None:
        """Keep of each drafted sequence's draft KV only the drafts the target
        accepted (none, where its target was lost)."""
        for share in shares:
            if isinstance(share.outputs, WorkerUnavailableError):  # none of its drafts counted
                for seq in share.seqs:
                    if seq.seq_id in drafts:
                        seq.draft_cached = min(seq.draft_cached, seq.num_tokens)
                continue
            for seq, out in zip(share.seqs, share.outputs, strict=True):
                if out.status.ok and seq.seq_id in drafts:  # it holds its first k-1 drafts
                    accepted = seq.num_tokens + out.num_accepted_drafts
                    seq.draft_cached = min(seq.draft_cached, accepted)

    def _send_ahead(self, shares: list[Verified], waiting: int) -> None:
        """Ask for the next round's drafts for the sequences that go on, cut from
        the outputs' columns (router/ahead.py) before anything else reads them;
        their k is chosen for the next round's batch: those that go on and
        as many ``waiting`` sequences as take the places of those that end."""
        if self._timed(self._number + 1):
            return
        live = [
            (s.facts, VerifyColumns.of(s.outputs))
            for s in shares
            if s.facts is not None and not isinstance(s.outputs, WorkerUnavailableError)
        ]
        if not live:
            return
        batch, kinds, rooms = _going_on(live, waiting)
        if not batch:  # every sequence failed (each starts again), or all end and none waits
            return
        seeded = any(facts.seeded for facts, _ in live)
        k = self._choose(kinds, rooms, seeded, self._number + 1, batch)
        workers, max_len = self.drafter.up_to()
        parts: dict[int, NextDrafts] = {}
        seq_ids: list[int] = []  # those whose next drafts are seen to
        for facts, columns in live:
            if k:
                seq_ids += cut_next(facts, columns, k, workers, max_len, into=parts)
            else:
                seq_ids += [s for i, s in enumerate(facts.seq_ids) if i not in columns.failed]
        plan = self.drafter.send_next(parts, k) if parts else None
        self._ahead = _Ahead(k, plan, set(seq_ids))

    def _overlapped(self, running: list[SequenceState]) -> tuple[list[Verified], Drafts]:
        groups = {m: [s for s in running if s.micro_batch == m] for m in (0, 1)}
        now = self._turn if groups[self._turn] else 1 - self._turn
        drafts = self.drafter.collect(now, groups[now])
        self.drafter.start(1 - now, groups[1 - now])
        self._turn = 1 - now
        self.metrics.record_round(self.k)
        return self.verifier.verify(groups[now], drafts), drafts


def _going_on(
    live: list[tuple[ShareFacts, VerifyColumns]], waiting: int
) -> tuple[int, list[str], list[int] | None]:
    """The next round's batch (the sequences that did not fail, less those
    that end and that no ``waiting`` sequence is admitted in place of: a
    closed batch shrinks in its tail) and the kinds and rooms (after this
    round's tokens) of those that surely go on: not ended by their length
    or a stop token (all of them, rooms unknown, if none goes on: the next
    round then holds only sequences admitted)."""
    batch, kinds, rooms, every = 0, [], [], []
    for facts, columns in live:
        end = 0
        for i, gained in enumerate(columns.num_tokens):
            start, end = end, end + gained
            if i in columns.failed:
                continue
            batch += 1
            every.append(facts.kinds[i])
            if goes_on(facts, i, gained, columns.token_ids[start:end]):
                kinds.append(facts.kinds[i])
                rooms.append(facts.room[i] - gained)
    batch = min(batch, len(kinds) + waiting)
    return (batch, kinds, rooms) if kinds else (batch, every, None)


def _seeded(seqs: list[SequenceState]) -> bool:
    return any(s.options.seed is not None and not s.options.greedy for s in seqs)

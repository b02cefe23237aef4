"""Which sequences a round verifies, with how many drafts each.

Without overlap a round drafts k tokens for every running sequence and then
verifies them all; when adaptive, k is chosen for the round by the
``KChooser`` (router/adaptive.py) from what earlier rounds cost and gained,
except that a round holding a seeded sampling request keeps the configured k
(a seeded sample depends on the rounds it was drafted in, so its output
would otherwise depend on its neighbours). The verify batches are prepared
while the draft workers draft. An in-process draft's tokens stay on the
device into the verify; every few rounds (``time_every``) the round reads
them back first, to time the draft's steps apart. With overlap the
running sequences ride in two micro-batches: a round verifies one while the
draft pool proposes for the other, always with the configured k.
"""

from __future__ import annotations

import time

from protos.messages import read_back
from router.adaptive import KChooser
from router.drafting import Draft, Drafter
from router.metrics import SpeculationMetrics
from router.sequence import SequenceState
from router.verifying import Verified, Verifier


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
        self._rounds = 0
        self._ended: tuple[int, float] | None = None  # the last round's batch size and end

    def run(self, running: list[SequenceState]) -> tuple[list[Verified], dict[int, Draft]]:
        """Draft and verify one round: the verified shares, and the drafts by sequence id."""
        if self.overlap and self.k:
            return self._overlapped(running)
        seqs = list(running)
        seeded = any(s.options.seed is not None and not s.options.greedy for s in seqs)
        if self.chooser is None or seeded:
            k = self.k
        else:
            k = self.chooser.choose(len(seqs), (s.acceptance_kind for s in seqs))
        lag = {s.seq_id: s.num_tokens - s.draft_cached for s in seqs}  # tokens the draft lacks
        self._rounds += 1
        every = self.chooser.config.time_every if self.chooser is not None else 0
        timed = bool(every) and (self._rounds - 1) % every == 0
        start = time.perf_counter()
        if self.chooser is not None and self._ended is not None:
            self.chooser.observe_between(self._ended[0], start - self._ended[1])
        plan = self.drafter.send(seqs, k) if k else None
        try:
            prepared = self.verifier.prepare(seqs)  # while the draft workers draft
        finally:  # a sent batch holds its stream until received
            drafts = self.drafter.receive(plan, seqs) if plan is not None else {}
        if timed:  # the draft's steps are done when its tokens are on the host
            read_back(tokens for tokens, _, _ in drafts.values())
        drafted = time.perf_counter()
        # After a round with drafts the draft lacks 1 or 2 of a sequence's tokens;
        # a round whose drafted sequences lacked more also prefilled them.
        steady = all(lag[seq_id] <= 2 for seq_id in drafts)
        shares = self.verifier.send(prepared, drafts)
        k = k if drafts else 0
        self.metrics.record_round(k)
        ended = time.perf_counter()
        if self.chooser is not None and timed:
            draft_s = drafted - start if steady else None
            self.chooser.observe_round(len(seqs), k, draft_s, ended - drafted)
        self._ended = (len(seqs), ended)
        return shares, drafts

    def skip_gap(self) -> None:
        """The engine did more than a round's own work before the next round
        (prefilled, requeued or moved sequences): that gap is not timed."""
        self._ended = None

    def accepted(self, seq: SequenceState, k: int, num_accepted: int) -> None:
        """``seq``'s ``k`` drafts came back with the first ``num_accepted`` passed."""
        self.metrics.record(k, num_accepted)
        if self.chooser is not None:
            self.chooser.observe_acceptance(k, num_accepted, seq.acceptance_kind)

    def _overlapped(self, running: list[SequenceState]) -> tuple[list[Verified], dict[int, Draft]]:
        groups = {m: [s for s in running if s.micro_batch == m] for m in (0, 1)}
        now = self._turn if groups[self._turn] else 1 - self._turn
        drafts = self.drafter.collect(now, groups[now])
        self.drafter.start(1 - now, groups[1 - now])
        self._turn = 1 - now
        self.metrics.record_round(self.k)
        return self.verifier.verify(groups[now], drafts), drafts

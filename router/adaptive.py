"""Choosing how many tokens to draft each round, so that speculation is used
only where it raises goodput.

A round of k drafts over B sequences gains each sequence E(k) = 1 + sum over
i <= k of a_1 ... a_i tokens, where a_j is the chance that draft j is
accepted when the drafts before it were, and costs the time from the last
round's end to its own. The chooser picks the k in 0..k_max with the most
tokens per second, from the acceptance per position (counted every round)
and the price of a round of k at B.

Where rounds of k at B have run with their drafts sent ahead
(router/rounds.py), their price is measured: the time from the outputs of
the round before (which then sent their drafts) to theirs, of every such
round. That time holds the draft's k steps, the verify over B(k + 1) tokens
and the engine's own work between rounds (applying the results, scheduling,
building the next round's calls), less what of the draft's steps ran while
the engine worked: on a GPU the drafts sent ahead run while the host does
its bookkeeping, by how much no part's own time tells. Only whole rounds
show it, and they are read at no cost (no read-back to wait for).

Where none has run, the price is built from its parts, timed every
``time_every`` rounds (and on the first few), halfway between probes (a
probe must be sent ahead to be measured whole): a timed round reads its
drafts back before verifying them, so the draft's steps and the verify are
timed apart (by batch size and by tokens in the step), and the engine's own
work is timed every round (by batch size); step sizes not measured are
interpolated (router/step_times.py). That sum counts the draft's steps in
full, so it is scaled by what the nearest k measured whole at the batch
size cost against its own sum: the parts give the shape of the price over
k, whole rounds its level. What it has not run it learns by probing: every
``probe_every`` rounds (from round probe_every + 1) it drafts one token
more than its choice, or one fewer, by turns (at k = 0 or k_max, the one
neighbour there is, every time), so a draft that turns good is noticed and
the price of each neighbouring k is measured; positions never
reached borrow the acceptance of the last one measured. Acceptance counts
decay and prices are the median of the latest few, so both follow a
changing workload, at the sizes still in use. A whole round's price not
measured again for ``forget_after`` rounds is forgotten (but the latest
measured at the batch size, which anchors the level), so that k is priced
by its parts again. Rounds whose draft caught up on more than a round leaves
behind (after k = 0, a new sequence) or whose drafts were not all sent
ahead (a timed round, a late admission) are not measured as whole rounds:
their price is not that of the k. So a probe up from k = 0 is timed
instead, and its parts are what prices the k above 0 once its whole
rounds are forgotten: else the chooser, settled at 0, would keep the price
a k above had when it settled there. A pinned k times the same rounds as a
chosen one.

Acceptance is kept apart by kind of sequence (greedy, sampled, constrained
by a grammar) as well as pooled, and a round's E(k) is the mean over its
sequences of their kind's, each counting no more drafts than it can keep
before its length ends it (router/acceptance.py): near max_tokens a round
drafts fewer, and never more than the sequence with the most room can keep.
Where the chooser is settled (for the rule below) is chosen as if every
sequence had room, and a sequence admitted after the drafts were sent
ahead gets its own k, so sequences that end do not hold others back.

Leaving k = 0 costs more than a round's price shows: the draft must first
catch up on every token it missed while k was 0 (one forward over them, not
replayed from a graph). So once settled at k = 0, another k is chosen only
if it looks ``leave_zero`` better; otherwise near-equal prices at k = 0 and
k = 1 would flip between them and pay that catch-up each time.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from router.acceptance import GREEDY, AcceptanceByKind, Mix, mix_of
from router.step_times import StepTimes


@dataclass(frozen=True)
class AdaptiveConfig:
    probe_every: int = 16  # rounds between probes of one token more or fewer
    decay: float = 0.95  # weight the acceptance counts keep per new observation
    window: int = 8  # times kept per size; their median is the estimate
    # Rounds between timed ones (after the first ``time_first``): a timed round
    # reads its drafts back before verifying them, so the draft's steps and
    # the verify are priced apart; it drafts on the round's path, not ahead,
    # so it costs more than others, and its whole round is not measured.
    time_every: int = 16
    time_first: int = 3
    # How much more goodput another k must promise to leave k = 0 (the draft's
    # catch-up over the tokens it missed is not in a round's price).
    leave_zero: float = 0.05
    # Rounds after which a whole round's price not measured again is forgotten
    # (that k is then priced by its parts): longer than probes take to visit
    # both neighbours of a settled k.
    forget_after: int = 64

    def __post_init__(self) -> None:
        if self.probe_every < 1:
            raise ValueError(f"probe_every must be >= 1, got {self.probe_every}")
        if not 0.0 < self.decay < 1.0:
            raise ValueError(f"decay must be in (0, 1), got {self.decay}")
        if self.window < 1:
            raise ValueError(f"window must be >= 1, got {self.window}")
        if self.time_every < 1:
            raise ValueError(f"time_every must be >= 1, got {self.time_every}")
        if self.time_first < 1:
            raise ValueError(f"time_first must be >= 1, got {self.time_first}")
        if self.forget_after < 1:
            raise ValueError(f"forget_after must be >= 1, got {self.forget_after}")
        if self.leave_zero < 0:
            raise ValueError(f"leave_zero must be >= 0, got {self.leave_zero}")


class KChooser:
    def __init__(self, k_max: int, config: AdaptiveConfig = AdaptiveConfig()):
        self.k_max = k_max
        self.config = config
        self.draft_step_s = StepTimes(config.window)  # by batch size
        self.target_step_s = StepTimes(config.window)  # by tokens in the step
        self.between_s = StepTimes(config.window)  # engine's own work a round, by batch
        self.round_s: dict[int, StepTimes] = {}  # by batch: whole rounds drafted ahead, by k
        self.acceptance = AcceptanceByKind(k_max)
        self.pinned: int | None = None
        self._settled = k_max  # the last round's best k (before any probe)
        # Rounds served, which number them: a chooser set aside for a while
        # (another in its place) does not count the rounds it did not serve.
        self.rounds = 0

    def count_round(self) -> int:
        """Count a round starting; its number (from 1)."""
        self.rounds += 1
        return self.rounds

    def pin(self, k: int | None) -> None:
        """Draft exactly ``k`` tokens every round from now on (None: choose again);
        what rounds cost and gain is still measured. Rounds that keep the
        configured k (seeded sampling, router/rounds.py) still keep it."""
        if k is not None and not 0 <= k <= self.k_max:
            raise ValueError(f"k must be in 0..{self.k_max}, got {k}")
        self.pinned = k
        if k is not None:  # (at k = 0 the draft misses tokens as when settled there)
            self._settled = k

    @property
    def reached(self) -> list[float]:
        return self.acceptance.pooled.reached

    @property
    def accepted(self) -> list[float]:
        return self.acceptance.pooled.accepted

    def timed(self, round_number: int) -> bool:
        """Whether round ``round_number`` (from 1) is timed: the first ``time_first``
        rounds, then one in ``time_every``, halfway between those that probe
        where both are alike (rounds time_every / 2 + 1, 3 time_every / 2 + 1,
        ...), and never a probe (the round after, where one falls there): a
        probe is sent ahead, so its k is measured whole, and the settled k's
        verify is timed again; and, once settled at k = 0, a probe up (its
        draft catches up first, so it is not measured whole, and its verify
        would never be priced otherwise)."""
        config = self.config
        every = config.time_every
        if round_number <= config.time_first:
            return True
        # Halfway, or the round after where that one probes (a probe is measured whole).
        after = (round_number - 1 - every // 2) % every
        probes = self._probes(round_number)
        if (after == 0 and not probes) or (after == 1 and self._probes(round_number - 1)):
            return True
        return self._settled == 0 and probes  # (from k = 0 every probe is up)

    def choose(
        self,
        batch: int,
        kinds: Sequence[str] = (),
        *,
        round_number: int,
        rooms: Sequence[int] | None = None,
    ) -> int:
        """The k for round ``round_number`` of ``batch`` sequences, of these ``kinds``
        (none given: pooled acceptance) and ``rooms`` (tokens each may still
        gain; None: unlimited); read only when k is not pinned. It drafts no
        more than the sequence with the most room can keep. Where it is
        settled is chosen as if every sequence had room for k_max drafts:
        a k drafted because sequences end soon is not a k it chose."""
        if self.pinned is not None:
            return self.pinned
        whole = self.round_s.get(batch)
        if whole is not None:
            whole.forget(before=round_number - self.config.forget_after)
        mix = mix_of(kinds, rooms, self.k_max) if kinds else None
        roomy = mix is None or all(most == self.k_max for _, most in mix)  # (mix is then free)
        free = mix if roomy else mix_of(kinds, None, self.k_max)
        self._settled = self.best(batch, free)
        best = self._settled if free == mix else self.best(batch, mix)
        most = max(most for _, most in mix) if mix else self.k_max
        return min(max(best + self._probe(round_number, best), 0), most)

    def _probes(self, round_number: int) -> bool:
        turn, rest = divmod(round_number - 1, self.config.probe_every)
        return turn > 0 and rest == 0

    def _probe(self, round_number: int, k: int) -> int:
        """+1 or -1 from ``k`` on a probe round (by turns; the other way where
        the turn's would leave 0..k_max: at an end every probe tries the one
        neighbour there is), else 0."""
        if not self._probes(round_number):
            return 0
        step = 1 if (round_number - 1) // self.config.probe_every % 2 else -1
        return step if 0 <= k + step <= self.k_max else -step

    def best(self, batch: int, mix: Mix | None = None) -> int:
        """The k with the most expected tokens per second (k_max while unmeasured);
        after settling at k = 0, another only if it is ``leave_zero`` better."""
        unmeasured = self.draft_step_s.get(batch) is None or self.target_step_s.get(batch) is None
        if unmeasured or not self.acceptance.pooled.measured:
            return self.k_max
        gains, prices = self.acceptance.curve(mix), self.prices(batch)
        rates = [gain / max(price, 1e-9) for gain, price in zip(gains, prices, strict=True)]
        best = max(range(self.k_max + 1), key=rates.__getitem__)
        if self._settled == 0 and rates[best] < rates[0] * (1 + self.config.leave_zero):
            return 0
        return best

    def goodput(self, batch: int, k: int, mix: Mix | None = None) -> float:
        """Expected tokens per second per sequence for a round of ``k`` drafts."""
        return self.expected_tokens(k, mix) / max(self.price(batch, k), 1e-9)

    def price(self, batch: int, k: int) -> float:
        """Seconds a round of ``k`` drafts over ``batch`` sequences takes."""
        if not 0 <= k <= self.k_max:
            raise ValueError(f"k must be in 0..{self.k_max}, got {k}")
        return self.prices(batch)[k]

    def prices(self, batch: int) -> list[float]:
        """Seconds a round of each k in 0..k_max over ``batch`` sequences takes:
        as measured whole, where rounds of that k have run; else the sum of
        its parts, scaled as the nearest k measured whole at ``batch`` was to
        its own. (All at once: every round chooses from all of them.)"""
        parts = self._parts(batch)
        whole = self.round_s.get(batch)
        if whole is None:
            return parts
        prices = []
        for k, own in enumerate(parts):
            near = whole.nearest(k)
            if near is None:
                prices.append(own)
            elif near == k:
                prices.append(whole.get(k) or 0.0)
            else:
                prices.append(own * (whole.get(near) or 0.0) / max(parts[near], 1e-9))
        return prices

    def _parts(self, batch: int) -> list[float]:
        """Each k's price from its parts: k draft steps, the verify over
        batch * (k + 1) tokens and the engine's own work between rounds."""
        draft = self.draft_step_s.get(batch) or 0.0
        between = self.between_s.get(batch) or 0.0
        return [
            (self.target_step_s.get(batch * (k + 1)) or 0.0) + draft * k + between
            for k in range(self.k_max + 1)
        ]

    def expected_tokens(self, k: int, mix: Mix | None = None) -> float:
        """E(k) from the measured acceptance: the mean over ``mix``'s sequences
        of their kind's, each up to the drafts it can keep (router/acceptance.py)."""
        return self.acceptance.curve(mix)[k]

    def observe_round(self, batch: int, k: int, draft_s: float | None, verify_s: float) -> None:
        """Wall time of one round: ``k`` draft steps, then a verify over batch * (k + 1)
        tokens. ``draft_s`` is None when the draft also caught up on more tokens
        than a round leaves behind (a new sequence, or rounds without drafts):
        that time is not a draft step's."""
        if k and draft_s is not None:
            self.draft_step_s.add(batch, draft_s / k)
        self.target_step_s.add(batch * (k + 1), verify_s)

    def observe_whole(self, batch: int, k: int, seconds: float, round_number: int) -> None:
        """Round ``round_number``, of ``k`` drafts
        over ``batch`` sequences, drafted ahead, took ``seconds`` from the end of
        the round before to its own."""
        whole = self.round_s.get(batch)
        if whole is None:
            whole = self.round_s[batch] = StepTimes(self.config.window)
        whole.add(k, seconds, at=round_number)

    def observe_between(self, batch: int, seconds: float) -> None:
        """The engine's own work from the end of a round of ``batch`` sequences
        to the start of the next."""
        self.between_s.add(batch, seconds)

    def observe_acceptance(self, k: int, accepted: int, kind: str = GREEDY) -> None:
        """One sequence's ``k`` drafts, of which the first ``accepted`` passed."""
        self.acceptance.observe(k, accepted, kind, self.config.decay)

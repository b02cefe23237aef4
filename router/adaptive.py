"""Choosing how many tokens to draft each round, so that speculation is used
only where it raises goodput.

A round of k drafts over B sequences costs k draft steps, one target step
over B(k + 1) tokens, and the engine's own work between rounds (applying
the results, scheduling, building the next round's calls: the same for
every k), and gains each sequence E(k) = 1 + sum over i <= k of a_1 ... a_i
tokens, where a_j is the chance that draft j is accepted when the drafts
before it were. Decoding alone (k = 0) costs one target step over B tokens
and the engine's work per token. The chooser measures all of these as rounds
run (wall time of the draft and verify calls every few rounds, by batch size
and by tokens in the step; the time from one round's end to the next one's
start, by batch size; acceptance per position, every round) and picks the k
in 0..k_max with the most tokens per second. Leaving the engine's own work
out would undervalue long rounds, which pay it less often per token. Rounds
that draft ahead (router/rounds.py) hide part of the draft's time behind
the engine's own work; the chooser does not count on it, as its timings
cannot tell how much (none, for a draft in process on the CPU), so it may
draft a little less than would pay where the draft works apart.

Acceptance is kept apart by kind of sequence (greedy, sampled, constrained
by a grammar: their drafts pass at different rates) as well as pooled; a
round's E(k) is the mean over its sequences of their kind's, so a batch of
greedy requests is not held back by sampled ones served earlier or beside
it. A kind not seen yet borrows the pooled counts.

What it has not measured it learns by probing: every ``probe_every`` rounds
it drafts one token more than its choice, or one fewer, by turns, so a draft
that turns good is noticed and the cost of drafting less is known; positions
never reached borrow the acceptance of the last one measured. Acceptance
counts decay and step times are the median of the latest few, so both follow
a changing workload.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter, deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from model_runtime.sampling import SamplingOptions

GREEDY, SAMPLED, CONSTRAINED = "greedy", "sampled", "constrained"


def acceptance_kind(options: SamplingOptions) -> str:
    """The acceptance a sequence's drafts count in: greedy drafts, sampled
    ones and those under a grammar pass at different rates."""
    if options.grammar:
        return CONSTRAINED
    return GREEDY if options.greedy else SAMPLED


@dataclass(frozen=True)
class AdaptiveConfig:
    probe_every: int = 16  # rounds between probes of one token more or fewer
    decay: float = 0.95  # weight the acceptance counts keep per new observation
    window: int = 8  # step times kept per bucket; their median is the estimate
    # Rounds between timed ones: a timed round reads its drafts back before
    # verifying them, so the draft's steps and the verify are priced apart
    # (others leave the drafts on the device and let the verify queue behind).
    time_every: int = 4

    def __post_init__(self) -> None:
        if self.probe_every < 1:
            raise ValueError(f"probe_every must be >= 1, got {self.probe_every}")
        if not 0.0 < self.decay < 1.0:
            raise ValueError(f"decay must be in (0, 1), got {self.decay}")
        if self.window < 1:
            raise ValueError(f"window must be >= 1, got {self.window}")
        if self.time_every < 1:
            raise ValueError(f"time_every must be >= 1, got {self.time_every}")


def _bucket(n: int) -> int:
    """Batch sizes and token counts are measured in powers of two."""
    return max(0, math.ceil(math.log2(max(n, 1))))


@dataclass
class _StepTimes:
    """The latest seconds per power-of-two bucket; the estimate is their median,
    so one slow round (a first call that compiles or captures) does not count."""

    window: int
    times: dict[int, deque[float]] = field(default_factory=dict)

    def add(self, n: int, seconds: float) -> None:
        self.times.setdefault(_bucket(n), deque(maxlen=self.window)).append(seconds)

    def get(self, n: int) -> float | None:
        """The estimate for ``n``: its own bucket's, else the nearest measured one's."""
        if not self.times:
            return None
        b = _bucket(n)
        nearest = min(self.times, key=lambda known: (abs(known - b), -known))
        return statistics.median(self.times[nearest])


@dataclass
class Acceptance:
    """Decayed counts of the drafts that reached each position and of those
    accepted there."""

    reached: list[float]
    accepted: list[float]

    @classmethod
    def empty(cls, k_max: int) -> Acceptance:
        return cls([0.0] * k_max, [0.0] * k_max)

    @property
    def measured(self) -> bool:
        return bool(self.reached[0])

    def observe(self, k: int, accepted: int, decay: float) -> None:
        """One sequence's ``k`` drafts, of which the first ``accepted`` passed."""
        for j in range(min(k, len(self.reached))):
            if j > accepted:
                break
            self.reached[j] = decay * self.reached[j] + 1
            self.accepted[j] = decay * self.accepted[j] + (j < accepted)

    def expected_tokens(self, k: int) -> float:
        """E(k): tokens a round of k drafts gains a sequence."""
        total, chance, rate = 1.0, 1.0, 0.0
        for j in range(k):
            if self.reached[j]:
                rate = self.accepted[j] / self.reached[j]
            chance *= rate  # positions never reached keep the last measured rate
            total += chance
        return total


class KChooser:
    def __init__(self, k_max: int, config: AdaptiveConfig = AdaptiveConfig()):
        self.k_max = k_max
        self.config = config
        self.draft_step_s = _StepTimes(config.window)  # by batch size
        self.target_step_s = _StepTimes(config.window)  # by tokens in the step
        self.between_s = _StepTimes(config.window)  # engine's own work a round, by batch
        self.pooled = Acceptance.empty(k_max)  # every kind of sequence together
        self.by_kind: dict[str, Acceptance] = {}
        self._rounds = 0
        self.pinned: int | None = None

    def pin(self, k: int | None) -> None:
        """Draft exactly ``k`` tokens every round from now on (None: choose again);
        what rounds cost and gain is still measured. Rounds that keep the
        configured k (seeded sampling, router/rounds.py) still keep it."""
        if k is not None and not 0 <= k <= self.k_max:
            raise ValueError(f"k must be in 0..{self.k_max}, got {k}")
        self.pinned = k

    @property
    def reached(self) -> list[float]:
        return self.pooled.reached

    @property
    def accepted(self) -> list[float]:
        return self.pooled.accepted

    def choose(self, batch: int, kinds: Iterable[str] = ()) -> int:
        """The k for the next round of ``batch`` sequences, of these ``kinds``
        (none given: pooled acceptance; read only when k is not pinned)."""
        if self.pinned is not None:
            return self.pinned
        self._rounds += 1
        best = self.best(batch, Counter(kinds))
        probe, rest = divmod(self._rounds, self.config.probe_every)
        if rest:
            return best
        return min(best + 1, self.k_max) if probe % 2 else max(best - 1, 0)

    def best(self, batch: int, mix: Mapping[str, int] | None = None) -> int:
        """The k with the most expected tokens per second (k_max while unmeasured)."""
        draft = self.draft_step_s.get(batch)
        if draft is None or self.target_step_s.get(batch) is None or not self.pooled.measured:
            return self.k_max
        return max(range(self.k_max + 1), key=lambda k: self.goodput(batch, k, mix))

    def goodput(self, batch: int, k: int, mix: Mapping[str, int] | None = None) -> float:
        """Expected tokens per second per sequence for a round of ``k`` drafts."""
        verify = self.target_step_s.get(batch * (k + 1)) or 0.0
        draft = (self.draft_step_s.get(batch) or 0.0) * k
        between = self.between_s.get(batch) or 0.0
        return self.expected_tokens(k, mix) / max(verify + draft + between, 1e-9)

    def expected_tokens(self, k: int, mix: Mapping[str, int] | None = None) -> float:
        """E(k) from the measured acceptance: the mean over ``mix``'s sequences
        of their kind's (a kind not measured yet: the pooled one's)."""
        if not mix:
            return self.pooled.expected_tokens(k)
        total = sum(n * self._of(kind).expected_tokens(k) for kind, n in mix.items())
        return total / sum(mix.values())

    def _of(self, kind: str) -> Acceptance:
        own = self.by_kind.get(kind)
        return own if own is not None and own.measured else self.pooled

    def observe_round(self, batch: int, k: int, draft_s: float | None, verify_s: float) -> None:
        """Wall time of one round: ``k`` draft steps, then a verify over batch * (k + 1)
        tokens. ``draft_s`` is None when the draft also caught up on more tokens
        than a round leaves behind (a new sequence, or rounds without drafts):
        that time is not a draft step's."""
        if k and draft_s is not None:
            self.draft_step_s.add(batch, draft_s / k)
        self.target_step_s.add(batch * (k + 1), verify_s)

    def observe_between(self, batch: int, seconds: float) -> None:
        """The engine's own work from the end of a round of ``batch`` sequences
        to the start of the next."""
        self.between_s.add(batch, seconds)

    def observe_acceptance(self, k: int, accepted: int, kind: str = GREEDY) -> None:
        """One sequence's ``k`` drafts, of which the first ``accepted`` passed."""
        decay = self.config.decay
        self.pooled.observe(k, accepted, decay)
        own = self.by_kind.get(kind)
        if own is None:
            own = self.by_kind[kind] = Acceptance.empty(self.k_max)
        own.observe(k, accepted, decay)

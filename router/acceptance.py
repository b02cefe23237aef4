"""How often drafts pass, by position and by kind of sequence, and the tokens
a round of k drafts can be expected to gain a batch.

Draft j of a round passes with chance a_j when the drafts before it passed,
so a round of k drafts gains a sequence E(k) = 1 + sum over i <= k of
a_1 ... a_i tokens (the 1: the target's own token after the last accepted
draft). The counts decay, so E follows a changing workload.

Greedy drafts, sampled ones and those under a grammar pass at different
rates, so each kind keeps its own counts beside the pooled ones; a kind not
seen yet borrows the pooled counts. A sequence also gains no more than its
room (tokens left before max_tokens or the model's length): with room r it
keeps at most r - 1 drafts, so a round's drafts past that are drawn for
nothing. A batch's mix counts its sequences by (kind, most drafts it can
keep), and its E(k) is the mean of theirs.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from model_runtime.sampling import SamplingOptions

GREEDY, SAMPLED, CONSTRAINED = "greedy", "sampled", "constrained"

# (kind, most drafts a sequence can keep) -> sequences of the batch
Mix = Mapping[tuple[str, int], int]


def acceptance_kind(options: SamplingOptions) -> str:
    """The acceptance a sequence's drafts count in: greedy drafts, sampled
    ones and those under a grammar pass at different rates."""
    if options.grammar:
        return CONSTRAINED
    return GREEDY if options.greedy else SAMPLED


def mix_of(kinds: Sequence[str], rooms: Sequence[int] | None, k_max: int) -> Mix:
    """A batch's mix from its sequences' kinds and rooms (None: room for all
    k_max drafts each). It is built every round on the round's path, so the
    common batch, all with room for every draft, takes the short way."""
    if rooms is not None and len(rooms) != len(kinds):
        raise ValueError(f"a room for each kind: {len(kinds)} kinds, {len(rooms)} rooms")
    if rooms is None or not rooms or min(rooms) > k_max:
        return {(kind, k_max): count for kind, count in Counter(kinds).items()}
    return Counter(zip(kinds, [max(min(room - 1, k_max), 0) for room in rooms], strict=True))


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

    def curve(self, k_max: int) -> list[float]:
        """[E(0), ..., E(k_max)]."""
        totals, total, chance, rate = [1.0], 1.0, 1.0, 0.0
        for j in range(k_max):
            if j < len(self.reached) and self.reached[j]:
                rate = self.accepted[j] / self.reached[j]
            chance *= rate  # positions never reached keep the last measured rate
            total += chance
            totals.append(total)
        return totals


class AcceptanceByKind:
    """The pooled counts and each kind's."""

    def __init__(self, k_max: int):
        self.k_max = k_max
        self.pooled = Acceptance.empty(k_max)
        self.by_kind: dict[str, Acceptance] = {}

    def observe(self, k: int, accepted: int, kind: str, decay: float) -> None:
        self.pooled.observe(k, accepted, decay)
        own = self.by_kind.get(kind)
        if own is None:
            own = self.by_kind[kind] = Acceptance.empty(self.k_max)
        own.observe(k, accepted, decay)

    def of(self, kind: str) -> Acceptance:
        """The kind's counts, or the pooled ones while it has none."""
        own = self.by_kind.get(kind)
        return own if own is not None and own.measured else self.pooled

    def curve(self, mix: Mix | None) -> list[float]:
        """[E(0), ..., E(k_max)] of a round over ``mix`` (None: pooled, no room limit)."""
        if not mix:
            return self.pooled.curve(self.k_max)
        if len(mix) == 1:  # (the common batch: one kind, all with the same room)
            ((kind, most),) = mix
            curve = self.of(kind).curve(self.k_max)
            return [curve[min(k, most)] for k in range(self.k_max + 1)]
        curves = {kind: self.of(kind).curve(self.k_max) for kind in {kind for kind, _ in mix}}
        n = sum(mix.values())
        return [
            sum(count * curves[kind][min(k, most)] for (kind, most), count in mix.items()) / n
            for k in range(self.k_max + 1)
        ]

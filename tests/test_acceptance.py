"""What a round of k drafts is expected to gain a batch: each sequence's
acceptance by position, up to the drafts it can keep before its length ends
it."""

from __future__ import annotations

import pytest

from router.acceptance import GREEDY, SAMPLED, AcceptanceByKind, mix_of
from router.adaptive import AdaptiveConfig, KChooser


def halves(k_max: int) -> AcceptanceByKind:
    """Counts where every draft passes half the time."""
    acceptance = AcceptanceByKind(k_max)
    for j in range(k_max):
        acceptance.pooled.reached[j], acceptance.pooled.accepted[j] = 10.0, 5.0
    return acceptance


def priced(draft_s: float, probe_every: int = 10**9) -> KChooser:
    """A chooser at batch 1 whose verify costs 5 ms at any k, a draft step ``draft_s``."""
    chooser = KChooser(5, AdaptiveConfig(probe_every=probe_every))
    chooser.target_step_s.add(1, 0.005)
    chooser.target_step_s.add(6, 0.005)
    chooser.draft_step_s.add(1, draft_s)
    return chooser


def test_a_sequence_keeps_no_more_drafts_than_its_room_less_one() -> None:
    assert mix_of([GREEDY, GREEDY, SAMPLED], [100, 3, 1], k_max=5) == {
        (GREEDY, 5): 1,
        (GREEDY, 2): 1,
        (SAMPLED, 0): 1,
    }


def test_without_rooms_every_sequence_can_keep_every_draft() -> None:
    assert mix_of([GREEDY, GREEDY], None, k_max=4) == {(GREEDY, 4): 2}


def test_a_room_of_k_max_keeps_one_draft_fewer_and_one_more_keeps_them_all() -> None:
    assert mix_of([GREEDY, GREEDY], [5, 4], k_max=4) == {(GREEDY, 4): 1, (GREEDY, 3): 1}
    assert mix_of([GREEDY, SAMPLED], [5, 5], k_max=4) == {(GREEDY, 4): 1, (SAMPLED, 4): 1}


def test_a_mix_needs_a_room_for_each_kind() -> None:
    with pytest.raises(ValueError, match="a room for each kind: 2 kinds, 1 rooms"):
        mix_of([GREEDY, GREEDY], [5], k_max=4)


def test_a_batch_of_one_kind_gains_by_its_own_counts() -> None:
    acceptance = halves(2)
    for _ in range(50):
        acceptance.observe(2, 2, SAMPLED, decay=0.95)  # sampled drafts always pass
    assert acceptance.curve({(SAMPLED, 2): 3}) == pytest.approx([1.0, 2.0, 3.0])


def test_drafts_past_a_sequences_room_gain_it_nothing() -> None:
    curve = halves(4).curve({(GREEDY, 2): 1})
    assert curve == pytest.approx([1.0, 1.5, 1.75, 1.75, 1.75])


def test_a_batchs_gain_is_the_mean_of_its_sequences() -> None:
    acceptance = halves(4)
    mixed = acceptance.curve({(GREEDY, 4): 1, (GREEDY, 1): 1})
    assert mixed[4] == pytest.approx(((1 + 0.5 + 0.25 + 0.125 + 0.0625) + 1.5) / 2)


def test_a_round_near_a_sequences_length_drafts_what_it_can_keep() -> None:
    chooser = priced(draft_s=0.0002)
    for _ in range(50):
        chooser.observe_acceptance(5, accepted=5)  # every draft passes
    assert chooser.choose(1, [GREEDY], round_number=1, rooms=[100]) == 5
    assert chooser.choose(1, [GREEDY], round_number=2, rooms=[3]) == 2
    assert chooser.choose(1, [GREEDY], round_number=3, rooms=[1]) == 0


def test_a_probe_does_not_draft_past_what_the_batch_can_keep() -> None:
    chooser = priced(draft_s=0.0002, probe_every=1)  # round 2 probes one more
    for _ in range(50):
        chooser.observe_acceptance(5, accepted=5)
    assert chooser.choose(1, [GREEDY], round_number=2, rooms=[3]) == 2


def test_a_round_drafting_nothing_because_its_sequences_end_does_not_settle_at_k_0() -> None:
    # Once settled at k = 0 the chooser leaves only for a k 5% better; a k
    # drafted because every sequence ends soon is not a k it chose.
    chooser = priced(draft_s=0.0004)
    for j in range(5):
        chooser.reached[j], chooser.accepted[j] = 100.0, 10.0  # k = 1 is 2% better than 0
    assert chooser.choose(1, [GREEDY], round_number=1, rooms=[100]) == 1
    assert chooser.choose(1, [GREEDY], round_number=2, rooms=[1]) == 0
    assert chooser.choose(1, [GREEDY], round_number=3, rooms=[100]) == 1


def test_a_sequence_ending_beside_others_does_not_settle_the_chooser_at_k_0() -> None:
    chooser = priced(draft_s=0.0004)
    for j in range(5):
        chooser.reached[j], chooser.accepted[j] = 100.0, 10.0  # k = 1 is 2% better than 0
    assert chooser.choose(2, [GREEDY] * 2, round_number=1, rooms=[100, 100]) == 1
    chooser.choose(2, [GREEDY] * 2, round_number=2, rooms=[100, 1])
    assert chooser.choose(2, [GREEDY] * 2, round_number=3, rooms=[100, 100]) == 1

"""Adaptive k: each round drafts as many tokens as pay for themselves, from
the acceptance and the step costs measured so far (the chooser)."""

from __future__ import annotations

import pytest

from router.acceptance import CONSTRAINED, GREEDY, SAMPLED
from router.adaptive import AdaptiveConfig, KChooser

NEVER_PROBE = AdaptiveConfig(probe_every=10**9)


def measured(
    acceptance: float, draft_s: float, verify_s: dict[int, float], k_max: int = 5
) -> KChooser:
    """A chooser that has seen rounds at every k, with step times by tokens."""
    chooser = KChooser(k_max, NEVER_PROBE)
    for tokens, seconds in verify_s.items():
        chooser.target_step_s.add(tokens, seconds)
    for batch in (1, 64):
        chooser.draft_step_s.add(batch, draft_s)
    for j in range(k_max):
        chooser.reached[j], chooser.accepted[j] = 100.0, 100.0 * acceptance
    return chooser


def test_before_measuring_anything_it_drafts_the_most() -> None:
    assert KChooser(5).choose(batch=1, round_number=1) == 5


def test_expected_tokens_follow_the_acceptance_per_position() -> None:
    chooser = KChooser(3)
    for j, rate in enumerate([0.5, 0.5, 0.5]):
        chooser.reached[j], chooser.accepted[j] = 10.0, 10.0 * rate
    assert chooser.expected_tokens(3) == pytest.approx(1 + 0.5 + 0.25 + 0.125)
    assert chooser.expected_tokens(0) == 1.0


def test_positions_never_reached_borrow_the_last_measured_rate() -> None:
    chooser = KChooser(4)
    chooser.reached[0], chooser.accepted[0] = 10.0, 8.0
    assert chooser.expected_tokens(3) == pytest.approx(1 + 0.8 + 0.64 + 0.512)


def test_drafts_that_are_never_accepted_are_not_drafted() -> None:
    chooser = measured(0.0, draft_s=0.001, verify_s={1: 0.005, 6: 0.005})
    assert chooser.best(batch=1) == 0


def test_cheap_drafts_that_are_accepted_are_drafted_to_the_limit() -> None:
    chooser = measured(0.95, draft_s=0.0002, verify_s={1: 0.005, 6: 0.005})
    assert chooser.best(batch=1) == 5


def test_a_large_batch_whose_verify_grows_with_k_drafts_fewer() -> None:
    # At batch 1 a verify costs a decode step; at batch 64 every draft token
    # adds to it, as when the target's step becomes compute-bound.
    verify = {1: 0.005, 2: 0.005, 4: 0.005, 8: 0.005, 64: 0.006}
    verify.update({128: 0.009, 256: 0.015, 512: 0.027})
    chooser = measured(0.6, draft_s=0.0008, verify_s=verify)
    assert chooser.best(batch=1) > chooser.best(batch=64)


def test_the_engines_own_work_per_round_favours_longer_rounds() -> None:
    # Work the engine does once a round, whatever k, is paid less often per
    # token by rounds that gain more tokens.
    chooser = measured(0.6, draft_s=0.0008, verify_s={1: 0.005, 8: 0.005})
    lean = chooser.best(batch=1)
    for _ in range(3):
        chooser.observe_between(batch=1, seconds=0.02)
    assert chooser.best(batch=1) > lean


def test_acceptance_is_counted_up_to_the_first_rejection() -> None:
    chooser = KChooser(4)
    chooser.observe_acceptance(4, accepted=2)  # drafts 1, 2 passed, 3 failed, 4 unseen
    assert chooser.reached == [1.0, 1.0, 1.0, 0.0]
    assert chooser.accepted == [1.0, 1.0, 0.0, 0.0]


def test_acceptance_is_kept_apart_by_kind_of_sequence() -> None:
    chooser = KChooser(3)
    for _ in range(20):
        chooser.observe_acceptance(3, accepted=3, kind=GREEDY)
        chooser.observe_acceptance(3, accepted=0, kind=SAMPLED)
    assert chooser.expected_tokens(3, {(GREEDY, 3): 1}) == pytest.approx(4.0)
    assert chooser.expected_tokens(3, {(SAMPLED, 3): 1}) == pytest.approx(1.0)
    assert chooser.expected_tokens(3, {(GREEDY, 3): 1, (SAMPLED, 3): 3}) == pytest.approx(1.75)


def test_a_greedy_batch_is_not_held_back_by_sampled_requests_served_beside_it() -> None:
    chooser = measured(0.5, draft_s=0.0008, verify_s={1: 0.005, 8: 0.005})
    for _ in range(50):
        chooser.observe_acceptance(5, accepted=5, kind=GREEDY)
        for _ in range(3):  # more sampled requests than greedy ones
            chooser.observe_acceptance(5, accepted=0, kind=SAMPLED)
    assert chooser.best(batch=1, mix={(GREEDY, 5): 1}) == 5
    assert chooser.best(batch=1, mix={(SAMPLED, 5): 1}) == 0
    assert chooser.choose(batch=1, kinds=[GREEDY, GREEDY], round_number=1) == 5
    assert chooser.best(batch=1) < 5  # pooled, as before kinds were told apart


def test_a_kind_not_seen_yet_borrows_the_pooled_acceptance() -> None:
    chooser = KChooser(2)
    chooser.observe_acceptance(2, accepted=1, kind=GREEDY)
    assert chooser.expected_tokens(2, {(CONSTRAINED, 2): 1}) == chooser.expected_tokens(2)


def test_probes_try_one_token_more_and_one_fewer_by_turns() -> None:
    chooser = measured(0.6, draft_s=0.0008, verify_s={1: 0.005, 4: 0.005})
    chooser.config = AdaptiveConfig(probe_every=4)
    best = chooser.best(batch=1)
    assert 0 < best < 5
    picks = [chooser.choose(batch=1, round_number=r) for r in range(1, 10)]
    assert picks == [best] * 4 + [best + 1] + [best] * 3 + [best - 1]


def test_at_either_end_every_probe_tries_the_one_neighbour_there_is() -> None:
    unmeasured = KChooser(5, AdaptiveConfig(probe_every=4))  # it drafts k_max
    picks = [unmeasured.choose(batch=1, round_number=r) for r in range(1, 14)]
    assert picks == [5] * 4 + [4] + [5] * 3 + [4] + [5] * 3 + [4]
    never = measured(0.0, draft_s=0.001, verify_s={1: 0.005})
    never.config = AdaptiveConfig(probe_every=4)
    picks = [never.choose(batch=1, round_number=r) for r in range(1, 14)]
    assert picks == [0] * 4 + [1] + [0] * 3 + [1] + [0] * 3 + [1]


def test_the_first_few_rounds_are_timed_and_then_one_in_every_few() -> None:
    chooser = KChooser(5, AdaptiveConfig(probe_every=10**9, time_every=8, time_first=3))
    assert [r for r in range(1, 30) if chooser.timed(r)] == [1, 2, 3, 5, 13, 21, 29]


def test_a_timing_that_falls_on_a_probe_moves_to_the_round_after() -> None:
    # Sent ahead, a probe is measured whole; timed, it would not be.
    chooser = KChooser(5, AdaptiveConfig(probe_every=6, time_every=8, time_first=3))
    assert chooser.choose(batch=1, round_number=13) == 4  # a probe down from k_max
    assert [r for r in range(1, 30) if chooser.timed(r)] == [1, 2, 3, 5, 14, 21, 29]


def test_settled_at_k_0_a_probe_up_is_timed() -> None:
    # Its draft catches up first, so it is not measured whole: timing it is
    # the only way a k above 0 gets a price other than the one it had.
    chooser = measured(0.0, draft_s=0.001, verify_s={1: 0.005})
    chooser.config = AdaptiveConfig(probe_every=4, time_every=100, time_first=1)
    picks = {r: chooser.choose(batch=1, round_number=r) for r in range(1, 14)}
    assert [r for r, k in picks.items() if k] == [5, 9, 13]  # (no k below 0 to probe)
    assert [r for r in range(2, 14) if chooser.timed(r)] == [5, 9, 13]


def test_settled_above_k_0_no_probe_is_timed() -> None:
    chooser = measured(0.6, draft_s=0.0008, verify_s={1: 0.005, 4: 0.005})
    chooser.config = AdaptiveConfig(probe_every=4, time_every=100, time_first=1)
    assert chooser.choose(batch=1, round_number=1) > 0
    assert not any(chooser.timed(r) for r in range(2, 14))


def test_a_pinned_k_does_not_probe_but_times_the_same_rounds() -> None:
    # Pinned and chosen rounds pay alike for being timed.
    config = AdaptiveConfig(probe_every=4, time_every=4, time_first=2)
    pinned, free = KChooser(5, config), KChooser(5, config)
    pinned.pin(2)
    assert [pinned.choose(batch=1, round_number=r) for r in range(1, 13)] == [2] * 12
    timed = [r for r in range(1, 13) if pinned.timed(r)]
    assert timed == [r for r in range(1, 13) if free.timed(r)] == [1, 2, 3, 7, 11]


def test_a_k_whose_rounds_were_measured_whole_is_priced_as_measured() -> None:
    # Drafts sent ahead run while the engine works: a whole round can cost
    # less than its parts, and only whole rounds show by how much.
    chooser = measured(0.6, draft_s=0.002, verify_s={1: 0.005, 6: 0.006})
    by_parts = chooser.best(batch=1)
    cheaper = by_parts + 2
    for k in (by_parts, cheaper):  # here the draft's steps are all but hidden
        chooser.observe_whole(batch=1, k=k, seconds=0.005 + k * 0.0002, round_number=1)
    assert chooser.price(1, cheaper) == pytest.approx(0.005 + cheaper * 0.0002)
    assert chooser.best(batch=1) == cheaper


def test_a_k_not_measured_whole_is_priced_by_its_parts_scaled_as_the_nearest_was() -> None:
    chooser = measured(0.6, draft_s=0.002, verify_s={1: 0.005, 6: 0.006})
    parts = {k: chooser.price(1, k) for k in range(6)}
    chooser.observe_whole(batch=1, k=4, seconds=0.5 * parts[4], round_number=1)
    chooser.observe_whole(batch=1, k=1, seconds=0.8 * parts[1], round_number=1)
    assert chooser.price(1, 5) == pytest.approx(0.5 * parts[5])
    assert chooser.price(1, 3) == pytest.approx(0.5 * parts[3])
    assert chooser.price(1, 2) == pytest.approx(0.8 * parts[2])  # a tie: the smaller k
    assert chooser.price(1, 0) == pytest.approx(0.8 * parts[0])


def test_a_k_measured_whole_at_another_batch_size_is_priced_by_its_parts() -> None:
    chooser = measured(0.6, draft_s=0.002, verify_s={1: 0.005, 6: 0.006})
    by_parts = chooser.price(1, 3)
    chooser.observe_whole(batch=4, k=3, seconds=0.001, round_number=1)
    assert chooser.price(1, 3) == by_parts


def test_settled_at_k_0_it_leaves_only_for_a_clearly_better_k() -> None:
    # Leaving k = 0 makes the draft catch up on every token it missed, which
    # a round's price does not show: near-equal prices must not flip it.
    chooser = measured(0.0, draft_s=0.001, verify_s={1: 0.005, 2: 0.005})
    chooser.config = AdaptiveConfig(probe_every=10**9, leave_zero=0.1)
    assert chooser.choose(batch=1, round_number=1) == 0  # drafts never pass
    for j in range(5):  # now they pass 30% of the time: k = 1 is 8% better
        chooser.reached[j], chooser.accepted[j] = 100.0, 30.0
    rate = {k: chooser.goodput(1, k) for k in range(6)}
    assert max(rate, key=rate.__getitem__) == 1 and rate[0] * 1.05 < rate[1] < rate[0] * 1.1
    assert chooser.choose(batch=1, round_number=2) == 0
    chooser.config = AdaptiveConfig(probe_every=10**9, leave_zero=0.05)
    assert chooser.choose(batch=1, round_number=3) == 1


def test_not_settled_at_k_0_it_takes_the_best_k() -> None:
    chooser = measured(0.3, draft_s=0.001, verify_s={1: 0.005, 2: 0.005})
    chooser.config = AdaptiveConfig(probe_every=10**9, leave_zero=0.1)
    assert chooser.choose(batch=1, round_number=1) == 1


def test_a_k_0_pinned_and_then_unpinned_counts_as_settled_there() -> None:
    chooser = measured(0.3, draft_s=0.001, verify_s={1: 0.005, 2: 0.005})
    chooser.config = AdaptiveConfig(probe_every=10**9, leave_zero=0.1)
    chooser.pin(0)
    chooser.pin(None)
    assert chooser.choose(batch=1, round_number=1) == 0


def test_a_probe_down_to_k_0_does_not_settle_it_there() -> None:
    chooser = measured(0.3, draft_s=0.001, verify_s={1: 0.005, 2: 0.005})
    chooser.config = AdaptiveConfig(probe_every=2, leave_zero=0.5)
    assert [chooser.choose(batch=1, round_number=r) for r in range(1, 7)] == [1, 1, 2, 1, 0, 1]


def test_a_pinned_k_is_drafted_every_round_until_unpinned() -> None:
    chooser = measured(0.0, draft_s=0.001, verify_s={1: 0.005})
    chooser.pin(4)
    assert [chooser.choose(batch=1, round_number=r) for r in range(1, 41)] == [4] * 40
    chooser.pin(None)
    assert chooser.choose(batch=1, round_number=41) == 0
    with pytest.raises(ValueError, match=r"k must be in 0\.\.5"):
        chooser.pin(6)


def test_one_slow_round_does_not_move_the_step_cost() -> None:
    chooser = KChooser(3)
    for seconds in (0.005, 0.005, 0.9, 0.005):  # the third compiled a kernel
        chooser.observe_round(batch=1, k=0, draft_s=0.0, verify_s=seconds)
    assert chooser.target_step_s.get(1) == 0.005


def test_a_round_that_also_caught_the_draft_up_does_not_price_its_steps() -> None:
    chooser = KChooser(3)
    chooser.observe_round(batch=1, k=3, draft_s=None, verify_s=0.005)  # a prompt's prefill too
    assert chooser.draft_step_s.get(1) is None
    chooser.observe_round(batch=1, k=3, draft_s=0.003, verify_s=0.005)
    assert chooser.draft_step_s.get(1) == pytest.approx(0.001)


def test_the_config_is_checked() -> None:
    with pytest.raises(ValueError, match="probe_every must be >= 1"):
        AdaptiveConfig(probe_every=0)
    with pytest.raises(ValueError, match="time_first must be >= 1"):
        AdaptiveConfig(time_first=0)
    with pytest.raises(ValueError, match="decay must be in"):
        AdaptiveConfig(decay=1.0)
    with pytest.raises(ValueError, match="window must be >= 1"):
        AdaptiveConfig(window=0)
    with pytest.raises(ValueError, match="leave_zero must be >= 0"):
        AdaptiveConfig(leave_zero=-0.1)


def test_a_whole_rounds_price_not_measured_again_is_forgotten_for_its_parts() -> None:
    # Settled at k = 0, a k above is not measured whole again: a price it had
    # once (here inflated) would hold the chooser at 0 for good.
    chooser = measured(0.5, draft_s=0.0004, verify_s={1: 0.005, 6: 0.005})
    chooser.observe_whole(batch=1, k=0, seconds=0.005, round_number=0)
    chooser.observe_whole(batch=1, k=1, seconds=0.020, round_number=0)
    assert chooser.choose(batch=1, round_number=1) == 0
    for r in range(2, 70):
        chooser.observe_whole(batch=1, k=0, seconds=0.005, round_number=r)  # again every round
        assert (chooser.choose(batch=1, round_number=r) > 0) == (r > 64)


def test_with_the_defaults_no_probe_is_timed_so_each_is_measured_whole() -> None:
    chooser = measured(0.6, draft_s=0.0008, verify_s={1: 0.005, 4: 0.005})
    chooser.config = AdaptiveConfig()
    best = chooser.best(batch=1)
    probes = [r for r in range(1, 200) if chooser.choose(batch=1, round_number=r) != best]
    assert len(probes) > 8 and not [r for r in probes if chooser.timed(r)]


@pytest.mark.parametrize("k", [-1, 6])
def test_a_k_outside_0_to_k_max_has_no_price(k: int) -> None:
    with pytest.raises(ValueError, match=r"k must be in 0\.\.5"):
        KChooser(5).price(1, k)

"""Step prices by size: the median of the latest few at a measured size,
interpolated between measured sizes, never pooled across sizes."""

from __future__ import annotations

import pytest

from router.step_times import StepTimes


def priced(*timed: tuple[int, float]) -> StepTimes:
    """Step times holding each (size, seconds) given, in that order."""
    times = StepTimes(window=4)
    for size, seconds in timed:
        times.add(size, seconds)
    return times


def test_nothing_measured_has_no_price() -> None:
    assert StepTimes(window=4).get(8) is None


def test_a_measured_size_is_priced_at_the_median_of_its_latest_times() -> None:
    times = StepTimes(window=3)
    for seconds in (0.9, 0.010, 0.012, 0.011):  # the first one fell out of the window
        times.add(64, seconds)
    assert times.get(64) == pytest.approx(0.011)


def test_a_size_timed_fewer_than_three_times_is_priced_at_its_least() -> None:
    times = priced((48, 0.9), (48, 0.006))  # the first step compiled a kernel
    assert times.get(48) == pytest.approx(0.006)


def test_sizes_are_priced_apart_not_by_power_of_two() -> None:
    # 320 and 512 tokens: a batch of 64 with 4 drafts each and with 7.
    times = priced((320, 0.012), (512, 0.018))
    assert times.get(320) == pytest.approx(0.012)
    assert times.get(512) == pytest.approx(0.018)


def test_a_size_between_measured_ones_is_priced_on_the_line_between_them() -> None:
    assert priced((128, 0.010), (256, 0.014)).get(192) == pytest.approx(0.012)


def test_a_size_below_the_measured_ones_takes_the_smallest_ones_price() -> None:
    times = priced((8, 0.006), (4, 0.005))  # (sizes come in any order)
    assert times.get(1) == pytest.approx(0.005)


def test_a_size_above_the_measured_ones_is_not_priced_as_the_largest() -> None:
    # Settled at k = 0, a batch of 64 has measured verifies of 64 and 128
    # tokens; a k never run must not be priced as the largest one measured.
    assert priced((64, 0.010), (128, 0.012)).get(384) == pytest.approx(0.020)


def test_above_the_measured_sizes_the_slope_is_that_of_the_whole_range() -> None:
    # Not the last step's: 128 and 144 tokens padded to graphs of 128 and 160.
    times = priced((16, 0.006), (128, 0.008), (144, 0.010))
    assert times.get(272) == pytest.approx(0.010 + 128 * 0.004 / 128)


def test_a_price_above_the_measured_ones_never_falls() -> None:
    times = priced((64, 0.012), (128, 0.010))  # (noise)
    assert times.get(384) == pytest.approx(0.010)


def test_a_new_time_moves_its_sizes_price() -> None:
    times = StepTimes(window=1)
    times.add(16, 0.004)
    times.add(16, 0.005)
    assert times.get(16) == pytest.approx(0.005) and times.count(16) == 1


def test_the_window_is_checked() -> None:
    with pytest.raises(ValueError, match="window must be >= 1"):
        StepTimes(window=0)


def test_the_nearest_measured_size_is_found_on_either_side() -> None:
    times = priced((2, 0.01), (5, 0.02))
    assert [times.nearest(size) for size in (0, 2, 3, 4, 5, 9)] == [2, 2, 2, 5, 5, 5]
    assert StepTimes(window=4).nearest(3) is None


def test_sizes_not_measured_since_a_round_are_forgotten_but_the_latest() -> None:
    times = StepTimes(window=4)
    times.add(1, 0.010, at=1)
    times.add(2, 0.020, at=5)
    times.add(3, 0.030, at=9)
    times.forget(before=6)
    assert times.count(1) == times.count(2) == 0 and times.get(3) == 0.030
    assert times.nearest(1) == 3 and times.get(2) == 0.030  # as if never measured
    times.add(4, 0.040, at=9)
    times.forget(before=100)
    assert times.count(3) == 0 and times.get(4) == 0.040  # the one added last stays

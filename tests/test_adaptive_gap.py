"""How benchmarks/adaptive_gap.py splits adaptive k's extra round time over the
best fixed k's: rounds timed on the path, the same k's rounds run slower, and
the rest (what it chose, and the tail that leaves)."""

from __future__ import annotations

import pytest

from benchmarks.adaptive_gap import cells, gap

BATCH = 4
# [batch, k, drafted ahead, rounds, seconds, tokens, slowest round's seconds]
FIXED = {
    2: [[BATCH, 2, 1, 10, 0.100, 100, 0.011], [BATCH, 2, 0, 1, 0.012, 10, 0.012]],
    3: [[BATCH, 3, 1, 10, 0.110, 110, 0.012], [BATCH, 3, 0, 1, 0.013, 11, 0.013]],
}
BASE = 0.112  # the best fixed k's (k = 2) round seconds


def test_rounds_timed_on_the_path_count_beyond_their_ks_rounds_drafted_ahead() -> None:
    # Two k = 2 rounds on the path at 13 ms against 10 ms ahead: 6 ms more.
    adaptive = [[BATCH, 2, 1, 9, 0.090, 90, 0.01], [BATCH, 2, 0, 2, 0.026, 20, 0.013]]
    split = gap(adaptive, FIXED, best=2, batch=BATCH)
    assert split["timing"] == pytest.approx(0.006 / BASE)
    assert split["same k"] == pytest.approx(0.0)


def test_rounds_drafted_ahead_count_beyond_the_same_ks_fixed_rounds() -> None:
    # k = 3 rounds ahead at 12 ms against 11 ms in k = 3's row: 1 ms each.
    adaptive = [[BATCH, 3, 1, 8, 0.096, 90, 0.012], [BATCH, 3, 0, 1, 0.013, 11, 0.013]]
    split = gap(adaptive, FIXED, best=2, batch=BATCH)
    assert split["same k"] == pytest.approx(0.008 / BASE)
    assert split["timing"] == pytest.approx(0.002 / BASE)


def test_the_parts_add_up_to_the_whole_gap_and_the_tail_counts_in_choice() -> None:
    adaptive = [
        [BATCH, 3, 1, 8, 0.096, 90, 0.012],
        [BATCH, 2, 0, 2, 0.026, 20, 0.013],
        [BATCH - 1, 5, 1, 3, 0.030, 20, 0.011],  # the tail
    ]
    split = gap(adaptive, FIXED, best=2, batch=BATCH)
    assert split["gap"] == pytest.approx((0.152 - BASE) / BASE)
    assert split["timing"] + split["same k"] + split["choice"] == pytest.approx(split["gap"])
    assert split["choice"] == pytest.approx((0.152 - BASE - 0.008 - 0.006) / BASE)


def test_cells_compare_adaptive_with_the_fastest_fixed_k_of_each_batch_size() -> None:
    def row(k: object, rate: float, log: list) -> dict:
        return {"k": k, "batch": BATCH, "tokens_per_s": rate, "runs_round_costs": [log, log]}

    adaptive = [[BATCH, 2, 1, 11, 0.121, 110, 0.011]]
    rows = [row("adaptive", 900.0, adaptive), row(0, 100.0, [[BATCH, 0, 0, 30, 0.2, 30, 0.01]]),
            row(2, 1000.0, FIXED[2]), row(3, 990.0, FIXED[3])]  # fmt: skip
    found = cells({"pairs": [{"wanted_acceptance": 0.8, "rows": rows}]}, run=1)
    assert [(wanted, batch, best) for wanted, batch, best, _ in found] == [(0.8, BATCH, 2)]
    assert found[0][3]["same k"] == pytest.approx(0.011 / BASE)

"""How benchmarks/adaptive_gap.py splits adaptive k's extra round time over the
best fixed k's: rounds timed on the path, the same k's rounds run slower, and
the rest (what it chose, and the tail that leaves)."""

from __future__ import annotations

import pytest

from benchmarks.adaptive_gap import cells, gap, passes

BATCH = 4
# [batch, k, drafted ahead, rounds, seconds, tokens, slowest round's seconds]
FIXED = {
    2: [[BATCH, 2, 1, 10, 0.100, 100, 0.011], [BATCH, 2, 0, 1, 0.012, 10, 0.012]],
    3: [[BATCH, 3, 1, 10, 0.110, 110, 0.012], [BATCH, 3, 0, 1, 0.013, 11, 0.013]],
}
BASE = 0.112  # the best fixed k's (k = 2) round seconds


def test_rounds_timed_on_the_path_count_beyond_the_best_rows_own_rounds_on_it() -> None:
    # Two k = 2 rounds on the path at 13 ms against 10 ms ahead: 6 ms more, of
    # which the best row's own round on the path (12 ms) pays 2 ms too.
    adaptive = [[BATCH, 2, 1, 9, 0.090, 90, 0.01], [BATCH, 2, 0, 2, 0.026, 20, 0.013]]
    shares = gap(adaptive, FIXED, best=2, batch=BATCH)
    assert shares["timing"] == pytest.approx(0.004 / BASE)
    assert shares["same k"] == pytest.approx(0.0)


def test_as_many_rounds_on_the_path_as_the_best_row_cost_no_timing() -> None:
    adaptive = [[BATCH, 2, 1, 10, 0.100, 100, 0.01], [BATCH, 2, 0, 1, 0.012, 10, 0.012]]
    assert gap(adaptive, FIXED, best=2, batch=BATCH)["timing"] == pytest.approx(0.0)


def test_rounds_drafted_ahead_count_beyond_the_same_ks_fixed_rounds() -> None:
    # k = 3 rounds ahead at 12 ms against 11 ms in k = 3's row: 1 ms each.
    adaptive = [[BATCH, 3, 1, 8, 0.096, 90, 0.012], [BATCH, 3, 0, 1, 0.013, 20, 0.013]]
    shares = gap(adaptive, FIXED, best=2, batch=BATCH)
    assert shares["same k"] == pytest.approx(0.008 / BASE)
    assert shares["timing"] == pytest.approx(0.0)  # 13 against 11 ms, as the best's 12 against 10


def test_the_parts_add_up_to_the_whole_gap_and_the_tail_counts_in_choice() -> None:
    adaptive = [
        [BATCH, 3, 1, 8, 0.096, 90, 0.012],
        [BATCH, 2, 0, 2, 0.026, 20, 0.013],
        [BATCH - 1, 5, 1, 3, 0.030, 0, 0.011],  # the tail
    ]
    shares = gap(adaptive, FIXED, best=2, batch=BATCH)
    assert shares["gap"] == pytest.approx((0.152 - BASE) / BASE)
    assert shares["timing"] + shares["same k"] + shares["choice"] == pytest.approx(shares["gap"])
    assert shares["choice"] == pytest.approx((0.152 - BASE - 0.008 - 0.004) / BASE)


def test_rows_that_kept_different_tokens_are_compared_by_the_best_rows_tokens() -> None:
    # Twice the tokens in twice the seconds of the best row: no gap.
    adaptive = [[BATCH, 2, 1, 20, 0.200, 200, 0.01], [BATCH, 2, 0, 2, 0.024, 20, 0.012]]
    shares = gap(adaptive, FIXED, best=2, batch=BATCH)
    assert shares == pytest.approx({"gap": 0.0, "timing": 0.0, "same k": 0.0, "choice": 0.0})


def row(k: object, rate: float, *logs: list) -> dict:
    return {"k": k, "batch": BATCH, "tokens_per_s": rate, "runs_round_costs": list(logs)}


def test_cells_compare_each_pass_of_adaptive_with_the_fastest_fixed_k_above_zero() -> None:
    first, second = [[BATCH, 2, 1, 11, 0.132, 110, 0.012]], [[BATCH, 2, 1, 11, 0.121, 110, 0.011]]
    rows = [row("adaptive", 900.0, first, second),
            row(0, 2000.0, *[[[BATCH, 0, 0, 110, 0.2, 110, 0.01]]] * 2),
            row(2, 1000.0, FIXED[2], FIXED[2]), row(3, 990.0, FIXED[3], FIXED[3])]  # fmt: skip
    found = cells({"pairs": [{"wanted_acceptance": 0.8, "rows": rows}]}, run=1)
    assert [(wanted, batch, best) for wanted, batch, best, _ in found] == [(0.8, BATCH, 2)]
    assert found[0][3]["same k"] == pytest.approx(0.011 / BASE)  # the second pass's


def test_passes_are_those_every_row_ran_but_adaptives_learning_pass() -> None:
    log = FIXED[2]
    rows = [row("adaptive-first", 900.0, log), row("adaptive", 900.0, log, log, log),
            row(2, 1000.0, log, log)]  # fmt: skip
    assert passes({"pairs": [{"rows": rows}]}) == 2

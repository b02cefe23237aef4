"""Reading a speculative_gpu.py report for its plots: speedups by batch size."""

from __future__ import annotations

from typing import Any

import pytest

from benchmarks.plot_speculative import summary


def row(k: int | str, batch: int, tokens_per_s: float) -> dict[str, Any]:
    return {"k": k, "batch": batch, "tokens_per_s": tokens_per_s, "acceptance": 0.5}


def report(rows: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "target_only": {"1": 100.0, "4": 300.0},
        "draft_only": {"1": 1000.0, "4": 3000.0},
        "pairs": [{"wanted_acceptance": 0.8, "rows": rows}],
    }


def test_each_batch_sizes_speedups_are_over_target_only_at_that_size() -> None:
    rows = [row(1, 1, 150.0), row("adaptive", 1, 200.0), row(1, 4, 600.0)]
    points = summary(report([*rows, row("adaptive", 4, 450.0)]))
    assert [p["batch"] for p in points] == [1, 4]
    assert points[0]["speedup"] == {1: pytest.approx(1.5), "adaptive": pytest.approx(2.0)}
    assert points[1]["speedup"] == {1: pytest.approx(2.0), "adaptive": pytest.approx(1.5)}
    assert points[0]["c"] == pytest.approx(0.1)


def test_a_batch_size_a_run_cut_short_never_reached_is_left_out() -> None:
    points = summary(report([row(1, 1, 150.0), row("adaptive", 1, 200.0)]))
    assert [p["batch"] for p in points] == [1]


def test_a_batch_size_a_run_cut_short_in_is_left_out() -> None:
    rows = [row(1, 1, 150.0), row("adaptive", 1, 200.0), row("adaptive-first", 4, 500.0)]
    assert [p["batch"] for p in summary(report(rows))] == [1]

"""The periodic statistics line says what happened over the last interval,
as vLLM's does, not since the start."""

from __future__ import annotations

import logging

import pytest

from router.metrics import EngineStats, RequestCounts, SpeculationMetrics, StatsLog


def stats(
    prompt: int, generated: int, drafts: int, drafted: int, accepted: list[int]
) -> EngineStats:
    speculation = SpeculationMetrics(
        2, drafts, drafted, sum(accepted), accepted_per_position=accepted
    )
    return EngineStats(True, 3, 1, 0.25, speculation, RequestCounts(prompt, generated))


def test_each_line_covers_its_interval_alone(caplog: pytest.LogCaptureFixture) -> None:
    log = StatsLog(0.0, logging.getLogger("stats-test"))
    with caplog.at_level(logging.INFO, logger="stats-test"):
        log.maybe_log(lambda: stats(100, 40, drafts=10, drafted=20, accepted=[8, 4]))
        log.maybe_log(lambda: stats(100, 40, drafts=10, drafted=20, accepted=[8, 4]))
    first, first_spec, second, second_spec = (r.getMessage() for r in caplog.records)
    assert "Running: 3 reqs, Waiting: 1 reqs, KV cache usage: 25.0%" in first
    assert "accepted 12 of 20 draft tokens" in first_spec
    assert "per-position acceptance rate 0.800, 0.400" in first_spec
    # Nothing happened since: no throughput, no acceptance to speak of.
    assert "Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 0.0" in second
    assert "acceptance rate -" in second_spec and "accepted 0 of 0" in second_spec

"""benchmarks/speculative_gpu.py, run end to end as a program on the bundled
pair (``--bundled`` runs on the CPU too): every row it times is in its report,
with what the report is read for, so that a lent GPU's minutes are not spent
finding a broken script."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
KS = [0, 2]
CONCURRENCY = [1, 2]


ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)}


def command(folder: Path, out: Path) -> list[str]:
    return [
        sys.executable, str(ROOT / "benchmarks" / "speculative_gpu.py"), "--bundled",
        "--checkpoints", str(folder), "--concurrency", *map(str, CONCURRENCY),
        "--ks", *map(str, KS), "--max-tokens", "8", "--min-tokens", "16",
        "--repeats", "1", "--out", str(out),
    ]  # fmt: skip


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    folder = tmp_path_factory.mktemp("speculative_gpu")
    out = folder / "report.json"
    result = subprocess.run(
        command(folder, out), capture_output=True, text=True, timeout=300, cwd=ROOT, env=ENV
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return {**json.loads(out.read_text()), "path": out}


def test_a_run_cut_short_keeps_the_rows_it_timed(tmp_path: Path) -> None:
    out = tmp_path / "report.json"
    with subprocess.Popen(
        command(tmp_path, out), stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
        cwd=ROOT, env=ENV,
    ) as run:  # fmt: skip
        watchdog = threading.Timer(300, run.kill)  # (a run that hangs ends the read)
        watchdog.start()
        try:
            assert run.stdout is not None
            first = next(line for line in run.stdout if line.startswith('{"k"'))
        finally:
            run.kill()  # as a call's time limit kills it
            watchdog.cancel()
    pair = json.loads(out.read_text())["pairs"][0]
    assert not pair["complete"]
    assert [r["tokens_per_s"] for r in pair["rows"]] == [json.loads(first)["tokens_per_s"]]


def test_a_run_that_finishes_says_its_pair_is_complete(report: dict) -> None:
    assert report["pairs"][0]["complete"]


@pytest.mark.parametrize("reader", ["round_costs.py", "adaptive_gap.py"])
def test_the_readers_of_a_report_read_it(report: dict, reader: str) -> None:
    # benchmarks/gpu_speculation.sh runs them after each run, under set -e.
    said = read(report, reader)
    assert said.count("pass 0") >= len(CONCURRENCY)  # a line per batch size at least


def test_every_pinned_k_and_adaptive_is_timed_at_every_concurrency(report: dict) -> None:
    rows = report["pairs"][0]["rows"]
    names = ["adaptive-first", "adaptive", *KS]
    assert sorted((r["batch"], str(r["k"])) for r in rows) == sorted(
        (b, str(name)) for b in CONCURRENCY for name in names
    )
    assert all(r["tokens_per_s"] > 0 for r in rows)


def test_each_row_says_what_stalled_it_and_what_its_rounds_cost(report: dict) -> None:
    for row in report["pairs"][0]["rows"]:
        assert set(row["runs_stalls"][0]) == {"compiles", "full_collections", "cuda"}
        assert row["runs_round_costs"][0], row["k"]
        assert row["refill"] is False  # closed batches, one after another
        # What adaptive k saw in the batches' tails; a pinned k chooses nothing.
        pinned = not isinstance(row["k"], str)
        assert not pinned or row["runs_tail_choices"] == [[]] * len(row["runs_stalls"])


def test_each_speculative_row_is_checked_against_plain_decoding(report: dict) -> None:
    rows = report["pairs"][0]["rows"]
    assert all(0.0 <= r["same_tokens_as_k0"] <= 1.0 for r in rows)


def test_the_report_has_the_step_costs_and_how_the_heap_stood(report: dict) -> None:
    for alone in ("target_only", "draft_only"):
        assert sorted(int(b) for b in report[alone]) == CONCURRENCY
    assert report["device"] == "cpu"
    assert report["frozen_at_start"] == 0  # nothing froze the heap before the script
    assert report["python"] == sys.version.split()[0]


def test_the_report_says_when_each_step_and_each_row_was_done(report: dict) -> None:
    steps = [step for step, _ in report["timeline"]]
    rows = sum(len(row["runs_tokens_per_s"]) for row in report["pairs"][0]["rows"])
    assert steps == [
        "target alone timed", "draft alone timed", *["pair 1: a row"] * rows, "pair 1: done"
    ]  # fmt: skip
    seconds = [s for _, s in report["timeline"]]
    assert seconds == sorted(seconds) and seconds[0] > 0


def test_the_tail_reader_reads_a_reports_tail_choices(tmp_path: Path) -> None:
    # (The CPU run's batches are too short for a tail: a made-up report instead.)
    pinned = {"k": 2, "batch": 4, "runs_round_costs": [[[3, 2, 1, 2, 0.04, 8, 0.02]]]}
    choice = [3, 1, 2, 9, [1], [8.0, 12.0, 10.0], [1.0, 1.5, 1.8]]
    adaptive = {"k": "adaptive", "batch": 4, "runs_tail_choices": [[], [choice]]}
    path = tmp_path / "report.json"
    path.write_text(json.dumps({"pairs": [{"wanted_acceptance": 0.8, "rows": [pinned, adaptive]}]}))
    said = read({"path": path}, "choices.py").splitlines()
    assert said == [
        "0.8 b4 adaptive pass 1:",
        "  b3: chose 1; priced best 2; rooms 2-9; priced / pinned by k: - - 0.50",
    ]


def read(report: dict, reader: str) -> str:
    """What ``reader`` (in benchmarks/) says of the report."""
    result = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / reader), str(report["path"])],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


def test_a_refilled_run_keeps_each_concurrency_in_flight(tmp_path: Path) -> None:
    out = tmp_path / "report.json"
    run = [*command(tmp_path, out), "--refill"]
    run[run.index("--concurrency") + 1 : run.index("--ks")] = ["2"]
    result = subprocess.run(run, capture_output=True, text=True, timeout=300, cwd=ROOT, env=ENV)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report["args"]["refill"] and report["pairs"][0]["complete"]
    for row in report["pairs"][0]["rows"]:
        assert row["refill"], row["k"]  # (rows.decode refills: tests/test_round_costs.py)
        assert max(size for size, *_ in row["runs_round_costs"][0]) == 2, row["k"]

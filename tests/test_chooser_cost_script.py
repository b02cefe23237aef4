"""The chooser's host-cost benchmark runs as a program and reports each batch size."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_chooser_cost_script_reports_choose_and_observe_at_each_batch_size() -> None:
    command = ["benchmarks/chooser_cost.py", "--near-end", "--repeats", "5", "--batch", "1", "8"]
    done = subprocess.run(
        [sys.executable, *command],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    rows = [json.loads(line) for line in done.stdout.splitlines()]
    assert [(row["batch"], row["near_end"]) for row in rows] == [(1, True), (8, True)]
    assert all(row["choose_us"] > 0 and row["observe_us"] > 0 for row in rows)

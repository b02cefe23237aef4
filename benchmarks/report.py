"""A benchmark's report as it grows: written whole after every step, so that
a call that runs out of time keeps what it measured, and the seconds since
the script began at each step (``Timeline``), so that the log of a call
says where its minutes went."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any


class Timeline:
    """Seconds since it was made at each step, into ``report["timeline"]`` and printed."""

    def __init__(self, report: dict[str, Any]):
        self.start = time.perf_counter()
        self.steps: list[list[Any]] = report.setdefault("timeline", [])

    def mark(self, step: str) -> None:
        seconds = round(time.perf_counter() - self.start, 1)
        self.steps.append([step, seconds])
        print(f"[{seconds:.1f} s] {step}", flush=True)


def kept(
    report: dict[str, Any], pair: dict[str, Any], out: Path | None, timeline: Timeline | None = None
) -> Callable[..., None]:
    """A new pair in ``report``, and what writes its rows into it and the
    report out: after every run (``complete`` false: a call that runs out
    of time keeps what it timed) and once at the end; each marked on
    ``timeline``, where given."""
    entry = {**pair, "rows": [], "complete": False}
    report["pairs"].append(entry)
    number = len(report["pairs"])

    def keep(rows: list[dict[str, Any]], complete: bool = False) -> None:
        entry.update(rows=rows, complete=complete)
        if timeline is not None:
            timeline.mark(f"pair {number}: " + ("done" if complete else "a row"))
        write(report, out)

    return keep


def write(report: dict[str, Any], out: Path | None) -> None:
    """``report`` to ``out`` whole: a kill mid-write leaves the one before."""
    if out:
        part = out.with_name(out.name + ".part")
        part.write_text(json.dumps(report, indent=1, default=str))
        part.replace(out)

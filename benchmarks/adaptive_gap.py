"""Where adaptive k's time goes beside the best fixed k's, per pair and batch
size of a ``speculative_gpu.py`` report, from the rows' round logs
(benchmarks/round_costs.py).

Adaptive's rounds take ``gap`` more seconds than the best fixed k's for the
same tokens (greedy: both decode the same text). The gap is split three ways,
each as a share of the best fixed k's round time:

- ``timing``: its full-batch rounds drafted on the path (timed ones, whose
  draft steps are read back before the verify; a call's first) beyond what
  rounds of their k cost drafted ahead in that k's fixed row;
- ``same k``: its full-batch rounds drafted ahead beyond what rounds of the
  same k cost in that k's fixed row (the chooser's own host work, switching
  between k's graphs, rounds disturbed by a probe);
- ``choice``: the rest: the k's it chose against the best one's, and the
  tail (rounds after the first sequences ended) those k's leave behind.

    PYTHONPATH=. python benchmarks/adaptive_gap.py \
        benchmarks/results/speculative_gpu_h100_900948a.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from benchmarks.round_costs import Entry, split


def ahead_round_s(log: list[Entry], batch: int, k: int) -> float | None:
    """Seconds a full-batch round of ``k`` drafted ahead took, on average, in ``log``."""
    n, seconds, _ = split(log, batch)["ahead"].get(k, [0, 0.0, 0])
    return seconds / n if n else None


def gap(adaptive: list[Entry], fixed: dict[int, list[Entry]], best: int, batch: int) -> dict:
    """Adaptive's round seconds beyond the best fixed k's (``fixed[best]``), split
    as the module says, each a share of the best's round seconds. A k that
    adaptive ran but no fixed row ran ahead counts in ``choice``."""
    base = sum(e[4] for e in fixed[best])
    parts = split(adaptive, batch)
    extra = {"timing": 0.0, "same k": 0.0}
    for name, part in (("timing", "on path"), ("same k", "ahead")):
        for k, (n, seconds, _) in parts[part].items():
            pinned = ahead_round_s(fixed[k], batch, k) if k in fixed else None
            if pinned is not None:
                extra[name] += seconds - n * pinned
    total = sum(e[4] for e in adaptive) - base
    shares = {name: s / base for name, s in extra.items()}
    return {"gap": total / base, **shares, "choice": total / base - sum(shares.values())}


def cells(report: dict[str, Any], run: int = 0) -> list[tuple[Any, int, int, dict]]:
    """(wanted acceptance, batch, best fixed k, gap) for every pair and batch
    size, from pass ``run`` of each row (0: the first)."""
    found = []
    for pair in report["pairs"]:
        rows: dict[int, dict] = {}
        for row in pair["rows"]:
            rows.setdefault(row["batch"], {})[row["k"]] = row
        for batch, by_k in sorted(rows.items()):
            fixed = {k: r for k, r in by_k.items() if isinstance(k, int) and k > 0}
            if "adaptive" not in by_k or not fixed:
                continue
            best = max(fixed, key=lambda k: fixed[k]["tokens_per_s"])
            logs = {k: r["runs_round_costs"][min(run, len(r["runs_round_costs"]) - 1)]
                    for k, r in fixed.items()}  # fmt: skip
            adaptive = by_k["adaptive"]["runs_round_costs"][run]
            found.append((pair["wanted_acceptance"], batch, best, gap(adaptive, logs, best, batch)))
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("report", type=Path)
    args = parser.parse_args()
    report = json.loads(args.report.read_text())
    passes = min(
        len(r["runs_round_costs"])
        for p in report["pairs"]
        for r in p["rows"]
        if r["k"] != "adaptive-first"  # (its one pass)
    )
    for run in range(passes):
        for wanted, batch, best, split_gap in cells(report, run):
            said = ", ".join(f"{name} {share:+.1%}" for name, share in split_gap.items())
            print(f"{wanted} b{batch} pass {run} (best fixed k = {best}): {said}")


if __name__ == "__main__":
    main()

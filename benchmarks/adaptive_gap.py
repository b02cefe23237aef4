"""Where adaptive k's time goes beside the best fixed k's, per pair and batch
size of a ``speculative_gpu.py`` report, from the rows' round logs
(benchmarks/round_costs.py).

Adaptive's rounds take ``gap`` more seconds than the best fixed k's for the
same tokens (greedy: both decode the same text). The gap is split three ways,
each as a share of the best fixed k's round time:

- ``timing``: its full-batch rounds drafted on the path (timed ones, whose
  draft steps are read back before the verify; a call's first) beyond what
  rounds of their k cost drafted ahead in that k's fixed row, less the same
  of the best fixed k's own rounds on the path (a call's first);
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

Shares = dict[str, float]  # part -> seconds beyond the best fixed k's, a share of its own


def ahead_round_s(log: list[Entry], batch: int, k: int) -> float | None:
    """Seconds a full-batch round of ``k`` drafted ahead took, on average, in ``log``."""
    n, seconds, _ = split(log, batch)["ahead"].get(k, [0, 0.0, 0])
    return seconds / n if n else None


def beyond_ahead(log: list[Entry], part: str, fixed: dict[int, list[Entry]], batch: int) -> float:
    """Seconds ``log``'s full-batch rounds of ``part`` ("on path" or "ahead")
    took beyond what rounds of their k cost drafted ahead in that k's fixed
    row (a k no fixed row ran ahead adds nothing)."""
    extra = 0.0
    for k, (n, seconds, _) in split(log, batch)[part].items():
        pinned = ahead_round_s(fixed[k], batch, k) if k in fixed else None
        if pinned is not None:
            extra += seconds - n * pinned
    return extra


def gap(adaptive: list[Entry], fixed: dict[int, list[Entry]], best: int, batch: int) -> Shares:
    """Adaptive's round seconds beyond the best fixed k's (``fixed[best]``), split
    as the module says, each a share of the best's round seconds. Timing is
    net of the best row's own rounds on the path (a call's first round is
    drafted on it in every row). A k that adaptive ran but no fixed row ran
    ahead, k = 0 among them, counts in ``choice``. Where the rows kept
    different numbers of tokens (a bf16 tie that reached an end token in one
    of them), adaptive's seconds are scaled to the best row's tokens."""
    kept = sum(e[5] for e in adaptive)
    scale = sum(e[5] for e in fixed[best]) / kept if kept else 1.0
    base = sum(e[4] for e in fixed[best])
    on_path = scale * beyond_ahead(adaptive, "on path", fixed, batch)
    extra = {
        "timing": on_path - beyond_ahead(fixed[best], "on path", fixed, batch),
        "same k": scale * beyond_ahead(adaptive, "ahead", fixed, batch),
    }
    total = scale * sum(e[4] for e in adaptive) - base
    shares = {name: s / base for name, s in extra.items()}
    return {"gap": total / base, **shares, "choice": total / base - sum(shares.values())}


def cells(report: dict[str, Any], run: int = 0) -> list[tuple[Any, int, int, Shares]]:
    """(wanted acceptance, batch, best fixed k, gap) for every pair and batch
    size, from pass ``run`` of each row (0: the first); the best fixed k is
    the fastest k > 0 by its median tokens/s."""
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
            logs = {k: r["runs_round_costs"][run] for k, r in fixed.items()}
            adaptive = by_k["adaptive"]["runs_round_costs"][run]
            found.append((pair["wanted_acceptance"], batch, best, gap(adaptive, logs, best, batch)))
    return found


def passes(report: dict[str, Any]) -> int:
    """Passes every row ran (adaptive's first, learning pass is a row of one)."""
    return min(
        len(row["runs_round_costs"])
        for pair in report["pairs"]
        for row in pair["rows"]
        if row["k"] != "adaptive-first"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("report", type=Path)
    args = parser.parse_args()
    report = json.loads(args.report.read_text())
    for run in range(passes(report)):
        for wanted, batch, best, shares in cells(report, run):
            said = ", ".join(f"{name} {share:+.1%}" for name, share in shares.items())
            print(f"{wanted} b{batch} pass {run} (best fixed k = {best}): {said}")


if __name__ == "__main__":
    main()

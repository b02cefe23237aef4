"""What each round of a timed row cost and gained, by its batch size, its k
and whether its drafts were sent ahead, so that an adaptive row can be laid
beside a fixed-k one round for round: its full-batch rounds apart from a
batch's tail (few sequences left, where the chooser picks other k), and
rounds drafted on the path (timed ones, a call's first) apart from those
whose drafts were waiting.

A round's seconds run from the outputs of the round before (which then sent
this round's drafts ahead) to its own, or from its start for the first
after a prefill; its tokens are what its sequences kept of what it gave them.

    python benchmarks/round_costs.py benchmarks/results/speculative_gpu_h100.json
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from router.rounds import Rounds
from router.sequence import SequenceState

# One entry of a row's log: [batch, k, drafts sent ahead (0/1), rounds, seconds, tokens,
# the slowest round's seconds] (logs written before the slowest was kept have six).
Entry = list[Any]


@contextmanager
def round_log(rounds: Rounds) -> Iterator[list[Entry]]:
    """Log ``rounds``' rounds while inside; yields the log, filled on the way out.
    A round's tokens are counted once the engine has applied them (at the
    next round, or on the way out)."""
    totals: dict[tuple[int, int, int], list[float]] = {}
    state: dict[str, Any] = {"came": None, "last": None}  # last: (key, seqs, their tokens)
    run, skip_gap, record_round = rounds.run, rounds.skip_gap, rounds.metrics.record_round

    def settle() -> None:
        if state["last"] is not None:
            key, seqs, before = state["last"]
            totals[key][2] += sum(s.num_tokens for s in seqs) - before
            state["last"] = None

    def logged_run(running: list[SequenceState], waiting: int = 0) -> list:
        settle()
        start, came = time.perf_counter(), state["came"]
        ahead, seqs = int(rounds.drafts_in_flight), list(running)
        before = sum(s.num_tokens for s in seqs)
        shares = run(running, waiting)
        key = (len(seqs), state["k"], ahead)
        entry = totals.setdefault(key, [0, 0.0, 0, 0.0])
        took = state["came"] - (start if came is None else came)
        entry[0] += 1
        entry[1] += took
        entry[3] = max(entry[3], took)
        state["last"] = (key, seqs, before)
        return shares

    def logged_record_round(k: int) -> None:  # when the round's outputs came
        state["came"], state["k"] = time.perf_counter(), k
        record_round(k)

    def logged_skip_gap() -> None:
        state["came"] = None
        skip_gap()

    rounds.run, rounds.skip_gap = logged_run, logged_skip_gap  # type: ignore[method-assign]
    rounds.metrics.record_round = logged_record_round  # type: ignore[method-assign]
    log: list[Entry] = []
    try:
        yield log
    finally:
        del rounds.run, rounds.skip_gap, rounds.metrics.record_round
        settle()
        log += [[*key, n, round(s, 6), t, round(most, 6)]
                for key, (n, s, t, most) in sorted(totals.items())]  # fmt: skip


def split(log: list[Entry], batch: int) -> dict[str, dict[int, list[float]]]:
    """Rounds, seconds and tokens by k: of full-batch rounds with drafts sent
    ahead, of full-batch rounds drafted on the path, and of the tail."""
    parts: dict[str, dict[int, list[float]]] = {"ahead": {}, "on path": {}, "tail": {}}
    for size, k, ahead, n, seconds, tokens, *_ in log:
        part = "tail" if size < batch else "ahead" if ahead else "on path"
        got = parts[part].setdefault(k, [0, 0.0, 0])
        for i, v in enumerate((n, seconds, tokens)):
            got[i] += v
    return parts


def slowest(log: list[Entry]) -> str:
    """The slowest round (batch, k) beside the mean of its kind, where the log keeps it."""
    kept = [e for e in log if len(e) > 6]
    if not kept:
        return ""
    size, k, _, n, seconds, _, most = max(kept, key=lambda e: e[6])
    return f"; slowest {1e3 * most:.1f} ms (batch {size}, k{k}; mean {1e3 * seconds / n:.1f})"


def describe(log: list[Entry], batch: int) -> str:
    """Per part: its share of the row's time, and by k rounds, ms a round,
    tokens a round; then the slowest round."""
    parts = split(log, batch)
    total = sum(s for part in parts.values() for _, s, _ in part.values()) or 1.0
    said = []
    for name, by_k in parts.items():
        seconds = sum(s for _, s, _ in by_k.values())
        ks = " ".join(f"k{k}:{n:.0f}x{1e3 * s / n:.2f}ms/{t / n:.1f}t"
                      for k, (n, s, t) in sorted(by_k.items()))  # fmt: skip
        said.append(f"{name} {seconds / total:.0%} [{ks}]")
    return "; ".join(said) + slowest(log)


def stalled(seen: dict[str, Any] | None) -> str:
    """What benchmarks/stalls.py saw in a pass, where it ran and saw anything."""
    if not seen:
        return ""
    said = [f"compiled {name.split('[')[0]} in {s:.3f} s" for name, s in seen["compiles"] or []]
    said += [f"full collection {c['s'] * 1e3:.0f} ms ({c['frozen']} frozen; at {c['where'][-1]})"
             if isinstance(c, dict) else f"full collection {c * 1e3:.0f} ms"
             for c in seen["full_collections"]]  # fmt: skip
    said += [f"{name} {n}" for name, n in seen["cuda"].items() if n]
    return f"; stalls: {', '.join(said)}" if said else ""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("report", type=Path)
    args = parser.parse_args()
    for pair in json.loads(args.report.read_text())["pairs"]:
        for row in pair["rows"]:
            for i, log in enumerate(row.get("runs_round_costs", [])):
                rate = row["runs_tokens_per_s"][i]
                print(f"{pair['wanted_acceptance']} b{row['batch']} {row['k']} pass {i}: "
                      f"{rate:.0f} tok/s; {describe(log, row['batch'])}"
                      f"{stalled(row.get('runs_stalls', [None] * (i + 1))[i])}")  # fmt: skip


if __name__ == "__main__":
    main()

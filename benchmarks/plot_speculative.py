"""Plots of a speculative_gpu.py run: speedup over target-only against k (at
concurrency 1) and against concurrency (best fixed k and adaptive), measured
beside the theory E / (k c + 1).

    pip install -e ".[bench]"
    python benchmarks/plot_speculative.py benchmarks/results/speculative_gpu_h200_narrow.json

writes ``<name>_vs_k.png`` and ``<name>_vs_concurrency.png`` beside the JSON,
and prints each adaptive pass's tokens/s beside the rate its choices of k
would give at the pinned rows' cost and gain a round (``from_choices``), and
adaptive against the k that was best on the first pass, both read on the
later passes (``held_out``).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from statistics import mean
from typing import Any


def expected_tokens(alpha: float, k: int) -> float:
    """E = (1 - a^(k+1)) / (1 - a): tokens per round when each draft passes with chance a."""
    return float(k + 1) if alpha >= 1 else (1 - alpha ** (k + 1)) / (1 - alpha)


def theory(alpha: float, c: float, k: int) -> float:
    return expected_tokens(alpha, k) / (k * c + 1)


def alpha_from(rate: float, k: int) -> float:
    """The per-draft acceptance a that makes the share of drafted tokens
    accepted at k drafts a round, (a + ... + a^k) / k, equal ``rate`` (at
    k = 1 the two are one)."""
    lo, hi = 0.0, 1.0
    for _ in range(50):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if sum(mid**i for i in range(1, k + 1)) / k < rate else (lo, mid)
    return lo


def summary(report: dict[str, Any]) -> list[dict[str, Any]]:
    """Per pair and concurrency: alpha (from the smallest k measured), c, and speedups by k."""
    target = {int(b): r for b, r in report["target_only"].items()}
    draft = {int(b): r for b, r in report["draft_only"].items()}
    out = []
    for pair in report["pairs"]:
        for batch in sorted(target):
            rows = {r["k"]: r for r in pair["rows"] if r["batch"] == batch}
            if not complete_enough(rows):  # (a run cut short before or in it)
                continue
            k = min(k for k in rows if isinstance(k, int) and k > 0)
            alpha = alpha_from(rows[k]["acceptance"] or 0.0, k)
            c = target[batch] / draft[batch]
            speedup = {k: r["tokens_per_s"] / target[batch] for k, r in rows.items()}
            out.append({"wanted": pair["wanted_acceptance"], "batch": batch, "alpha": alpha,
                        "c": c, "speedup": speedup})  # fmt: skip
    return out


def complete_enough(rows: dict[Any, dict[str, Any]]) -> bool:
    """Whether a batch size's rows (by k) hold adaptive and a pinned k > 0."""
    return "adaptive" in rows and any(isinstance(k, int) and k > 0 for k in rows)


def from_choices(rows: list[dict[str, Any]], batch: int) -> list[tuple[float, float]]:
    """Each adaptive pass at ``batch``: its tokens/s, and the tokens/s its rounds
    by k would give at the pinned rows' cost and gain a round. Every row
    decodes the same tokens N, so a pinned row of R rounds at r tokens/s
    gains N / R a round and spends N / (r R) seconds on it. Exact only at
    concurrency 1: rounds are counted whatever their batch, and adaptive k
    differs between a batch's full rounds and its tail (few sequences left),
    which a pinned row's average round does not tell apart."""
    rows_at = {r["k"]: r for r in rows if r["batch"] == batch}
    pinned = {k: r for k, r in rows_at.items() if isinstance(k, int)}
    adaptive = rows_at["adaptive"]
    passes = adaptive.get("runs_rounds_per_k") or [adaptive["rounds_per_k"]]
    out = []
    for rate, rounds in zip(adaptive["runs_tokens_per_s"], passes, strict=False):
        used = [(k, n) for k, n in enumerate(rounds) if n]
        own = {k: pinned[k]["rounds_per_k"][k] for k, _ in used if k in pinned}
        if len(own) < len(used) or not all(own.values()):
            continue  # a k with no pinned row to price it
        gained = sum(n / own[k] for k, n in used)
        spent = sum(n / (own[k] * pinned[k]["tokens_per_s"]) for k, n in used)
        out.append((rate, gained / spent))
    return out


def held_out(rows: list[dict[str, Any]], batch: int) -> tuple[int, float] | None:
    """The best fixed k at ``batch`` chosen on each row's first pass, and its
    rate on the passes after (None with one pass a row). The highest of nine
    noisy means is biased up; a k chosen on one pass and read on another is
    not, so adaptive / this is the fairer of the two ratios."""
    pinned = {r["k"]: r["runs_tokens_per_s"] for r in rows
              if r["batch"] == batch and isinstance(r["k"], int) and r["k"] > 0}  # fmt: skip
    if not pinned or min(len(runs) for runs in pinned.values()) < 2:
        return None
    best = max(pinned, key=lambda k: pinned[k][0])
    return best, mean(pinned[best][1:])


def pyplot() -> Any:
    """matplotlib's pyplot, drawing to files (imported here: reading a report needs none)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_vs_k(points: list[dict[str, Any]], path: Path) -> None:
    fig, ax = pyplot().subplots(figsize=(7, 4.5))
    for p in (p for p in points if p["batch"] == 1):
        ks = [k for k in p["speedup"] if isinstance(k, int) and k > 0]
        line = ax.plot(ks, [p["speedup"][k] for k in ks], "o-",
                       label=f"measured, a = {p['alpha']:.2f}")[0]  # fmt: skip
        ax.plot(ks, [theory(p["alpha"], p["c"], k) for k in ks], "--", color=line.get_color(),
                label=f"theory, c = {p['c']:.3f}")  # fmt: skip
        ax.axhline(p["speedup"]["adaptive"], color=line.get_color(), linestyle=":", alpha=0.7)
    ax.axhline(1.0, color="grey", linewidth=0.8)
    ax.set(xlabel="k (drafts per round)", ylabel="speedup over target-only",
           title="Concurrency 1 (dotted: adaptive k)")  # fmt: skip
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def plot_vs_concurrency(points: list[dict[str, Any]], path: Path) -> None:
    fig, ax = pyplot().subplots(figsize=(7, 4.5))
    for wanted in sorted({p["wanted"] for p in points}):
        mine = sorted((p for p in points if p["wanted"] == wanted), key=lambda p: p["batch"])
        batches = [p["batch"] for p in mine]
        best = [max(v for k, v in p["speedup"].items() if isinstance(k, int)) for p in mine]
        line = ax.plot(batches, best, "o-", label=f"best fixed k, a = {mine[0]['alpha']:.2f}")[0]
        ax.plot(batches, [p["speedup"]["adaptive"] for p in mine], "s:", color=line.get_color(),
                label="adaptive k")  # fmt: skip
    ax.axhline(1.0, color="grey", linewidth=0.8)
    ax.set_xscale("log", base=2)
    ax.set(xlabel="concurrent requests", ylabel="speedup over target-only")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("report", type=Path)
    args = parser.parse_args()
    points = summary(json.loads(args.report.read_text()))
    stem = args.report.with_suffix("")
    plot_vs_k(points, Path(f"{stem}_vs_k.png"))
    plot_vs_concurrency(points, Path(f"{stem}_vs_concurrency.png"))
    for p in points:
        ks = {k: round(v, 2) for k, v in p["speedup"].items()}
        print(f"a={p['alpha']:.2f} c={p['c']:.3f} batch={p['batch']}: {ks}")
    for p in points:
        fixed = {k: v for k, v in p["speedup"].items() if isinstance(k, int) and k > 0}
        best = max(fixed, key=fixed.__getitem__)
        adaptive = p["speedup"].get("adaptive", float("nan"))
        print(f"{p['wanted']} batch {p['batch']}: adaptive / best fixed k (k = {best}) "
              f"{adaptive / fixed[best]:.3f}, / target-only {adaptive:.2f}")  # fmt: skip
    for pair in json.loads(args.report.read_text())["pairs"]:
        for batch in sorted(
            {p["batch"] for p in points if p["wanted"] == pair["wanted_acceptance"]}
        ):
            passes = from_choices(pair["rows"], batch)
            said = ", ".join(f"{rate:.0f} of {predicted:.0f}" for rate, predicted in passes)
            print(f"{pair['wanted_acceptance']} batch {batch}: adaptive, of its k's rate: {said}")
            chosen = held_out(pair["rows"], batch)
            if chosen is not None:
                k, rate = chosen
                adaptive = next(
                    r for r in pair["rows"] if r["batch"] == batch and r["k"] == "adaptive"
                )["runs_tokens_per_s"][1:]  # the same passes
                print(f"{pair['wanted_acceptance']} batch {batch}: adaptive / k = {k} (best on "
                      f"pass 1) on later passes {mean(adaptive) / rate:.3f}")  # fmt: skip


if __name__ == "__main__":
    main()

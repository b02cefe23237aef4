"""Does a round whose k differs from the last one's cost more than a round
at a pinned k? At one concurrency, rows with k pinned to each of ``--ks``
and a row whose k alternates between them round by round (on the chooser's
own schedule of timed rounds), timed back to back over several passes, each
pass in the reverse order of the one before.

    python3 benchmarks/shapes.py --out /tmp/ck --pair-scale 0.0022583
    PYTHONPATH=. python3 benchmarks/k_switching.py --target /tmp/ck/pair-target \
        --draft /tmp/ck/pair-draft --batch 16 --ks 6 7 --out k_switching.json

If alternating runs below both pinned rows, switching k costs something the
chooser (router/adaptive.py) does not price.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any

from benchmarks.prompts import Workload, prompts
from benchmarks.rows import engine_row
from router.adaptive import KChooser
from specserve import LLM, SamplingParams


class Alternating(KChooser):
    """Drafts each of ``ks`` in turn, round by round."""

    def __init__(self, k_max: int, ks: list[int]):
        super().__init__(k_max)
        self.ks = ks

    def choose(self, batch: int, *kinds_and_rooms: Any, round_number: int, **_: Any) -> int:
        return self.ks[round_number % len(self.ks)]


def rows(
    llm: LLM, batch: int, ks: list[int], max_tokens: int, passes: int, text: bool
) -> list[dict]:
    """Each row's tokens/s in every pass, and its rounds by k in the first."""
    k_max = max(ks)
    choosers: dict[str, KChooser] = {"alternating": Alternating(k_max, ks)}
    for k in ks:
        choosers[f"k = {k}"] = KChooser(k_max)
        choosers[f"k = {k}"].pin(k)
    names = list(choosers)
    for name in names:  # capture every shape first
        llm.engine.rounds.chooser = choosers[name]
        llm.generate(prompts(batch, 2, text), SamplingParams(temperature=0, max_tokens=max_tokens),
                     use_tqdm=False)  # fmt: skip
    found: dict[str, list[dict]] = {name: [] for name in names}
    for p in range(passes):
        for name in names if p % 2 == 0 else names[::-1]:
            llm.engine.rounds.chooser = choosers[name]
            row, _ = engine_row(llm, batch, Workload(max_tokens, text))
            found[name].append(row)
            print(name, round(row["tokens_per_s"]), row["rounds_per_k"], flush=True)
    return [
        {
            "row": name,
            "tokens_per_s": statistics.median(r["tokens_per_s"] for r in runs),
            "runs_tokens_per_s": [r["tokens_per_s"] for r in runs],
            "rounds_per_k": runs[0]["rounds_per_k"],
        }
        for name, runs in found.items()
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--target", required=True)
    parser.add_argument("--draft", required=True)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--ks", nargs=2, type=int, default=[6, 7])
    parser.add_argument("--max-tokens", type=int, default=96)
    parser.add_argument("--passes", type=int, default=3)
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--text", action="store_true", help="code prompts (the bundled pair)")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    spec = {"model": args.draft, "num_speculative_tokens": max(args.ks)}
    llm = LLM(args.target, dtype=args.dtype, max_model_len=1024, max_num_seqs=args.batch,
              speculative_config=spec)  # fmt: skip
    found = rows(llm, args.batch, args.ks, args.max_tokens, args.passes, args.text)
    report = {"args": vars(args), "rows": found}
    for row in report["rows"]:
        print(f"{row['row']}: {row['tokens_per_s']:.0f} tokens/s ({row['rounds_per_k']})")
    if args.out:
        args.out.write_text(json.dumps(report, indent=1, default=str))


if __name__ == "__main__":
    main()

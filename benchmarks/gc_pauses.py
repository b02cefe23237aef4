"""How long Python's collections pause an ``LLM`` serving process: a full
collection with the startup heap frozen (as a served process leaves it,
model_runtime/heap.py) and thawed, and the collections decoding runs by
itself (``LLM.generate`` freezes the heap for the length of a call).

    PYTHONPATH=. python benchmarks/gc_pauses.py --out gc_pauses.json   # the bundled pair, CPU
    PYTHONPATH=. python benchmarks/gc_pauses.py --target /tmp/ck/pair-target \
        --draft /tmp/ck/pair-draft --device cuda --dtype bfloat16 --batch 64

One ``LLM`` is built; then, frozen, thawed (gc.unfreeze) and frozen again:
the time of a full collection forced ``--collections`` times outside
``generate`` (the pause a round meets when one falls in it), and every
collection the decoding of ``--rows`` greedy rows at ``--batch`` ran by
itself, by generation (count, longest, total), beside the rows' tokens/s.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import time
from pathlib import Path
from typing import Any

from benchmarks.prompts import Workload, prompts
from benchmarks.rows import decode, warm_up
from benchmarks.stalls import collections
from model_runtime.heap import freeze_startup_heap
from specserve import LLM


def by_generation(seen: list[dict[str, Any]]) -> dict[int, dict[str, float]]:
    """Count, longest and total milliseconds of the collections of each generation."""
    found: dict[int, list[float]] = {}
    for one in seen:
        found.setdefault(one["generation"], []).append(one["s"])
    return {g: {"count": len(s), "longest_ms": 1e3 * max(s), "total_ms": 1e3 * sum(s)}
            for g, s in sorted(found.items())}  # fmt: skip


def forced_ms(times: int) -> float:
    """The median milliseconds of ``times`` full collections."""
    spans = []
    for _ in range(times):
        start = time.perf_counter()
        gc.collect()
        spans.append(time.perf_counter() - start)
    return 1e3 * statistics.median(spans)


def measure(llm: LLM, state: str, args: argparse.Namespace, text: bool) -> dict[str, Any]:
    row: dict[str, Any] = {"state": state, "frozen_objects": gc.get_freeze_count()}
    row["tracked_objects"] = len(gc.get_objects())  # the permanent generation not counted
    row["full_collection_ms"] = forced_ms(args.collections)
    warm_up(llm, args.batch, text)
    with collections((0, 1, 2)) as seen:
        work = Workload(args.max_tokens, text)
        rates = [decode(llm, args.batch, work)[0] for _ in range(args.rows)]
    row["tokens_per_s"] = statistics.median(rates)
    row["collections"] = by_generation(seen)
    print(json.dumps(row), flush=True)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--target", default="specserve/demo-target")
    parser.add_argument("--draft", default="specserve/demo-draft")
    parser.add_argument("--k", type=int, default=4)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--rows", type=int, default=3)
    parser.add_argument("--collections", type=int, default=5)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    text = args.target.startswith("specserve/")  # the bundled pair decodes code
    spec = {"model": args.draft, "num_speculative_tokens": args.k}
    llm = LLM(args.target, speculative_config=spec, device=args.device, dtype=args.dtype,
              max_num_seqs=args.batch, max_model_len=1024)  # fmt: skip
    llm.generate(prompts(args.batch, 2, text), use_tqdm=False)  # compile and capture first
    freeze_startup_heap("benchmark")
    rows = [measure(llm, "frozen", args, text)]
    gc.unfreeze()
    rows.append(measure(llm, "thawed", args, text))
    freeze_startup_heap("benchmark")
    rows.append(measure(llm, "frozen again", args, text))
    if args.out:
        args.out.write_text(json.dumps({"args": vars(args), "rows": rows}, indent=1, default=str))


if __name__ == "__main__":
    main()

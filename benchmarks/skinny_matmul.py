"""The projections of a decode step at small batch: the library GEMM
(``F.linear``) against the skinny matmul (model_runtime/kernels/skinny_matmul.py)
over a sweep of tile shapes, and with the tiles its rule picks.

    python benchmarks/skinny_matmul.py --out skinny.json
    python benchmarks/skinny_matmul.py --shapes qwen3-8b --rows 32 36 64 --out verify.json

Every projection of the Qwen3-0.6B and Qwen3-8B shapes and their LM heads, 1,
6 and 16 rows by default (a verify of k drafts at batch B has B (k + 1) rows),
bf16. Times are device time per call from CUDA-graph replays,
rotating over enough copies of the weight that the L2 cache cannot hold them.
Each result is first checked against the library's (relative error). Needs a
GPU.
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections.abc import Callable

import torch
import torch.nn.functional as F
import triton

from model_runtime.kernels.skinny_matmul import TileConfig, skinny_matmul

# (shape, projection, N, K)
PROJECTIONS = [
    ("qwen3-0.6b", "qkv", 4096, 1024),
    ("qwen3-0.6b", "o", 1024, 2048),
    ("qwen3-0.6b", "gate_up", 6144, 1024),
    ("qwen3-0.6b", "down", 1024, 3072),
    ("qwen3-0.6b", "lm_head", 151936, 1024),
    ("qwen3-8b", "qkv", 6144, 4096),
    ("qwen3-8b", "o", 4096, 4096),
    ("qwen3-8b", "gate_up", 24576, 4096),
    ("qwen3-8b", "down", 4096, 12288),
    ("qwen3-8b", "lm_head", 151936, 4096),
]
TILES = [
    TileConfig(block_n=bn, block_k=bk, num_warps=w, num_stages=s)
    for bn in (16, 32, 64)
    for bk in (64, 128, 256)
    for w, s in ((4, 4), (4, 6))
]
# Past 16 rows the row tile is 32 or 64: fewer stages fit in shared memory.
WIDE_TILES = [
    TileConfig(block_n=bn, block_k=bk, num_warps=w, num_stages=s)
    for bn in (32, 64)
    for bk in (64, 128)
    for w, s in ((4, 3), (4, 4), (8, 3))
]
ROWS = (1, 6, 16)
L2_BYTES = 60 << 20


def graph_us(calls: list[Callable[[], object]], repeats: int = 7) -> float:
    """Median device time of one call, in us, replaying all ``calls`` in one graph."""
    for call in calls[:2]:
        call()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for call in calls:
            call()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1000 / len(calls))
    return statistics.median(times)


def measure(shape: str, name: str, n: int, k: int, m: int) -> dict:
    copies = max(2, -(-3 * L2_BYTES // (n * k * 2)))
    weights = [torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * 0.02 for _ in range(copies)]
    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    reps = weights * max(1, 64 // copies)
    row = dict(shape=shape, projection=name, n=n, k=k, rows=m, floor_us=n * k * 2 / 4.08e6)
    row["library_us"] = graph_us([lambda w=w: F.linear(x, w) for w in reps])
    reference = F.linear(x, weights[0]).float()
    row["tiles"] = []
    for tiles in [*(TILES if m <= 16 else WIDE_TILES), TileConfig.for_shape(n, k, m)]:
        try:
            out = skinny_matmul(x, weights[0], tiles=tiles).float()
            torch.cuda.synchronize()
        except triton.runtime.errors.OutOfResources as e:
            row["tiles"].append(dict(tiles=tiles.__dict__, error=str(e)))
            continue
        error = ((out - reference).norm() / reference.norm()).item()
        if not error < 1e-2:
            raise SystemExit(f"{shape} {name} rows={m} {tiles}: relative error {error}")
        us = graph_us([lambda w=w, t=tiles: skinny_matmul(x, w, tiles=t) for w in reps])
        row["tiles"].append(dict(tiles=tiles.__dict__, us=us, error=error))
    timed = [t for t in row["tiles"][:-1] if "us" in t]
    best = min(timed, key=lambda t: t["us"])
    row["best_us"], row["best_tiles"] = best["us"], best["tiles"]
    row["rule_us"] = row["tiles"][-1].get("us", float("nan"))
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shapes", nargs="+", default=sorted({p[0] for p in PROJECTIONS}))
    parser.add_argument("--rows", nargs="+", type=int, default=list(ROWS))
    parser.add_argument("--out", help="write every number here as JSON")
    args = parser.parse_args()
    rows = []
    for shape, name, n, k in PROJECTIONS:
        if shape not in args.shapes:
            continue
        for m in args.rows:
            row = measure(shape, name, n, k, m)
            rows.append(row)
            print(
                f"{shape:11} {name:8} rows={m:2}  floor {row['floor_us']:6.1f} us  "
                f"library {row['library_us']:6.1f}  rule {row['rule_us']:6.1f}  "
                f"best {row['best_us']:6.1f} {row['best_tiles']}",
                flush=True,
            )
    if args.out:
        with open(args.out, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()

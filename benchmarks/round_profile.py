"""Where a speculative round's time goes on a GPU, through ``LLM``: per round
at each batch size, the wall time, the GPU's busy time (kernels and copies)
and so its idle time, and the host's synchronisations and device-to-host
copies, from one profiled greedy generate with k pinned.

    PYTHONPATH=. python benchmarks/round_profile.py --target T --draft D \
        --k 3 --batch 1 64 --out round_profile.json

Needs a GPU (the idle time is what host work between kernels costs).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import torch
from torch.profiler import ProfilerActivity, profile

from benchmarks.speculative_gpu import prompts
from specserve import LLM, SamplingParams

SYNCS = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize")


def profiled_round(llm: LLM, batch: int, tokens: int) -> dict[str, Any]:
    params = SamplingParams(temperature=0, max_tokens=tokens, ignore_eos=True)
    llm.generate(prompts(batch, 3), params, use_tqdm=False)  # every shape met once
    before = sum(llm.engine.metrics.rounds_per_k)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        llm.generate(prompts(batch, 4), params, use_tqdm=False)
        torch.cuda.synchronize()
    rounds = sum(llm.engine.metrics.rounds_per_k) - before
    events = prof.events()
    gpu = [e for e in events if e.device_type.name == "CUDA"]
    start = min(e.time_range.start for e in events)
    end = max(e.time_range.end for e in events)
    busy = _union([(e.time_range.start, e.time_range.end) for e in gpu]) if gpu else 0.0
    host = {name: 0 for name in (*SYNCS, "cudaMemcpyAsync", "cudaGraphLaunch", "cudaLaunchKernel")}
    for e in events:
        if e.name in host:
            host[e.name] += 1
    top = sorted(prof.key_averages(), key=lambda a: a.self_cpu_time_total, reverse=True)[:12]
    per_round = 1 / max(rounds, 1)
    return {
        "batch": batch,
        "rounds": rounds,
        "wall_ms_per_round": (end - start) / 1000 * per_round,
        "gpu_busy_ms_per_round": busy / 1000 * per_round,
        "calls_per_round": {n: round(c * per_round, 2) for n, c in host.items()},
        "top_self_cpu_ms_per_round": {
            a.key: round(a.self_cpu_time_total / 1000 * per_round, 3) for a in top
        },
    }


def _union(spans: list[tuple[float, float]]) -> float:
    """Total length of the union of ``spans`` (microseconds)."""
    total, reach = 0.0, float("-inf")
    for lo, hi in sorted(spans):
        if hi > reach:
            total += hi - max(lo, reach)
            reach = hi
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--target", required=True)
    parser.add_argument("--draft", required=True)
    parser.add_argument("--k", type=int, default=3)
    parser.add_argument("--batch", nargs="+", type=int, default=[1, 64])
    parser.add_argument("--tokens", type=int, default=24)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    spec = {"model": args.draft, "num_speculative_tokens": args.k, "adaptive_k": False}
    llm = LLM(
        args.target, dtype="bfloat16", max_model_len=1024, max_num_seqs=max(args.batch),
        speculative_config=spec,
    )  # fmt: skip
    rows = [profiled_round(llm, b, args.tokens) for b in args.batch]
    report = {"device": torch.cuda.get_device_name(), "args": vars(args), "rows": rows}
    print(json.dumps(report, indent=1, default=str))
    if args.out:
        args.out.write_text(json.dumps(report, indent=1, default=str))


if __name__ == "__main__":
    main()

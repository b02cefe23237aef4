"""Where a speculative round's time goes on a GPU, through ``LLM``: per round
at each batch size, the wall time, the GPU's busy time (kernels and copies)
and so its idle time, and the host's synchronisations and device-to-host
copies, from one profiled greedy generate with k pinned; and per phase of
the round (the router's step, the drafter's calls, the draft's propose and
its forwards, the target's verify and its forward, the rest of
``generate``), its wall time and how long the GPU sat idle while the host
was in it.

    PYTHONPATH=. python benchmarks/round_profile.py --target T --draft D \
        --k 3 --batch 1 64 --out round_profile.json

Needs a GPU (the idle time is what host work between kernels costs).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import torch
from torch.profiler import ProfilerActivity, profile, record_function

from benchmarks.prompts import prompts
from draft_worker.worker import DraftWorker
from router.drafting import Drafter
from router.engine import LLMEngine
from router.rounds import Rounds
from specserve import LLM, SamplingParams
from target_worker.worker import TargetWorker

SYNCS = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize")

# The phases of a round, each the time inside one call (they nest in this order).
PHASES = {
    "engine.step": (LLMEngine, "step"),
    "rounds.run": (Rounds, "run"),
    "drafter.send": (Drafter, "send"),  # (an in-process draft proposes when sent to)
    "drafter.send_next": (Drafter, "send_next"),
    "draft.propose": (DraftWorker, "propose"),
    "target.verify": (TargetWorker, "verify"),
}


def mark_runners(llm: LLM) -> None:
    """Name the target's and the draft's forwards apart."""
    workers = llm.engine.workers
    for name, worker in (("target.forward", workers.target), ("draft.forward", workers.drafts[0])):
        runner = worker.runner  # type: ignore[union-attr]

        def marked(*args: Any, _call: Any = runner.forward, _name: str = name) -> Any:
            with record_function(_name):
                return _call(*args)

        runner.forward = marked


def mark_phases() -> None:
    """Wrap every phase's call in a profiler range named for it."""
    for name, (owner, attr) in PHASES.items():
        call = getattr(owner, attr)

        def marked(*args: Any, _call: Any = call, _name: str = name, **kwargs: Any) -> Any:
            with record_function(_name):
                return _call(*args, **kwargs)

        setattr(owner, attr, marked)


def profiled_round(llm: LLM, batch: int, tokens: int) -> dict[str, Any]:
    params = SamplingParams(temperature=0, max_tokens=tokens, ignore_eos=True)
    llm.generate(prompts(batch, 3), params, use_tqdm=False)  # every shape met once
    started = time.perf_counter()
    outs = llm.generate(prompts(batch, 5), params, use_tqdm=False)  # unprofiled
    rate = sum(len(o.outputs[0].token_ids) for o in outs) / (time.perf_counter() - started)
    before = sum(llm.engine.metrics.rounds_per_k)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        llm.generate(prompts(batch, 4), params, use_tqdm=False)
        torch.cuda.synchronize()
    rounds = sum(llm.engine.metrics.rounds_per_k) - before
    events = prof.events()
    # Kernels and copies (the profiler also puts each range's span on the GPU's timeline).
    gpu = [e for e in events if e.device_type.name == "CUDA" and not e.is_user_annotation]
    start = min(e.time_range.start for e in events)
    end = max(e.time_range.end for e in events)
    spans = _merged([(e.time_range.start, e.time_range.end) for e in gpu])
    busy = sum(hi - lo for lo, hi in spans)
    host = {name: 0 for name in (*SYNCS, "cudaMemcpyAsync", "cudaGraphLaunch", "cudaLaunchKernel")}
    for e in events:
        if e.name in host:
            host[e.name] += 1
    averages = prof.key_averages()
    top = sorted(averages, key=lambda a: a.self_cpu_time_total, reverse=True)[:12]
    kernels = sorted(averages, key=lambda a: a.self_device_time_total, reverse=True)[:12]
    per_round = 1 / max(rounds, 1)
    return {
        "batch": batch,
        "rounds": rounds,
        "tokens_per_s_unprofiled": round(rate, 1),
        "wall_ms_per_round": (end - start) / 1000 * per_round,
        "gpu_busy_ms_per_round": busy / 1000 * per_round,
        "calls_per_round": {n: round(c * per_round, 2) for n, c in host.items()},
        "phases_ms_per_round": _phases(events, spans, (start, end), per_round),
        "top_self_cpu_ms_per_round": {
            a.key: round(a.self_cpu_time_total / 1000 * per_round, 3) for a in top
        },
        "top_gpu_ms_per_round": {
            a.key[:80]: round(a.self_device_time_total / 1000 * per_round, 3) for a in kernels
        },
        "gpu_ms_per_round_by_phase": _device_time(events, per_round),
    }


def _merged(spans: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """The union of ``spans`` as disjoint sorted spans."""
    out: list[tuple[float, float]] = []
    for lo, hi in sorted(spans):
        if out and lo <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], hi))
        else:
            out.append((lo, hi))
    return out


def _phases(
    events: Any, busy: list[tuple[float, float]], window: tuple[float, float], per_round: float
) -> dict[str, dict[str, float]]:
    """Per phase: wall ms and GPU-idle ms per round while the host was inside
    it (inclusive of the phases nested in it); "outside" is the host outside
    every engine step."""
    idle, reach = [], window[0]
    for lo, hi in busy:
        if lo > reach:
            idle.append((reach, lo))
        reach = max(reach, hi)
    idle.append((reach, window[1]))
    names = [*PHASES, "target.forward", "draft.forward"]
    ranges: dict[str, list[tuple[float, float]]] = {name: [] for name in names}
    for e in events:
        if e.name in ranges and e.device_type.name == "CPU":
            ranges[e.name].append((e.time_range.start, e.time_range.end))
    steps = _merged(ranges["engine.step"])
    outside, reach = [], window[0]
    for lo, hi in steps:
        outside.append((reach, lo))
        reach = hi
    outside.append((reach, window[1]))
    ranges["outside"] = outside
    report = {}
    for name, spans in ranges.items():
        spans = _merged(spans)
        wall = sum(hi - lo for lo, hi in spans)
        gap = sum(_overlap(span, gap) for span in spans for gap in idle)
        report[name] = {
            "wall": round(wall / 1000 * per_round, 3),
            "gpu_idle": round(gap / 1000 * per_round, 3),
        }
    return report


def _device_time(events: Any, per_round: float) -> dict[str, float]:
    """The GPU's span of each phase's work, from the profiler's ranges on the
    GPU's timeline (the forwards split by runner: ``mark_runners``)."""
    totals: dict[str, float] = {}
    for e in events:
        if e.is_user_annotation and e.device_type.name == "CUDA":
            totals[e.name] = totals.get(e.name, 0.0) + e.time_range.end - e.time_range.start
    return {name: round(t / 1000 * per_round, 3) for name, t in totals.items()}


def _overlap(a: tuple[float, float], b: tuple[float, float]) -> float:
    return max(0.0, min(a[1], b[1]) - max(a[0], b[0]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--target", required=True)
    parser.add_argument("--draft", required=True)
    parser.add_argument("--k", type=int, default=3)
    parser.add_argument("--batch", nargs="+", type=int, default=[1, 64])
    parser.add_argument("--tokens", type=int, default=24)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    mark_phases()
    spec = {"model": args.draft, "num_speculative_tokens": args.k, "adaptive_k": False}
    llm = LLM(
        args.target, dtype="bfloat16", max_model_len=1024, max_num_seqs=max(args.batch),
        speculative_config=spec,
    )  # fmt: skip
    mark_runners(llm)
    rows = [profiled_round(llm, b, args.tokens) for b in args.batch]
    report = {"device": torch.cuda.get_device_name(), "args": vars(args), "rows": rows}
    print(json.dumps(report, indent=1, default=str))
    if args.out:
        args.out.write_text(json.dumps(report, indent=1, default=str))


if __name__ == "__main__":
    main()

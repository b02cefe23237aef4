"""Speculation on one GPU through ``LLM``: speedup over target-only against k
and against concurrency, for the realistic-shape pair at several acceptances
(benchmarks/shapes.py), beside the theory E / (k c + 1).

    PYTHONPATH=. python benchmarks/speculative_gpu.py --checkpoints /tmp/ckpt \
        --acceptance 0.6 0.75 0.9 --out speculative_gpu.json

For each wanted acceptance: the pair is built in memory, the scale s whose
greedy agreement between draft and target on random text is that acceptance
is found by bisection, the target at s is written (over the last one) beside
the draft, and one ``LLM`` with num_speculative_tokens = K_MAX runs greedy
batches of random prompts at every concurrency with k pinned to 0..K_MAX and
with k adaptive (``--bundled``: the bundled pair in bf16 instead, on code
prompts). Each ``LLM`` is frozen once built (``frozen``), as a serving
program would freeze its heap, so Python's full collections do not fall on
rows at random. Target-only (no draft model) and draft-only runs give the
step costs: c = draft ms per token / target ms per token at each concurrency.
The theory uses E = (1 - a^(k+1)) / (1 - a) with a the acceptance measured
at k = 1. ``--draft-shape`` sets the draft's width (Qwen3-0.6B's by
default; ``target`` for the target's own). ``--seed-shapes`` adds the
Qwen3-0.6B-shape draft beside the target (random: acceptance 0, so it prices
rounds only). The report is written after every row, its pair's
``complete`` false until its last row and the check of its outputs, so a
call that runs out of time keeps what it timed. The realistic pair needs a
GPU; ``--bundled`` runs on the CPU too, slowly, which is how the tests
check this script end to end.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from benchmarks.prompts import MIN_TOKENS, Workload, prompts
from benchmarks.report import Timeline, kept, write
from benchmarks.rows import Fixed, decode, engine_row, median_run, warm_up
from benchmarks.shapes import (
    SHAPES,
    bundled_tokenizer,
    calibrate,
    save,
    save_random_qwen3,
    set_scale,
    speculative_pair,
)
from benchmarks.ties import same_as_plain
from model_runtime.heap import freeze_startup_heap
from router.adaptive import KChooser
from specserve import LLM, SamplingParams

K_MAX = 8


def frozen(llm: LLM) -> LLM:
    """``llm``, with what is alive now collected and frozen, as a program
    that serves from one process would freeze its heap once built
    (model_runtime/heap.py): a full collection between the timed calls then
    walks only what the rows made since, not the 10^5 objects of the models
    (0.25-0.3 s each, which fell on rows at random), and ``LLM.generate``
    leaves the frozen heap as it is. ``free`` thaws it."""
    freeze_startup_heap("benchmark")
    return llm


def free() -> None:
    gc.unfreeze()  # a dropped LLM frozen with the rest is freed only once thawed
    gc.collect()
    torch.cuda.empty_cache()


def engine_rows(
    llm: LLM,
    concurrency: list[int],
    work: Workload,
    ks: list[int],
    repeats: int = 2,
    keep: Callable[[list[dict[str, Any]]], None] | None = None,
) -> list[dict[str, Any]]:
    """Tokens/s and acceptance at every concurrency for k adaptive and pinned
    to each of ``ks``: the median of ``repeats`` passes over all of them (a
    row is a second or so, and the best of nine pinned k is biased upward by
    a single row's noise), and adaptive's first pass apart (``adaptive-first``,
    while it still learns: its chooser sees only its own rounds, as a
    server's would). Pinned rows run k as a fixed setting would, timing
    nothing (``Fixed``); adaptive rows pay for the rounds they time. ``keep``
    is given the rows so far after each run (a run cut short keeps them)."""
    assert llm.engine.rounds.chooser is not None, "the speculative LLM must choose k adaptively"
    # Compile and capture every shape before timing any: each k, and adaptive
    # rounds (whose k changes, and the draft's catch-up with it).
    for k in [*ks, None]:
        llm.engine.rounds.chooser.pin(k)
        for batch in concurrency:
            length = work.max_tokens if k is None else 4
            params = SamplingParams(temperature=0, max_tokens=length)
            llm.generate(prompts(batch, 2, work.text), params, use_tqdm=False)
    learner = KChooser(K_MAX)
    runs: dict[tuple[Any, int], list[dict[str, Any]]] = {}
    outputs: dict[tuple[Any, int], list[list[int]]] = {}
    for batch, name, k in schedule(concurrency, ks, repeats):
        llm.engine.rounds.chooser = learner if k is None else Fixed(K_MAX, k)
        row, tokens = engine_row(llm, batch, work)
        runs.setdefault((name, batch), []).append({"k": name, "batch": batch, **row})
        outputs.setdefault((name, batch), tokens)
        if keep is not None:  # (before the row is printed: it is kept once it is seen)
            keep([median_run(found) for found in runs.values()])
        print(json.dumps(runs[name, batch][-1]), flush=True)
    rows = [median_run(found) for found in runs.values()]
    found = [outputs[r["k"], r["batch"]] for r in rows]
    same_as_plain(llm, rows, found, work)
    return rows


def schedule(
    concurrency: list[int], ks: list[int], repeats: int
) -> list[tuple[int, str | int, int | None]]:
    """(batch, row name, pinned k or None for adaptive) in the order timed:
    a batch size's rows back to back, adaptive's learning pass first, each
    pass in the reverse order of the one before, so that rows compared with
    each other are timed close together and a drift of the GPU's speed over
    a pass falls on them alike."""
    names: list[tuple[str | int, int | None]] = [("adaptive", None), *((k, k) for k in ks)]
    order = []
    for batch in concurrency:
        order.append((batch, "adaptive-first", None))
        for rep in range(repeats):
            order += [(batch, name, k) for name, k in (names if rep % 2 == 0 else names[::-1])]
    return order


def rate(llm: LLM, batch: int, work: Workload) -> float:
    warm_up(llm, batch, work.text)
    return decode(llm, batch, work)[0]


def alone(
    folder: Path | str, concurrency: list[int], work: Workload, repeats: int = 2
) -> dict[int, float]:
    """Tokens/s of ``folder`` decoding alone at each concurrency (the median of ``repeats``)."""
    llm = frozen(
        LLM(str(folder), dtype="bfloat16", max_model_len=1024, max_num_seqs=max(concurrency))
    )
    runs = [[rate(llm, b, work) for b in concurrency] for _ in range(repeats)]
    rates = {b: statistics.median(r[i] for r in runs) for i, b in enumerate(concurrency)}
    del llm
    free()
    return rates


def speculative(
    target: Path | str,
    draft: Path | str,
    concurrency: list[int],
    work: Workload,
    ks: list[int],
    repeats: int = 2,
    keep: Callable[[list[dict[str, Any]]], None] | None = None,
) -> list[dict[str, Any]]:
    spec = {"model": str(draft), "num_speculative_tokens": K_MAX}
    llm = frozen(LLM(
        str(target), dtype="bfloat16", max_model_len=1024, max_num_seqs=max(concurrency),
        speculative_config=spec,
    ))  # fmt: skip
    rows = engine_rows(llm, concurrency, work, ks, repeats, keep)
    del llm
    free()
    return rows


def realistic_pairs(args: argparse.Namespace, report: dict[str, Any], timeline: Timeline) -> None:
    """Calibrate every scale first, then write and run the target at each in
    turn (the pair stays in memory meanwhile: one target on disk at a time);
    each pair's rows go into ``report["pairs"]`` as they are timed."""
    tokenizer, work = bundled_tokenizer(), workload(args, text=False)
    width = None if args.draft_shape == "target" else SHAPES[args.draft_shape]
    eos = tokenizer.eos_token_id
    target, draft = speculative_pair(SHAPES["qwen3-8b"], args.draft_layers, eos, draft_shape=width)
    timeline.mark("pair built")
    draft_dir = save(draft, args.checkpoints / "pair-draft", tokenizer)
    base: dict = {}
    scales = args.scales or [
        calibrate(target, draft, args.draft_layers, a, base) for a in args.acceptance
    ]
    timeline.mark("draft written, scales found")
    for wanted, scale in zip(args.acceptance, scales, strict=True):
        set_scale(target, args.draft_layers, scale, base)
        target_dir = save(target, args.checkpoints / "pair-target", tokenizer)
        timeline.mark(f"acceptance {wanted}: scale {scale:.4f}, target written")
        if "target_only" not in report:  # the costs first: they do not depend on s
            report["target_only"] = alone(target_dir, args.concurrency, work, args.repeats)
            timeline.mark("target alone timed")
            report["draft_only"] = alone(draft_dir, args.concurrency, work, args.repeats)
            timeline.mark("draft alone timed")
            write(report, args.out)
        pair = {"wanted_acceptance": wanted, "scale": scale}
        keep = kept(report, pair, args.out, timeline)
        rows = speculative(
            target_dir, draft_dir, args.concurrency, work, args.ks, args.repeats, keep
        )
        keep(rows, complete=True)


def workload(args: argparse.Namespace, text: bool) -> Workload:
    return Workload(args.max_tokens, text, args.min_tokens, args.refill)


def bundled_pair(args: argparse.Namespace, report: dict[str, Any], timeline: Timeline) -> None:
    """The bundled trained pair in bf16 on prompts of the code it was trained on."""
    target, draft = "specserve/demo-target", "specserve/demo-draft"
    conc, repeats, work = args.concurrency, args.repeats, workload(args, text=True)
    report["target_only"] = alone(target, conc, work, repeats)
    timeline.mark("target alone timed")
    report["draft_only"] = alone(draft, conc, work, repeats)
    timeline.mark("draft alone timed")
    keep = kept(report, {"wanted_acceptance": None, "name": "bundled"}, args.out, timeline)
    keep(speculative(target, draft, conc, work, args.ks, repeats, keep), True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkpoints", type=Path, required=True)
    parser.add_argument("--acceptance", nargs="+", type=float, default=[0.6, 0.75, 0.9])
    parser.add_argument("--scales", nargs="+", type=float, help="given: no calibration")
    parser.add_argument("--draft-layers", type=int, default=4)
    parser.add_argument(
        "--draft-shape", default="qwen3-0.6b", choices=[*SHAPES, "target"],
        help="the width of the draft's layers (target: the target's own)",
    )  # fmt: skip
    parser.add_argument("--concurrency", nargs="+", type=int, default=[1, 4, 16, 64])
    parser.add_argument("--max-tokens", type=int, default=96)
    parser.add_argument("--ks", nargs="+", type=int, default=list(range(K_MAX + 1)))
    parser.add_argument("--repeats", type=int, default=2, help="passes over every row")
    parser.add_argument(
        "--min-tokens", type=int, default=MIN_TOKENS,
        help="new tokens a row decodes at least (benchmarks/prompts.py: its noise)",
    )  # fmt: skip
    parser.add_argument(
        "--refill", action="store_true",
        help="keep each concurrency's count in flight, not closed batches (prompts.Workload)",
    )  # fmt: skip
    parser.add_argument("--seed-shapes", action="store_true")
    parser.add_argument("--bundled", action="store_true", help="the bundled pair, in bf16")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    report: dict[str, Any] = {
        "device": torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu",
        "args": vars(args),
        "python": sys.version.split()[0],
        "frozen_at_start": gc.get_freeze_count(),  # frozen before this script froze anything
    }  # fmt: skip
    report["pairs"] = []
    timeline = Timeline(report)
    if args.bundled:
        bundled_pair(args, report, timeline)
    else:
        realistic_pairs(args, report, timeline)
    conc, work = args.concurrency, workload(args, text=False)
    if args.seed_shapes:
        small = args.checkpoints / "qwen3-0.6b"
        if not (small / "config.json").exists():
            save_random_qwen3(small, "qwen3-0.6b")
        report["seed_draft_only"] = alone(small, conc, work)
        target = args.checkpoints / "pair-target"
        report["seed_shapes"] = speculative(target, small, [1], work, args.ks)
    write(report, args.out)
    print(json.dumps({k: v for k, v in report.items() if k != "pairs"}, indent=1, default=str))


if __name__ == "__main__":
    main()

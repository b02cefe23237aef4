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
prompts). Target-only (no draft model) and draft-only runs give the
step costs: c = draft ms per token / target ms per token at each concurrency.
The theory uses E = (1 - a^(k+1)) / (1 - a) with a the acceptance measured
at k = 1. ``--draft-shape`` sets the draft's width (Qwen3-0.6B's by
default; ``target`` for the target's own). ``--seed-shapes`` adds the
Qwen3-0.6B-shape draft beside the target (random: acceptance 0, so it prices
rounds only). Needs a GPU.
"""

from __future__ import annotations

import argparse
import gc
import json
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch

from benchmarks.prompts import prompts, timed_prompts
from benchmarks.shapes import (
    SHAPES,
    bundled_tokenizer,
    save,
    save_random_qwen3,
    set_scale,
    speculative_pair,
)
from router.adaptive import KChooser
from specserve import LLM, SamplingParams

K_MAX = 8


def timed(
    llm: LLM, batch: int, max_tokens: int, text: bool = False
) -> tuple[float, list[list[int]]]:
    """Tokens/s of greedy decoding of the row's batches of prompts, and the tokens."""
    params = SamplingParams(temperature=0, max_tokens=max_tokens, ignore_eos=True)
    warm_up = SamplingParams(temperature=0, max_tokens=8)
    llm.generate(prompts(batch, 0, text), warm_up, use_tqdm=False)
    tokens = []
    start = time.perf_counter()
    for asked in timed_prompts(batch, max_tokens, text):
        outs = llm.generate(asked, params, use_tqdm=False)
        tokens += [list(o.outputs[0].token_ids) for o in outs]
    return sum(map(len, tokens)) / (time.perf_counter() - start), tokens


def tokens_per_s(llm: LLM, batch: int, max_tokens: int, text: bool = False) -> float:
    return timed(llm, batch, max_tokens, text)[0]


def step_counts(llm: LLM) -> dict[str, dict[str, float]]:
    """How the in-process target's and draft's forwards have run so far."""
    workers = {"target": llm.engine.workers.target, "draft": llm.engine.workers.drafts[0]}
    return {name: asdict(w.runner.counts) for name, w in workers.items()}  # type: ignore[attr-defined]


def counts_since(before: dict, after: dict) -> dict[str, dict[str, float]]:
    return {w: {n: round(after[w][n] - v, 4) for n, v in before[w].items()} for w in before}


def same_as_plain(
    llm: LLM,
    rows: list[dict[str, Any]],
    outputs: list[list[list[int]]],
    max_tokens: int,
    text: bool = False,
) -> None:
    """Mark each row with the share of its sequences whose greedy tokens equal
    those of k = 0 (a plain target step every round) at the same concurrency,
    and where one differs, the gap between the target's two likeliest tokens
    (k = 0's logprobs) at the first token where they part. bf16 logits of a
    random model often tie to within rounding, which the k + 1 rows of a
    verify and the one row of a decode round differently: a gap of a unit or
    two of bf16 at the logits' size (0.125 to 0.25) is such a tie, a wider one
    would be a lost token."""
    plain = {r["batch"]: out for r, out in zip(rows, outputs, strict=True) if r["k"] == 0}
    for row, out in zip(rows, outputs, strict=True):
        if row["batch"] not in plain:
            continue
        same = [a == b for a, b in zip(out, plain[row["batch"]], strict=True)]
        row["same_tokens_as_k0"] = sum(same) / len(same)
        asked = [p for ps in timed_prompts(row["batch"], max_tokens, text) for p in ps]
        parted = []
        for prompt, a, b in zip(asked, out, plain[row["batch"]], strict=True):
            if a != b:
                first = next(i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y)
                parted.append({"prompt_token_ids": prompt["prompt_token_ids"] + b[:first]})
        if parted:
            row["parting_gaps"] = top_two_gaps(llm, parted[:8])


def top_two_gaps(llm: LLM, prefixes: list[dict[str, list[int]]]) -> list[float]:
    """The target's logprob gap between its two likeliest next tokens after each prefix."""
    assert llm.engine.rounds.chooser is not None
    llm.engine.rounds.chooser.pin(0)
    params = SamplingParams(temperature=0, max_tokens=1, logprobs=2)
    gaps = []
    for out in llm.generate(prefixes, params, use_tqdm=False):
        assert out.outputs[0].logprobs is not None
        top = sorted((p.logprob for p in out.outputs[0].logprobs[0].values()), reverse=True)
        gaps.append(round(top[0] - top[1], 4))
    return gaps


def agreement(target: Any, draft: Any, ids: torch.Tensor) -> float:
    with torch.no_grad():
        return (target(ids).logits.argmax(-1) == draft(ids).logits.argmax(-1)).float().mean().item()


def calibrate(target: Any, draft: Any, layers: int, wanted: float, base: dict) -> float:
    """The scale whose greedy agreement on random text is ``wanted`` (bisection)."""
    ids = torch.randint(1000, 100000, (4, 256), device=target.device)
    low, high = 0.0, 0.5
    for _ in range(12):
        middle = (low + high) / 2
        set_scale(target, layers, middle, base)
        low, high = (middle, high) if agreement(target, draft, ids) > wanted else (low, middle)
    scale = (low + high) / 2
    set_scale(target, layers, scale, base)
    return scale


def free() -> None:
    gc.collect()
    torch.cuda.empty_cache()


def engine_rows(
    llm: LLM, concurrency: list[int], max_tokens: int, ks: list[int], text: bool = False
) -> list[dict[str, Any]]:
    """Tokens/s and acceptance at every concurrency for k adaptive and pinned to each of ``ks``."""
    assert llm.engine.rounds.chooser is not None, "the speculative LLM must choose k adaptively"
    # Compile and capture every shape before timing any: each k, and adaptive
    # rounds (whose k changes, and the draft's catch-up with it).
    for k in [*ks, None]:
        llm.engine.rounds.chooser.pin(k)
        for batch in concurrency:
            length = max_tokens if k is None else 4
            warm_up = SamplingParams(temperature=0, max_tokens=length)
            llm.generate(prompts(batch, 2, text), warm_up, use_tqdm=False)
    # Adaptive first, with nothing measured: it learns from its own rounds only.
    chooser = llm.engine.rounds.chooser = KChooser(K_MAX)
    rows, outputs = [], []
    for k in [None, *ks]:
        chooser.pin(k)
        for batch in concurrency:
            before, steps = llm.engine.metrics.copy(), step_counts(llm)
            rate, tokens = timed(llm, batch, max_tokens, text)
            outputs.append(tokens)
            after = llm.engine.metrics.copy()
            steps = counts_since(steps, step_counts(llm))
            drafted = after.num_draft_tokens - before.num_draft_tokens
            accepted = after.num_accepted_tokens - before.num_accepted_tokens
            rounds = [a - b for a, b in zip(after.rounds_per_k, before.rounds_per_k, strict=True)]
            rows.append(
                {"k": "adaptive" if k is None else k, "batch": batch, "tokens_per_s": rate,
                 "acceptance": accepted / drafted if drafted else None, "rounds_per_k": rounds,
                 "steps": steps}
            )  # fmt: skip
            print(json.dumps(rows[-1]), flush=True)
    same_as_plain(llm, rows, outputs, max_tokens, text)
    return rows


def alone(
    folder: Path | str, concurrency: list[int], max_tokens: int, text: bool = False
) -> dict[int, float]:
    """Tokens/s of ``folder`` decoding alone at each concurrency."""
    llm = LLM(str(folder), dtype="bfloat16", max_model_len=1024, max_num_seqs=max(concurrency))
    rates = {b: tokens_per_s(llm, b, max_tokens, text) for b in concurrency}
    del llm
    free()
    return rates


def speculative(
    target: Path | str,
    draft: Path | str,
    concurrency: list[int],
    max_tokens: int,
    ks: list[int],
    text: bool = False,
) -> list[dict[str, Any]]:
    spec = {"model": str(draft), "num_speculative_tokens": K_MAX}
    llm = LLM(
        str(target), dtype="bfloat16", max_model_len=1024, max_num_seqs=max(concurrency),
        speculative_config=spec,
    )  # fmt: skip
    rows = engine_rows(llm, concurrency, max_tokens, ks, text)
    del llm
    free()
    return rows


def realistic_pairs(args: argparse.Namespace, report: dict[str, Any]) -> None:
    """Calibrate every scale first, then write and run the target at each in
    turn (the pair stays in memory meanwhile: one target on disk at a time);
    each pair's rows go into ``report["pairs"]`` as they finish."""
    tokenizer = bundled_tokenizer()
    width = None if args.draft_shape == "target" else SHAPES[args.draft_shape]
    eos = tokenizer.eos_token_id
    target, draft = speculative_pair(SHAPES["qwen3-8b"], args.draft_layers, eos, draft_shape=width)
    draft_dir = save(draft, args.checkpoints / "pair-draft", tokenizer)
    base: dict = {}
    scales = args.scales or [
        calibrate(target, draft, args.draft_layers, a, base) for a in args.acceptance
    ]
    for wanted, scale in zip(args.acceptance, scales, strict=True):
        set_scale(target, args.draft_layers, scale, base)
        target_dir = save(target, args.checkpoints / "pair-target", tokenizer)
        print(f"acceptance {wanted}: scale {scale:.4f}", flush=True)
        if "target_only" not in report:  # the costs first: they do not depend on s
            report["target_only"] = alone(target_dir, args.concurrency, args.max_tokens)
            report["draft_only"] = alone(draft_dir, args.concurrency, args.max_tokens)
            write(report, args.out)
        rows = speculative(target_dir, draft_dir, args.concurrency, args.max_tokens, args.ks)
        report["pairs"].append({"wanted_acceptance": wanted, "scale": scale, "rows": rows})
        write(report, args.out)


def bundled_pair(args: argparse.Namespace, report: dict[str, Any]) -> None:
    """The bundled trained pair in bf16 on prompts of the code it was trained on."""
    target, draft = "specserve/demo-target", "specserve/demo-draft"
    conc, tokens = args.concurrency, args.max_tokens
    report["target_only"] = alone(target, conc, tokens, text=True)
    report["draft_only"] = alone(draft, conc, tokens, text=True)
    rows = speculative(target, draft, conc, tokens, args.ks, text=True)
    report["pairs"].append({"wanted_acceptance": None, "name": "bundled", "rows": rows})


def write(report: dict[str, Any], out: Path | None) -> None:
    if out:
        out.write_text(json.dumps(report, indent=1, default=str))


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
    parser.add_argument("--seed-shapes", action="store_true")
    parser.add_argument("--bundled", action="store_true", help="the bundled pair, in bf16")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    report: dict[str, Any] = {"device": torch.cuda.get_device_name(), "args": vars(args)}
    report["pairs"] = []
    if args.bundled:
        bundled_pair(args, report)
    else:
        realistic_pairs(args, report)
    conc, tokens = args.concurrency, args.max_tokens
    if args.seed_shapes:
        small = args.checkpoints / "qwen3-0.6b"
        if not (small / "config.json").exists():
            save_random_qwen3(small, "qwen3-0.6b")
        report["seed_draft_only"] = alone(small, conc, tokens)
        target = args.checkpoints / "pair-target"
        report["seed_shapes"] = speculative(target, small, [1], tokens, args.ks)
    write(report, args.out)
    print(json.dumps({k: v for k, v in report.items() if k != "pairs"}, indent=1, default=str))


if __name__ == "__main__":
    main()

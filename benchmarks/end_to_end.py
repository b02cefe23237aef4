"""Tokens per second through the public API on a GPU: ``LLM`` target-only at
several batch sizes against transformers ``generate`` on the same checkpoint
in the same run, and the bundled pair in bf16 with and without speculation.

    PYTHONPATH=. python benchmarks/end_to_end.py --checkpoints /tmp/ckpt --out e2e.json

Random bf16 checkpoints in the Qwen3 shapes are written under --checkpoints
first when missing (benchmarks/shapes.py). Greedy, EOS ignored, prompts of
PROMPT_LEN random tokens.
"""

from __future__ import annotations

import argparse
import gc
import json
import time
from pathlib import Path
from typing import Any

import torch
from transformers import AutoModelForCausalLM

from benchmarks.shapes import SHAPES, save_random_qwen3
from specserve import LLM, SamplingParams

PROMPT_LEN = 64


def prompts(batch: int, seed: int) -> list[dict[str, list[int]]]:
    gen = torch.Generator().manual_seed(seed)
    return [
        {"prompt_token_ids": torch.randint(1000, 100000, (PROMPT_LEN,), generator=gen).tolist()}
        for _ in range(batch)
    ]


def time_llm(llm: LLM, batch: int, max_tokens: int) -> dict[str, float]:
    params = SamplingParams(temperature=0, max_tokens=max_tokens, ignore_eos=True)
    llm.generate(prompts(batch, 0), SamplingParams(temperature=0, max_tokens=8), use_tqdm=False)
    start = time.perf_counter()
    outs = llm.generate(prompts(batch, 1), params, use_tqdm=False)
    seconds = time.perf_counter() - start
    tokens = sum(len(o.outputs[0].token_ids) for o in outs)
    return {"tokens_per_s": tokens / seconds, "ms_per_step": seconds / max_tokens * 1e3}


def time_transformers(folder: Path, max_tokens: int) -> dict[str, float]:
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.bfloat16).cuda().eval()
    ids = torch.tensor([prompts(1, 1)[0]["prompt_token_ids"]], device="cuda")

    def run(n: int) -> float:
        torch.cuda.synchronize()
        start = time.perf_counter()
        model.generate(ids, max_new_tokens=n, min_new_tokens=n, do_sample=False)
        torch.cuda.synchronize()
        return time.perf_counter() - start

    run(4)
    seconds = run(max_tokens)
    return {"tokens_per_s": max_tokens / seconds, "ms_per_step": seconds / max_tokens * 1e3}


def free() -> None:
    gc.collect()
    torch.cuda.empty_cache()


def shape_rows(folder: Path, batches: list[int], max_tokens: int) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    started = time.perf_counter()
    llm = LLM(str(folder), dtype="bfloat16", max_model_len=1024, max_num_seqs=max(batches))
    startup = time.perf_counter() - started
    for batch in batches:
        rows.append({"engine": "specserve", "batch": batch, **time_llm(llm, batch, max_tokens)})
        rows[-1]["startup_s"] = startup
        print(json.dumps(rows[-1]), flush=True)
    del llm
    free()
    rows.append({"engine": "transformers", "batch": 1, **time_transformers(folder, max_tokens)})
    print(json.dumps(rows[-1]), flush=True)
    free()
    return rows


def bundled_pair(max_tokens: int) -> dict[str, Any]:
    spec = {"model": "specserve/demo-draft", "num_speculative_tokens": 5}
    params = SamplingParams(temperature=0, max_tokens=max_tokens)
    text = ["def fibonacci(n):", "class Stack:\n    def push(self, item):"]
    result: dict[str, Any] = {}
    for name, extra in (("target_only", {}), ("speculative", {"speculative_config": spec})):
        llm = LLM("specserve/demo-target", dtype="bfloat16", **extra)
        for batch in (1, 16):  # warm up every batch size (kernels specialise on shapes)
            llm.generate((text * 8)[:batch], params, use_tqdm=False)
        for batch in (1, 16):
            start = time.perf_counter()
            outs = llm.generate((text * 8)[:batch], params, use_tqdm=False)
            tokens = sum(len(o.outputs[0].token_ids) for o in outs)
            result[f"{name}_batch{batch}_tokens_per_s"] = tokens / (time.perf_counter() - start)
        if extra:
            result["metrics"] = llm.speculation_stats()
        del llm
        free()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkpoints", type=Path, required=True)
    parser.add_argument("--shapes", nargs="+", default=["qwen3-8b"], choices=list(SHAPES))
    parser.add_argument("--batch", nargs="+", type=int, default=[1, 16, 64])
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--out", help="write the results as JSON here")
    args = parser.parse_args()
    report: dict[str, Any] = {"device": torch.cuda.get_device_name(), "torch": torch.__version__}
    for shape in args.shapes:
        folder = args.checkpoints / shape
        if not (folder / "config.json").exists():
            save_random_qwen3(folder, shape)
        report[shape] = shape_rows(folder, args.batch, args.max_tokens)
    report["bundled_pair_bf16"] = bundled_pair(args.max_tokens)
    print(json.dumps(report, indent=1), flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()

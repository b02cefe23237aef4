"""A tensor-parallel target against one GPU: the same greedy output, and the
time of its verify step.

    PYTHONPATH=. python benchmarks/tensor_parallel.py --target /ckpt/qwen3-8b \
        --draft /ckpt/qwen3-0.6b --tp 1 2 --out tensor_parallel.json

For each tensor-parallel size (tp > 1: ranks are processes of the mp
executor, one GPU each, meeting in an NCCL group through torch.distributed;
Ray is not needed):
1. greedy output: PROMPTS decoded by the target alone, compared token for
   token with the first size's;
2. verify step: the time spent inside the target's verify call per round,
   every sequence verifying k drafts (from the draft model, in this process on
   the first GPU), at each batch size.
"""

from __future__ import annotations

import argparse
import gc
import json
from dataclasses import replace
from typing import Any

import torch

from benchmarks.grpc_overhead import Timed, round_ms
from router.clients import close_worker
from router.config import EngineConfig, SpeculativeConfig
from router.engine import LLMEngine
from router.params import SamplingParams
from specserve.local_workers import build_local_workers

PROMPTS = [
    "def fibonacci(n):",
    "import os\nimport sys\n",
    "class Stack:\n    def push(self, item):",
    "# Parse the command line\n",
]


def greedy(engine: LLMEngine, max_tokens: int) -> list[list[int]]:
    params = SamplingParams(temperature=0, max_tokens=max_tokens, ignore_eos=True)
    states = [
        engine.add_request(f"g{i}", engine.tokenizer.encode(p), params)[0]
        for i, p in enumerate(PROMPTS)
    ]
    while engine.has_unfinished():
        engine.step()
    return [s.output_ids for s in states]


def first_difference(a: list[int], b: list[int]) -> int | None:
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def measure(args: argparse.Namespace, tp: int) -> dict[str, Any]:
    config = EngineConfig.of(
        args.target,
        SpeculativeConfig(args.draft, args.k, adaptive_k=False),
        dtype=args.dtype,
        max_model_len=args.max_model_len,
        tensor_parallel_size=tp,
        distributed_executor_backend="mp" if tp > 1 else None,
        num_kv_blocks=args.num_kv_blocks,
        log_stats_interval_s=None,
    )
    workers = build_local_workers(config)
    workers.targets = [Timed(w) for w in workers.targets]  # type: ignore[misc]
    try:
        plain = LLMEngine(replace(config, speculative=None), replace(workers, drafts=[]))
        out: dict[str, Any] = {"tp": tp, "greedy": greedy(plain, args.max_tokens), "verify": []}
        engine = LLMEngine(config, workers)
        for batch in args.batch:
            round_total, verify = round_ms(engine, batch)
            row = {"batch": batch, "verify_ms": verify, "round_ms": round_total}
            out["verify"].append(row)
            print(json.dumps({"tp": tp, **row}), flush=True)
        return out
    finally:
        for worker in workers.targets + workers.drafts:
            close_worker(worker)
        del workers
        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--target", required=True)
    parser.add_argument("--draft", required=True)
    parser.add_argument("--tp", nargs="+", type=int, default=[1, 2])
    parser.add_argument("--batch", nargs="+", type=int, default=[1, 16, 64])
    parser.add_argument("--k", type=int, default=5)
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--max-model-len", type=int, default=1024)
    parser.add_argument("--num-kv-blocks", type=int, default=4096)
    parser.add_argument("--max-tokens", type=int, default=32, help="greedy tokens per prompt")
    parser.add_argument("--out")
    args = parser.parse_args()
    runs = [measure(args, tp) for tp in args.tp]
    reference = runs[0]["greedy"]
    for run in runs:
        run["greedy_first_difference"] = [
            first_difference(a, b) for a, b in zip(reference, run["greedy"], strict=True)
        ]
    device = torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"
    print(f"\n{device} x{torch.cuda.device_count()}, k={args.k}")
    header = f"{'tp':>3}{'batch':>7}{'verify ms':>11}{'round ms':>10}"
    print(f"{header}  same greedy output as tp {runs[0]['tp']}")
    for run in runs:
        same = all(d is None for d in run["greedy_first_difference"])
        for row in run["verify"]:
            times = f"{row['verify_ms']:>11.2f}{row['round_ms']:>10.2f}"
            print(f"{run['tp']:>3}{row['batch']:>7}{times}  {same}")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(
                {
                    "device": device,
                    "gpus": torch.cuda.device_count(),
                    "torch": torch.__version__,
                    "options": vars(args),
                    "runs": runs,
                },
                f,
                indent=1,
            )


if __name__ == "__main__":
    main()

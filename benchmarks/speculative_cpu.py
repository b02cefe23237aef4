"""Tokens/s and acceptance on the bundled pair: target-only decoding,
speculative decoding for k = 1..8, and transformers' own assisted generation
on the same models and prompts. One request at a time (batch 1, the latency
regime speculation is for), greedy, float32.

    python benchmarks/speculative_cpu.py --max-tokens 128 --out speculative_cpu.json
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from collections.abc import Callable

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from specserve import LLM, SamplingParams, resolve_model

PROMPTS = [
    "def fibonacci(n):",
    "import os\nimport sys\n",
    "class Stack:\n    def push(self, item):",
    "    for i in range(len(items)):\n",
    "# Parse the command line\n",
    "def read_config(path):\n    with open(path) as f:",
    "try:\n    import json\nexcept ImportError:",
    "    return self._cache[key]\n\n    def",
]


def timed(generate_one: Callable[[str], int]) -> tuple[float, int]:
    """(seconds, generated tokens) over every prompt, one at a time."""
    generate_one(PROMPTS[0])  # warm up
    tokens, start = 0, time.perf_counter()
    for prompt in PROMPTS:
        tokens += generate_one(prompt)
    return time.perf_counter() - start, tokens


def ours(k: int | None, max_tokens: int) -> dict:
    spec = (
        None
        if k is None
        else {"model": "specserve/demo-draft", "num_speculative_tokens": k, "adaptive_k": False}
    )
    llm = LLM("specserve/demo-target", speculative_config=spec, dtype="float32", device="cpu")
    params = SamplingParams(temperature=0, max_tokens=max_tokens, ignore_eos=True)

    def one(prompt: str) -> int:
        return len(llm.generate(prompt, params, use_tqdm=False)[0].outputs[0].token_ids)

    seconds, tokens = timed(one)
    row = {
        "system": "specserve",
        "k": k or 0,
        "tokens": tokens,
        "seconds": seconds,
        "tokens_per_s": tokens / seconds,
    }
    if k:
        m = llm.speculation_stats()
        row |= {
            "acceptance_rate": m["acceptance_rate"],
            "mean_acceptance_length": m["mean_acceptance_length"],
        }
    return row


def transformers_rows(max_tokens: int) -> list[dict]:
    target = AutoModelForCausalLM.from_pretrained(
        resolve_model("specserve/demo-target"), dtype=torch.float32
    ).eval()
    draft = AutoModelForCausalLM.from_pretrained(
        resolve_model("specserve/demo-draft"), dtype=torch.float32
    ).eval()
    tokenizer = AutoTokenizer.from_pretrained(resolve_model("specserve/demo-target"))
    rows = []
    for name, extra in (
        ("transformers", {}),
        ("transformers assisted", {"assistant_model": draft}),
    ):

        def one(prompt: str, extra: dict = extra) -> int:
            ids = torch.tensor([tokenizer.encode(prompt)])
            with torch.no_grad():
                out = target.generate(
                    ids,
                    max_new_tokens=max_tokens,
                    min_new_tokens=max_tokens,
                    do_sample=False,
                    **extra,
                )
            return out.shape[1] - ids.shape[1]

        seconds, tokens = timed(one)
        rows.append(
            {
                "system": name,
                "k": None,
                "tokens": tokens,
                "seconds": seconds,
                "tokens_per_s": tokens / seconds,
            }
        )
        print(json.dumps(rows[-1]), flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--k", nargs="+", type=int, default=list(range(1, 9)))
    parser.add_argument("--out")
    args = parser.parse_args()
    rows = [ours(None, args.max_tokens)]
    print(json.dumps(rows[-1]), flush=True)
    for k in args.k:
        rows.append(ours(k, args.max_tokens))
        print(json.dumps(rows[-1]), flush=True)
    rows += transformers_rows(args.max_tokens)
    base = rows[0]["tokens_per_s"]
    print(
        f"\n{platform.processor() or platform.machine()}, {torch.get_num_threads()} threads, "
        f"torch {torch.__version__}"
    )
    print(f"{'system':<24}{'k':>3}{'tok/s':>9}{'speedup':>9}{'accept':>8}{'mean len':>9}")
    for r in rows:
        print(
            f"{r['system']:<24}{r['k'] if r['k'] is not None else '-':>3}"
            f"{r['tokens_per_s']:>9.1f}{r['tokens_per_s'] / base:>9.2f}"
            f"{r.get('acceptance_rate', float('nan')):>8.2f}"
            f"{r.get('mean_acceptance_length', float('nan')):>9.2f}"
        )
    if args.out:
        with open(args.out, "w") as f:
            json.dump(
                {
                    "threads": torch.get_num_threads(),
                    "torch": torch.__version__,
                    "max_tokens": args.max_tokens,
                    "prompts": len(PROMPTS),
                    "rows": rows,
                },
                f,
                indent=1,
            )


if __name__ == "__main__":
    main()

"""Adaptive k on the bundled pair at batch 1 (CPU, float32, greedy): tokens/s
and rounds by k for outputs of a few lengths, after a pass that lets the
chooser learn. Run it in two trees, alternately, to compare choosers.

    python benchmarks/adaptive_cpu.py --max-tokens 20 96 --k 8
"""

from __future__ import annotations

import argparse
import json
import time

from benchmarks.speculative_cpu import PROMPTS
from specserve import LLM, SamplingParams


def row(llm: LLM, max_tokens: int, passes: int) -> dict:
    params = SamplingParams(temperature=0, max_tokens=max_tokens, ignore_eos=True)
    llm.generate(PROMPTS, params, use_tqdm=False)  # learn, compile
    before = llm.speculation_stats()["rounds_per_k"]
    assert isinstance(before, list)
    tokens, start = 0, time.perf_counter()
    for _ in range(passes):
        for prompt in PROMPTS:
            out = llm.generate([prompt], params, use_tqdm=False)[0].outputs[0]
            tokens += len(out.token_ids)
    seconds = time.perf_counter() - start
    after = llm.speculation_stats()["rounds_per_k"]
    assert isinstance(after, list)
    rounds = [a - b for a, b in zip(after, before, strict=True)]
    return {"max_tokens": max_tokens, "tokens_per_s": tokens / seconds, "rounds_per_k": rounds}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--max-tokens", nargs="+", type=int, default=[20, 96])
    parser.add_argument("--k", type=int, default=8, help="num_speculative_tokens")
    parser.add_argument("--passes", type=int, default=2)
    args = parser.parse_args()
    for max_tokens in args.max_tokens:
        spec = {"model": "specserve/demo-draft", "num_speculative_tokens": args.k}
        llm = LLM("specserve/demo-target", dtype="float32", speculative_config=spec)
        print(json.dumps(row(llm, max_tokens, args.passes)), flush=True)


if __name__ == "__main__":
    main()

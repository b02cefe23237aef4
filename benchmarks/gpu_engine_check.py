"""On a GPU: the engine sizes its KV caches from gpu_memory_utilization, runs
the Triton rejection sampler, and greedy speculation still equals target-only
greedy decoding (bundled pair, float32).

    python benchmarks/gpu_engine_check.py
"""

from __future__ import annotations

import json
import time

import torch

from specserve import LLM, SamplingParams

PROMPTS = [
    "def fibonacci(n):",
    "import os\nimport sys\n",
    "class Stack:\n    def push(self, item):",
    "# Parse the command line\n",
] * 4


def run(llm: LLM) -> tuple[list[list[int]], float]:
    params = SamplingParams(temperature=0, max_tokens=64)
    start = time.perf_counter()
    outs = llm.generate(PROMPTS, params, use_tqdm=False)
    seconds = time.perf_counter() - start
    ids = [o.outputs[0].token_ids for o in outs]
    return ids, sum(map(len, ids)) / seconds


def main() -> None:
    options = {"dtype": "float32", "gpu_memory_utilization": 0.3, "max_model_len": 1024}
    plain = LLM("specserve/demo-target", **options)
    spec = LLM(
        "specserve/demo-target",
        speculative_config={"model": "specserve/demo-draft", "num_speculative_tokens": 5},
        **options,
    )
    run(plain), run(spec)  # warm up
    plain_ids, plain_tps = run(plain)
    spec_ids, spec_tps = run(spec)
    report = {
        "device": torch.cuda.get_device_name(),
        "kv_blocks": spec.engine.workers.num_blocks,
        "sampler": spec.engine.workers.target.sample.__name__,
        "greedy_equal": plain_ids == spec_ids,
        "target_only_tokens_per_s": plain_tps,
        "speculative_tokens_per_s": spec_tps,
        "metrics": spec.speculation_stats(),
    }
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()

"""On a GPU: the compiled Triton path gives the PyTorch path's numbers, and
replayed CUDA graphs give the eager tokens.

    PYTHONPATH=. python benchmarks/gpu_forward_check.py --out check.json

1. Paged attention at the Qwen3-8B head shape (bf16) against a float32
   reference, for decode (split keys), verify and prefill rows in one batch.
2. Tiny random checkpoints of every family, float32: Triton logits against
   PyTorch logits for one ragged batch.
3. The bundled pair in bf16 through ``LLM``: greedy tokens with graphs equal
   those of ``enforce_eager=True``, with and without speculation.
"""

from __future__ import annotations

import os

# The test helpers below would otherwise turn on Triton's CPU interpreter.
os.environ["TRITON_INTERPRET"] = "0"

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from model_runtime.batch import SequenceChunk
from model_runtime.kernels.paged_attention import paged_attention
from model_runtime.ops.torch_ops import TorchOps
from model_runtime.random_checkpoint import save_random_checkpoint
from specserve import LLM, SamplingParams
from tests.conftest import ARCHITECTURES, random_tokens, runner_of
from tests.test_triton_kernels import attention_reference, ragged_pool

PROMPTS = ["def fibonacci(n):", "import os\nimport sys\n", "class Stack:", "# Parse\n"] * 4


def check_attention() -> dict[str, float]:
    torch.manual_seed(0)
    query_lens, seq_lens = [1, 1, 6, 6, 100], [700, 33, 518, 6, 300]
    results = {}
    for splits in (1, 8):
        pools = ragged_pool(seq_lens, 16, 8, 128, torch.bfloat16)
        pools = tuple(t.cuda() for t in pools)
        q = torch.randn(sum(query_lens), 32, 128, dtype=torch.bfloat16, device="cuda")
        starts = torch.tensor([0, *torch.tensor(query_lens).cumsum(0).tolist()], device="cuda")
        lens = torch.tensor(seq_lens, device="cuda")
        out = paged_attention(q, *pools, lens, starts, max(query_lens), 128**-0.5, None, splits)
        cpu = tuple(t.cpu() for t in pools)
        expected = attention_reference(q.cpu(), cpu, seq_lens, query_lens, None)
        results[f"splits_{splits}_max_abs_err"] = (out.float().cpu() - expected).abs().max().item()
    return results


def check_families(root: Path) -> dict[str, float]:
    results = {}
    for arch, overrides in ARCHITECTURES.items():
        folder = save_random_checkpoint(root / arch, arch, **overrides)
        logits = []
        for ops in ("triton", "torch"):
            runner = runner_of(
                folder, 64, block_size=4, dtype="float32", device="cuda", enforce_eager=True
            )
            if ops == "torch":
                runner.ops = TorchOps()
            runner.forward(
                [SequenceChunk(1, random_tokens(13, 1)), SequenceChunk(2, random_tokens(9, 2))]
            )
            batch = [
                SequenceChunk(3, random_tokens(11, 3), num_logits=2),
                SequenceChunk(1, [5]),
                SequenceChunk(2, random_tokens(6, 4), num_logits=6),
            ]
            logits.append(runner.forward(batch).float().cpu())
        results[arch] = (logits[0] - logits[1]).abs().max().item()
    return results


def greedy(llm: LLM) -> tuple[list[list[int]], float]:
    params = SamplingParams(temperature=0, max_tokens=64)
    llm.generate(PROMPTS[:2], params, use_tqdm=False)  # warm up
    start = time.perf_counter()
    outs = llm.generate(PROMPTS, params, use_tqdm=False)
    return [list(o.outputs[0].token_ids) for o in outs], time.perf_counter() - start


def check_graphs() -> dict[str, Any]:
    spec = {"model": "specserve/demo-draft", "num_speculative_tokens": 5}
    options: dict[str, Any] = {"dtype": "bfloat16", "gpu_memory_utilization": 0.3}
    runs = {}
    for name, extra in (
        ("eager", {"enforce_eager": True}),
        ("graphs", {}),
        ("eager_spec", {"enforce_eager": True, "speculative_config": spec}),
        ("graphs_spec", {"speculative_config": spec}),
    ):
        started = time.perf_counter()
        llm = LLM("specserve/demo-target", **options, **extra)
        built = time.perf_counter() - started
        runs[name] = (*greedy(llm), built)
        del llm
        torch.cuda.empty_cache()
    eager = runs["eager"][0]
    return {
        **{f"{name}_equal_to_eager": r[0] == eager for name, r in runs.items()},
        **{f"{name}_s": r[1] for name, r in runs.items()},
        **{f"{name}_startup_s": r[2] for name, r in runs.items()},
        "tokens": sum(map(len, eager)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", help="write the results as JSON here")
    args = parser.parse_args()
    report: dict[str, Any] = {"device": torch.cuda.get_device_name()}
    report["attention"] = check_attention()
    print(json.dumps(report), flush=True)
    with tempfile.TemporaryDirectory() as root:
        report["families_max_abs_diff"] = check_families(Path(root))
    print(json.dumps(report), flush=True)
    report["graphs"] = check_graphs()
    print(json.dumps(report, indent=1), flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()

"""Time one step of the model runtime: decode (1 token per sequence) and
verify (k+1 tokens per sequence), eager (the Triton kernels launched from
Python) and replayed from the runner's CUDA graphs, against the floor of
reading the weights once.

Random weights in the shapes of real checkpoints (no hub is needed):

    python benchmarks/step_time.py --shapes qwen3-0.6b qwen3-8b --batch 1 16 64 --out step_time.json

Needs a CUDA GPU. Prints a table; --out also writes every number as JSON.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable

import torch
from transformers import Qwen3Config

from benchmarks.shapes import SHAPES
from model_runtime.batch import SequenceChunk
from model_runtime.config import ModelConfig
from model_runtime.distributed import SINGLE_DEVICE
from model_runtime.kv_cache import PagedKVCache
from model_runtime.models.llama import Qwen3ForCausalLM
from model_runtime.runner import ModelRunner


def random_runner(
    shape: str, num_blocks: int, block_size: int, max_len: int, max_batch: int
) -> ModelRunner:
    hf = Qwen3Config(**SHAPES[shape], max_position_embeddings=max_len)
    config = ModelConfig.from_hf(hf, "Qwen3ForCausalLM")
    with torch.device("cuda"):
        model = Qwen3ForCausalLM(config, SINGLE_DEVICE, max_len)
    model.to(torch.bfloat16)
    model.rotary.float()
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.fill_(1.0) if "norm" in name else p.normal_(0.0, 0.02)
    cache = PagedKVCache(
        config.num_hidden_layers,
        config.num_key_value_heads,
        config.head_dim,
        num_blocks,
        block_size,
        torch.bfloat16,
        "cuda",
    )
    runner = ModelRunner(model.eval(), cache, max_len)
    runner.capture_graphs(max_batch)
    return runner


def cuda_ms(fn: Callable[[], object], iters: int = 20, repeats: int = 5) -> float:
    """Median over ``repeats`` of the mean device time of ``iters`` calls, in ms."""
    for _ in range(3):
        fn()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(iters):
            fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / iters)
    return statistics.median(times)


def measure(runner: ModelRunner, batch: int, new_tokens: int, context: int) -> dict[str, float]:
    gen = torch.Generator().manual_seed(batch)
    vocab = runner.vocab_size
    seqs = range(batch)
    runner.forward(
        [
            SequenceChunk(s, torch.randint(0, vocab, (context,), generator=gen).tolist())
            for s in seqs
        ]
    )
    chunks = [
        SequenceChunk(
            s, torch.randint(0, vocab, (new_tokens,), generator=gen).tolist(), num_logits=new_tokens
        )
        for s in seqs
    ]

    def rewind() -> None:
        for s in seqs:
            runner.truncate(s, context)

    with torch.inference_mode():
        prepared = runner.prepare(chunks)
        eager_out = runner.execute(prepared).float()
        eager = cuda_ms(lambda: runner.execute(prepared))
        rewind()
        graph_out = runner.forward(chunks).float()
        rewind()
        rel = ((graph_out - eager_out).norm() / eager_out.norm()).item()

        def step() -> None:
            runner.forward(chunks)
            rewind()

        # Device time per step when the host runs ahead, and the wall time of
        # a step that waits for its logits (what a worker's step costs).
        replay = cuda_ms(step)
        walls = []
        for _ in range(30):
            t0 = time.perf_counter()
            step()
            torch.cuda.synchronize()
            walls.append((time.perf_counter() - t0) * 1e3)
    for s in seqs:
        runner.free(s)
    return {
        "eager_ms": eager,
        "graph_ms": replay,
        "step_wall_ms": statistics.median(walls),
        "graph_vs_eager_rel_err": rel,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shapes", nargs="+", default=list(SHAPES), choices=list(SHAPES))
    parser.add_argument("--batch", nargs="+", type=int, default=[1, 16, 64])
    parser.add_argument("--context", type=int, default=512)
    parser.add_argument("--k", type=int, default=5, help="drafts verified per sequence")
    parser.add_argument(
        "--bandwidth-tbs", type=float, default=4.08, help="measured copy bandwidth, for the floor"
    )
    parser.add_argument("--out", help="write the results as JSON here")
    args = parser.parse_args()

    rows = []
    for shape in args.shapes:
        block_size = 16
        max_len = args.context + args.k + 16
        blocks = max(args.batch) * (-(-max_len // block_size)) + 8
        runner = random_runner(shape, blocks, block_size, max_len, max(args.batch))
        weight_bytes = sum(p.numel() * p.element_size() for p in runner.model.parameters())
        floor_ms = weight_bytes / (args.bandwidth_tbs * 1e12) * 1e3
        for batch in args.batch:
            for kind, new_tokens in (("decode", 1), ("verify", args.k + 1)):
                r = measure(runner, batch, new_tokens, args.context)
                rows.append(
                    {
                        "shape": shape,
                        "step": kind,
                        "batch": batch,
                        "context": args.context,
                        "tokens_per_seq": new_tokens,
                        "weight_gb": weight_bytes / 1e9,
                        "floor_ms": floor_ms,
                        **r,
                    }
                )
                print(json.dumps(rows[-1]), flush=True)
        del runner
        torch.cuda.empty_cache()

    print(f"\n{torch.cuda.get_device_name()}, torch {torch.__version__}, context {args.context}")
    print(f"{'shape':<11}{'step':<8}{'batch':>6}{'floor':>8}{'eager':>9}{'graph':>9}{'wall':>8}")
    for r in rows:
        print(
            f"{r['shape']:<11}{r['step']:<8}{r['batch']:>6}{r['floor_ms']:>8.2f}"
            f"{r['eager_ms']:>9.2f}{r['graph_ms']:>9.2f}{r['step_wall_ms']:>8.2f}"
        )
    if args.out:
        with open(args.out, "w") as f:
            json.dump(
                {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "rows": rows},
                f,
                indent=1,
            )


if __name__ == "__main__":
    main()

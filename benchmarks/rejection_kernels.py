"""Check the Triton rejection-sampling kernels against the PyTorch reference on
a GPU, and time both at serving sizes, next to the floor of reading their
inputs once.

    python benchmarks/rejection_kernels.py --batch 64 256 --k 5 --vocab 151936 --out kernels.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable

import torch

from target_worker.rejection_sampler import (
    RejectionInputs,
    densify,
    rejection_sample_reference,
    rejection_sample_triton,
)


def make_inputs(batch: int, k: int, vocab: int, greedy_share: float, seed: int) -> RejectionInputs:
    gen = torch.Generator(device="cuda").manual_seed(seed)
    rows = batch * (k + 1)
    logits = torch.randn(rows, vocab, device="cuda", generator=gen) * 3
    target = torch.softmax(logits, -1)
    draft_rows = torch.tensor(
        [b * (k + 1) + i for b in range(batch) for i in range(k)], device="cuda"
    )
    q_logits = logits[draft_rows] + torch.randn(batch * k, vocab, device="cuda", generator=gen)
    top, ids = torch.softmax(q_logits, -1).topk(32, dim=-1)  # what the draft ships
    q = densify(ids, top / top.sum(-1, keepdim=True), vocab)
    drafts = ids.gather(1, torch.multinomial(top, 1, generator=gen)).squeeze(1)
    return RejectionInputs(
        target_probs=target,
        target_argmax=logits.argmax(-1),
        draft_ids=drafts,
        draft_probs=q,
        num_drafts=[k] * batch,
        is_greedy=torch.rand(batch, device="cuda", generator=gen) < greedy_share,
        uniforms=torch.rand(batch * k, dtype=torch.float64, device="cuda", generator=gen),
        noise=torch.empty(batch, vocab, device="cuda").exponential_(generator=gen),
    )


def time_ms(
    fn: Callable[[RejectionInputs], torch.Tensor], inputs: RejectionInputs, repeats: int
) -> float:
    """Median wall time of whole calls (host work included), in ms."""
    fn(inputs)
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn(inputs)
        torch.cuda.synchronize()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", nargs="+", type=int, default=[64, 256])
    parser.add_argument("--k", type=int, default=5)
    parser.add_argument("--vocab", type=int, default=151936)
    parser.add_argument("--bandwidth-tbs", type=float, default=4.08)
    parser.add_argument("--checks", type=int, default=5, help="random inputs compared per size")
    parser.add_argument("--out")
    args = parser.parse_args()
    rows = []
    for batch in args.batch:
        mismatches = 0
        for seed in range(args.checks):
            inputs = make_inputs(batch, args.k, args.vocab, greedy_share=0.25, seed=seed)
            same = torch.equal(
                rejection_sample_triton(inputs).cpu(), rejection_sample_reference(inputs).cpu()
            )
            mismatches += not same
        inputs = make_inputs(batch, args.k, args.vocab, greedy_share=0.0, seed=99)
        triton_ms = time_ms(rejection_sample_triton, inputs, 50)
        reference_ms = time_ms(rejection_sample_reference, inputs, 3)
        # Each kernel input read once: p [R, V], q [T, V], noise [B, V] (float32).
        r, t = batch * (args.k + 1), batch * args.k
        floor_ms = (r + t + batch) * args.vocab * 4 / (args.bandwidth_tbs * 1e12) * 1e3
        rows.append(
            {
                "batch": batch,
                "k": args.k,
                "vocab": args.vocab,
                "random_inputs_compared": args.checks,
                "mismatches": mismatches,
                "triton_ms": triton_ms,
                "reference_ms": reference_ms,
                "floor_ms": floor_ms,
            }
        )
        print(json.dumps(rows[-1]), flush=True)
    print(f"\n{torch.cuda.get_device_name()}, torch {torch.__version__}")
    print(
        f"{'batch':>6}{'k':>3}{'vocab':>8}{'mismatch':>9}{'floor':>8}{'triton':>9}{'reference':>11}"
    )
    for r in rows:
        print(
            f"{r['batch']:>6}{r['k']:>3}{r['vocab']:>8}{r['mismatches']:>9}{r['floor_ms']:>8.3f}"
            f"{r['triton_ms']:>9.3f}{r['reference_ms']:>11.1f}"
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

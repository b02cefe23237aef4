"""Speculation as three processes on one GPU (a router, a draft worker and a
target worker, gRPC on loopback): speedup over target-only against k and
against concurrency, in the JSON form of speculative_gpu.py (plot it with
plot_speculative.py).

    PYTHONPATH=. python benchmarks/speculative_grpc.py --target /tmp/ck/pair-target \
        --draft /tmp/ck/pair-draft --out speculative_grpc.json

The workers start once: the target, the draft, and the draft's checkpoint
served as a target of its own (for c, the draft's cost decoding alone). For
each setting a router starts over them: target-only (no draft workers), k
pinned to each of ``--ks`` (``--no-adaptive-k --no-overlap``), adaptive k
(``--no-overlap``), and two micro-batches in flight at k = ``--overlap-k``.
Each serves greedy requests of random prompts at every concurrency, that
many Generate streams at a time; acceptance comes from the router's
Describe. ``--text`` sends prompts of code instead (for the bundled pair,
which was trained on it). Needs a GPU to mean anything, runs anywhere.
"""

from __future__ import annotations

import argparse
import json
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import asdict
from pathlib import Path
from typing import Any

import grpc
import torch

from benchmarks.prompts import prompts
from benchmarks.speculative_gpu import K_MAX, counts_since
from protos import common_pb2 as pb
from protos import draft_worker_pb2_grpc, router_pb2_grpc, target_worker_pb2_grpc
from protos import router_pb2 as rpb
from protos.fields import worker_info_from_proto
from router.wire import stats_from_info
from specserve.launch import service


def request(prompt: dict[str, Any], max_tokens: int) -> rpb.GenerateRequest:
    message = rpb.GenerateRequest(max_tokens=max_tokens, ignore_eos=True)
    message.token_ids.ids.extend(prompt["prompt_token_ids"])
    message.sampling.temperature = 0
    return message


def generate_all(
    stub: router_pb2_grpc.RouterStub, asked: list[dict[str, Any]], max_tokens: int
) -> tuple[float, list[list[int]]]:
    """Tokens/s of every prompt's stream at once, and each one's tokens."""

    def one(prompt: dict[str, Any]) -> list[int]:
        responses = stub.Generate(request(prompt, max_tokens), timeout=600)
        return [t for r in responses for t in r.token_ids]

    start = time.perf_counter()
    with ThreadPoolExecutor(len(asked)) as pool:
        tokens = list(pool.map(one, asked))
    return sum(map(len, tokens)) / (time.perf_counter() - start), tokens


def forwards(workers: dict[str, str]) -> dict[str, dict[str, float]]:
    """How each worker's forwards have run so far (replayed, captured, eager,
    and the seconds of the last two: where a kernel compiles)."""
    stubs = {
        "target": target_worker_pb2_grpc.TargetWorkerStub,
        "draft": draft_worker_pb2_grpc.DraftWorkerStub,
    }
    counts = {}
    for name, address in workers.items():
        with grpc.insecure_channel(address) as channel:
            reply = stubs[name](channel).Describe(pb.DescribeRequest(), timeout=30)
        counts[name] = asdict(worker_info_from_proto(reply).forwards)
    return counts


def router_rows(
    args: argparse.Namespace, router_args: list[str], label: int | str, workers: dict[str, str]
) -> tuple[list[dict[str, Any]], list[list[list[int]]]]:
    """One router over ``workers`` (name -> address): a row per concurrency,
    with how the workers' forwards ran in it, and the tokens."""
    rows, outputs = [], []
    with (
        service("router", *router_args, "--disable-log-stats") as (address, _),
        grpc.insecure_channel(address) as channel,
    ):
        stub = router_pb2_grpc.RouterStub(channel)
        for batch in args.concurrency:
            generate_all(stub, prompts(batch, 2, args.text), 8)  # warm up this batch's shapes
            before = stats_from_info(stub.Describe(rpb.DescribeRouterRequest())).speculation
            steps = forwards(workers)
            rate, tokens = generate_all(stub, prompts(batch, 1, args.text), args.max_tokens)
            steps = counts_since(steps, forwards(workers))
            after = stats_from_info(stub.Describe(rpb.DescribeRouterRequest())).speculation
            drafted = after.num_draft_tokens - before.num_draft_tokens
            accepted = after.num_accepted_tokens - before.num_accepted_tokens
            rounds = [a - b for a, b in zip(after.rounds_per_k, before.rounds_per_k, strict=True)]
            rows.append(
                {"k": label, "batch": batch, "tokens_per_s": rate,
                 "acceptance": accepted / drafted if drafted else None, "rounds_per_k": rounds,
                 "steps": steps}
            )  # fmt: skip
            outputs.append(tokens)
            print(json.dumps(rows[-1]), flush=True)
    return rows, outputs


def start_workers(args: argparse.Namespace, stack: ExitStack) -> tuple[str, str, str]:
    """The target, the draft, and the draft as a target: their addresses."""
    common = ["--dtype", "bfloat16", "--max-model-len", "1024", "--num-kv-blocks", "2048"]
    common += ["--max-num-seqs", str(max(args.concurrency))]
    started = []
    for command, model, extra in (
        ("target-worker", args.target, ["--capture-query-len", str(K_MAX + 1)]),
        ("draft-worker", args.draft, ["--capture-query-len", "2"]),
        ("target-worker", args.draft, []),
    ):
        address, _ = stack.enter_context(service(command, "--model", model, *common, *extra))
        started.append(address)
    return started[0], started[1], started[2]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--target", required=True)
    parser.add_argument("--draft", required=True)
    parser.add_argument("--concurrency", nargs="+", type=int, default=[1, 4, 16, 64])
    parser.add_argument("--max-tokens", type=int, default=96)
    parser.add_argument("--ks", nargs="+", type=int, default=list(range(1, K_MAX + 1)))
    parser.add_argument("--overlap-k", type=int, default=4)
    parser.add_argument("--text", action="store_true", help="prompts of code, not random ids")
    parser.add_argument("--name", default="pair", help="the pair's name in the report")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    device = torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"
    report: dict[str, Any] = {"device": device, "args": vars(args), "three_processes": True}
    with ExitStack() as stack:
        target, draft, draft_as_target = start_workers(args, stack)
        rows, plain = router_rows(args, ["--target-workers", target], 0, {"target": target})
        report["target_only"] = {r["batch"]: r["tokens_per_s"] for r in rows}
        alone, _ = router_rows(
            args, ["--target-workers", draft_as_target], "draft", {"target": draft_as_target}
        )
        report["draft_only"] = {r["batch"]: r["tokens_per_s"] for r in alone}
        spec = ["--target-workers", target, "--draft-workers", draft]
        settings: list[tuple[int | str, list[str]]] = [
            (k, ["--num-speculative-tokens", str(k), "--no-adaptive-k", "--no-overlap"])
            for k in args.ks
        ]
        settings += [("adaptive", ["--num-speculative-tokens", str(K_MAX), "--no-overlap"])]
        settings += [("overlap", ["--num-speculative-tokens", str(args.overlap_k), "--overlap"])]
        report["pairs"] = [{"wanted_acceptance": None, "name": args.name, "rows": rows}]
        for label, extra in settings:
            more, outputs = router_rows(
                args, [*spec, *extra], label, {"target": target, "draft": draft}
            )
            for row, out, base in zip(more, outputs, plain, strict=True):
                same = [a == b for a, b in zip(out, base, strict=True)]
                row["same_tokens_as_k0"] = sum(same) / len(same)
            rows += more
            if args.out:  # after every setting: a run cut short keeps what it measured
                args.out.write_text(json.dumps(report, indent=1, default=str))
    print(json.dumps({k: v for k, v in report.items() if k != "pairs"}, indent=1, default=str))


if __name__ == "__main__":
    main()

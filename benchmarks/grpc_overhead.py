"""What the gRPC transport costs: the router's overhead per round, and
end-to-end tokens/s in one process against three processes on loopback.

    python benchmarks/grpc_overhead.py --out grpc_overhead.json

On GPUs, with the draft and target workers on GPUs of their own (their
processes see only ``--draft-gpu`` and ``--target-gpu``; the in-process
engine runs on the first GPU):

    PYTHONPATH=. python benchmarks/grpc_overhead.py --target /ckpt/qwen3-8b \
        --draft /ckpt/qwen3-0.6b --k 5 --dtype bfloat16 --device cuda \
        --draft-gpu 0 --target-gpu 1 --out grpc_overhead_gpu.json

Per round, at batch B (every sequence decoding, greedy; by default the bundled
pair on the CPU, k = 4):
- model: time inside the workers' propose + verify calls (in-process engine);
- in-process round: the whole engine step with in-process workers;
- gRPC round: the same step with the workers in two other processes.
Router overhead = (gRPC round - model) / gRPC round: scheduling, serialisation
and RPC together. End to end: generate tokens/s for 1 and 16 concurrent
requests, speculation on and off.
"""

from __future__ import annotations

import argparse
import json
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import replace
from functools import partial
from typing import Any

import grpc
import torch

from protos import common_pb2, router_pb2, router_pb2_grpc
from router.config import EngineConfig, SpeculativeConfig
from router.engine import LLMEngine
from router.params import SamplingParams
from router.workers import Workers, build_remote_workers
from specserve.launch import service
from specserve.local_workers import build_local_workers


def worker_args(args: argparse.Namespace) -> tuple[str, ...]:
    return (
        "--dtype",
        args.dtype,
        "--device",
        args.device,
        "--max-model-len",
        str(args.max_model_len),
        "--num-kv-blocks",
        str(args.num_kv_blocks),
    )


def gpu_env(gpu: str | None) -> dict[str, str] | None:
    return None if gpu is None else {"CUDA_VISIBLE_DEVICES": gpu}


class Timed:
    """Wraps a worker and adds up the time spent inside its batch calls."""

    def __init__(self, worker: Any):
        self.worker, self.seconds = worker, 0.0

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.worker, name)
        if name not in ("propose", "verify", "prefill"):
            return attr

        def timed(*args: Any) -> Any:
            start = time.perf_counter()
            try:
                return attr(*args)
            finally:
                self.seconds += time.perf_counter() - start

        return timed


def engine_local(args: argparse.Namespace) -> tuple[LLMEngine, Workers]:
    """The timed in-process engine, and its workers (to build more engines over)."""
    config = EngineConfig.of(
        args.target,
        SpeculativeConfig(args.draft, args.k, adaptive_k=False),
        dtype=args.dtype,
        device=args.device,
        max_model_len=args.max_model_len,
        num_kv_blocks=args.num_kv_blocks,
        log_stats_interval_s=None,
    )
    workers = build_local_workers(config)
    workers.targets = [Timed(w) for w in workers.targets]  # type: ignore[misc]
    workers.drafts = [Timed(w) for w in workers.drafts]  # type: ignore[misc]
    return LLMEngine(config, workers), workers


def round_ms(engine: LLMEngine, batch: int, rounds: int = 10) -> tuple[float, float]:
    """(mean step ms, mean ms inside the workers) with ``batch`` sequences decoding."""
    params = SamplingParams(temperature=0, max_tokens=1000, ignore_eos=True)
    for i in range(batch):
        engine.add_request(f"b{batch}-{i}", engine.tokenizer.encode(f"def f{i}(x):"), params)
    for _ in range(3):
        engine.step()  # admit, prefill, warm up
    timers = [w for w in (*engine.workers.targets, *engine.workers.drafts) if isinstance(w, Timed)]
    for t in timers:
        t.seconds = 0.0
    start = time.perf_counter()
    for _ in range(rounds):
        engine.step()
    total = (time.perf_counter() - start) / rounds * 1e3
    inside = sum(t.seconds for t in timers) / rounds * 1e3
    for seq in list(engine.running):
        engine.abort(seq.request_id)
    return total, inside


def tokens_per_s(generate_one: Callable[[int], int], concurrency: int, requests: int) -> float:
    start = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as pool:
        tokens = sum(pool.map(generate_one, range(requests)))
    return tokens / (time.perf_counter() - start)


def in_process_tokens_per_s(
    engine: LLMEngine, concurrency: int, requests: int, max_tokens: int
) -> float:
    """As the gRPC clients load the router: ``concurrency`` requests in flight,
    a new one added as soon as one finishes."""
    params = SamplingParams(temperature=0, max_tokens=max_tokens, ignore_eos=True)
    waiting = deque(range(requests))
    in_flight = 0
    start = time.perf_counter()
    while waiting or engine.has_unfinished():
        while waiting and in_flight < concurrency:
            i = waiting.popleft()
            engine.add_request(str(i), engine.tokenizer.encode(f"def f{i}(x):"), params)
            in_flight += 1
        in_flight -= len(engine.step())
    return requests * max_tokens / (time.perf_counter() - start)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", nargs="+", type=int, default=[1, 16, 64])
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--target", default="specserve/demo-target")
    parser.add_argument("--draft", default="specserve/demo-draft")
    parser.add_argument("--k", type=int, default=4)
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--max-model-len", type=int, default=1024)
    parser.add_argument("--num-kv-blocks", type=int, default=4096)
    parser.add_argument("--draft-gpu", help="CUDA_VISIBLE_DEVICES of the draft worker process")
    parser.add_argument("--target-gpu", help="CUDA_VISIBLE_DEVICES of the target worker process")
    parser.add_argument("--out")
    return parser.parse_args()


def start_workers(args: argparse.Namespace, stack: ExitStack) -> tuple[str, str]:
    """A target and a draft worker process (stopped when ``stack`` closes)."""
    addresses = []
    for command, model, gpu in (
        ("target-worker", args.target, args.target_gpu),
        ("draft-worker", args.draft, args.draft_gpu),
    ):
        address, _ = stack.enter_context(
            service(command, "--model", model, *worker_args(args), env=gpu_env(gpu))
        )
        addresses.append(address)
    return addresses[0], addresses[1]


def measure_rounds(
    args: argparse.Namespace, local: LLMEngine, target: str, draft: str
) -> list[dict[str, Any]]:
    """Round time in process and over gRPC, for each batch size."""
    config = EngineConfig.of(
        args.target,
        SpeculativeConfig(args.draft, args.k, adaptive_k=False),
        log_stats_interval_s=None,
    )
    remote = LLMEngine(config, build_remote_workers([target], [draft]))
    rows = []
    for batch in args.batch:
        local_ms, model_ms = round_ms(local, batch)
        grpc_ms, _ = round_ms(remote, batch)
        row = {
            "batch": batch,
            "model_ms": model_ms,
            "in_process_round_ms": local_ms,
            "grpc_round_ms": grpc_ms,
            "router_overhead_fraction": (grpc_ms - model_ms) / grpc_ms,
            "acceptance_rate": local.metrics.acceptance_rate,
        }
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


def measure_end_to_end(
    args: argparse.Namespace,
    local: LLMEngine,
    local_workers: Workers,
    addresses: tuple[str, str],
    stack: ExitStack,
) -> list[dict[str, Any]]:
    """Tokens/s through a router process and in process, with and without
    speculation and overlap, at 1 and 16 requests in flight."""
    (target, draft), rows = addresses, []
    for speculate, overlap in ((False, False), (True, False), (True, True)):
        router_args = ["--target-workers", target, "--num-speculative-tokens", str(args.k)]
        router_args += ["--overlap" if overlap else "--no-overlap"]
        router_args += ["--draft-workers", draft] if speculate else []
        router, _ = stack.enter_context(service("router", *router_args))
        # The same in-process workers, with speculation or without.
        engine = LLMEngine(
            replace(
                local.config,
                speculative=local.config.speculative if speculate else None,
                overlap=overlap,
            ),
            replace(local_workers, drafts=local_workers.drafts if speculate else []),
        )
        stub = router_pb2_grpc.RouterStub(stack.enter_context(grpc.insecure_channel(router)))
        over_grpc = partial(generate_over_grpc, stub, args.max_tokens)
        for concurrency in (1, 16):
            requests = concurrency * 2
            row = {
                "speculation": speculate,
                "overlap": overlap,
                "concurrency": concurrency,
                "in_process_tokens_per_s": in_process_tokens_per_s(
                    engine, concurrency, requests, args.max_tokens
                ),
                "three_processes_tokens_per_s": tokens_per_s(over_grpc, concurrency, requests),
            }
            rows.append(row)
            print(json.dumps(row), flush=True)
    return rows


def generate_over_grpc(stub: router_pb2_grpc.RouterStub, max_tokens: int, i: int) -> int:
    """Tokens of one greedy completion of prompt ``i`` through the router."""
    request = router_pb2.GenerateRequest(
        text=f"def f{i}(x):",
        max_tokens=max_tokens,
        ignore_eos=True,
        sampling=common_pb2.SamplingParams(temperature=0),
    )
    return sum(len(r.token_ids) for r in stub.Generate(request, timeout=600))


def print_summary(result: dict[str, Any]) -> None:
    print(f"\nrounds (k={result['k']}, {result['device']}, {result['threads']} threads):")
    print(f"{'batch':>6}{'model':>9}{'in-proc':>9}{'gRPC':>9}{'overhead':>10}")
    for r in result["rounds"]:
        print(
            f"{r['batch']:>6}{r['model_ms']:>9.1f}{r['in_process_round_ms']:>9.1f}"
            f"{r['grpc_round_ms']:>9.1f}{r['router_overhead_fraction']:>10.0%}"
        )
    print("end to end tokens/s:")
    for r in result["end_to_end"]:
        print(
            f"  speculation {r['speculation']!s:<6} overlap {r['overlap']!s:<6} "
            f"concurrency {r['concurrency']:>3}: "
            f"in-process {r['in_process_tokens_per_s']:>7.1f}, "
            f"three processes {r['three_processes_tokens_per_s']:>7.1f}"
        )


def main() -> None:
    args = parse_args()
    result: dict[str, Any] = {
        "threads": torch.get_num_threads(),
        "k": args.k,
        "options": vars(args),
        "device": torch.cuda.get_device_name() if args.device == "cuda" else "cpu",
    }
    local, local_workers = engine_local(args)
    with ExitStack() as stack:
        addresses = start_workers(args, stack)
        result["rounds"] = measure_rounds(args, local, *addresses)
        result["end_to_end"] = measure_end_to_end(args, local, local_workers, addresses, stack)
    print_summary(result)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()

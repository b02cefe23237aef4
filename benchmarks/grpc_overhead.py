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
from typing import Any

import grpc
import torch

from protos import common_pb2, router_pb2, router_pb2_grpc
from router.config import EngineConfig, SpeculativeConfig
from router.engine import LLMEngine
from router.launch import service
from router.params import SamplingParams
from router.workers import Workers, build_local_workers, build_remote_workers


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
    config = EngineConfig(
        model=args.target,
        dtype=args.dtype,
        device=args.device,
        max_model_len=args.max_model_len,
        speculative=SpeculativeConfig(args.draft, args.k),
        num_kv_blocks_override=args.num_kv_blocks,
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


def main() -> None:
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
    args = parser.parse_args()
    k = args.k
    result: dict[str, Any] = {
        "threads": torch.get_num_threads(),
        "k": k,
        "options": vars(args),
        "device": torch.cuda.get_device_name() if args.device == "cuda" else "cpu",
        "rounds": [],
    }
    local, local_workers = engine_local(args)
    with ExitStack() as stack:
        target, _ = stack.enter_context(
            service(
                "target-worker",
                "--model",
                args.target,
                *worker_args(args),
                env=gpu_env(args.target_gpu),
            )
        )
        draft, _ = stack.enter_context(
            service(
                "draft-worker",
                "--model",
                args.draft,
                *worker_args(args),
                env=gpu_env(args.draft_gpu),
            )
        )
        remote = LLMEngine(
            EngineConfig(
                model=args.target,
                speculative=SpeculativeConfig(args.draft, k),
                log_stats_interval_s=None,
            ),
            build_remote_workers([target], [draft], k),
        )
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
            result["rounds"].append(row)
            print(json.dumps(row), flush=True)

        result["end_to_end"] = []
        for speculate, overlap in ((False, False), (True, False), (True, True)):
            router_args = [
                "--target-workers",
                target,
                "--num-speculative-tokens",
                str(k),
                "--overlap" if overlap else "--no-overlap",
            ]
            if speculate:
                router_args += ["--draft-workers", draft]
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
            channel = stack.enter_context(grpc.insecure_channel(router))
            stub = router_pb2_grpc.RouterStub(channel)

            def over_grpc(i: int, stub: router_pb2_grpc.RouterStub = stub) -> int:
                request = router_pb2.GenerateRequest(
                    text=f"def f{i}(x):",
                    max_tokens=args.max_tokens,
                    ignore_eos=True,
                    sampling=common_pb2.SamplingParams(temperature=0),
                )
                return sum(len(r.token_ids) for r in stub.Generate(request, timeout=600))

            for concurrency in (1, 16):
                requests = concurrency * 2
                local_tps = in_process_tokens_per_s(engine, concurrency, requests, args.max_tokens)
                row = {
                    "speculation": speculate,
                    "overlap": overlap,
                    "concurrency": concurrency,
                    "in_process_tokens_per_s": local_tps,
                    "three_processes_tokens_per_s": tokens_per_s(over_grpc, concurrency, requests),
                }
                result["end_to_end"].append(row)
                print(json.dumps(row), flush=True)
    print(f"\nrounds (k={k}, {result['device']}, {result['threads']} threads):")
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
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()

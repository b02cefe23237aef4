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
- gRPC round: the same step with the workers in two other processes, split
  into the time the two RPCs' batches are in flight (the workers' calls,
  their conversions, the transport) and the router's own work (the rest:
  scheduling, building and reading the messages, bookkeeping). What the
  router does while a batch is in flight (it prepares the verify batch while
  the draft worker drafts) is off the round's path and not counted there;
  ``router_all_ms`` counts it too.
Router overhead = the router's own work / gRPC round; transport overhead =
(gRPC round - model) / gRPC round: everything the three processes add. End
to end (unless --rounds-only): generate tokens/s for 1 and 16 concurrent
requests, speculation on and off.
"""

from __future__ import annotations

import argparse
import json
import time
from contextlib import ExitStack
from typing import Any

import torch

from benchmarks.grpc_end_to_end import measure_end_to_end
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

    def __init__(self, worker: Any, calls: tuple[str, ...] = ("propose", "verify", "prefill")):
        self.worker, self.calls, self.seconds = worker, calls, 0.0

    @property
    def blocked(self) -> float:
        """An in-process call blocks the router for all of its time."""
        return self.seconds

    def reset(self) -> None:
        self.seconds = 0.0

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.worker, name)
        if name not in self.calls:
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


class TimedStream:
    """Wraps a gRPC client's batch stream and adds up, per batch, the time
    from sending it to its result (``seconds``: the batch is in flight, so
    what the router does meanwhile is off the round's path) and the time the
    router spent blocked sending and waiting (``blocked``)."""

    def __init__(self, stream: Any):
        self.stream, self.seconds, self.blocked = stream, 0.0, 0.0

    def reset(self) -> None:
        self.seconds = self.blocked = 0.0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.stream, name)

    def start(self, message: Any) -> Any:
        sent = time.perf_counter()
        wait = self.stream.start(message)
        self.blocked += time.perf_counter() - sent

        def result() -> Any:
            start = time.perf_counter()
            try:
                return wait()
            finally:
                end = time.perf_counter()
                self.blocked += end - start
                self.seconds += end - sent

        return result

    def call(self, message: Any) -> Any:
        return self.start(message)()


def timed_rpcs(workers: Workers) -> list[TimedStream]:
    """Time the batch streams of gRPC worker clients: the round trips alone."""
    streams = []
    for client in (*workers.targets, *workers.drafts):
        for name in ("_propose", "_verify"):
            if hasattr(client, name):
                streams.append(TimedStream(getattr(client, name)))
                setattr(client, name, streams[-1])
    return streams


def round_ms(
    engine: LLMEngine, batch: int, timers: list[Any], rounds: int = 10
) -> tuple[float, float, float]:
    """Mean ms of a step with ``batch`` sequences decoding, inside ``timers``
    (in flight, for streams), and blocked in them."""
    params = SamplingParams(temperature=0, max_tokens=1000, ignore_eos=True)
    for i in range(batch):
        engine.add_request(f"b{batch}-{i}", engine.tokenizer.encode(f"def f{i}(x):"), params)
    for _ in range(3):
        engine.step()  # admit, prefill, warm up
    for t in timers:
        t.reset()
    start = time.perf_counter()
    for _ in range(rounds):
        engine.step()
    total = (time.perf_counter() - start) / rounds * 1e3
    inside = sum(t.seconds for t in timers) / rounds * 1e3
    blocked = sum(t.blocked for t in timers) / rounds * 1e3
    for seq in list(engine.running):
        engine.abort(seq.request_id)
    return total, inside, blocked


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", nargs="+", type=int, default=[1, 16, 64])
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--target", default="specserve/demo-target")
    parser.add_argument("--draft", default="specserve/demo-draft")
    parser.add_argument("--k", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=30, help="timed rounds per batch size")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--max-model-len", type=int, default=1024)
    parser.add_argument("--num-kv-blocks", type=int, default=4096)
    parser.add_argument("--draft-gpu", help="CUDA_VISIBLE_DEVICES of the draft worker process")
    parser.add_argument("--target-gpu", help="CUDA_VISIBLE_DEVICES of the target worker process")
    parser.add_argument("--rounds-only", action="store_true", help="skip the end-to-end runs")
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
    remote_workers = build_remote_workers([target], [draft])
    remote, rpcs = LLMEngine(config, remote_workers), timed_rpcs(remote_workers)
    local_timers = [*local.workers.targets, *local.workers.drafts]
    rows = []
    for batch in args.batch:
        local_ms, model_ms, _ = round_ms(local, batch, local_timers, args.rounds)
        grpc_ms, rpc_ms, blocked_ms = round_ms(remote, batch, rpcs, args.rounds)
        row = {
            "batch": batch,
            "model_ms": model_ms,
            "in_process_round_ms": local_ms,
            "grpc_round_ms": grpc_ms,
            "rpc_ms": rpc_ms,
            "router_own_ms": grpc_ms - rpc_ms,
            # Including what it did while a batch was in flight (off the path
            # as long as the worker took longer):
            "router_all_ms": grpc_ms - blocked_ms,
            "router_overhead_fraction": (grpc_ms - rpc_ms) / grpc_ms,
            "transport_overhead_fraction": (grpc_ms - model_ms) / grpc_ms,
            "acceptance_rate": local.metrics.acceptance_rate,
        }
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


def print_summary(result: dict[str, Any]) -> None:
    print(f"\nrounds (k={result['k']}, {result['device']}, {result['threads']} threads):")
    print(f"{'batch':>6}{'model':>9}{'in-proc':>9}{'gRPC':>9}{'router':>9}{'transport':>10}")
    for r in result["rounds"]:
        print(
            f"{r['batch']:>6}{r['model_ms']:>9.1f}{r['in_process_round_ms']:>9.1f}"
            f"{r['grpc_round_ms']:>9.1f}{r['router_overhead_fraction']:>9.0%}"
            f"{r['transport_overhead_fraction']:>10.0%}"
        )
    print("end to end tokens/s:")
    for r in result.get("end_to_end", []):
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
        if not args.rounds_only:
            result["end_to_end"] = measure_end_to_end(args, local, local_workers, addresses, stack)
    print_summary(result)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()

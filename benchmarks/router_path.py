"""Where the router's own time goes on a round's path over gRPC: the time in
each of its calls while no batch is in flight (the draft and target workers
in two other processes), per round, at each batch size.

    PYTHONPATH=. python benchmarks/router_path.py --target T --draft D --k 4 \
        --batch 16 64 --rounds 150 [--pin]

The time a batch is in flight is counted from before its sending (gRPC's
sending thread needs the GIL) to its result, as in grpc_overhead.py; the
rest of a step is the router's, split by the innermost call it was in.
``--pin`` keeps the router on CPU 0 and the workers on CPU 1 (on a small
CPU machine the workers' threads otherwise run on the router's core).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import subprocess
import time
from collections import defaultdict
from contextlib import ExitStack
from typing import Any

from benchmarks.grpc_overhead import start_workers
from protos import convert
from router import rounds
from router.batch_stream import BatchStream
from router.config import EngineConfig, SpeculativeConfig
from router.drafting import Drafter
from router.engine import LLMEngine
from router.params import SamplingParams
from router.verifying import Verifier
from router.workers import build_remote_workers

# The calls timed apart (those a version lacks are left out).
CALLS = {
    convert: [
        "propose_batch_to_proto",
        "propose_result_from_proto",
        "verify_batch_to_proto",
        "verify_result_from_proto",
    ],
    rounds: ["cut_next"],
    Drafter: ["send", "send_next", "receive", "_plan", "_apply"],
    Verifier: ["prepare", "send", "_add_drafts"],
    rounds.Rounds: ["run"],
    LLMEngine: ["step", "_round", "_apply_verify"],
}


class PathClock:
    """Adds up, by the innermost timed call, the time no batch is in flight."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.in_flight = 0
        self.seconds: dict[str, float] = defaultdict(float)
        self._last = time.perf_counter()

    def tick(self) -> None:
        now = time.perf_counter()
        if not self.in_flight:
            self.seconds[self.calls[-1] if self.calls else "-"] += now - self._last
        self._last = now

    def wrap(self, owner: Any, name: str) -> None:
        call = getattr(owner, name, None)
        if call is None:
            return
        label = f"{owner.__name__.rsplit('.', 1)[-1]}.{name}"

        @functools.wraps(call)
        def timed(*args: Any, **kwargs: Any) -> Any:
            self.tick()
            self.calls.append(label)
            try:
                return call(*args, **kwargs)
            finally:
                self.tick()
                self.calls.pop()

        setattr(owner, name, timed)

    def wrap_streams(self) -> None:
        start = BatchStream.start

        def started(stream: BatchStream[Any, Any], message: Any) -> Any:
            self.tick()
            self.in_flight += 1  # from before its sending
            wait = start(stream, message)

            def result() -> Any:
                try:
                    return wait()
                finally:
                    self.tick()
                    self.in_flight -= 1

            return result

        BatchStream.start = started  # type: ignore[method-assign]


def pin_router_apart() -> None:
    """The router on CPU 0, its worker processes (all their threads) on CPU 1."""
    children = subprocess.run(
        ["pgrep", "-P", str(os.getpid())], capture_output=True, text=True, check=False
    ).stdout.split()
    for pid in children:
        subprocess.run(["taskset", "-a", "-p", "-c", "1", pid], capture_output=True, check=False)
    subprocess.run(["taskset", "-a", "-p", "-c", "0", str(os.getpid())], capture_output=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--target", default="specserve/demo-target")
    p.add_argument("--draft", default="specserve/demo-draft")
    p.add_argument("--k", type=int, default=4)
    p.add_argument("--batch", type=int, nargs="+", default=[64])
    p.add_argument("--rounds", type=int, default=100)
    p.add_argument("--dtype", default="float32")
    p.add_argument("--device", default="cpu")
    p.add_argument("--gpu", help="CUDA_VISIBLE_DEVICES of both worker processes")
    p.add_argument("--max-model-len", type=int, default=1024)
    p.add_argument("--pin", action="store_true")
    a = p.parse_args()
    clock = PathClock()
    for owner, names in CALLS.items():
        for name in names:
            clock.wrap(owner, name)
    clock.wrap_streams()
    args = argparse.Namespace(**vars(a), num_kv_blocks=8192, draft_gpu=a.gpu, target_gpu=a.gpu)
    rows = []
    with ExitStack() as stack:
        target, draft = start_workers(args, stack)
        if a.pin:
            pin_router_apart()
        spec = SpeculativeConfig(a.draft, a.k, adaptive_k=False)
        config = EngineConfig.of(a.target, spec, log_stats_interval_s=None)
        engine = LLMEngine(config, build_remote_workers([target], [draft]))
        for batch in a.batch:
            rows.append(measure(engine, clock, batch, a.rounds, a.max_model_len))
            print(json.dumps(rows[-1]), flush=True)
        engine.close()


def measure(engine: LLMEngine, clock: PathClock, batch: int, rounds_: int, max_len: int) -> Any:
    params = SamplingParams(temperature=0, max_tokens=max_len - 40, ignore_eos=True)
    for i in range(batch):
        engine.add_request(f"b{batch}-{i}", engine.tokenizer.encode(f"def f{i}(x):"), params)
    for _ in range(5):
        engine.step()
    clock.tick()
    clock.seconds.clear()
    start = time.perf_counter()
    for _ in range(rounds_):
        engine.step()
    clock.tick()
    step_ms = (time.perf_counter() - start) / rounds_ * 1e3
    per_call = {k: v / rounds_ * 1e3 for k, v in clock.seconds.items()}
    for seq in list(engine.running):
        engine.abort(seq.request_id)
    own = sum(per_call.values())
    return {
        "batch": batch,
        "step_ms": step_ms,
        "router_own_ms": own,
        "router_own_fraction": own / step_ms,
        "by_call_ms": dict(sorted(per_call.items(), key=lambda kv: -kv[1])),
    }


if __name__ == "__main__":
    main()

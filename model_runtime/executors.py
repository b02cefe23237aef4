"""Where the ranks of a tensor-parallel worker run, and how calls reach them.

An executor starts ``tensor_parallel_size`` ranks (``model_runtime.rank``),
runs each call on every rank and returns their results in rank order. Two
kinds, as vLLM names them (``--distributed-executor-backend``):

- ``mp``: one process per rank on this machine (``multiprocessing``, spawn);
- ``ray``: one Ray actor per rank, placed by a placement group with one bundle
  per rank ({"GPU": 1} on GPUs, {"CPU": 1} otherwise), STRICT_PACK so a group
  shares a node, on a running cluster (``ray_address``) or a local one.

A rank that dies, fails a call or stops answering makes the executor
*broken*: the other ranks are stopped (a Ray placement group is removed),
that call and every later one raise WorkerUnavailableError and ``alive()`` is
False. Collectives give up after ``collective_timeout_s``, so a rank waiting
for a dead peer never hangs.
"""

from __future__ import annotations

import multiprocessing
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any, Protocol

from model_runtime.config import ModelConfig
from model_runtime.errors import WorkerUnavailableError
from model_runtime.heap import freeze_startup_heap
from model_runtime.rank import Rank, RankConfig, WorkerFactory, rendezvous_address
from model_runtime.resolve import resolve_model
from model_runtime.specs import ParallelConfig, RunnerSpec


class PlacementError(RuntimeError):
    """The cluster cannot place the ranks (too few GPUs or CPUs)."""


class RankExecutor(Protocol):
    pids: list[int]  # each rank's process id, in rank order

    def run(self, method: str, *args: Any) -> list[Any]:
        """``Rank.run(method, *args)`` on every rank: (result, free KV blocks) of each,
        in rank order."""

    def alive(self) -> bool: ...

    def shutdown(self) -> None: ...


def _serve_rank(conn: Connection, config: RankConfig, rank: int, init_method: str) -> None:
    """A rank process: build the rank, then answer calls until the pipe closes."""
    try:
        target = Rank(config, rank, init_method, gpu_index=rank)
    except BaseException as e:  # reported to the parent, which raises it
        conn.send(("error", e))
        return
    freeze_startup_heap(f"rank {rank}")  # it serves until the pipe closes
    conn.send(("ok", None))
    while True:
        try:
            message = conn.recv()
        except EOFError:
            return
        if message is None:
            return
        method, args = message
        try:
            conn.send(("ok", target.run(method, *args)))
        except Exception as e:
            conn.send(("error", e))


class MpExecutor:
    def __init__(self, config: RankConfig, start_timeout_s: float = 600.0):
        self.call_timeout_s = config.collective_timeout_s
        self._broken: str | None = None
        context = multiprocessing.get_context("spawn")
        init_method = rendezvous_address("127.0.0.1")
        self._conns: list[Connection] = []
        self._processes = []
        for rank in range(config.tensor_parallel_size):
            parent, child = context.Pipe()
            process = context.Process(
                target=_serve_rank,
                args=(child, config, rank, init_method),
                name=f"{config.name}-rank-{rank}",
                daemon=True,
            )
            process.start()
            self._conns.append(parent)
            self._processes.append(process)
        self.pids = [p.pid or 0 for p in self._processes]
        try:
            for rank in range(config.tensor_parallel_size):
                self._receive(rank, start_timeout_s)
        except BaseException:
            self.shutdown()
            raise

    def _receive(self, rank: int, timeout_s: float) -> Any:
        """Rank ``rank``'s answer; its exception is raised here."""
        conn, process = self._conns[rank], self._processes[rank]
        deadline = time.monotonic() + timeout_s
        while not conn.poll(0.05):
            if not process.is_alive():
                raise WorkerUnavailableError(
                    f"tensor-parallel rank {rank} exited (code {process.exitcode})"
                )
            if time.monotonic() > deadline:
                raise WorkerUnavailableError(
                    f"tensor-parallel rank {rank} did not answer within {timeout_s:.0f}s"
                )
        status, value = conn.recv()
        if status == "error":
            raise value
        return value

    def run(self, method: str, *args: Any) -> list[Any]:
        if self._broken is not None:
            raise WorkerUnavailableError(self._broken)
        try:
            for conn in self._conns:
                conn.send((method, args))
            return [self._receive(rank, self.call_timeout_s) for rank in range(len(self._conns))]
        except Exception as e:
            self._broken = f"a tensor-parallel rank failed: {type(e).__name__}: {e}"
            self.shutdown()
            raise WorkerUnavailableError(self._broken) from e

    def alive(self) -> bool:
        return self._broken is None and all(p.is_alive() for p in self._processes)

    def shutdown(self) -> None:
        """Stop every rank (idempotent)."""
        for conn in self._conns:
            try:
                conn.send(None)
            except OSError:
                pass
        for process in self._processes:
            process.join(timeout=5)
            if process.is_alive():
                process.kill()
                process.join()


class _RayRank:
    """The body of one rank's Ray actor."""

    def __init__(self) -> None:
        self.target: Rank | None = None

    def rendezvous(self) -> str:
        import ray

        return rendezvous_address(ray.util.get_node_ip_address())

    def start(self, config: RankConfig, rank: int, init_method: str) -> int:
        import os

        self.target = Rank(config, rank, init_method, gpu_index=0)  # Ray sets the GPU
        freeze_startup_heap(f"rank {rank}")  # an actor's process serves only this rank
        return os.getpid()

    def run(self, method: str, *args: Any) -> Any:
        assert self.target is not None
        return self.target.run(method, *args)


class RayExecutor:
    def __init__(
        self,
        config: RankConfig,
        ray_address: str | None = None,
        placement_timeout_s: float = 60.0,
        start_timeout_s: float = 600.0,
        strategy: str = "STRICT_PACK",
    ):
        import ray
        from ray.util.placement_group import placement_group, remove_placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        self._ray = ray
        self.call_timeout_s = config.collective_timeout_s
        self._broken: str | None = None
        if not ray.is_initialized():
            ray.init(address=ray_address, log_to_driver=False, include_dashboard=False)
        size = config.tensor_parallel_size
        gpu = _wants_gpu(config.runner.device, ray.cluster_resources())
        bundle = {"GPU": 1.0, "CPU": 1.0} if gpu else {"CPU": 1.0}
        self.placement_group: Any = placement_group([bundle] * size, strategy=strategy)
        self._remove_group: Callable[[Any], None] = remove_placement_group
        ready, _ = ray.wait([self.placement_group.ready()], timeout=placement_timeout_s)
        if not ready:
            available = ray.available_resources()
            remove_placement_group(self.placement_group)
            raise PlacementError(
                f"the Ray cluster could not place {size} ranks of {bundle} ({strategy}) within "
                f"{placement_timeout_s:.0f}s; available now: "
                f"{ {k: v for k, v in available.items() if k in ('CPU', 'GPU')} }. Add nodes "
                "or lower tensor_parallel_size"
            )
        actor = ray.remote(_RayRank)
        self.actors: list[Any] = [
            actor.options(
                num_cpus=1,
                num_gpus=1 if gpu else 0,
                scheduling_strategy=PlacementGroupSchedulingStrategy(
                    self.placement_group, placement_group_bundle_index=rank
                ),
            ).remote()
            for rank in range(size)
        ]
        try:
            init_method = ray.get(self.actors[0].rendezvous.remote(), timeout=start_timeout_s)
            starts = [a.start.remote(config, r, init_method) for r, a in enumerate(self.actors)]
            self.pids: list[int] = list(ray.get(starts, timeout=start_timeout_s))
        except ray.exceptions.RayTaskError as e:  # e.g. a checkpoint a rank cannot load
            self.shutdown()
            raise e.as_instanceof_cause() from None
        except BaseException:
            self.shutdown()
            raise

    def run(self, method: str, *args: Any) -> list[Any]:
        if self._broken is not None:
            raise WorkerUnavailableError(self._broken)
        refs = [a.run.remote(method, *args) for a in self.actors]
        try:
            # Take answers as they come, so that one rank's failure is seen at once
            # rather than after its peers give up waiting for it in a collective.
            pending, deadline = list(refs), time.monotonic() + self.call_timeout_s
            while pending:
                left = deadline - time.monotonic()
                done, pending = self._ray.wait(pending, num_returns=1, timeout=max(left, 0))
                if not done:
                    raise TimeoutError(f"no answer within {self.call_timeout_s:.0f}s")
                self._ray.get(done[0])  # raises what the rank raised
            return list(self._ray.get(refs))
        except Exception as e:  # a dead actor, a failed collective, a timeout
            self._broken = f"a tensor-parallel rank failed: {type(e).__name__}: {e}"
            self.shutdown()
            raise WorkerUnavailableError(self._broken) from e

    def alive(self) -> bool:
        return self._broken is None

    def shutdown(self) -> None:
        """Stop every rank and free the placement group (idempotent)."""
        for a in getattr(self, "actors", []):
            self._ray.kill(a)
        self.actors = []
        if self.placement_group is not None:
            self._remove_group(self.placement_group)
            self.placement_group = None


def _wants_gpu(device: str, resources: dict[str, float]) -> bool:
    if device == "auto":
        return resources.get("GPU", 0) > 0
    return device.startswith("cuda")


def start_executor(
    runner: RunnerSpec, parallel: ParallelConfig, build_worker: WorkerFactory, name: str
) -> RankExecutor:
    """Start the ranks of one tensor-parallel worker (a ``name`` worker built by
    ``build_worker`` on each rank) where ``parallel`` says. A size that does not
    split the model is refused here, before any process starts."""
    folder = resolve_model(runner.model, runner.revision)
    ModelConfig.from_pretrained(folder).check_tensor_parallel(parallel.tensor_parallel_size)
    config = RankConfig(runner, parallel.tensor_parallel_size, build_worker, name)
    if parallel.backend == "mp":
        return MpExecutor(config)
    return RayExecutor(config, parallel.ray_address, parallel.placement_timeout_s)

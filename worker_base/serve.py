"""Building a worker (in this process, or as ranks on an executor) and serving
it over gRPC until SIGTERM: what ``specserve draft-worker`` and ``specserve
target-worker`` share."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

import grpc

from model_runtime.build import build_runner
from model_runtime.distributed import SINGLE_DEVICE, TensorParallelGroup
from model_runtime.executors import RankExecutor, start_executor
from model_runtime.runner import ModelRunner
from model_runtime.specs import ParallelConfig, RunnerSpec
from protos.server import DEFAULT_GRACE_S, RunningServer, serve_until_signalled, start_server
from protos.tls import PLAIN, TlsConfig
from worker_base.executor_worker import ExecutorWorker
from worker_base.servicer import DEFAULT_LEASE_TTL_S, ServedWorker, WorkerServicer

logger = logging.getLogger(__name__)

Local = TypeVar("Local")  # the worker over a runner in this process
OnRanks = TypeVar("OnRanks")  # the worker whose ranks run on an executor


@dataclass(frozen=True)
class ServerConfig:
    """Where a worker service listens, and how long it drains on SIGTERM."""

    host: str = field(default="127.0.0.1", metadata={"help": "address to listen on"})
    port: int = field(default=0, metadata={"help": "port to listen on; 0 picks a free one"})
    grace_s: float = field(
        default=DEFAULT_GRACE_S,
        metadata={"help": "on SIGTERM, how long a batch in flight may finish"},
    )
    lease_ttl_s: float = field(
        default=DEFAULT_LEASE_TTL_S,
        metadata={"help": "seconds a departed router's sequences are kept before they are freed"},
    )

    def __post_init__(self) -> None:
        if not 0 <= self.port < 65536:
            raise ValueError(f"port must be in [0, 65535], got {self.port}")
        if self.grace_s < 0:
            raise ValueError(f"grace_s must be >= 0, got {self.grace_s}")
        if self.lease_ttl_s <= 0:
            raise ValueError(f"lease_ttl_s must be > 0, got {self.lease_ttl_s}")

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"


def start_worker(
    runner: RunnerSpec,
    parallel: ParallelConfig,
    factory: Callable[[ModelRunner, TensorParallelGroup, str], Local],
    on_ranks: Callable[[RankExecutor], OnRanks],
    name: str,
) -> Local | OnRanks:
    """The worker ``factory`` builds over ``runner``: here, or on every rank of an
    executor (wrapped by ``on_ranks``) when ``parallel`` asks for one."""
    if not parallel.uses_executor:
        return factory(build_runner(runner), SINGLE_DEVICE, runner.model)
    return on_ranks(start_executor(runner, parallel, factory, name))


S = TypeVar("S", bound=WorkerServicer)


def serve_worker(
    worker: ServedWorker,
    servicer: Callable[[ServedWorker, Callable[[str], None], float], S],
    add_to_server: Callable[[S, grpc.Server], None],
    service_name: str,
    server: ServerConfig,
    kind: str,
    tls: TlsConfig = PLAIN,
) -> None:
    """Serve ``worker`` (a ``kind``, such as "draft worker") through its
    ``servicer`` class, the gRPC service ``service_name``, until SIGTERM; a
    worker on an executor reports its ranks when it starts, NOT_SERVING when a
    rank fails, and stops them at the end."""
    if isinstance(worker, ExecutorWorker):
        pids = ", ".join(map(str, worker.executor.pids))
        print(f"{len(worker.executor.pids)} ranks: pids {pids}", flush=True)
    health: list[RunningServer] = []

    def lost(reason: str) -> None:
        logger.error("%s failed for good, reporting NOT_SERVING: %s", kind, reason)
        for running in health:
            running.fail()

    try:
        servicing = servicer(worker, lost, server.lease_ttl_s)
        binding = (add_to_server, servicing, service_name)
        running = start_server([binding], server.address, tls=tls)
        health.append(running)
        ready = f"{kind} ready on {server.host}:{{port}}"
        serve_until_signalled(running, server.grace_s, ready, servicing.idle)
    finally:
        if isinstance(worker, ExecutorWorker):
            worker.close()  # stops the ranks and frees their placement

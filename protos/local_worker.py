"""What every in-process worker offers besides its batch calls: releasing
sequences, the room in its KV cache, and a description of itself. The gRPC
servicers expose exactly these (``WorkerServicer``)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import grpc

from model_runtime.executors import RankExecutor
from model_runtime.runner import ModelRunner
from protos import common_pb2 as pb
from protos.messages import WorkerInfo, WorkerUnavailableError
from protos.serving import RunningServer, ServiceBinding, serve_until_signalled, start_server

logger = logging.getLogger(__name__)


class LocalWorker:
    def __init__(self, runner: ModelRunner, model_name: str):
        self.runner = runner
        self.model_name = model_name
        self.device = runner.device

    @property
    def vocab_size(self) -> int:
        return self.runner.vocab_size

    @property
    def num_free_blocks(self) -> int:
        return self.runner.kv_cache.num_free_blocks

    def release(self, seq_ids: Sequence[int]) -> int:
        return sum(self.runner.free(s) for s in seq_ids)

    def describe(self) -> WorkerInfo:
        return WorkerInfo.of(self.runner, self.model_name)

    def probe(self, timeout_s: float) -> bool:
        return True  # in-process: always there


def worker_info_to_proto(info: WorkerInfo) -> pb.WorkerInfo:
    return pb.WorkerInfo(
        model=info.model,
        vocab_size=info.vocab_size,
        max_model_len=info.max_model_len,
        block_size=info.block_size,
        num_blocks=info.num_blocks,
        num_free_blocks=info.num_free_blocks,
    )


class ServedWorker(Protocol):
    """What a worker service needs of its worker, in-process or tensor-parallel."""

    @property
    def num_free_blocks(self) -> int: ...

    def release(self, seq_ids: Sequence[int]) -> int: ...

    def describe(self) -> WorkerInfo: ...


class WorkerServicer:
    """Release and Describe, shared by both worker services; the model runs one
    batch at a time under ``lock``. A worker that raises WorkerUnavailableError
    (a tensor-parallel rank died) fails the call with UNAVAILABLE, and
    ``on_unavailable`` hears of it (the service then reports NOT_SERVING)."""

    def __init__(self, worker: ServedWorker, on_unavailable: Callable[[str], None] | None = None):
        self.worker = worker
        self.lock = threading.Lock()
        self.on_unavailable = on_unavailable

    def unavailable(self, context: grpc.ServicerContext, error: WorkerUnavailableError) -> None:
        if self.on_unavailable is not None:
            self.on_unavailable(str(error))
        context.abort(grpc.StatusCode.UNAVAILABLE, f"this worker has failed: {error}")

    def Release(
        self, request: pb.ReleaseRequest, context: grpc.ServicerContext
    ) -> pb.ReleaseResponse:
        with self.lock:
            try:
                released = self.worker.release(list(request.seq_ids))
            except WorkerUnavailableError as e:
                self.unavailable(context, e)
            return pb.ReleaseResponse(num_released=released)

    def Describe(self, request: pb.DescribeRequest, context: grpc.ServicerContext) -> pb.WorkerInfo:
        with self.lock:
            try:
                info = self.worker.describe()
            except WorkerUnavailableError as e:
                self.unavailable(context, e)
            return worker_info_to_proto(info)


class ExecutorWorker:
    """A worker whose ranks run on an executor (tensor parallelism): every call
    runs on every rank and rank 0's answer is the worker's. Subclasses add the
    batch calls (prefill and verify, or propose)."""

    def __init__(self, executor: RankExecutor):
        self.executor = executor
        self._free_blocks = 0
        self.info: WorkerInfo = self.describe()

    def _call(self, method: str, *args: Any) -> Any:
        result, self._free_blocks = self.executor.run(method, *args)[0]
        return result

    @property
    def vocab_size(self) -> int:
        return self.info.vocab_size

    @property
    def num_free_blocks(self) -> int:
        """As of the last call (every call reports it): asked once per round."""
        return self._free_blocks

    def release(self, seq_ids: Sequence[int]) -> int:
        return int(self._call("release", list(seq_ids)))

    def describe(self) -> WorkerInfo:
        info: WorkerInfo = self._call("describe")
        return info

    def probe(self, timeout_s: float) -> bool:
        return self.executor.alive()

    def close(self) -> None:
        """Stop the ranks (and free their placement)."""
        self.executor.shutdown()


def serve_worker(
    worker: ServedWorker,
    bind: Callable[[Callable[[str], None]], ServiceBinding],
    address: str,
    grace_s: float,
    kind: str,
) -> None:
    """Serve ``worker`` (its service made by ``bind`` from the callback for a failed
    worker) on ``address`` until SIGTERM; a worker on an executor reports its ranks
    when it starts, NOT_SERVING when a rank fails, and stops them at the end."""
    if isinstance(worker, ExecutorWorker):
        pids = ", ".join(map(str, worker.executor.pids))
        print(f"{len(worker.executor.pids)} ranks: pids {pids}", flush=True)
    health: list[RunningServer] = []

    def lost(reason: str) -> None:
        logger.error("%s failed, reporting NOT_SERVING: %s", kind, reason)
        for running in health:
            running.set_serving(False)

    try:
        running = start_server([bind(lost)], address)
        health.append(running)
        serve_until_signalled(
            running, grace_s, f"{kind} ready on {address.rsplit(':', 1)[0]}:{{port}}"
        )
    finally:
        if isinstance(worker, ExecutorWorker):
            worker.close()  # stops the ranks and frees their placement

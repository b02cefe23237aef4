"""What every in-process worker offers besides its batch calls: releasing
sequences, the room in its KV cache, and a description of itself. The gRPC
servicers expose exactly these (``WorkerServicer``)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Protocol

import grpc

from model_runtime.runner import ModelRunner
from protos import common_pb2 as pb
from protos.messages import WorkerInfo, WorkerUnavailableError


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

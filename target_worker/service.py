"""The TargetWorker gRPC service: converts wire messages and delegates to a
TargetWorker (or its ranks), one batch at a time, through the shared batch
loop (``worker_base.servicer``: how errors are reported)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from functools import partial
from typing import Any, TypeVar

import grpc

from model_runtime.specs import ParallelConfig, RunnerSpec
from protos import convert, target_worker_pb2_grpc
from protos import target_worker_pb2 as tpb
from protos.messages import VerifyOutput
from protos.tls import PLAIN, TlsConfig
from target_worker.tensor_parallel import ParallelTargetWorker, target_rank_worker
from target_worker.worker import TargetWorker, TargetWorkerConfig
from worker_base.serve import ServerConfig, serve_worker, start_worker
from worker_base.servicer import WorkerServicer, check_distinct

SERVICE_NAME = "specserve.v1.TargetWorker"
R = TypeVar("R")


class TargetWorkerService(WorkerServicer, target_worker_pb2_grpc.TargetWorkerServicer):
    worker: TargetWorker | ParallelTargetWorker

    def Prefill(
        self, request_iterator: Iterator[tpb.PrefillBatch], context: grpc.ServicerContext
    ) -> Iterator[tpb.PrefillResult]:
        reply = _reply(convert.prefill_result_to_proto)
        return self.batch_loop(request_iterator, context, self._prepare_prefill, reply)

    def Verify(
        self, request_iterator: Iterator[tpb.VerifyBatch], context: grpc.ServicerContext
    ) -> Iterator[tpb.VerifyResult]:
        reply = _reply(convert.verify_result_to_proto)
        return self.batch_loop(request_iterator, context, self._prepare_verify, reply)

    def _prepare_prefill(self, batch: tpb.PrefillBatch) -> Callable[[], list[VerifyOutput]]:
        requests = convert.prefill_batch_from_proto(batch)
        check_distinct(r.tokens.seq_id for r in requests)
        return partial(self.worker.prefill, requests)

    def _prepare_verify(self, batch: tpb.VerifyBatch) -> Callable[[], list[VerifyOutput]]:
        requests = convert.verify_batch_from_proto(batch)
        check_distinct(r.tokens.seq_id for r in requests)
        return partial(self.worker.verify, requests)


def _reply(
    result_to_proto: Callable[[int, list[VerifyOutput], int], R],
) -> Callable[[Any, list[VerifyOutput], int], R]:
    """How a batch's outputs and the free KV blocks become its result message."""

    def reply(batch: Any, outputs: list[VerifyOutput], free: int) -> R:
        return result_to_proto(batch.batch_id, outputs, free)

    return reply


def build_target_worker(
    runner: RunnerSpec, target: TargetWorkerConfig, parallel: ParallelConfig
) -> TargetWorker | ParallelTargetWorker:
    """The target worker in this process, or its ranks started by an executor."""
    factory = partial(target_rank_worker, target)
    return start_worker(runner, parallel, factory, ParallelTargetWorker, "target")


def serve(
    server: ServerConfig,
    runner: RunnerSpec,
    target: TargetWorkerConfig,
    parallel: ParallelConfig,
    tls: TlsConfig = PLAIN,
) -> None:
    """Run a target worker until SIGTERM."""
    serve_worker(
        build_target_worker(runner, target, parallel),
        TargetWorkerService,
        target_worker_pb2_grpc.add_TargetWorkerServicer_to_server,
        SERVICE_NAME,
        server,
        "target worker",
        tls,
    )

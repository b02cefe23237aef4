"""The TargetWorker gRPC service: converts wire messages and delegates to a
TargetWorker, one batch at a time (see draft_worker/service.py for how errors
are reported)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from functools import partial
from typing import Any, TypeVar

import grpc

from model_runtime.executors import ParallelConfig, start_executor
from model_runtime.serving_config import WorkerServerConfig
from protos import convert, target_worker_pb2_grpc
from protos import target_worker_pb2 as tpb
from protos.local_worker import WorkerServicer, serve_worker
from protos.messages import VerifyOutput, VerifyRequest, WorkerUnavailableError
from protos.serving import ServiceBinding
from target_worker.parallel import ParallelTargetWorker, target_rank_worker
from target_worker.worker import TargetWorker, TargetWorkerConfig

SERVICE_NAME = "specserve.v1.TargetWorker"
R = TypeVar("R")


class TargetWorkerService(WorkerServicer, target_worker_pb2_grpc.TargetWorkerServicer):
    worker: TargetWorker | ParallelTargetWorker

    def _batches(
        self,
        batches: Iterator[Any],
        context: grpc.ServicerContext,
        request_from_proto: Callable[[Any], VerifyRequest],
        call: Callable[[list[VerifyRequest]], list[VerifyOutput]],
        output_to_proto: Callable[[VerifyOutput], Any],
        result: Callable[..., R],
    ) -> Iterator[R]:
        """One result per batch: convert, run under the lock, convert back."""
        for batch in batches:
            try:
                requests = [request_from_proto(m) for m in batch.sequences]
            except ValueError as e:
                context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(e))
            with self.lock:
                try:
                    outputs, free = call(requests), self.worker.num_free_blocks
                except WorkerUnavailableError as e:
                    self.unavailable(context, e)
            yield result(
                batch_id=batch.batch_id,
                outputs=[output_to_proto(o) for o in outputs],
                num_free_blocks=free,
            )

    def Prefill(
        self, request_iterator: Iterator[tpb.PrefillBatch], context: grpc.ServicerContext
    ) -> Iterator[tpb.PrefillResult]:
        return self._batches(
            request_iterator,
            context,
            convert.prefill_request_from_proto,
            self.worker.prefill,
            convert.prefill_output_to_proto,
            tpb.PrefillResult,
        )

    def Verify(
        self, request_iterator: Iterator[tpb.VerifyBatch], context: grpc.ServicerContext
    ) -> Iterator[tpb.VerifyResult]:
        return self._batches(
            request_iterator,
            context,
            convert.verify_request_from_proto,
            self.worker.verify,
            convert.verify_output_to_proto,
            tpb.VerifyResult,
        )


def build_worker(
    server: WorkerServerConfig, target: TargetWorkerConfig, parallel: ParallelConfig
) -> TargetWorker | ParallelTargetWorker:
    """The worker in this process, or its ranks started by an executor."""
    if not parallel.uses_executor:
        return TargetWorker(server.build_runner(), target, server.model)
    build = partial(target_rank_worker, target)
    config = server.rank_config(parallel.tensor_parallel_size, build)
    return ParallelTargetWorker(start_executor(config, parallel))


def serve(server: WorkerServerConfig, target: TargetWorkerConfig, parallel: ParallelConfig) -> None:
    """Run a target worker until SIGTERM."""
    worker = build_worker(server, target, parallel)

    def bind(lost: Callable[[str], None]) -> ServiceBinding:
        servicer = TargetWorkerService(worker, lost)
        return target_worker_pb2_grpc.add_TargetWorkerServicer_to_server, servicer, SERVICE_NAME

    serve_worker(worker, bind, f"{server.host}:{server.port}", server.grace_s, "target worker")

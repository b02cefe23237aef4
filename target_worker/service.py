"""The TargetWorker gRPC service: converts wire messages and delegates to a
TargetWorker (or its ranks), one batch at a time, through the shared batch
loop (``worker_base.servicer``: how errors are reported)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from functools import partial

import grpc

from model_runtime.specs import ParallelConfig, RunnerSpec
from protos import convert, target_worker_pb2_grpc
from protos import target_worker_pb2 as tpb
from protos.messages import VerifyOutput
from protos.server import ServiceBinding
from target_worker.tensor_parallel import ParallelTargetWorker, target_rank_worker
from target_worker.worker import TargetWorker, TargetWorkerConfig
from worker_base.serve import ServerConfig, build_worker, serve_worker
from worker_base.servicer import WorkerServicer

SERVICE_NAME = "specserve.v1.TargetWorker"


class TargetWorkerService(WorkerServicer, target_worker_pb2_grpc.TargetWorkerServicer):
    worker: TargetWorker | ParallelTargetWorker

    def Prefill(
        self, request_iterator: Iterator[tpb.PrefillBatch], context: grpc.ServicerContext
    ) -> Iterator[tpb.PrefillResult]:
        return self.batch_loop(request_iterator, context, self._prepare_prefill, _prefill_result)

    def Verify(
        self, request_iterator: Iterator[tpb.VerifyBatch], context: grpc.ServicerContext
    ) -> Iterator[tpb.VerifyResult]:
        return self.batch_loop(request_iterator, context, self._prepare_verify, _verify_result)

    def _prepare_prefill(self, batch: tpb.PrefillBatch) -> Callable[[], list[VerifyOutput]]:
        requests = [convert.prefill_request_from_proto(m) for m in batch.sequences]
        return partial(self.worker.prefill, requests)

    def _prepare_verify(self, batch: tpb.VerifyBatch) -> Callable[[], list[VerifyOutput]]:
        requests = [convert.verify_request_from_proto(m) for m in batch.sequences]
        return partial(self.worker.verify, requests)


def _prefill_result(
    batch: tpb.PrefillBatch, outputs: list[VerifyOutput], free: int
) -> tpb.PrefillResult:
    return tpb.PrefillResult(
        batch_id=batch.batch_id,
        outputs=[convert.prefill_output_to_proto(o) for o in outputs],
        num_free_blocks=free,
    )


def _verify_result(
    batch: tpb.VerifyBatch, outputs: list[VerifyOutput], free: int
) -> tpb.VerifyResult:
    return tpb.VerifyResult(
        batch_id=batch.batch_id,
        outputs=[convert.verify_output_to_proto(o) for o in outputs],
        num_free_blocks=free,
    )


def build_target_worker(
    runner: RunnerSpec, target: TargetWorkerConfig, parallel: ParallelConfig
) -> TargetWorker | ParallelTargetWorker:
    """The target worker in this process, or its ranks started by an executor."""
    factory = partial(target_rank_worker, target)
    return build_worker(runner, parallel, factory, ParallelTargetWorker, "target")


def serve(
    server: ServerConfig, runner: RunnerSpec, target: TargetWorkerConfig, parallel: ParallelConfig
) -> None:
    """Run a target worker until SIGTERM."""
    worker = build_target_worker(runner, target, parallel)

    def bind(lost: Callable[[str], None]) -> ServiceBinding:
        servicer = TargetWorkerService(worker, lost)
        return target_worker_pb2_grpc.add_TargetWorkerServicer_to_server, servicer, SERVICE_NAME

    serve_worker(worker, bind, server, "target worker")

"""The TargetWorker gRPC service: converts wire messages and delegates to a
TargetWorker, one batch at a time (see draft_worker/service.py for how errors
are reported)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import TypeVar

import grpc

from model_runtime.config import ModelConfig
from model_runtime.resolve import resolve_model
from model_runtime.serving_config import WorkerServerConfig
from protos import convert, target_worker_pb2_grpc
from protos import target_worker_pb2 as tpb
from protos.local_worker import WorkerServicer
from protos.messages import VerifyOutput, VerifyRequest, WorkerUnavailableError
from protos.serving import RunningServer, serve_until_signalled, start_server
from target_worker.executors import ParallelConfig, start_executor
from target_worker.parallel import ParallelTargetWorker
from target_worker.rank import RankConfig
from target_worker.worker import TargetWorker, TargetWorkerConfig

logger = logging.getLogger(__name__)

SERVICE_NAME = "specserve.v1.TargetWorker"
M = TypeVar("M")


class TargetWorkerService(WorkerServicer, target_worker_pb2_grpc.TargetWorkerServicer):
    worker: TargetWorker | ParallelTargetWorker

    def _run(
        self,
        context: grpc.ServicerContext,
        call: Callable[[list[VerifyRequest]], list[VerifyOutput]],
        requests: list[VerifyRequest],
    ) -> tuple[list[VerifyOutput], int]:
        """One batch through the worker; the outputs and the free blocks after it."""
        with self.lock:
            try:
                return call(requests), self.worker.num_free_blocks
            except WorkerUnavailableError as e:
                self.unavailable(context, e)
                raise

    def _requests(
        self,
        context: grpc.ServicerContext,
        convert_one: Callable[[M], VerifyRequest],
        messages: list[M],
    ) -> list[VerifyRequest]:
        try:
            return [convert_one(m) for m in messages]
        except ValueError as e:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(e))
            raise  # abort raises; this keeps the type checker informed

    def Prefill(
        self, request_iterator: Iterator[tpb.PrefillBatch], context: grpc.ServicerContext
    ) -> Iterator[tpb.PrefillResult]:
        for batch in request_iterator:
            requests = self._requests(
                context,
                convert.prefill_request_from_proto,
                list(batch.sequences),
            )
            outputs, free = self._run(context, self.worker.prefill, requests)
            yield tpb.PrefillResult(
                batch_id=batch.batch_id,
                outputs=[convert.prefill_output_to_proto(o) for o in outputs],
                num_free_blocks=free,
            )

    def Verify(
        self, request_iterator: Iterator[tpb.VerifyBatch], context: grpc.ServicerContext
    ) -> Iterator[tpb.VerifyResult]:
        for batch in request_iterator:
            requests = self._requests(
                context,
                convert.verify_request_from_proto,
                list(batch.sequences),
            )
            outputs, free = self._run(context, self.worker.verify, requests)
            yield tpb.VerifyResult(
                batch_id=batch.batch_id,
                outputs=[convert.verify_output_to_proto(o) for o in outputs],
                num_free_blocks=free,
            )


def build_worker(
    server: WorkerServerConfig, target: TargetWorkerConfig, parallel: ParallelConfig
) -> TargetWorker | ParallelTargetWorker:
    """The worker in this process, or its ranks started by an executor."""
    if not parallel.uses_executor:
        return TargetWorker(server.build_runner(), target, server.model)
    folder = resolve_model(server.model)
    ModelConfig.from_pretrained(folder).check_tensor_parallel(parallel.tensor_parallel_size)
    config = RankConfig(
        folder=str(folder),
        model_name=server.model,
        tensor_parallel_size=parallel.tensor_parallel_size,
        dtype=server.dtype,
        device=server.device,
        max_model_len=server.max_model_len,
        block_size=server.block_size,
        num_kv_blocks=server.num_kv_blocks,
        gpu_memory_utilization=server.gpu_memory_utilization,
        cpu_memory_bytes=server.cpu_memory_bytes,
        max_num_seqs=server.max_num_seqs,
        seed=target.seed,
    )
    return ParallelTargetWorker(start_executor(config, parallel))


def serve(
    server: WorkerServerConfig,
    target: TargetWorkerConfig,
    parallel: ParallelConfig,
) -> None:
    """Run a target worker until SIGTERM."""
    worker = build_worker(server, target, parallel)
    if isinstance(worker, ParallelTargetWorker):
        pids = ", ".join(map(str, worker.executor.pids))
        size = parallel.tensor_parallel_size
        print(f"{size} ranks ({parallel.backend}): pids {pids}", flush=True)
    health: list[RunningServer] = []

    def lost(reason: str) -> None:
        logger.error("target worker failed, reporting NOT_SERVING: %s", reason)
        for running in health:
            running.set_serving(False)

    try:
        running = start_server(
            [
                (
                    target_worker_pb2_grpc.add_TargetWorkerServicer_to_server,
                    TargetWorkerService(worker, lost),
                    SERVICE_NAME,
                )
            ],
            f"{server.host}:{server.port}",
        )
        health.append(running)
        ready = f"target worker ready on {server.host}:{{port}}"
        serve_until_signalled(running, server.grace_s, ready)
    finally:
        if isinstance(worker, ParallelTargetWorker):
            worker.close()  # stops the ranks and frees their placement

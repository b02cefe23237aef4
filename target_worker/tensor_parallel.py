"""A tensor-parallel target worker: TargetWorker's calls, run on every rank of
an executor, answered with rank 0's results. The gRPC service and the
in-process engine use it wherever they would use a TargetWorker."""

from __future__ import annotations

from collections.abc import Sequence

from model_runtime.distributed import TensorParallelGroup
from model_runtime.runner import ModelRunner
from protos.messages import VerifyOutput, VerifyRequest
from target_worker.worker import TargetWorker, TargetWorkerConfig
from worker_base.executor_worker import ExecutorWorker


def target_rank_worker(
    config: TargetWorkerConfig, runner: ModelRunner, tp: TensorParallelGroup, model_name: str
) -> TargetWorker:
    """What each rank builds over its shard (a RankConfig's build_worker, partially applied)."""
    return TargetWorker(runner, config, model_name, tp)


class ParallelTargetWorker(ExecutorWorker):
    def prefill(self, requests: Sequence[VerifyRequest]) -> list[VerifyOutput]:
        outputs: list[VerifyOutput] = self._call("prefill", list(requests))
        return outputs

    def verify(self, requests: Sequence[VerifyRequest]) -> list[VerifyOutput]:
        outputs: list[VerifyOutput] = self._call("verify", list(requests))
        return outputs

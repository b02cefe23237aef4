"""A tensor-parallel draft worker (``draft_tensor_parallel_size``, or
``specserve draft-worker -tp N``): DraftWorker's calls, run on every rank of an
executor, answered with rank 0's proposals."""

from __future__ import annotations

from collections.abc import Sequence

from draft_worker.worker import DraftWorker, DraftWorkerConfig
from model_runtime.distributed import TensorParallelGroup
from model_runtime.runner import ModelRunner
from protos.messages import Proposal, ProposeRequest
from worker_base.executor_worker import ExecutorWorker


def draft_rank_worker(
    config: DraftWorkerConfig, runner: ModelRunner, tp: TensorParallelGroup, model_name: str
) -> DraftWorker:
    """What each rank builds over its shard (a RankConfig's build_worker, partially applied)."""
    return DraftWorker(runner, config, model_name, tp)


class ParallelDraftWorker(ExecutorWorker):
    def propose(self, requests: Sequence[ProposeRequest], k: int) -> list[Proposal]:
        proposals: list[Proposal] = self._call("propose", list(requests), k)
        return proposals

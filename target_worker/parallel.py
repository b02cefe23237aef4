"""A tensor-parallel target worker: the same calls as TargetWorker, run on every
rank of an executor, answered with rank 0's results. The gRPC service and the
in-process engine use it wherever they would use a TargetWorker."""

from __future__ import annotations

from collections.abc import Sequence

from protos.messages import VerifyOutput, VerifyRequest, WorkerInfo
from target_worker.executors import RankExecutor


class ParallelTargetWorker:
    def __init__(self, executor: RankExecutor):
        self.executor = executor
        self.info = self.describe()

    @property
    def vocab_size(self) -> int:
        return self.info.vocab_size

    @property
    def num_free_blocks(self) -> int:
        return self.describe().num_free_blocks

    def prefill(self, requests: Sequence[VerifyRequest]) -> list[VerifyOutput]:
        return self.executor.run("prefill", list(requests))[0]

    def verify(self, requests: Sequence[VerifyRequest]) -> list[VerifyOutput]:
        return self.executor.run("verify", list(requests))[0]

    def release(self, seq_ids: Sequence[int]) -> int:
        return self.executor.run("release", list(seq_ids))[0]

    def describe(self) -> WorkerInfo:
        return self.executor.run("describe")[0]

    def probe(self, timeout_s: float) -> bool:
        return self.executor.alive()

    def close(self) -> None:
        self.executor.shutdown()

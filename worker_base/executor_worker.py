"""A worker whose ranks run on an executor (tensor parallelism): every call runs
on every rank and rank 0's answer is the worker's. The worker packages
subclass it with their batch calls (prefill and verify, or propose)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from model_runtime.executors import RankExecutor
from protos.messages import WorkerInfo


class ExecutorWorker:
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

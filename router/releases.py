"""Freeing the KV of sequences that are done, one call per worker per step.

A step can finish, preempt or abort many sequences at once (a batch whose
requests all end together); over gRPC a release call per sequence and
worker would cost a round trip each. The engine queues them here and sends
each worker its sequences in one call at the end of the step (and of an
abort), before anything is admitted again.
"""

from __future__ import annotations

import logging

from model_runtime.errors import WorkerUnavailableError
from router.clients import DraftClient, TargetClient

logger = logging.getLogger(__name__)


class PendingReleases:
    def __init__(self) -> None:
        self._by_worker: dict[int, tuple[TargetClient | DraftClient, list[int]]] = {}

    def add(self, worker: TargetClient | DraftClient, seq_id: int) -> None:
        self._by_worker.setdefault(id(worker), (worker, []))[1].append(seq_id)

    def flush(self) -> None:
        """Send every queued release (best effort: a lost worker has nothing to free)."""
        pending, self._by_worker = self._by_worker, {}
        for worker, seq_ids in pending.values():
            try:
                worker.release(seq_ids)
            except WorkerUnavailableError as e:
                logger.warning("could not release sequences %s: %s", seq_ids, e)

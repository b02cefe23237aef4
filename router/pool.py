"""Workers of one kind, which of them can be reached, and when to look again
for one that was lost."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import Generic, Protocol, TypeVar

logger = logging.getLogger(__name__)


class Probeable(Protocol):
    def probe(self, timeout_s: float) -> bool: ...


W = TypeVar("W", bound=Probeable)


class WorkerPool(Generic[W]):
    def __init__(self, workers: Sequence[W], kind: str, retry_s: float, probe_s: float):
        self.workers = list(workers)
        self.kind = kind
        self.retry_s = retry_s
        self.probe_s = probe_s
        self._lost_at: dict[int, float] = {}

    def __len__(self) -> int:
        return len(self.workers)

    def is_up(self, index: int) -> bool:
        return index not in self._lost_at

    def up(self) -> list[int]:
        """Indexes of the workers to use now; lost ones are probed once per retry_s."""
        now = time.monotonic()
        for index, lost_at in list(self._lost_at.items()):
            if now - lost_at < self.retry_s:
                continue
            if self.workers[index].probe(self.probe_s):
                logger.info("%s worker %d is back", self.kind, index)
                del self._lost_at[index]
            else:
                self._lost_at[index] = now
        return [i for i in range(len(self.workers)) if i not in self._lost_at]

    def lose(self, index: int, reason: object) -> None:
        logger.warning("%s worker %d lost: %s", self.kind, index, reason)
        self._lost_at[index] = time.monotonic()

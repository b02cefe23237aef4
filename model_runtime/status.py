"""The outcome of one sequence inside a batch (common.proto SequenceStatus)."""

from __future__ import annotations

import enum
from dataclasses import dataclass


class StatusCode(enum.IntEnum):
    OK = 0
    NOT_FOUND = 1  # no KV for the sequence: the router re-prefills it
    INVALID_ARGUMENT = 2
    RESOURCE_EXHAUSTED = 3  # the KV cache cannot hold its new tokens now
    INTERNAL = 4


@dataclass(frozen=True)
class SequenceStatus:
    code: StatusCode = StatusCode.OK
    message: str = ""

    @property
    def ok(self) -> bool:
        return self.code == StatusCode.OK


OK = SequenceStatus()

"""How a runner's forwards ran: counted by the runner and its graphs, and
reported by a worker's description."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class StepCounts:
    """How a runner's forwards ran, and the host seconds the slow kinds took:
    a capture, or an eager forward (whose launches include compiling any
    kernel variant not met before; those run at startup to compile the
    attention variants count too)."""

    replayed: int = 0
    captured: int = 0
    capture_s: float = 0.0
    eager: int = 0
    eager_s: float = 0.0

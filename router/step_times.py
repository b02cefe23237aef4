"""What a step costs, by its size (sequences or tokens in it), from the
latest few measured.

The estimate at a measured size is the median of its latest ``window``
times, so one slow step (a first call that compiles a kernel) does not
count. A size not measured yet is priced by straight-line interpolation
between the nearest measured sizes on either side, or as the nearest one
beyond the measured range. Sizes are kept exactly, not in power-of-two
buckets: a verify of 64 sequences with 4 drafts each (320 tokens) and one
with 7 (512) can differ by half, and sharing a bucket would give them one
price, whichever k was run last.
"""

from __future__ import annotations

import statistics
from bisect import bisect_left, insort
from collections import deque
from dataclasses import dataclass, field


@dataclass
class StepTimes:
    window: int
    times: dict[int, deque[float]] = field(default_factory=dict)
    _sizes: list[int] = field(default_factory=list)  # the measured sizes, sorted
    _medians: dict[int, float] = field(default_factory=dict)

    def add(self, size: int, seconds: float) -> None:
        latest = self.times.get(size)
        if latest is None:
            latest = self.times[size] = deque(maxlen=self.window)
            insort(self._sizes, size)
        latest.append(seconds)
        self._medians[size] = statistics.median(latest)

    def get(self, size: int) -> float | None:
        """The estimate for a step of ``size`` (None: nothing measured yet)."""
        sizes = self._sizes
        if not sizes:
            return None
        at = bisect_left(sizes, size)
        if at < len(sizes) and sizes[at] == size:
            return self._medians[size]
        if at == 0:
            return self._medians[sizes[0]]
        if at == len(sizes):
            return self._medians[sizes[-1]]
        below, above = sizes[at - 1], sizes[at]
        low, high = self._medians[below], self._medians[above]
        return low + (high - low) * (size - below) / (above - below)

"""What a step costs, by its size (sequences or tokens in it), from the
latest few measured.

The estimate at a measured size is the median of its latest ``window``
times, so once a size has three, one slow step (a first call that compiles
a kernel) does not count; with fewer, it is the least of them, as a step is
slowed (by compiling, by the host), never sped up, and a size measured only
once or twice (a probe's) must not keep a compile's price. A size not
measured yet is priced by straight-line interpolation between the nearest
measured sizes on either side; below the measured range, as the smallest;
above it, along the line through the smallest and the largest (never
falling: a bigger step does not cost less), so that a k never run is not
priced as the largest one measured, nor by the slope between two close
sizes, which a CUDA graph's padding can make steep: a price too high is
never tried again, one too low is tried and then measured. Sizes are kept
exactly, not in power-of-two buckets: a verify of 64 sequences with 4
drafts each (320 tokens) and one with 7 (512) can differ by half, and
sharing a bucket would give them one price, whichever k was run last.

Each size remembers when it was last measured (on a clock its owner keeps),
so that a price no longer refreshed can be forgotten (``forget``), all but
the latest measured: a size not run for long keeps the price of a moment
that is gone.
"""

from __future__ import annotations

import statistics
from bisect import bisect_left, insort
from collections import deque
from dataclasses import dataclass, field


@dataclass
class StepTimes:
    """The latest ``window`` seconds of each measured size, and their medians."""

    window: int
    _times: dict[int, deque[float]] = field(default_factory=dict, init=False, repr=False)
    _sizes: list[int] = field(default_factory=list, init=False, repr=False)  # sorted
    _medians: dict[int, float] = field(default_factory=dict, init=False, repr=False)
    _stamps: dict[int, int] = field(default_factory=dict, init=False, repr=False)
    _last: int | None = field(default=None, init=False, repr=False)  # the size added last

    def __post_init__(self) -> None:
        if self.window < 1:
            raise ValueError(f"window must be >= 1, got {self.window}")

    def add(self, size: int, seconds: float, at: int = 0) -> None:
        """A step of ``size`` took ``seconds``, measured at ``at`` on the owner's clock."""
        self._stamps[size], self._last = at, size
        latest = self._times.get(size)
        if latest is None:
            latest = self._times[size] = deque(maxlen=self.window)
            insort(self._sizes, size)
        latest.append(seconds)
        self._medians[size] = statistics.median(latest) if len(latest) >= 3 else min(latest)

    def forget(self, before: int) -> None:
        """Drop every size last measured before ``before``, but the one added last."""
        for size in [s for s, at in self._stamps.items() if at < before and s != self._last]:
            del self._times[size], self._medians[size], self._stamps[size]
            self._sizes.remove(size)

    def count(self, size: int) -> int:
        """How many times of ``size`` are kept."""
        return len(self._times.get(size, ()))

    def nearest(self, size: int) -> int | None:
        """The measured size nearest ``size`` (the smaller on a tie; None: none measured)."""
        at = bisect_left(self._sizes, size)
        near = self._sizes[max(at - 1, 0) : at + 1]
        return min(near, key=lambda s: abs(s - size)) if near else None

    def get(self, size: int) -> float | None:
        """The estimate for a step of ``size`` (None: nothing measured yet)."""
        sizes, medians = self._sizes, self._medians
        if not sizes:
            return None
        at = bisect_left(sizes, size)
        if at < len(sizes) and sizes[at] == size:
            return medians[size]
        if at == 0 or len(sizes) == 1:
            return medians[sizes[0]]  # below them all, or only one measured
        if at == len(sizes):  # beyond the largest: the slope over all measured
            first, last = sizes[0], sizes[-1]
            slope = (medians[last] - medians[first]) / (last - first)
            return medians[last] + max(slope, 0.0) * (size - last)
        below, above = sizes[at - 1], sizes[at]
        slope = (medians[above] - medians[below]) / (above - below)
        return medians[below] + slope * (size - below)

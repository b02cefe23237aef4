"""What can stall a round of a timed row, recorded while the row runs: the
Triton kernels compiled (a new specialisation of a kernel's arguments, met
for the first time), Python's full collections, and the CUDA caching
allocator's trips to the driver (new segments, and the retries that free
its cache first). Each is one round's worth of 10-500 ms, against rounds of
7-35 ms, and a row's round log cannot tell them apart.

    with stalls() as seen:
        ...
    seen  # {"compiles": [[name, s], ...], "full_collections": [{"generation": 2,
          #  "s": ..., "frozen": ..., "where": [...]}, ...], "cuda": {...}}
"""

from __future__ import annotations

import gc
import time
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
import triton

CUDA_COUNTERS = ("num_alloc_retries", "num_device_alloc", "num_device_free")


@contextmanager
def compiles() -> Iterator[list[list[Any]] | None]:
    """Each Triton kernel compiled (or loaded from Triton's disk cache) inside,
    as [kernel and its specialisation, seconds]; None where this Triton has
    no hooks to tell (before 3.4). Hooks already set still run."""
    runtime = getattr(getattr(triton, "knobs", None), "runtime", None)
    if runtime is None:
        yield None
        return
    before, after = runtime.jit_cache_hook, runtime.jit_post_compile_hook
    seen: list[list[Any]] = []
    started: list[float] = []

    def missed(**kwargs: Any) -> bool:  # the kernel's cache has no entry for these arguments
        started.append(time.perf_counter())
        return bool(before and before(**kwargs))  # true: the hook set before skips the compile

    def compiled(**kwargs: Any) -> Any:
        took = time.perf_counter() - started.pop() if started else float("nan")
        seen.append([kwargs.get("repr", "?"), round(took, 4)])
        return after(**kwargs) if after else None

    runtime.jit_cache_hook, runtime.jit_post_compile_hook = missed, compiled
    try:
        yield seen
    finally:
        runtime.jit_cache_hook, runtime.jit_post_compile_hook = before, after


def caller() -> list[str]:
    """Where a collection started: the innermost frames outside this module
    (an allocation that crossed a threshold, or an explicit gc.collect())."""
    frames = [
        f
        for f in traceback.extract_stack()[:-1]
        if f.filename not in (__file__, "<string>")  # <string>: a dataclass's __init__
    ]
    return [f"{Path(f.filename).name}:{f.lineno} {f.name}" for f in frames[-4:]]


@contextmanager
def collections(generations: tuple[int, ...] = (2,)) -> Iterator[list[dict[str, Any]]]:
    """Each collection of one of ``generations`` inside (the oldest, 2, by
    default: the full ones): its generation, seconds and how many objects
    were frozen (left out of it), and for a full one where it started."""
    seen: list[dict[str, Any]] = []
    started: list[dict[str, Any]] = []

    def callback(phase: str, info: dict[str, int]) -> None:
        generation = info["generation"]
        if generation not in generations:
            return
        if phase == "start":
            at = {"generation": generation, "frozen": gc.get_freeze_count()}
            if generation == 2:  # rare enough to pay for a stack
                at["where"] = caller()
            started.append({**at, "start": time.perf_counter()})
        elif started:
            one = started.pop()
            one["s"] = round(time.perf_counter() - one.pop("start"), 6)
            seen.append(one)

    gc.callbacks.append(callback)
    try:
        yield seen
    finally:
        gc.callbacks.remove(callback)


def cuda_counters() -> dict[str, int]:
    if not torch.cuda.is_available():
        return {}
    stats = torch.cuda.memory_stats()
    return {name: int(stats.get(name, 0)) for name in CUDA_COUNTERS}


@contextmanager
def stalls() -> Iterator[dict[str, Any]]:
    """Compiles, full collections and the allocator's driver calls inside."""
    seen: dict[str, Any] = {}
    before = cuda_counters()
    with compiles() as compiled, collections() as collected:
        try:
            yield seen
        finally:
            after = cuda_counters()
            seen.update(
                compiles=compiled,
                full_collections=collected,
                cuda={name: after[name] - before[name] for name in before},
            )

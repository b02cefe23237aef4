"""Python's full collections (0.1-0.3 s over a serving process's heap) do not
walk what a process built before it serves: a served process freezes its
startup heap for good, and ``LLM.generate`` freezes the heap and holds off
automatic full collections for the length of a call, then thaws it, so that
the program's objects, and an LLM it drops, are still freed
(model_runtime/heap.py)."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator
from contextlib import nullcontext
from typing import Any

import pytest

from model_runtime.heap import NO_FULL_COLLECTIONS, frozen_heap
from specserve import LLM, SamplingParams
from specserve.launch import service

SPEC = {"model": "specserve/demo-draft", "num_speculative_tokens": 3}
SHORT = SamplingParams(temperature=0, max_tokens=8)


def demo_llm() -> LLM:
    return LLM("specserve/demo-target", dtype="float32", max_model_len=256, speculative_config=SPEC)


def first_weight(llm: LLM) -> Any:
    return next(llm.engine.workers.target.runner.model.parameters())  # type: ignore[attr-defined]


@pytest.fixture
def thawed() -> Iterator[None]:
    gc.unfreeze()
    yield
    gc.unfreeze()


def test_generate_queues_and_runs_its_rounds_frozen_with_full_collections_held_off(
    thawed: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    llm = demo_llm()
    thresholds = gc.get_threshold()
    seen: list[tuple[int, int]] = []  # (frozen objects, oldest threshold) at each call

    def watched(method: Any) -> Any:
        def call(*args: Any) -> Any:
            seen.append((gc.get_freeze_count(), gc.get_threshold()[2]))
            return method(*args)

        return call

    monkeypatch.setattr(llm.engine, "add_request", watched(llm.engine.add_request))
    monkeypatch.setattr(llm.engine, "step", watched(llm.engine.step))
    llm.generate(["def f(x):"] * 4, SHORT)
    assert len(seen) > 4
    assert all(frozen > 0 and oldest == NO_FULL_COLLECTIONS for frozen, oldest in seen)
    assert gc.get_freeze_count() == 0  # thawed after the call
    assert gc.get_threshold() == thresholds


@pytest.fixture
def eager_collector() -> Iterator[None]:
    """Thresholds low enough that keeping 20,000 objects starts full
    collections whatever this Python's defaults, restored after."""
    thresholds = gc.get_threshold()
    gc.set_threshold(100, 2, 2)
    yield
    gc.set_threshold(*thresholds)


def full_collections_keeping(block: Any) -> tuple[list[list[int]], list[int]]:
    """Keep 20,000 new objects inside ``block`` (a context manager), after a
    full collection run while frozen (which leaves the collector counting a
    small oldest generation); the objects, and the full collections that
    started inside."""
    frozen_before = gc.get_freeze_count()
    gc.freeze()
    gc.collect()
    if not frozen_before:
        gc.unfreeze()
    inside: list[int] = []
    full: list[int] = []

    def callback(phase: str, info: dict[str, int]) -> None:
        if phase == "start" and info["generation"] == 2 and inside:
            full.append(1)

    gc.callbacks.append(callback)
    try:
        with block:
            inside.append(1)
            kept = [[i] for i in range(20_000)]
            inside.clear()
    finally:
        gc.callbacks.remove(callback)
    return kept, full


def test_keeping_this_many_objects_starts_full_collections_outside_a_call(
    thawed: None, eager_collector: None
) -> None:
    kept, full = full_collections_keeping(nullcontext())
    assert len(kept) == 20_000 and full  # the cases below would test nothing otherwise


def test_a_call_starts_no_full_collection_however_much_it_keeps(
    thawed: None, eager_collector: None
) -> None:
    thresholds = gc.get_threshold()
    kept, full = full_collections_keeping(frozen_heap())
    assert len(kept) == 20_000 and full == []
    assert gc.get_threshold() == thresholds


def test_a_call_holds_off_full_collections_where_the_program_froze_the_heap(
    thawed: None, eager_collector: None
) -> None:
    gc.freeze()  # the program's freeze (or a site hook's), which the call leaves be
    frozen = gc.get_freeze_count()
    kept, full = full_collections_keeping(frozen_heap())
    assert len(kept) == 20_000 and full == []
    assert gc.get_freeze_count() >= frozen


def test_a_call_that_raises_restores_the_threshold_and_thaws_the_heap(thawed: None) -> None:
    thresholds = gc.get_threshold()
    with pytest.raises(RuntimeError), frozen_heap():
        raise RuntimeError("a round failed")
    assert gc.get_threshold() == thresholds and gc.get_freeze_count() == 0


def test_generate_leaves_a_heap_the_program_froze_frozen(thawed: None) -> None:
    llm = demo_llm()
    gc.freeze()
    frozen = gc.get_freeze_count()
    llm.generate(["def f(x):"], SHORT)
    assert gc.get_freeze_count() >= frozen


def test_an_llm_dropped_by_an_owner_in_a_cycle_is_freed_by_a_full_collection(
    thawed: None,
) -> None:
    class Owner:
        pass

    owner = Owner()
    owner.me = owner  # type: ignore[attr-defined]
    owner.llm = demo_llm()  # type: ignore[attr-defined]
    owner.llm.generate(["def f(x):"], SHORT)  # type: ignore[attr-defined]
    weight = weakref.ref(first_weight(owner.llm))  # type: ignore[attr-defined]
    del owner
    gc.collect()  # the model's modules hold cycles too: only a full collection frees them
    assert weight() is None


def test_a_served_worker_freezes_its_startup_heap_before_it_is_ready() -> None:
    args = ("--model", "specserve/demo-draft", "--dtype", "float32")
    with service("draft-worker", *args, "--max-model-len", "256", "--num-kv-blocks", "64") as (
        _,
        process,
    ):
        lines = list(process.output_tail)  # type: ignore[attr-defined]
    frozen = [i for i, line in enumerate(lines) if "startup heap frozen" in line]
    ready = [i for i, line in enumerate(lines) if "ready on" in line]
    assert frozen and ready and frozen[0] < ready[0], "".join(lines)

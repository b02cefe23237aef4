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


def held_off(keep: int) -> tuple[list[list[int]], list[int]]:
    """Keep ``keep`` new objects inside ``frozen_heap``, after a full
    collection run while frozen (which leaves the collector counting a small
    oldest generation: what the block keeps would start full ones, if
    allowed); the objects, and the full collections that started inside."""
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
        with frozen_heap():
            inside.append(1)
            kept = [[i] for i in range(keep)]
            inside.clear()
    finally:
        gc.callbacks.remove(callback)
    return kept, full


def test_a_call_starts_no_full_collection_however_much_it_keeps(thawed: None) -> None:
    thresholds = gc.get_threshold()
    kept, full = held_off(100_000)
    assert len(kept) == 100_000 and full == []
    assert gc.get_threshold() == thresholds


def test_a_call_holds_off_full_collections_where_the_program_froze_the_heap(
    thawed: None,
) -> None:
    gc.freeze()  # the program's freeze (or a site hook's), which the call leaves be
    frozen = gc.get_freeze_count()
    kept, full = held_off(100_000)
    assert len(kept) == 100_000 and full == []
    assert gc.get_freeze_count() >= frozen


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

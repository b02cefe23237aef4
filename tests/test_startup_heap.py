"""A serving process freezes what its startup built, so that Python's full
collections (0.1-0.2 s over such a heap) do not stall rounds; an in-process
LLM thaws it again when it is freed (model_runtime/heap.py)."""

from __future__ import annotations

import gc
import weakref

from specserve import LLM
from specserve.launch import service

SPEC = {"model": "specserve/demo-draft", "num_speculative_tokens": 3}


def demo_llm() -> LLM:
    return LLM("specserve/demo-target", dtype="float32", max_model_len=256, speculative_config=SPEC)


def test_an_llm_leaves_its_startup_heap_out_of_full_collections() -> None:
    gc.unfreeze()
    llm = demo_llm()
    weight = next(llm.engine.workers.target.runner.model.parameters())  # type: ignore[attr-defined]
    assert gc.get_freeze_count() > 0
    assert not any(o is weight for o in gc.get_objects())  # a full collection skips it
    del weight, llm


def test_freeing_an_llm_frees_its_weights() -> None:
    llm = demo_llm()
    weight = weakref.ref(next(llm.engine.workers.target.runner.model.parameters()))  # type: ignore[attr-defined]
    del llm
    gc.collect()  # the model's modules hold cycles: only a full collection frees them
    assert weight() is None


def test_a_served_worker_freezes_its_startup_heap_before_it_is_ready() -> None:
    args = (
        "--model",
        "specserve/demo-draft",
        "--dtype",
        "float32",
        "--max-model-len",
        "256",
        "--num-kv-blocks",
        "64",
    )
    with service("draft-worker", *args) as (_, process):
        lines = list(process.output_tail)  # type: ignore[attr-defined]
    frozen = [i for i, line in enumerate(lines) if "startup heap frozen" in line]
    ready = [i for i, line in enumerate(lines) if "ready on" in line]
    assert frozen and ready and frozen[0] < ready[0], "".join(lines)

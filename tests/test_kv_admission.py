"""Nothing waits forever for KV room: a budget that cannot hold one sequence
of max_model_len is refused at startup, and a sequence that grows to
max_model_len on the smallest cache that holds it finishes."""

from __future__ import annotations

import subprocess
import sys

import pytest

from specserve import LLM, SamplingParams

SPEC = {"model": "specserve/demo-draft", "num_speculative_tokens": 5}


def test_a_kv_budget_smaller_than_one_sequence_is_refused() -> None:
    # 4 blocks of 16 tokens hold 64 tokens; max_model_len is 128.
    with pytest.raises(ValueError, match="num_kv_blocks 4 cannot hold one sequence of max_model"):
        LLM("specserve/demo-target", dtype="float32", max_model_len=128, num_kv_blocks=4)


def test_a_worker_with_too_small_a_budget_refuses_to_start() -> None:
    # The reproduction: 64 blocks beside a 2048-token context.
    flags = ["--model", "specserve/demo-target", "--max-model-len", "2048", "--num-kv-blocks", "64"]
    result = subprocess.run(
        [sys.executable, "-m", "specserve", "target-worker", *flags],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2, result.stderr
    assert "num_kv_blocks 64 cannot hold one sequence of max_model_len 2048" in result.stderr


@pytest.mark.parametrize("speculative_config", [None, SPEC], ids=["target-only", "speculative"])
def test_sequences_fill_the_smallest_cache_that_holds_one(
    speculative_config: dict | None,
) -> None:
    # Exactly one 128-token sequence fits (the engine reserves a round's k + 1
    # tokens, but never past max_model_len, so the cache needs no more).
    llm = LLM(
        "specserve/demo-target",
        speculative_config=speculative_config,
        dtype="float32",
        max_model_len=128,
        num_kv_blocks=8,
    )
    engine, params = llm.engine, SamplingParams(max_tokens=500, ignore_eos=True)
    seqs = [
        engine.add_request(str(i), engine.tokenizer.encode(prompt), params)[0]
        for i, prompt in enumerate(["def f(x):", "import os\n", "class A:\n"])
    ]
    for _ in range(1000):  # a bound: a wedged engine steps forever without progress
        if not engine.has_unfinished():
            break
        engine.step()
    assert [(s.finish_reason, s.num_tokens) for s in seqs] == [("length", 128)] * 3


def test_the_sequences_a_step_finishes_are_released_in_one_call_per_worker() -> None:
    llm = LLM("specserve/demo-target", speculative_config=SPEC, dtype="float32", max_model_len=128)
    engine = llm.engine
    calls: list[tuple[str, list[int]]] = []
    for name, worker in (("target", engine.workers.target), ("draft", engine.workers.drafts[0])):
        release = worker.release
        worker.release = lambda ids, name=name, release=release: (  # type: ignore[method-assign]
            calls.append((name, list(ids))) or release(ids)
        )
    params = SamplingParams(max_tokens=6, ignore_eos=True, temperature=0)
    for i in range(4):  # the same prompt: all four finish in the same step
        engine.add_request(str(i), engine.tokenizer.encode("def f(x):"), params)
    while engine.has_unfinished():
        engine.step()
    assert sorted(name for name, _ in calls) == ["draft", "target"]
    assert all(len(ids) == 4 for _, ids in calls)
    assert engine.workers.target.num_free_blocks == engine.workers.num_blocks


def test_aborting_a_waiting_request_drops_it_and_counts_it_aborted() -> None:
    llm = LLM("specserve/demo-target", dtype="float32", max_model_len=128, max_num_seqs=1)
    engine, params = llm.engine, SamplingParams(temperature=0, max_tokens=8)
    engine.add_request("runs", engine.tokenizer.encode("def f(x):"), params)
    engine.add_request("waits", engine.tokenizer.encode("def g(x):"), params)
    engine.step()
    assert [s.request_id for s in engine.waiting] == ["waits"]
    engine.abort("waits")
    assert not engine.waiting and engine.requests.finished == {"abort": 1}
    engine.abort("runs")
    assert not engine.running and engine.requests.finished == {"abort": 2}

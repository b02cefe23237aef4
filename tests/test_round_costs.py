"""The benchmarks' log of rounds (benchmarks/round_costs.py) and their fixed-k
rows (benchmarks/rows.py), on the bundled pair in the engine."""

from __future__ import annotations

import gc

import pytest
import triton

from benchmarks.choices import describe, measured_ms, tail_choices
from benchmarks.prompts import Workload
from benchmarks.round_costs import round_log, split
from benchmarks.rows import Fixed, decode
from benchmarks.stalls import collections, stalls
from specserve import LLM, SamplingParams

PROMPTS = ["def f(x):", "class A:", "import os"]


def make_llm() -> LLM:
    spec = {"model": "specserve/demo-draft", "num_speculative_tokens": 3}
    return LLM("specserve/demo-target", dtype="float32", max_model_len=256, speculative_config=spec)


def test_the_log_holds_every_round_and_every_token_the_rounds_gained() -> None:
    llm = make_llm()
    params = SamplingParams(temperature=0, max_tokens=20, ignore_eos=True)
    with round_log(llm.engine.rounds) as log:
        outs = llm.generate(PROMPTS, params, use_tqdm=False)
    rounds = llm.speculation_stats()["rounds_per_k"]
    assert isinstance(rounds, list)
    assert sum(entry[3] for entry in log) == sum(rounds)
    # Each prompt's prefill gives its first token; the rounds gave the rest.
    gained = sum(len(o.outputs[0].token_ids) for o in outs) - len(PROMPTS)
    assert sum(entry[5] for entry in log) == gained
    assert {size for size, *_ in log} <= {1, 2, 3}


def test_the_log_keeps_each_kind_of_rounds_slowest_between_their_mean_and_their_sum() -> None:
    llm = make_llm()
    params = SamplingParams(temperature=0, max_tokens=20, ignore_eos=True)
    with round_log(llm.engine.rounds) as log:
        llm.generate(PROMPTS, params, use_tqdm=False)
    for _, _, _, n, seconds, _, most in log:
        assert seconds / n <= most + 1e-6 and most <= seconds + 1e-6


def test_the_rounds_are_left_as_they_were_after_the_log() -> None:
    llm = make_llm()
    with round_log(llm.engine.rounds):
        pass
    assert "run" not in vars(llm.engine.rounds) and "skip_gap" not in vars(llm.engine.rounds)
    assert "record_round" not in vars(llm.engine.metrics)


def test_a_fixed_k_drafts_every_round_ahead_but_the_first_after_a_prefill() -> None:
    # As with adaptive_k off, no round is timed (a timed round drafts on the path).
    llm = make_llm()
    llm.engine.rounds.chooser = Fixed(3, 2)
    params = SamplingParams(temperature=0, max_tokens=24, ignore_eos=True)
    with round_log(llm.engine.rounds) as log:
        llm.generate(PROMPTS, params, use_tqdm=False)
    on_path = [entry for entry in log if not entry[2]]
    assert {k for _, k, *_ in log} == {2}
    assert sum(entry[3] for entry in on_path) == 1  # one prefill, of all three prompts


def test_split_parts_rounds_into_full_batch_ahead_on_path_and_tail() -> None:
    # [batch, k, drafts sent ahead, rounds, seconds, tokens]
    log = [
        [4, 2, 1, 10, 1.0, 40],
        [4, 2, 0, 3, 0.5, 12],
        [2, 3, 1, 2, 0.1, 6],
        [1, 3, 1, 1, 0.1, 2],
    ]
    parts = split(log, batch=4)
    assert parts["ahead"] == {2: [10, 1.0, 40]}
    assert parts["on path"] == {2: [3, 0.5, 12]}
    assert parts["tail"] == {3: [3, 0.2, 8]}


def test_stalls_times_each_full_collection_inside_and_leaves_the_hooks_as_they_were() -> None:
    runtime = triton.knobs.runtime
    hooks = (runtime.jit_cache_hook, runtime.jit_post_compile_hook)
    callbacks = list(gc.callbacks)
    with stalls() as seen:
        gc.collect(0)
        gc.collect()
    [collection] = seen["full_collections"]
    assert collection["s"] >= 0 and collection["frozen"] == gc.get_freeze_count()
    assert "test_round_costs.py" in collection["where"][-1]  # the explicit gc.collect()
    assert seen["compiles"] == []
    assert (runtime.jit_cache_hook, runtime.jit_post_compile_hook) == hooks
    assert gc.callbacks == callbacks


def test_stalls_records_each_compile_and_lets_it_and_the_hooks_set_before_run() -> None:
    runtime = triton.knobs.runtime
    hooks = (runtime.jit_cache_hook, runtime.jit_post_compile_hook)
    calls: list[str] = []
    runtime.jit_cache_hook = lambda **kw: calls.append("cache") or False
    runtime.jit_post_compile_hook = lambda **kw: calls.append("post")
    try:
        with stalls() as seen:
            # What Triton does on a cache miss: a false answer means compile it.
            assert not runtime.jit_cache_hook(key="k", repr="kernel[num_warps=4](x: *fp32)")
            runtime.jit_post_compile_hook(key="k", repr="kernel[num_warps=4](x: *fp32)")
    finally:
        runtime.jit_cache_hook, runtime.jit_post_compile_hook = hooks
    [(name, seconds)] = seen["compiles"]
    assert name.startswith("kernel[") and seconds >= 0
    assert calls == ["cache", "post"]


def test_collections_times_the_generations_asked_for_and_only_those() -> None:
    with collections((0,)) as seen:
        gc.collect(0)
        gc.collect()
    [young] = seen
    assert young["generation"] == 0 and young["s"] >= 0 and "where" not in young


def test_the_tail_log_holds_each_choice_over_fewer_sequences_than_the_full_batch() -> None:
    llm = make_llm()
    chooser = llm.engine.rounds.chooser
    assert chooser is not None and chooser.pinned is None
    lengths = [8, 16, 24]  # the batch shrinks to 2, then 1
    params = [SamplingParams(temperature=0, max_tokens=n, ignore_eos=True) for n in lengths]
    with tail_choices(chooser, full=3) as log:
        llm.generate(PROMPTS, params, use_tqdm=False)
    assert {entry[0] for entry in log} == {1, 2}
    for _, k, least, most, measured, prices, gains in log:
        assert 0 <= k <= 3
        assert (least, most) == (None, None) or least <= most <= 24  # (None: rooms unknown)
        assert len(prices) == len(gains) == 4 and set(measured) <= {0, 1, 2, 3}


def test_no_choice_is_logged_while_k_is_pinned() -> None:
    llm = make_llm()
    llm.engine.rounds.chooser = Fixed(3, 2)
    params = SamplingParams(temperature=0, max_tokens=12, ignore_eos=True)
    with tail_choices(llm.engine.rounds.chooser, full=8) as log:
        llm.generate(PROMPTS, params, use_tqdm=False)
    assert log == []


def test_the_chooser_is_left_as_it_was_after_the_tail_log() -> None:
    chooser = make_llm().engine.rounds.chooser
    assert chooser is not None
    with tail_choices(chooser, full=4):
        outer = vars(chooser)["choose"]
        with tail_choices(chooser, full=2):
            assert vars(chooser)["choose"] is not outer
        assert vars(chooser)["choose"] is outer
    assert "choose" not in vars(chooser)


def test_the_tail_reader_lays_each_size_s_prices_beside_the_pinned_rows() -> None:
    # Pinned k = 1 and k = 2 rounds at batch 3 took 10 and 20 ms; adaptive priced them 12 and 10.
    pinned = [{"k": k, "runs_round_costs": [[[3, k, 1, 2, ms * 2e-3, 8, ms * 1e-3]]]}
              for k, ms in ((1, 10.0), (2, 20.0))]  # fmt: skip
    measured = measured_ms(
        [*pinned, {"k": "adaptive", "runs_round_costs": [[[3, 2, 1, 9, 1.0, 8]]]}]
    )
    assert measured == pytest.approx({(3, 1): 10.0, (3, 2): 20.0})
    choices = [[3, 1, 4, 9, [1], [8.0, 12.0, 10.0], [1.0, 1.5, 1.8]]]
    (line,) = describe(choices, measured)
    assert line == "b3: chose 1; priced best 2; rooms 4-9; priced / pinned by k: - 1.20 0.50"


def test_a_refilled_row_runs_its_prompts_in_one_call_at_most_batch_at_a_time() -> None:
    llm = make_llm()
    llm.engine.rounds.chooser = Fixed(3, 2)
    calls = []
    generate = llm.generate
    llm.generate = lambda asked, *a, **kw: calls.append(len(asked)) or generate(asked, *a, **kw)  # type: ignore[method-assign]
    work = Workload(max_tokens=8, text=True, min_tokens=48, refill=True)  # 3 batches of 2
    _, tokens, log = decode(llm, 2, work)
    assert calls == [6] and len(tokens) == 6 and all(len(t) == 8 for t in tokens)
    assert max(size for size, *_ in log) == 2  # a new prompt took each place that came free
    assert llm.engine.scheduler.max_num_seqs == 256  # as built, after the row


def test_a_refilled_row_decodes_what_closed_batches_decode() -> None:
    llm = make_llm()
    llm.engine.rounds.chooser = Fixed(3, 2)
    closed = decode(llm, 2, Workload(max_tokens=8, text=True, min_tokens=48))[1]
    assert (
        decode(llm, 2, Workload(max_tokens=8, text=True, min_tokens=48, refill=True))[1] == closed
    )


def test_a_row_cannot_run_more_sequences_than_the_llm_was_built_for() -> None:
    llm = make_llm()
    with pytest.raises(ValueError, match="at most 256 sequences, not 300"):
        decode(llm, 300, Workload(max_tokens=4, text=True, refill=True))


@pytest.mark.parametrize("field", ["max_tokens", "min_tokens"])
def test_a_workload_of_no_tokens_is_refused(field: str) -> None:
    with pytest.raises(ValueError, match=f"{field} must be >= 1, got 0"):
        Workload(**{field: 0})  # type: ignore[arg-type]

"""Tensor parallelism on CPUs, over gloo: a target split over two ranks computes
the logits of one, speculates to the same greedy output, keeps its ranks' KV
caches in step, and refuses a split its heads cannot take."""

from __future__ import annotations

from collections.abc import Iterator
from functools import partial
from pathlib import Path

import pytest

from model_runtime.batch import SequenceChunk
from model_runtime.executors import MpExecutor
from model_runtime.rank import RankConfig
from model_runtime.specs import RunnerSpec
from specserve import LLM, SamplingParams
from target_worker.tensor_parallel import target_rank_worker
from target_worker.worker import TargetWorkerConfig
from tests.conftest import ARCHITECTURES, random_tokens, runner_of

PROMPTS = ["def fibonacci(n):", "import os\nimport sys\n", "class Stack:\n    def push(self, x):"]
SPEC = {"model": "specserve/demo-draft", "num_speculative_tokens": 4}


def ragged_batches() -> list[list[SequenceChunk]]:
    """Two prefills, then a decode step, a 6-draft verify and a new prefill together."""
    return [
        [SequenceChunk(1, random_tokens(9, 1), 1), SequenceChunk(2, random_tokens(5, 2), 2)],
        [
            SequenceChunk(1, random_tokens(1, 3), 1),
            SequenceChunk(2, random_tokens(7, 4), 7),
            SequenceChunk(3, random_tokens(6, 5), 1),
        ],
    ]


@pytest.mark.parametrize("architecture", ARCHITECTURES)
def test_two_ranks_compute_the_logits_of_one(
    checkpoints: dict[str, Path], architecture: str
) -> None:
    folder = checkpoints[architecture]
    single = runner_of(folder, num_blocks=16, dtype="float32", max_model_len=256)
    build = partial(target_rank_worker, TargetWorkerConfig())
    spec = RunnerSpec(str(folder), dtype="float32", num_kv_blocks=16, max_model_len=256)
    executor = MpExecutor(RankConfig(spec, 2, build, "target"))
    try:
        for chunks in ragged_batches():
            expected = single.forward(chunks)
            for rank, (logits, _) in enumerate(executor.run("forward", chunks)):
                difference = (logits - expected).abs().max().item()
                assert difference < 1e-4, f"rank {rank}: {difference}"
    finally:
        executor.shutdown()


@pytest.fixture(scope="module")
def tp1_output() -> list[list[int]]:
    whole = LLM(
        "specserve/demo-target", speculative_config=SPEC, dtype="float32", max_model_len=512
    )
    params = SamplingParams(temperature=0, max_tokens=24)
    return [o.outputs[0].token_ids for o in whole.generate(PROMPTS, params, use_tqdm=False)]


@pytest.fixture(scope="module")
def tp2() -> Iterator[LLM]:
    llm = LLM(
        "specserve/demo-target",
        tensor_parallel_size=2,
        distributed_executor_backend="mp",
        speculative_config=SPEC,
        dtype="float32",
        max_model_len=512,
    )
    yield llm
    llm.engine.workers.target.close()  # type: ignore[attr-defined]


def test_greedy_speculation_with_a_tp2_target_equals_tp1(
    tp2: LLM, tp1_output: list[list[int]]
) -> None:
    params = SamplingParams(temperature=0, max_tokens=24)
    split = tp2.generate(PROMPTS, params, use_tqdm=False)
    assert [o.outputs[0].token_ids for o in split] == tp1_output
    assert tp2.speculation_stats()["num_accepted_tokens"] > 0  # the split target verified drafts


def test_a_draft_split_over_two_ranks_drafts_as_one(tp1_output: list[list[int]]) -> None:
    # The target drafts for itself: the bundled draft has a single kv head.
    same = {"model": "specserve/demo-target", "num_speculative_tokens": 4, "adaptive_k": False}
    spec = {**same, "draft_tensor_parallel_size": 2}
    llm = LLM(
        "specserve/demo-target",
        speculative_config=spec,
        distributed_executor_backend="mp",
        dtype="float32",
        max_model_len=512,
    )
    try:
        params = SamplingParams(temperature=0, max_tokens=24)
        outputs = llm.generate(PROMPTS, params, use_tqdm=False)
        assert [o.outputs[0].token_ids for o in outputs] == tp1_output
        whole = LLM(
            "specserve/demo-target", speculative_config=same, dtype="float32", max_model_len=512
        )
        whole.generate(PROMPTS, params, use_tqdm=False)
        assert llm.speculation_stats() == whole.speculation_stats()  # the same drafts were accepted
    finally:
        for worker in (llm.engine.workers.target, *llm.engine.workers.drafts):
            worker.close()  # type: ignore[attr-defined]


def test_every_ranks_kv_cache_is_free_after_the_requests(tp2: LLM) -> None:
    tp2.generate(PROMPTS, SamplingParams(temperature=0.8, seed=3, max_tokens=16), use_tqdm=False)
    ranks = tp2.engine.workers.target.executor.run("describe")  # type: ignore[attr-defined]
    infos = [info for info, _ in ranks]
    assert [i.num_free_blocks for i in infos] == [i.num_blocks for i in infos]


def test_every_rank_holds_the_engines_max_model_len(tp2: LLM) -> None:
    ranks = tp2.engine.workers.target.executor.run("describe")  # type: ignore[attr-defined]
    assert [info.max_model_len for info, _ in ranks] == [512, 512]
    assert tp2.engine.max_model_len == 512


def test_a_size_that_does_not_divide_the_heads_is_refused(checkpoints: dict[str, Path]) -> None:
    folder = str(checkpoints["Qwen3ForCausalLM"])
    with pytest.raises(ValueError, match=r"tensor_parallel_size 3 does not divide num_attention"):
        LLM(folder, tensor_parallel_size=3, distributed_executor_backend="mp")

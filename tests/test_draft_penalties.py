"""The draft proposes under the penalties, bad words and grammar the target
verifies with: a draft that is the target itself then has every greedy draft
accepted; its token history follows its KV cache through rejections."""

from __future__ import annotations

import pytest
import torch

from draft_worker.penalties import DraftHistory
from model_runtime.sampling import SamplingOptions
from protos.messages import DraftedBatch, ProposeRequest, SequenceTokens
from specserve import LLM, SamplingParams, StructuredOutputsParams

PROMPTS = ["def fibonacci(n):", "import os\n", "class Stack:\n"]


@pytest.fixture(scope="module")
def twin() -> LLM:
    """The target drafting for itself: without the penalties in the draft,
    penalised drafts would be rejected wherever a penalty moves the argmax."""
    spec = {"model": "specserve/demo-target", "num_speculative_tokens": 3, "adaptive_k": False}
    return LLM("specserve/demo-target", dtype="float32", speculative_config=spec)


@pytest.mark.parametrize(
    "adjustments",
    [
        {"repetition_penalty": 1.3},
        {"frequency_penalty": 1.5},
        {"presence_penalty": 1.2, "frequency_penalty": 0.5},
        {"bad_words": ["return", "self"]},
        {"bad_words": ["numeric", "unittest.mock"]},  # several tokens: matched over drafts too
        {"structured_outputs": StructuredOutputsParams(regex=r"[a-z]+( [a-z]+)*\.")},
    ],
    ids=["repetition", "frequency", "presence", "bad-words", "long-bad-word", "grammar"],
)
def test_a_draft_that_is_the_target_has_every_adjusted_draft_accepted(
    twin: LLM,
    adjustments: dict,  # type: ignore[type-arg]
) -> None:
    before = twin.speculation_stats()
    params = SamplingParams(temperature=0, max_tokens=24, ignore_eos=True, **adjustments)
    adjusted = twin.generate(PROMPTS, params, use_tqdm=False)
    after = twin.speculation_stats()
    drafted = after["num_draft_tokens"] - before["num_draft_tokens"]  # type: ignore[operator]
    accepted = after["num_accepted_tokens"] - before["num_accepted_tokens"]  # type: ignore[operator]
    assert drafted > 0 and accepted == drafted
    plain = twin.generate(PROMPTS, SamplingParams(temperature=0, max_tokens=24), use_tqdm=False)
    assert [o.outputs[0].token_ids for o in adjusted] != [o.outputs[0].token_ids for o in plain]


def request(seq_id: int, cached: int, tokens: list[int]) -> ProposeRequest:
    options = SamplingOptions(presence_penalty=1.0, output_start=2)
    return ProposeRequest(SequenceTokens(seq_id, cached, tokens), options)


def test_the_history_keeps_what_the_cache_keeps_of_the_drafts() -> None:
    history = DraftHistory()
    first = [request(7, 0, [1, 2, 3])]  # prompt [1, 2], output [3]
    history.start(first, vocab_size=16, device=torch.device("cpu"))
    history.finish(first, DraftedBatch(torch.tensor([[4, 5, 6]])))  # the cache holds 4, 5
    # The target accepted draft 4 and rejected 5: the cache keeps 1, 2, 3, 4; 9 comes.
    penalties = history.start([request(7, 4, [9])], 16, torch.device("cpu"))
    assert penalties is not None
    assert history._tokens[7] == [1, 2, 3, 4, 9]
    counts = penalties.counts[0]
    assert counts.nonzero().flatten().tolist() == [3, 4, 9]  # the output's tokens alone
    history.forget([7])
    assert history.start([request(7, 0, [1, 2])], 16, torch.device("cpu")) is not None
    assert history._tokens[7] == [1, 2]

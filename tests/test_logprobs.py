"""Log-probabilities: the target's raw log-softmax at every generated (and,
when asked, prompt) position, equal to what transformers computes for the
same tokens, whether the tokens came from speculation or plain decoding."""

from __future__ import annotations

import pytest
import torch

import specserve
from specserve import LLM, SamplingParams
from specserve.outputs import RequestOutput
from tests.conftest import hf_logits

PROMPTS = ["def fibonacci(n):", "import os\nimport sys\n", "class Stack:\n    def push(self, x):"]
NUM_TOP = 3


@pytest.fixture(scope="module")
def speculative() -> LLM:
    spec = {"model": "specserve/demo-draft", "num_speculative_tokens": 4}
    return LLM("specserve/demo-target", speculative_config=spec, dtype="float32", max_model_len=512)


def reference_logprobs(output: RequestOutput) -> torch.Tensor:
    """transformers' log-softmax over prompt + completion: row i predicts token i + 1."""
    ids = output.prompt_token_ids + output.outputs[0].token_ids
    folder = specserve.resolve_model("specserve/demo-target")
    return torch.log_softmax(hf_logits(folder, ids), dim=-1)


def assert_position_matches(position: dict, chosen: int, row: torch.Tensor) -> None:
    top_values, top_ids = row.topk(NUM_TOP)
    assert set(position) == {chosen, *top_ids.tolist()}
    for rank, (token, value) in enumerate(
        zip(top_ids.tolist(), top_values.tolist(), strict=True), start=1
    ):
        assert position[token].logprob == pytest.approx(value, abs=1e-4)
        assert position[token].rank == rank
    assert position[chosen].logprob == pytest.approx(row[chosen].item(), abs=1e-4)
    assert position[chosen].rank == 1 + int((row > row[chosen]).sum())


@pytest.mark.parametrize("temperature", [0.0, 0.8])
def test_generated_logprobs_are_the_targets_raw_log_softmax(
    speculative: LLM, temperature: float
) -> None:
    params = SamplingParams(temperature=temperature, seed=7, max_tokens=24, logprobs=NUM_TOP)
    outputs = speculative.generate(PROMPTS, params, use_tqdm=False)
    assert sum(o.outputs[0].num_accepted_tokens for o in outputs) > 0  # drafts were accepted
    for output in outputs:
        completion = output.outputs[0]
        assert completion.logprobs is not None
        assert len(completion.logprobs) == len(completion.token_ids)
        reference = reference_logprobs(output)
        start = len(output.prompt_token_ids) - 1
        for i, (token, position) in enumerate(
            zip(completion.token_ids, completion.logprobs, strict=True)
        ):
            assert_position_matches(position, token, reference[start + i])
        expected = sum(
            p[t].logprob for t, p in zip(completion.token_ids, completion.logprobs, strict=True)
        )
        assert completion.cumulative_logprob == pytest.approx(expected)


def test_prompt_logprobs_cover_every_prompt_token_after_the_first(speculative: LLM) -> None:
    params = SamplingParams(temperature=0, max_tokens=4, prompt_logprobs=NUM_TOP)
    (output,) = speculative.generate(PROMPTS[:1], params, use_tqdm=False)
    assert output.prompt_logprobs is not None
    assert len(output.prompt_logprobs) == len(output.prompt_token_ids)
    assert output.prompt_logprobs[0] is None
    reference = reference_logprobs(output)
    for i, position in enumerate(output.prompt_logprobs[1:]):
        assert_position_matches(position, output.prompt_token_ids[i + 1], reference[i])
    assert output.outputs[0].logprobs is None  # not asked for


def test_without_logprobs_nothing_is_computed(speculative: LLM) -> None:
    (output,) = speculative.generate(PROMPTS[:1], SamplingParams(max_tokens=4), use_tqdm=False)
    assert output.prompt_logprobs is None
    assert output.outputs[0].logprobs is None
    assert output.outputs[0].cumulative_logprob is None


@pytest.mark.parametrize("field", ["logprobs", "prompt_logprobs"])
@pytest.mark.parametrize("value", [-1, 21])
def test_logprobs_out_of_range_are_refused(field: str, value: int) -> None:
    with pytest.raises(ValueError, match=rf"{field} must be in \[0, 20\], got {value}"):
        SamplingParams(**{field: value})  # type: ignore[arg-type]

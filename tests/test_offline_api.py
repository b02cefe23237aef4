"""The offline API as a vLLM user's scripts call it: LLM.chat, the prompt
forms of vllm.inputs, RequestOutput.metrics, get_metrics() with vLLM's metric
names, and the speculation summary shown when generate finishes."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from specserve import LLM, SamplingParams, StructuredOutputsParams, TextPrompt, TokensPrompt
from specserve.metrics_reader import Counter, Vector

GREEDY = SamplingParams(temperature=0, max_tokens=12)
SPEC = {"model": "specserve/demo-draft", "num_speculative_tokens": 3, "adaptive_k": False}


@pytest.fixture(scope="module")
def llm() -> LLM:
    return LLM("specserve/demo-target", dtype="float32", speculative_config=SPEC)


def texts(outputs: list) -> list[str]:  # type: ignore[type-arg]
    return [o.outputs[0].text for o in outputs]


def test_chat_answers_the_conversation_the_chat_template_renders(llm: LLM) -> None:
    conversation = [{"role": "user", "content": "Write a loop."}]
    rendered = llm.get_tokenizer().apply_chat_template(
        conversation, add_generation_prompt=True, tokenize=False
    )
    ids = llm.get_tokenizer().encode(rendered, add_special_tokens=False)
    (chat,) = llm.chat(conversation, GREEDY, use_tqdm=False)
    (plain,) = llm.generate([TokensPrompt(prompt_token_ids=ids)], GREEDY, use_tqdm=False)
    assert chat.outputs[0].token_ids == plain.outputs[0].token_ids
    assert chat.prompt == rendered
    two = llm.chat([conversation, [{"role": "user", "content": "hi"}]], GREEDY, use_tqdm=False)
    assert len(two) == 2 and two[0].outputs[0].token_ids == chat.outputs[0].token_ids


def test_every_prompt_form_gives_the_same_completion(llm: LLM) -> None:
    text = "def fibonacci(n):"
    ids = llm.get_tokenizer().encode(text)
    forms = [text, TextPrompt(prompt=text), TokensPrompt(prompt_token_ids=ids, prompt=text)]
    outputs = llm.generate(forms, GREEDY, use_tqdm=False)
    assert len(set(texts(outputs))) == 1
    assert [o.prompt for o in outputs] == [text] * 3
    with pytest.raises(ValueError, match="prompt_token_ids"):
        llm.generate([{"text": text}], GREEDY, use_tqdm=False)  # type: ignore[list-item]


def test_a_request_output_says_when_it_arrived_started_and_finished(llm: LLM) -> None:
    (out,) = llm.generate(["import os"], GREEDY, use_tqdm=False)
    m = out.metrics
    assert m is not None and m.first_scheduled_time is not None
    times = [m.arrival_time, m.first_scheduled_time, m.first_token_time, m.last_token_time]
    assert times == sorted(times) and m.finished_time == m.last_token_time
    assert m.time_in_queue is not None and m.time_in_queue >= 0


def test_get_metrics_reads_as_vllms_with_its_names(llm: LLM) -> None:
    before = {(m.name, tuple(m.labels.items())): m for m in llm.get_metrics()}
    outputs = llm.generate(["def f(x):", "class A:"], GREEDY, use_tqdm=False)
    after = {m.name: m for m in llm.get_metrics() if m.name != "vllm:request_success"}

    def grew(name: str) -> int:
        old = before[(name, (("model_name", "specserve/demo-target"),))]
        assert isinstance(old, Counter)
        new = after[name]
        assert isinstance(new, Counter) and new.labels == {"model_name": "specserve/demo-target"}
        return new.value - old.value

    assert grew("vllm:generation_tokens") == sum(len(o.outputs[0].token_ids) for o in outputs)
    assert grew("vllm:prompt_tokens") == sum(len(o.prompt_token_ids) for o in outputs)
    drafted, accepted = (
        grew("vllm:spec_decode_num_draft_tokens"),
        grew("vllm:spec_decode_num_accepted_tokens"),
    )
    assert drafted > 0 and 0 <= accepted <= drafted
    per_position = after["vllm:spec_decode_num_accepted_tokens_per_pos"]
    assert isinstance(per_position, Vector) and len(per_position.values) == 3
    success = [m for m in llm.get_metrics() if m.name == "vllm:request_success"]
    assert {m.labels["finished_reason"] for m in success} >= {"length"}


def test_generate_shows_the_speculation_summary_without_any_logging_setup() -> None:
    script = (
        "from specserve import LLM, SamplingParams;"
        "llm = LLM('specserve/demo-target', dtype='float32', speculative_config="
        "{'model': 'specserve/demo-draft', 'num_speculative_tokens': 3});"
        "llm.generate(['def f(x):'], SamplingParams(max_tokens=8), use_tqdm=False)"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300, check=True
    )
    assert "speculation: acceptance rate" in done.stderr


@pytest.fixture(scope="module")
def target_only() -> LLM:
    return LLM("specserve/demo-target", dtype="float32")


def test_logit_bias_and_min_tokens_give_the_target_alones_greedy_output(
    llm: LLM, target_only: LLM
) -> None:
    prompts = ["def fibonacci(n):", "import os\n"]
    plain = llm.generate(prompts, GREEDY, use_tqdm=False)
    first, second = plain[0].outputs[0].token_ids[:2]
    cases = [
        SamplingParams(temperature=0, max_tokens=12, logit_bias={first: -100.0}),
        SamplingParams(temperature=0, max_tokens=12, stop_token_ids=[second], min_tokens=6),
    ]
    for params in cases:
        spec = [o.outputs[0].token_ids for o in llm.generate(prompts, params, use_tqdm=False)]
        alone = target_only.generate(prompts, params, use_tqdm=False)
        assert spec == [o.outputs[0].token_ids for o in alone]
    biased, stopped = (llm.generate(prompts[:1], p, use_tqdm=False)[0] for p in cases)
    assert biased.outputs[0].token_ids[0] != first
    assert len(stopped.outputs[0].token_ids) >= 6
    assert second not in stopped.outputs[0].token_ids[:6]


def test_token_ids_outside_the_vocabulary_are_refused(llm: LLM) -> None:
    with pytest.raises(ValueError, match="outside"):
        llm.generate(["x"], SamplingParams(logit_bias={10**6: 1.0}), use_tqdm=False)


def test_without_detokenizing_only_token_ids_come_back(llm: LLM) -> None:
    bare = SamplingParams(temperature=0, max_tokens=8, detokenize=False)
    (out,) = llm.generate(["def f(x):"], bare, use_tqdm=False)
    (text,) = llm.generate(
        ["def f(x):"], SamplingParams(temperature=0, max_tokens=8), use_tqdm=False
    )
    assert out.outputs[0].text == "" and out.outputs[0].token_ids == text.outputs[0].token_ids
    with pytest.raises(ValueError, match="stop strings need the text"):
        SamplingParams(detokenize=False, stop=["x"])


@pytest.mark.parametrize(
    "penalties",
    [
        {"repetition_penalty": 1.3},
        {"frequency_penalty": 1.5},
        {"presence_penalty": 1.2, "frequency_penalty": 0.5},
    ],
    ids=["repetition", "frequency", "presence"],
)
def test_penalties_give_the_target_alones_greedy_output(
    llm: LLM,
    target_only: LLM,
    penalties: dict,  # type: ignore[type-arg]
) -> None:
    # Each verify row is penalised as if the drafts before it were accepted.
    prompts = ["def fibonacci(n):", "import os\n", "class Stack:\n"]
    params = SamplingParams(temperature=0, max_tokens=24, **penalties)
    spec = [o.outputs[0].token_ids for o in llm.generate(prompts, params, use_tqdm=False)]
    alone = [o.outputs[0].token_ids for o in target_only.generate(prompts, params, use_tqdm=False)]
    plain = llm.generate(prompts, SamplingParams(temperature=0, max_tokens=24), use_tqdm=False)
    assert spec == alone
    assert spec != [o.outputs[0].token_ids for o in plain]  # the penalties did something


def test_a_stop_string_can_stay_in_the_text_and_a_prompt_be_cut_to_its_tail(llm: LLM) -> None:
    text = llm.generate(["def fibonacci(n):"], GREEDY, use_tqdm=False)[0].outputs[0].text
    stop = text[3:6]
    kept = SamplingParams(
        temperature=0, max_tokens=12, stop=[stop], include_stop_str_in_output=True
    )
    (out,) = llm.generate(["def fibonacci(n):"], kept, use_tqdm=False)
    assert out.outputs[0].text.endswith(stop) and out.outputs[0].stop_reason == stop
    ids = llm.get_tokenizer().encode("import os\nimport sys\ndef main():")
    cut = SamplingParams(temperature=0, max_tokens=6, truncate_prompt_tokens=4)
    (tail,) = llm.generate([TokensPrompt(prompt_token_ids=ids)], cut, use_tqdm=False)
    (alone,) = llm.generate([TokensPrompt(prompt_token_ids=ids[-4:])], GREEDY, use_tqdm=False)
    assert tail.prompt_token_ids == ids[-4:]
    assert tail.outputs[0].token_ids == alone.outputs[0].token_ids[:6]


def test_bad_words_never_appear_and_the_output_is_the_target_alones(
    llm: LLM, target_only: LLM
) -> None:
    prompts = ["def fibonacci(n):", "import os\n"]
    plain = llm.generate(prompts, SamplingParams(temperature=0, max_tokens=24), use_tqdm=False)
    words = [w for w in plain[0].outputs[0].text.split() if w.isidentifier()][:2]
    assert words, plain[0].outputs[0].text
    params = SamplingParams(temperature=0, max_tokens=24, bad_words=words)
    spec = llm.generate(prompts, params, use_tqdm=False)
    alone = target_only.generate(prompts, params, use_tqdm=False)
    assert [o.outputs[0].token_ids for o in spec] == [o.outputs[0].token_ids for o in alone]
    tokenizer = llm.get_tokenizer()
    for out in spec:
        ids = out.outputs[0].token_ids
        for word in words:
            for text in (word, " " + word):
                seq = tokenizer.encode(text, add_special_tokens=False)
                assert not any(ids[i : i + len(seq)] == seq for i in range(len(ids))), word


def test_structured_outputs_offline_fit_the_schema_and_are_the_target_alones(
    llm: LLM, target_only: LLM
) -> None:
    schema = {
        "type": "object",
        "properties": {"ok": {"type": "boolean"}, "n": {"type": "integer", "maximum": 9}},
        "required": ["ok", "n"],
        "additionalProperties": False,
    }
    params = SamplingParams(
        temperature=0,
        max_tokens=80,
        structured_outputs=StructuredOutputsParams(json=schema, disable_any_whitespace=True),
    )
    (spec,) = llm.generate(["Reply in JSON:"], params, use_tqdm=False)
    (alone,) = target_only.generate(["Reply in JSON:"], params, use_tqdm=False)
    assert spec.outputs[0].token_ids == alone.outputs[0].token_ids
    reply = json.loads(spec.outputs[0].text)
    assert set(reply) == {"ok", "n"} and isinstance(reply["ok"], bool) and reply["n"] <= 9

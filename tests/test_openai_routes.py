"""What a vLLM user's scripts meet besides the two completion routes: vLLM's
/tokenize, /detokenize and /ping, a model's card, echo with max_tokens 0,
chat content as parts, the role-only first chunk, stop_reason, the usage of a
truncated prompt, and clear refusals of what the server does not do (it keeps
serving)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

import openai
import pytest
from openai import OpenAI

MODEL = "specserve/demo-target"


def client(server: str) -> OpenAI:
    return OpenAI(api_key="EMPTY", base_url=f"{server}/v1")


def post(server: str, path: str, body: bytes | dict[str, Any]) -> tuple[int, dict[str, Any]]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    request = urllib.request.Request(f"{server}{path}", data, {"content-type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=60) as reply:
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def test_tokenize_and_detokenize_round_trip_through_the_served_tokenizer(server: str) -> None:
    status, tokens = post(server, "/tokenize", {"prompt": "def f(x):", "return_token_strs": True})
    assert status == 200
    assert tokens["count"] == len(tokens["tokens"]) == len(tokens["token_strs"])
    assert tokens["max_model_len"] == 2048
    assert post(server, "/detokenize", {"tokens": tokens["tokens"]}) == (
        200,
        {"prompt": "def f(x):"},
    )


def test_tokenize_renders_chat_messages_as_the_chat_route_does(server: str) -> None:
    messages = [{"role": "user", "content": "hi"}]
    _, tokens = post(server, "/tokenize", {"messages": messages})
    reply = client(server).chat.completions.create(model=MODEL, messages=messages, max_tokens=1)
    assert reply.usage is not None and reply.usage.prompt_tokens == tokens["count"]


def test_ping_and_a_models_card_answer_as_vllms_do(server: str) -> None:
    with urllib.request.urlopen(f"{server}/ping", timeout=10) as reply:
        assert reply.status == 200
    card = client(server).models.retrieve(MODEL)
    assert card.id == MODEL and card.model_extra is not None
    assert card.model_extra["root"] == MODEL and card.model_extra["permission"] == []
    with pytest.raises(openai.NotFoundError):
        client(server).models.retrieve("no-such-model")


def test_echo_with_max_tokens_0_gives_the_prompt_and_its_logprobs_alone(server: str) -> None:
    # What lm-evaluation-harness sends to score a text.
    reply = client(server).completions.create(
        model=MODEL, prompt="def f(x):", max_tokens=0, echo=True, logprobs=1
    )
    choice = reply.choices[0]
    assert choice.text == "def f(x):"
    assert choice.logprobs is not None and choice.logprobs.token_logprobs is not None
    assert choice.logprobs.token_logprobs[0] is None  # the first token has no context
    assert all(v is not None and v <= 0 for v in choice.logprobs.token_logprobs[1:])
    assert reply.usage is not None and reply.usage.completion_tokens == 0
    with pytest.raises(openai.BadRequestError, match="echo"):
        client(server).completions.create(model=MODEL, prompt="x", max_tokens=0)


def test_chat_content_as_text_parts_reads_as_the_same_string(server: str) -> None:
    def ask(content: Any) -> str | None:
        messages = [{"role": "user", "content": content}]
        reply = client(server).chat.completions.create(
            model=MODEL, messages=messages, max_tokens=8, temperature=0
        )
        return reply.choices[0].message.content

    parts = [{"type": "text", "text": "def f"}, {"type": "text", "text": "(x):"}]
    assert ask(parts) == ask("def f\n(x):")


def test_a_streamed_chat_opens_with_a_chunk_of_the_role_alone(server: str) -> None:
    stream = client(server).chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=4, stream=True
    )
    chunks = list(stream)
    assert chunks[0].choices[0].delta.role == "assistant"
    assert chunks[0].choices[0].delta.content == ""
    assert all(c.choices[0].delta.role is None for c in chunks[1:])


def test_stop_reason_names_the_stop_string_that_ended_a_choice(server: str) -> None:
    c = client(server)
    free = c.completions.create(model=MODEL, prompt="def f(x):", max_tokens=16, temperature=0)
    stop = free.choices[0].text[4:7]
    stopped = c.completions.create(
        model=MODEL, prompt="def f(x):", max_tokens=16, temperature=0, stop=[stop]
    )
    choice = stopped.choices[0]
    assert choice.finish_reason == "stop" and choice.model_extra is not None
    assert choice.model_extra["stop_reason"] == stop
    assert free.choices[0].model_extra is not None
    assert free.choices[0].model_extra["stop_reason"] is None  # it ran to max_tokens


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b'{"prompt": "x", ', "not valid JSON"),
        ({"prompt": "x", "stream_options": {"include_usage": True}}, "stream is true"),
        ({"prompt": "x", "best_of": 2}, "best_of=2 is not supported"),
        ({"prompt": "x", "suffix": "y"}, "suffix='y' is not supported"),
        ({"prompt": "x", "frobnicate": 1}, "frobnicate: unknown field"),
    ],
    ids=["malformed-json", "stream-options-alone", "best-of", "suffix", "unknown-field"],
)
def test_what_the_server_does_not_do_is_refused_by_name(
    server: str, body: bytes | dict[str, Any], message: str
) -> None:
    status, reply = post(server, "/v1/completions", body)
    assert status == 400 and message in reply["error"]["message"]
    # and it keeps serving; a field at the value that asks for nothing is taken
    ok = {"prompt": "x", "max_tokens": 2, "suffix": None, "best_of": 1}
    assert post(server, "/v1/completions", ok)[0] == 200


def test_logit_bias_and_min_tokens_shape_the_completion(server: str) -> None:
    c = client(server)
    forced = c.completions.create(
        model=MODEL, prompt="def f(x):", max_tokens=3, temperature=0, logit_bias={"42": 100}
    )
    assert forced.usage is not None and forced.usage.completion_tokens == 3
    status, tokens = post(
        server, "/tokenize", {"prompt": forced.choices[0].text, "add_special_tokens": False}
    )
    assert tokens["tokens"] == [42, 42, 42]
    free = c.completions.create(model=MODEL, prompt="def f(x):", max_tokens=8, temperature=0)
    (stop_id,) = post(
        server, "/tokenize", {"prompt": free.choices[0].text[:1], "add_special_tokens": False}
    )[1]["tokens"][:1]
    held = c.completions.create(
        model=MODEL, prompt="def f(x):", max_tokens=8, temperature=0,
        extra_body={"stop_token_ids": [stop_id], "min_tokens": 5},
    )  # fmt: skip
    assert held.usage is not None and held.usage.completion_tokens >= 5
    status, refused = post(server, "/v1/completions", {"prompt": "x", "logit_bias": {"9999999": 1}})
    assert status == 400 and "outside" in refused["error"]["message"]


def test_usage_counts_the_prompt_as_truncate_prompt_tokens_kept_it(server: str) -> None:
    whole = list(range(100, 130))
    reply = client(server).completions.create(
        model=MODEL, prompt=whole, max_tokens=2, n=2, temperature=0,
        extra_body={"truncate_prompt_tokens": 8},
    )  # fmt: skip
    assert reply.usage is not None and reply.usage.prompt_tokens == 8

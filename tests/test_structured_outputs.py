"""Structured outputs through the stock openai client: JSON that fits a
schema, a choice, a regex, a grammar; with speculation on (the session's
server) and off (a target-only server); exact under speculation (greedy
equals the target alone); and a schema the grammar engine refuses is a 400
while the server keeps serving."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import jsonschema
import openai
import pytest
from openai import OpenAI

from specserve.launch import service

SCHEMA = {
    "type": "object",
    "properties": {
        "answer": {"enum": ["yes", "no"]},
        "count": {"type": "integer", "minimum": 0, "maximum": 99},
        "name": {"type": "string", "maxLength": 8},
    },
    "required": ["answer", "count", "name"],
    "additionalProperties": False,
}
MODEL = "specserve/demo-target"
MESSAGES = [{"role": "user", "content": "Is it raining? Answer in JSON."}]


@pytest.fixture(scope="module")
def target_only() -> Iterator[str]:
    flags = ("--host", "127.0.0.1", "--dtype", "float32", "--max_model_len", "2048")
    with service("serve", MODEL, *flags) as (address, _):
        yield f"http://{address}"


@pytest.fixture(params=["speculative", "target-only"])
def base(request: pytest.FixtureRequest, server: str, target_only: str) -> str:
    return server if request.param == "speculative" else target_only


def client(base: str) -> OpenAI:
    return OpenAI(api_key="EMPTY", base_url=f"{base}/v1")


def schema_format() -> dict[str, Any]:
    return {"type": "json_schema", "json_schema": {"name": "reply", "schema": SCHEMA}}


@pytest.mark.parametrize(
    ("temperature", "asked"),
    [
        (0.0, {"response_format": schema_format()}),
        # Compact JSON: a small model at 0.8 may otherwise wander in whitespace.
        (0.8, {"structured_outputs": {"json": SCHEMA, "disable_any_whitespace": True}}),
    ],
    ids=["greedy-response-format", "sampled-structured-outputs"],
)
def test_a_schema_constrained_chat_reply_validates_against_its_schema(
    base: str, temperature: float, asked: dict[str, Any]
) -> None:
    reply = client(base).chat.completions.create(
        model=MODEL,
        messages=MESSAGES,  # type: ignore[arg-type]
        temperature=temperature,
        seed=7,
        max_tokens=300,
        extra_body=asked,
    )
    choice = reply.choices[0]
    assert choice.finish_reason == "stop", choice.message.content
    jsonschema.validate(json.loads(choice.message.content or ""), SCHEMA)


def test_greedy_structured_output_is_the_target_alones(server: str, target_only: str) -> None:
    def tokens(base: str, body: dict[str, Any]) -> list[str]:
        reply = client(base).completions.create(
            model=MODEL, prompt="Answer in JSON:", max_tokens=60, temperature=0,
            logprobs=0, extra_body=body,
        )  # fmt: skip
        assert reply.choices[0].logprobs is not None
        return list(reply.choices[0].logprobs.tokens or [])

    for body in (
        {"guided_json": SCHEMA},
        {"guided_regex": r"[a-z]{3,9}( [a-z]{2,9}){2}\."},
        {"guided_grammar": 'start: "x = " NUMBER\nNUMBER: /[0-9]{1,4}/'},
    ):
        assert tokens(server, body) == tokens(target_only, body), body


def test_a_choice_a_regex_and_a_grammar_shape_the_text(server: str) -> None:
    c = client(server)

    def text(**body: Any) -> str:
        reply = c.completions.create(model=MODEL, prompt="x", max_tokens=40, extra_body=body)
        return reply.choices[0].text

    assert text(guided_choice=["red", "green", "blue"]) in {"red", "green", "blue"}
    assert re.fullmatch(r"\d{3}-\d{4}", text(guided_regex=r"\d{3}-\d{4}"))
    assert text(guided_grammar='start: "ab" | "abab" "!"') in {"ab", "abab!"}  # Lark
    assert text(guided_grammar='root ::= "c" "d"?') in {"c", "cd"}  # GBNF
    # Greedy: sampled at temperature 1, about a quarter of these objects are
    # still open after 40 tokens (a valid prefix, cut by max_tokens).
    json_object = {"json_object": True, "disable_any_whitespace": True}
    obj = text(structured_outputs=json_object, temperature=0)
    assert isinstance(json.loads(obj), dict)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"response_format": {"type": "json_schema", "json_schema": {"schema": {"type": "wat"}}}},
         "Invalid type: wat"),
        ({"guided_regex": "(unclosed"}, "unclosed group"),
        ({"guided_grammar": "start: nowhere"}, "unknown name"),
        ({"guided_choice": ["a"], "guided_regex": "a"}, "one way of structuring"),
        ({"response_format": {"type": "yaml"}}, "'yaml' is not one of"),
    ],
    ids=["bad-schema", "bad-regex", "bad-grammar", "two-at-once", "unknown-format"],
)  # fmt: skip
def test_what_the_grammar_engine_refuses_is_a_400_and_serving_goes_on(
    server: str, body: dict[str, Any], message: str
) -> None:
    c = client(server)
    with pytest.raises(openai.BadRequestError, match=re.escape(message)):
        c.completions.create(model=MODEL, prompt="x", max_tokens=4, extra_body=body)
    assert c.completions.create(model=MODEL, prompt="x", max_tokens=2).choices[0].text is not None

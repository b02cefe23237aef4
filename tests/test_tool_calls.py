"""Tool calls on chat completions through the stock openai client: a
required or named call is held to its tool's schema by the grammar engine
(streamed or not), "auto" needs the server's tool-call parser, Hermes-style
calls are read from the text as it streams, and a tool's result in the next
request reaches the chat template."""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import openai
import pytest
from openai import OpenAI

from gateway.hermes import HermesParser, parse
from tests.test_openai_routes import post

MODEL = "specserve/demo-target"
WEATHER = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "maxLength": 12},
        "unit": {"enum": ["celsius", "fahrenheit"]},
    },
    "required": ["city", "unit"],
    "additionalProperties": False,
}
TIME = {
    "type": "object",
    "properties": {"zone": {"enum": ["UTC", "CET"]}},
    "required": ["zone"],
    "additionalProperties": False,
}
TOOLS: list[Any] = [
    {"type": "function", "function": {"name": "get_weather", "parameters": WEATHER}},
    {"type": "function", "function": {"name": "get_time", "parameters": TIME}},
]
SCHEMAS = {"get_weather": WEATHER, "get_time": TIME}
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]


def client(base: str) -> OpenAI:
    return OpenAI(api_key="EMPTY", base_url=f"{base}/v1")


def ask(server: str, choice: Any, **extra: Any) -> Any:
    return client(server).chat.completions.create(
        model=MODEL, messages=ASK, tools=TOOLS, tool_choice=choice, **{"max_tokens": 200, **extra}
    )


def check_calls(calls: list[Any]) -> None:
    assert calls
    for call in calls:
        assert call.type == "function" and call.id
        jsonschema.validate(json.loads(call.function.arguments), SCHEMAS[call.function.name])


@pytest.mark.parametrize(
    ("temperature", "parallel"), [(0.0, True), (0.8, False)], ids=["greedy", "sampled-one"]
)
def test_a_required_call_returns_valid_arguments(
    server: str, temperature: float, parallel: bool
) -> None:
    reply = ask(server, "required", temperature=temperature, seed=3, parallel_tool_calls=parallel)
    choice = reply.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    check_calls(choice.message.tool_calls)
    assert parallel or len(choice.message.tool_calls) == 1


def test_a_named_call_is_that_function_with_valid_arguments(server: str) -> None:
    choice = {"type": "function", "function": {"name": "get_time"}}
    reply = ask(server, choice, temperature=0)
    (call,) = reply.choices[0].message.tool_calls
    assert call.function.name == "get_time"
    check_calls([call])


def test_a_streamed_required_call_arrives_as_tool_call_deltas(server: str) -> None:
    chunks = list(ask(server, "required", temperature=0, stream=True))
    calls = [c for ch in chunks for c in (ch.choices[0].delta.tool_calls or [])]
    check_calls(calls)
    assert chunks[-1].choices[0].finish_reason == "tool_calls"


def test_a_streamed_named_call_streams_its_arguments(server: str) -> None:
    choice = {"type": "function", "function": {"name": "get_weather"}}
    chunks = list(ask(server, choice, temperature=0, stream=True))
    pieces = [c for ch in chunks for c in (ch.choices[0].delta.tool_calls or [])]
    assert len(pieces) > 1 and pieces[0].id and pieces[0].function.name == "get_weather"
    arguments = "".join(p.function.arguments or "" for p in pieces)
    jsonschema.validate(json.loads(arguments), WEATHER)
    assert chunks[-1].choices[0].finish_reason == "tool_calls"


def test_auto_needs_the_servers_tool_call_parser(server: str) -> None:
    with pytest.raises(openai.BadRequestError, match="--enable-auto-tool-choice"):
        ask(server, "auto")
    with pytest.raises(openai.BadRequestError, match="not in tools"):
        ask(server, {"type": "function", "function": {"name": "nope"}})
    reply = ask(server, "none", temperature=0, max_tokens=8)  # plain text: tools left out
    assert reply.choices[0].message.tool_calls is None


def test_a_tools_result_reaches_the_chat_template(server: str) -> None:
    call = {"id": "call-1", "type": "function",
            "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}  # fmt: skip
    messages = [
        *ASK,
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call-1", "content": "18 degrees and sunny"},
    ]
    status, tokens = post(server, "/tokenize", {"model": MODEL, "messages": messages})
    assert status == 200
    _, text = post(server, "/detokenize", {"model": MODEL, "tokens": tokens["tokens"]})
    assert "18 degrees and sunny" in text["prompt"]
    reply = client(server).chat.completions.create(
        model=MODEL,
        messages=messages,
        tools=TOOLS,
        tool_choice="none",
        max_tokens=4,  # type: ignore[arg-type]
    )
    assert reply.choices[0].message.content is not None


HERMES = (
    "Let me look.\n<tool_call>\n"
    '{"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}\n'
    '</tool_call>\n<tool_call>{"name": "get_time", "arguments": {"zone": "UTC"}}</tool_call>'
)


def test_hermes_calls_are_read_from_a_whole_reply() -> None:
    content, calls = parse(HERMES)
    assert content == "Let me look."
    assert [(c.name, json.loads(c.arguments)) for c in calls] == [
        ("get_weather", {"city": "Paris", "unit": "celsius"}),
        ("get_time", {"zone": "UTC"}),
    ]
    assert parse("<tool_call>{not json}</tool_call>") == ("<tool_call>{not json}</tool_call>", [])


@pytest.mark.parametrize("size", [1, 4, 11])
def test_hermes_calls_stream_whole_and_no_tag_leaks_into_the_content(size: int) -> None:
    parser, content, calls = HermesParser(), "", []
    for i in range(0, len(HERMES), size):
        said, closed = parser.feed(HERMES[i : i + size])
        assert "<" not in said  # a tag's start is held back until it is known
        content, calls = content + said, calls + closed
    said, closed = parser.feed("", final=True)
    assert (content + said).strip() == "Let me look."
    assert [c.name for c in calls + closed] == ["get_weather", "get_time"]

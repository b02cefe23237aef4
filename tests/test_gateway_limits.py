"""The gateway under hostile input and load: bodies and prompts too large to
read or tokenize are refused before they cost anything, values no sampler can
use are 400s, and a full server answers 429 with Retry-After; every refusal
is OpenAI's error JSON and the server keeps serving."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from email.message import Message
from http.client import HTTPResponse

import pytest

from specserve.launch import service

MAX_PENDING = 2


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    flags = ("--host", "127.0.0.1", "--dtype", "float32", "--max-model-len", "512")
    limits = ("--max-request-body-bytes", str(1 << 20), "--max-pending-requests", str(MAX_PENDING))
    with service("serve", "specserve/demo-target", *flags, *limits) as (address, _):
        yield f"http://{address}"


def post(base: str, body: bytes) -> tuple[int, dict, Message]:
    request = urllib.request.Request(
        f"{base}/v1/completions", data=body, headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=120) as reply:
            return reply.status, json.loads(reply.read()), reply.headers
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read()), e.headers


def still_serves(base: str) -> bool:
    return post(base, b'{"prompt": "def f():", "max_tokens": 2}')[0] == 200


def test_a_body_over_the_limit_is_refused_unread(server: str) -> None:
    body = json.dumps({"prompt": "x" * (2 << 20)}).encode()
    code, reply, _ = post(server, body)
    assert code == 413 and reply["error"]["type"] == "invalid_request_error"
    assert still_serves(server)


def test_a_prompt_no_context_could_hold_is_refused_before_tokenizing(server: str) -> None:
    # Under the body limit, but more characters than 512 tokens of this
    # vocabulary can spell.
    code, reply, _ = post(server, json.dumps({"prompt": "ab" * 400_000}).encode())
    assert code == 400 and "characters" in reply["error"]["message"]


@pytest.mark.parametrize(
    "body",
    [
        b'{"prompt": [-1]}',
        b'{"prompt": [1000000000000]}',
        b'{"prompt": [[5, 6], [99999]], "echo": true}',
        b'{"prompt": "x", "temperature": Infinity}',
        b'{"prompt": "x", "temperature": 1e308}',
        b'{"prompt": "x", "top_p": NaN}',
        json.dumps({"prompt": "x", "stop": [f"s{i}" for i in range(10_000)]}).encode(),
        json.dumps({"prompt": "x", "stop": ["y" * 10_000]}).encode(),
    ],
    ids=["negative id", "huge id", "id past vocab", "inf", "1e308", "nan", "10k stops", "long"],
)
def test_values_no_sampler_can_use_are_400s(server: str, body: bytes) -> None:
    code, reply, _ = post(server, body)
    assert code == 400, reply
    assert reply["error"]["type"] == "invalid_request_error" and reply["error"]["message"]
    assert still_serves(server)


def open_stream(base: str) -> HTTPResponse:
    """A long streamed completion, once its first chunk came (so it is in flight)."""
    body = {"prompt": "def f(x):", "max_tokens": 400, "ignore_eos": True, "stream": True}
    request = urllib.request.Request(
        f"{base}/v1/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    reply: HTTPResponse = urllib.request.urlopen(request, timeout=120)
    assert reply.readline().startswith(b"data: ")
    return reply


@pytest.mark.parametrize("stream", [False, True])
def test_a_full_server_answers_429_with_retry_after(server: str, stream: bool) -> None:
    busy = [open_stream(server) for _ in range(MAX_PENDING)]
    try:
        body = json.dumps({"prompt": "x", "max_tokens": 2, "stream": stream}).encode()
        code, reply, headers = post(server, body)
        assert code == 429, reply
        assert reply["error"]["type"] == "rate_limit_error"
        assert headers.get("Retry-After") == "1"  # any case
    finally:
        for reply in busy:
            reply.close()  # the client goes away: its request is aborted
    for _ in range(100):  # the aborts reach the engine
        if still_serves(server):
            break
    assert still_serves(server)

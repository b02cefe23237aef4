"""`specserve serve` as users start it, and the stock `openai` client against it."""

from __future__ import annotations

import json
import subprocess
import urllib.error
import urllib.request

import openai
import pytest
from openai import OpenAI

from specserve.launch import service


def client(base: str, key: str = "EMPTY") -> OpenAI:
    return OpenAI(api_key=key, base_url=f"{base}/v1")


@pytest.mark.parametrize("stream", [False, True])
def test_the_seeds_client_code_runs_unchanged(server: str, stream: bool) -> None:
    run_the_seeds_client_code(server, stream)


def run_the_seeds_client_code(server: str, stream: bool) -> None:
    c = client(server)
    models = c.models.list()
    model = models.data[0].id
    completion = c.completions.create(
        model=model,
        prompt="The future of AI is",
        echo=False,
        n=1,
        stream=stream,
    )
    if stream:
        chunks = list(completion)
        text = "".join(ch.choices[0].text for ch in chunks if ch.choices)
        assert chunks[-1].choices[0].finish_reason in ("stop", "length")
    else:
        text = completion.choices[0].text
        # OpenAI's default max_tokens is 16; a sampled end of text may come sooner
        used, reason = completion.usage.completion_tokens, completion.choices[0].finish_reason
        assert used == 16 if reason == "length" else used < 16
    assert text


def test_chat_completions_stream_and_not(server: str) -> None:
    c = client(server)
    messages = [{"role": "user", "content": "Write a loop."}]
    reply = c.chat.completions.create(
        model="specserve/demo-target", messages=messages, max_tokens=12
    )
    assert reply.choices[0].message.role == "assistant"
    assert reply.choices[0].message.content
    chunks = list(
        c.chat.completions.create(
            model="specserve/demo-target", messages=messages, max_tokens=12, stream=True
        )
    )
    assert chunks[0].choices[0].delta.role == "assistant"
    assert "".join(ch.choices[0].delta.content or "" for ch in chunks)


def test_n_3_returns_three_choices_and_echo_returns_the_prompt(server: str) -> None:
    c = client(server)
    out = c.completions.create(
        model="specserve/demo-target", prompt="def f(x):", n=3, max_tokens=8, seed=5
    )
    assert sorted(ch.index for ch in out.choices) == [0, 1, 2]
    echoed = c.completions.create(
        model="specserve/demo-target", prompt="def f(x):", echo=True, max_tokens=4, temperature=0
    )
    assert echoed.choices[0].text.startswith("def f(x):")


def post(base: str, path: str, body: bytes, headers: dict | None = None) -> tuple[int, dict]:
    request = urllib.request.Request(
        f"{base}{path}",
        data=body,
        method="POST",
        headers={"Content-Type": "application/json", **(headers or {})},
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as reply:
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


@pytest.mark.parametrize(
    ("body", "status"),
    [
        (b'{"model": "specserve/demo-target", "prompt": ', 400),
        (b'{"model": "no-such-model", "prompt": "x"}', 404),
        (json.dumps({"prompt": "x " * 3000}).encode(), 400),
        (b'{"prompt": "x", "max_tokens": -1}', 400),
        (b'{"prompt": "x", "max_tokens": 100000}', 400),
        (b'{"prompt": "x", "temperature": -0.5}', 400),
        (b'{"prompt": "x", "n": 0}', 400),
        (b'{"prompt": 42.5}', 400),
        (b'{"prompt": "x", "top_p": "high"}', 400),
        (b'{"prompt": "x", "logprobs": 21}', 400),
        (b'{"prompt": "x", "logprobs": -1}', 400),
    ],
)
def test_bad_requests_get_a_4xx_with_an_openai_error(server: str, body: bytes, status: int) -> None:
    code, reply = post(server, "/v1/completions", body)
    assert code == status, reply
    assert reply["error"]["message"]
    code, _ = post(server, "/v1/completions", b'{"prompt": "def f():", "max_tokens": 2}')
    assert code == 200  # and it keeps serving


def test_an_api_key_is_required_when_set() -> None:
    with service(
        "serve",
        "specserve/demo-target",
        "--host",
        "127.0.0.1",
        "--api-key",
        "s3cret",
        "--dtype",
        "float32",
    ) as (address, _):
        base = f"http://{address}"
        with pytest.raises(openai.AuthenticationError):
            client(base, "wrong").models.list()
        assert client(base, "s3cret").models.list().data
        code, _ = post(base, "/v1/completions", b'{"prompt": "x", "max_tokens": 1}')
        assert code == 401


def scrape(base: str) -> dict[str, float]:
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(f"{base}/metrics", timeout=30) as reply:
        text = reply.read().decode()
    values: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            values[sample.name] = values.get(sample.name, 0.0) + sample.value
    return values


def test_metrics_parse_and_the_speculation_counters_grow(server: str) -> None:
    before = scrape(server)
    # 64 tokens: even where adaptive k has settled on 0 for this server, a
    # round every 32 probes one draft token more.
    client(server).completions.create(
        model="specserve/demo-target", prompt="def g(x):", max_tokens=64, temperature=0,
        extra_body={"ignore_eos": True},
    )  # fmt: skip
    after = scrape(server)
    for name in (
        "specserve_spec_decode_num_drafts_total",
        "specserve_spec_decode_num_draft_tokens_total",
        "specserve_spec_decode_num_accepted_tokens_total",
    ):
        assert after[name] > before.get(name, 0.0), name
    assert after["specserve_request_total"] > before.get("specserve_request_total", 0.0)
    assert after["specserve_time_to_first_token_seconds_count"] >= 1
    assert "specserve_kv_cache_usage_perc" in after
    assert after["specserve_speculation_active"] == 1.0
    rounds = "specserve_spec_decode_num_rounds_per_k_total"
    assert after[rounds] > before.get(rounds, 0.0)
    assert 0 <= after["specserve_spec_decode_chosen_k"] <= 5


def test_bad_chat_logprobs_get_a_400(server: str) -> None:
    messages = [{"role": "user", "content": "hi"}]
    for extra in ({"top_logprobs": 2}, {"logprobs": True, "top_logprobs": 99}):
        code, reply = post(
            server, "/v1/chat/completions", json.dumps({"messages": messages, **extra}).encode()
        )
        assert code == 400, reply
        assert "logprobs" in reply["error"]["message"]


def test_statistics_are_logged_with_acceptance_and_throughput(
    served: tuple[str, subprocess.Popen[str]],
) -> None:
    base, process = served
    client(base).completions.create(
        model="specserve/demo-target", prompt="def h(y):", max_tokens=12, temperature=0
    )
    lines = [line for line in process.output_tail if "router.engine" in line]  # type: ignore[attr-defined]
    assert any("Avg generation throughput" in line and "KV cache usage" in line for line in lines)
    assert any(
        "acceptance rate" in line and "per-position acceptance rate" in line for line in lines
    ), lines[-3:]


def assert_completion_logprobs(logprobs: object, num_tokens: int, num_top: int) -> None:
    tokens = logprobs.tokens  # type: ignore[attr-defined]
    values = logprobs.token_logprobs  # type: ignore[attr-defined]
    top = logprobs.top_logprobs  # type: ignore[attr-defined]
    assert len(tokens) == len(values) == len(top) == num_tokens
    for token, value, alternatives in zip(tokens, values, top, strict=True):
        assert value <= 0
        assert alternatives[token] == value  # the chosen token is listed with its logprob
        assert num_top <= len(alternatives) <= num_top + 1
        assert max(alternatives.values()) <= 0
    offsets = logprobs.text_offset  # type: ignore[attr-defined]
    assert offsets == sorted(offsets) and offsets[0] == 0


def test_completion_logprobs_have_the_apis_shape_streamed_or_not(server: str) -> None:
    c = client(server)
    whole = c.completions.create(
        model="specserve/demo-target", prompt="def f(x):", max_tokens=10, temperature=0, logprobs=3
    )
    assert_completion_logprobs(whole.choices[0].logprobs, whole.usage.completion_tokens, 3)
    assert "".join(whole.choices[0].logprobs.tokens) == whole.choices[0].text
    chunks = list(
        c.completions.create(
            model="specserve/demo-target",
            prompt="def f(x):",
            max_tokens=10,
            temperature=0,
            logprobs=3,
            stream=True,
        )
    )
    streamed = [lp for ch in chunks for lp in ch.choices[0].logprobs.token_logprobs]
    tokens = [t for ch in chunks for t in ch.choices[0].logprobs.tokens]
    assert tokens == whole.choices[0].logprobs.tokens  # greedy: the same tokens
    # Rounds of another k batch the forward differently: the last digits may move.
    assert streamed == pytest.approx(whole.choices[0].logprobs.token_logprobs, abs=1e-4)


def test_echo_with_logprobs_covers_the_prompt(server: str) -> None:
    prompt = "import os\nimport sys"
    reply = client(server).completions.create(
        model="specserve/demo-target",
        prompt=prompt,
        max_tokens=4,
        temperature=0,
        logprobs=1,
        echo=True,
    )
    logprobs = reply.choices[0].logprobs
    assert reply.choices[0].text.startswith(prompt)
    assert "".join(logprobs.tokens).startswith(prompt)
    assert len(logprobs.tokens) == reply.usage.prompt_tokens + reply.usage.completion_tokens
    assert logprobs.token_logprobs[0] is None and logprobs.top_logprobs[0] is None
    assert all(v is not None and v <= 0 for v in logprobs.token_logprobs[1:])


@pytest.mark.parametrize("stream", [False, True])
def test_chat_logprobs_have_the_apis_shape(server: str, stream: bool) -> None:
    reply = client(server).chat.completions.create(
        model="specserve/demo-target",
        messages=[{"role": "user", "content": "Write a loop."}],
        max_tokens=6,
        logprobs=True,
        top_logprobs=2,
        stream=stream,
        extra_body={"ignore_eos": True},  # a sampled end of text would cut the six short
    )
    if stream:
        # The opening chunk names the role alone, without logprobs.
        logprobs = [ch.choices[0].logprobs for ch in reply]
        assert logprobs[0] is None
        content = [e for lp in logprobs[1:] for e in (lp.content or [])]
    else:
        content = reply.choices[0].logprobs.content
    assert len(content) == 6
    for entry in content:
        assert entry.logprob <= 0
        assert bytes(entry.bytes).decode(errors="replace") == entry.token
        assert len(entry.top_logprobs) == 2
        first, second = entry.top_logprobs
        assert first.logprob >= second.logprob
        assert first.logprob >= entry.logprob  # the most likely is at least as likely

"""`specserve serve --disaggregated`: the target worker, draft worker and router
as separate processes talking gRPC on loopback, the gateway in front; and
`specserve serve --router` in front of a router that already runs."""

from __future__ import annotations

import json
import re
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from protos import router_pb2 as rpb
from protos.router_pb2_grpc import RouterStub
from specserve import LLM, SamplingParams
from specserve.launch import service
from tests.test_openai_server import client, run_the_seeds_client_code, scrape

PROMPT = "def fibonacci(n):"
TOKEN = "router-secret"  # the Router API's bearer token
AUTH = (("authorization", f"Bearer {TOKEN}"),)


@pytest.fixture(scope="module")
def disaggregated() -> Iterator[tuple[str, str, int]]:
    """(gateway URL, router address, gateway pid) of the bundled pair served as
    four processes, the Router API behind a token."""
    flags = (
        "--router-token",
        TOKEN,
        "--host",
        "127.0.0.1",
        "--dtype",
        "float32",
        "--max_model_len",
        "512",
        "--disaggregated",
    )
    with service("serve", *flags) as (address, process):
        lines = "".join(process.output_tail)  # type: ignore[attr-defined]
        match = re.search(r"router on (\S+:\d+), target worker on \S+, draft worker on", lines)
        assert match, lines
        yield f"http://{address}", match.group(1), process.pid


def describe(router: str) -> rpb.RouterInfo:
    with grpc.insecure_channel(router) as channel:
        return RouterStub(channel).Describe(rpb.DescribeRouterRequest(), timeout=10, metadata=AUTH)


@pytest.mark.parametrize("stream", [False, True])
def test_the_seeds_client_code_runs_through_separate_processes(
    disaggregated: tuple[str, str, int], stream: bool
) -> None:
    run_the_seeds_client_code(disaggregated[0], stream)


def test_the_gateway_and_router_advertise_the_max_model_len_asked_for(
    disaggregated: tuple[str, str, int],
) -> None:
    # The bundled target allows 2048 tokens; serve was started with --max_model_len 512.
    (card,) = json.load(urllib.request.urlopen(f"{disaggregated[0]}/v1/models"))["data"]
    assert card["max_model_len"] == 512
    assert describe(disaggregated[1]).max_model_len == 512


def test_output_and_logprobs_equal_the_in_process_engine(
    disaggregated: tuple[str, str, int],
) -> None:
    reply = client(disaggregated[0]).completions.create(
        model="specserve/demo-target", prompt=PROMPT, max_tokens=20, temperature=0, logprobs=2
    )
    spec = {"model": "specserve/demo-draft", "num_speculative_tokens": 5}
    llm = LLM("specserve/demo-target", speculative_config=spec, dtype="float32", max_model_len=512)
    params = SamplingParams(temperature=0, max_tokens=20, logprobs=2)
    (expected,) = llm.generate([PROMPT], params, use_tqdm=False)
    completion = expected.outputs[0]
    assert reply.choices[0].text == completion.text
    assert completion.logprobs is not None
    chosen = [p[t].logprob for t, p in zip(completion.token_ids, completion.logprobs, strict=True)]
    assert reply.choices[0].logprobs.token_logprobs == pytest.approx(chosen, abs=1e-4)


def test_a_grammar_crosses_the_router_and_the_workers(
    disaggregated: tuple[str, str, int],
) -> None:
    reply = client(disaggregated[0]).completions.create(
        model="specserve/demo-target", prompt=PROMPT, max_tokens=12,
        extra_body={"guided_regex": r"(yes|no), [0-9]{2}\."},
    )  # fmt: skip
    assert re.fullmatch(r"(yes|no), [0-9]{2}\.", reply.choices[0].text)


def test_metrics_come_from_the_router(disaggregated: tuple[str, str, int]) -> None:
    base, router, _ = disaggregated
    before = scrape(base)
    client(base).completions.create(
        model="specserve/demo-target", prompt="class A:", max_tokens=16, temperature=0
    )
    after = scrape(base)
    name = "specserve_spec_decode_num_draft_tokens_total"
    assert after[name] > before.get(name, 0.0)
    assert after[name] == describe(router).num_draft_tokens
    assert after["specserve_speculation_active"] == 1.0
    # vLLM's names, carried from the router: 16 more tokens generated, one more success
    assert after["vllm:generation_tokens_total"] - before["vllm:generation_tokens_total"] == 16
    assert after["vllm:request_success_total"] - before["vllm:request_success_total"] == 1
    assert after["vllm:spec_decode_num_draft_tokens_total"] == after[name]


def test_a_client_that_goes_away_stops_its_request_and_frees_its_kv(
    disaggregated: tuple[str, str, int],
) -> None:
    base, router, _ = disaggregated
    rounds_before = describe(router).num_drafts
    max_tokens = 480  # at most k + 1 = 6 tokens a round: at least 80 rounds to finish
    stream = client(base).completions.create(
        model="specserve/demo-target",
        prompt=PROMPT,
        max_tokens=max_tokens,
        temperature=0,
        stream=True,
        extra_body={"ignore_eos": True},
    )
    next(iter(stream))
    stream.close()
    deadline = time.monotonic() + 60
    while (info := describe(router)).kv_cache_usage and time.monotonic() < deadline:
        time.sleep(0.05)
    assert info.num_running == 0 and info.kv_cache_usage == 0.0
    assert info.num_drafts - rounds_before < max_tokens // 6  # stopped, not finished


def test_a_gateway_in_front_of_a_running_router(disaggregated: tuple[str, str, int]) -> None:
    flags = ("--host", "127.0.0.1", "--router", disaggregated[1], "--router-token", TOKEN)
    with service("serve", *flags) as (address, _):
        c = client(f"http://{address}")
        (model,) = c.models.list().data
        assert model.id == "specserve/demo-target"  # what the router serves
        reply = c.completions.create(model=model.id, prompt=PROMPT, max_tokens=8, temperature=0)
        assert reply.usage.completion_tokens == 8
        messages = [{"role": "user", "content": "hi"}]
        c.chat.completions.create(model=model.id, messages=messages, max_tokens=4)


def children(pid: int) -> list[int]:
    """The processes whose parent is ``pid`` (from /proc)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # ended meanwhile
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


def test_the_router_token_guards_the_router_and_stays_off_command_lines(
    disaggregated: tuple[str, str, int],
) -> None:
    _, router, gateway_pid = disaggregated
    with grpc.insecure_channel(router) as channel, pytest.raises(grpc.RpcError) as refused:
        RouterStub(channel).Describe(rpb.DescribeRouterRequest(), timeout=10)
    assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
    commands = [Path(f"/proc/{pid}/cmdline").read_bytes() for pid in children(gateway_pid)]
    assert any(b"router" in c for c in commands)  # the router is one of them
    assert not [c for c in commands if TOKEN.encode() in c]  # ps shows any user these

"""Draft and target workers as real processes on loopback, driven by the engine
through the gRPC transport: the same output as the in-process engine."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from protos import common_pb2 as pb
from protos import draft_worker_pb2_grpc, router_pb2_grpc, target_worker_pb2_grpc
from protos import router_pb2 as rpb
from router.config import EngineConfig, SpeculativeConfig
from router.engine import LLMEngine
from router.params import SamplingParams
from router.workers import build_remote_workers
from specserve import LLM
from specserve.launch import service

K = 4
PROMPTS = ["def fibonacci(n):", "import os\nimport sys\n", "class Stack:\n    def push(self, x):"]


def remote_engine(target: str, draft: str | None) -> LLMEngine:
    spec = SpeculativeConfig("specserve/demo-draft", K) if draft else None
    config = EngineConfig.of("specserve/demo-target", spec)
    return LLMEngine(config, build_remote_workers([target], [draft] if draft else []))


def run(engine: LLMEngine, params: SamplingParams) -> list[list[int]]:
    states = [
        engine.add_request(str(i), engine.tokenizer.encode(p), params)[0]
        for i, p in enumerate(PROMPTS)
    ]
    while engine.has_unfinished():
        engine.step()
    return [s.output_ids for s in states]


@pytest.mark.parametrize(
    "params",
    [
        SamplingParams(temperature=0, max_tokens=24),
        SamplingParams(temperature=0.8, top_p=0.95, seed=11, max_tokens=24),
    ],
    ids=["greedy", "seeded"],
)
def test_workers_over_grpc_give_the_in_process_output(
    grpc_workers: tuple[str, str], params: SamplingParams
) -> None:
    local = LLM(
        "specserve/demo-target",
        dtype="float32",
        max_model_len=512,
        speculative_config={"model": "specserve/demo-draft", "num_speculative_tokens": K},
    )
    expected = [
        o.outputs[0].token_ids
        for o in local.generate(PROMPTS, [params] * len(PROMPTS), use_tqdm=False)
    ]
    engine = remote_engine(*grpc_workers)
    assert run(engine, params) == expected
    assert engine.metrics.num_draft_tokens > 0
    info = engine.workers.target.describe()
    assert info.num_free_blocks == info.num_blocks  # every sequence was released


@pytest.fixture(scope="module")
def router(grpc_workers: tuple[str, str]) -> Iterator[str]:
    target, draft = grpc_workers
    args = (
        "--target-workers",
        target,
        "--draft-workers",
        draft,
        "--num-speculative-tokens",
        str(K),
    )
    with service("router", *args) as (address, _):
        yield address


def stream(address: str, request: rpb.GenerateRequest) -> list[rpb.GenerateResponse]:
    with grpc.insecure_channel(address) as channel:
        return list(router_pb2_grpc.RouterStub(channel).Generate(request, timeout=60))


@pytest.mark.parametrize(
    "params",
    [
        SamplingParams(temperature=0, max_tokens=24),
        SamplingParams(temperature=0.8, top_p=0.95, seed=11, max_tokens=24),
    ],
    ids=["greedy", "seeded"],
)
def test_router_worker_processes_stream_the_in_process_output(
    router: str, params: SamplingParams
) -> None:
    local = LLM(
        "specserve/demo-target",
        dtype="float32",
        max_model_len=512,
        speculative_config={"model": "specserve/demo-draft", "num_speculative_tokens": K},
    )
    expected = local.generate(PROMPTS, [params] * len(PROMPTS), use_tqdm=False)
    for prompt, out in zip(PROMPTS, expected, strict=True):
        request = rpb.GenerateRequest(
            text=prompt,
            max_tokens=24,
            sampling=pb.SamplingParams(
                temperature=params.temperature, top_p=params.top_p, seed=params.seed
            ),
        )
        responses = stream(router, request)
        assert [t for r in responses for t in r.token_ids] == out.outputs[0].token_ids
        assert "".join(r.text for r in responses) == out.outputs[0].text
        assert responses[-1].finish_reason == rpb.FINISH_REASON_LENGTH
        assert responses[0].prompt_token_ids == out.prompt_token_ids
        assert responses[-1].speculation.num_draft_tokens > 0


def test_router_refuses_bad_input_and_keeps_serving(router: str) -> None:
    for request in (
        rpb.GenerateRequest(token_ids=rpb.TokenIds(ids=[])),
        rpb.GenerateRequest(token_ids=rpb.TokenIds(ids=[1, 10**6])),
        rpb.GenerateRequest(text="x", sampling=pb.SamplingParams(temperature=-1)),
    ):
        with pytest.raises(grpc.RpcError) as info:
            stream(router, request)
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    responses = stream(router, rpb.GenerateRequest(text="def f():", max_tokens=4))
    assert sum(len(r.token_ids) for r in responses) == 4


def test_64_concurrent_streams_complete_and_free_every_block(
    router: str, grpc_workers: tuple[str, str]
) -> None:
    from concurrent.futures import ThreadPoolExecutor

    def one(i: int) -> int:
        request = rpb.GenerateRequest(
            text=f"def f{i}(x):",
            max_tokens=16,
            ignore_eos=True,
            sampling=pb.SamplingParams(temperature=1.0, seed=i),
        )
        return sum(len(r.token_ids) for r in stream(router, request))

    with ThreadPoolExecutor(64) as pool:
        assert list(pool.map(one, range(64))) == [16] * 64
    for address in grpc_workers:
        with grpc.insecure_channel(address) as channel:
            stub = (
                target_worker_pb2_grpc.TargetWorkerStub
                if address == grpc_workers[0]
                else draft_worker_pb2_grpc.DraftWorkerStub
            )(channel)
            info = stub.Describe(pb.DescribeRequest(), timeout=10)
            assert info.num_free_blocks == info.num_blocks


def test_the_grpc_client_example_streams_a_completion(router: str) -> None:
    example = Path(__file__).resolve().parent.parent / "examples" / "grpc_client.py"
    result = subprocess.run(
        [sys.executable, str(example), router, "def fibonacci(n):"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() and "accepted" in result.stderr


def test_an_expired_deadline_aborts_the_request_and_frees_its_blocks(
    router: str, grpc_workers: tuple[str, str]
) -> None:
    request = rpb.GenerateRequest(text="def f(x):", max_tokens=400, ignore_eos=True)
    with grpc.insecure_channel(router) as channel:
        with pytest.raises(grpc.RpcError) as info:
            list(router_pb2_grpc.RouterStub(channel).Generate(request, timeout=0.5))
    assert info.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    with grpc.insecure_channel(grpc_workers[0]) as channel:
        stub = target_worker_pb2_grpc.TargetWorkerStub(channel)
        for _ in range(50):  # the abort reaches the engine loop within a round or two
            info_ = stub.Describe(pb.DescribeRequest(), timeout=10)
            if info_.num_free_blocks == info_.num_blocks:
                break
            time.sleep(0.1)
        assert info_.num_free_blocks == info_.num_blocks


def test_abort_ends_the_stream_and_frees_its_blocks(
    router: str, grpc_workers: tuple[str, str]
) -> None:
    responses: list[rpb.GenerateResponse] = []
    request = rpb.GenerateRequest(
        request_id="to-abort", text="def f(x):", max_tokens=500, ignore_eos=True
    )

    def run() -> None:
        responses.extend(stream(router, request))

    thread = threading.Thread(target=run)
    thread.start()
    with grpc.insecure_channel(router) as channel:
        stub = router_pb2_grpc.RouterStub(channel)
        for _ in range(100):
            if stub.Abort(rpb.AbortRequest(request_id="to-abort"), timeout=10).aborted:
                break
            time.sleep(0.05)
        assert not stub.Abort(rpb.AbortRequest(request_id="no-such-request"), timeout=10).aborted
    thread.join(timeout=30)
    assert responses and responses[-1].finish_reason == rpb.FINISH_REASON_ABORT
    assert sum(len(r.token_ids) for r in responses) < 500
    with grpc.insecure_channel(grpc_workers[0]) as channel:
        info = target_worker_pb2_grpc.TargetWorkerStub(channel).Describe(
            pb.DescribeRequest(), timeout=10
        )
    assert info.num_free_blocks == info.num_blocks

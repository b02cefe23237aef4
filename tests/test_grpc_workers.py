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
from grpc_health.v1 import health_pb2, health_pb2_grpc

from protos import common_pb2 as pb
from protos import draft_worker_pb2 as dpb
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
WORKER_ARGS = ("--dtype", "float32", "--max-model-len", "512", "--num-kv-blocks", "256")


@pytest.fixture(scope="module")
def workers() -> Iterator[tuple[str, str]]:
    with (
        service("target-worker", "--model", "specserve/demo-target", *WORKER_ARGS) as (t, _),
        service("draft-worker", "--model", "specserve/demo-draft", *WORKER_ARGS) as (d, _),
    ):
        yield t, d


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
    workers: tuple[str, str], params: SamplingParams
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
    engine = remote_engine(*workers)
    assert run(engine, params) == expected
    assert engine.metrics.num_draft_tokens > 0
    info = engine.workers.target.describe()
    assert info.num_free_blocks == info.num_blocks  # every sequence was released


def test_workers_serve_health_and_refuse_a_bad_k(workers: tuple[str, str]) -> None:
    _, draft = workers
    for address in workers:
        with grpc.insecure_channel(address) as channel:
            reply = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(), timeout=10
            )
            assert reply.status == health_pb2.HealthCheckResponse.SERVING
    with grpc.insecure_channel(draft) as channel:
        stub = draft_worker_pb2_grpc.DraftWorkerStub(channel)
        batch = dpb.ProposeBatch(
            num_draft_tokens=0,
            sequences=pb.SequenceBatch(
                seq_ids=[1],
                cached_lens=[0],
                num_tokens=[2],
                token_ids=[1, 2],
                samplings=[pb.SamplingParams()],
                sampling_index=[0],
            ),
        )
        with pytest.raises(grpc.RpcError) as info:
            list(stub.Propose(iter([batch]), timeout=10))
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        # and it keeps serving
        assert stub.Describe(pb.DescribeRequest(), timeout=10).vocab_size == 4096


def test_each_worker_holds_the_max_model_len_it_was_started_with(
    workers: tuple[str, str],
) -> None:
    # Both bundled models allow 2048 tokens; the workers were started with 512.
    stubs = (target_worker_pb2_grpc.TargetWorkerStub, draft_worker_pb2_grpc.DraftWorkerStub)
    for address, stub in zip(workers, stubs, strict=True):
        with grpc.insecure_channel(address) as channel:
            assert stub(channel).Describe(pb.DescribeRequest(), timeout=10).max_model_len == 512


def test_an_unknown_sequence_and_bad_tokens_get_their_own_status(workers: tuple[str, str]) -> None:
    _, draft = workers
    with grpc.insecure_channel(draft) as channel:
        stub = draft_worker_pb2_grpc.DraftWorkerStub(channel)
        # 900 was never prefilled; 901 holds a token past the vocabulary; 902
        # appends nothing; 903 is well formed.
        batch = dpb.ProposeBatch(
            num_draft_tokens=2,
            sequences=pb.SequenceBatch(
                seq_ids=[900, 901, 902, 903],
                cached_lens=[5, 0, 0, 0],
                num_tokens=[1, 2, 0, 2],
                token_ids=[1, 1, 99999, 5, 6],
                samplings=[pb.SamplingParams(temperature=0)],
                sampling_index=[0, 0, 0, 0],
            ),
        )
        (result,) = list(stub.Propose(iter([batch]), timeout=30))
        assert {i: s.code for i, s in result.failed.items()} == {
            0: pb.SequenceStatus.NOT_FOUND,
            1: pb.SequenceStatus.INVALID_ARGUMENT,
            2: pb.SequenceStatus.INVALID_ARGUMENT,
        }
        assert list(result.drafts.num_drafts)[3] == 2
        stub.Release(pb.ReleaseRequest(seq_ids=[900, 901, 902, 903]), timeout=10)


@pytest.fixture(scope="module")
def router(workers: tuple[str, str]) -> Iterator[str]:
    target, draft = workers
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
    router: str, workers: tuple[str, str]
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
    for address in workers:
        with grpc.insecure_channel(address) as channel:
            stub = (
                target_worker_pb2_grpc.TargetWorkerStub
                if address == workers[0]
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
    router: str, workers: tuple[str, str]
) -> None:
    request = rpb.GenerateRequest(text="def f(x):", max_tokens=400, ignore_eos=True)
    with grpc.insecure_channel(router) as channel:
        with pytest.raises(grpc.RpcError) as info:
            list(router_pb2_grpc.RouterStub(channel).Generate(request, timeout=0.5))
    assert info.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    with grpc.insecure_channel(workers[0]) as channel:
        stub = target_worker_pb2_grpc.TargetWorkerStub(channel)
        for _ in range(50):  # the abort reaches the engine loop within a round or two
            info_ = stub.Describe(pb.DescribeRequest(), timeout=10)
            if info_.num_free_blocks == info_.num_blocks:
                break
            time.sleep(0.1)
        assert info_.num_free_blocks == info_.num_blocks


def test_abort_ends_the_stream_and_frees_its_blocks(router: str, workers: tuple[str, str]) -> None:
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
    with grpc.insecure_channel(workers[0]) as channel:
        info = target_worker_pb2_grpc.TargetWorkerStub(channel).Describe(
            pb.DescribeRequest(), timeout=10
        )
    assert info.num_free_blocks == info.num_blocks

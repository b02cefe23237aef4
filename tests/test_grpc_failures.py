"""Worker failures seen through the router: lose the draft worker and keep
serving without speculation (and speculate again when it returns); lose a
target worker and move its streams to another target (or, with none left,
fail them with UNAVAILABLE, promptly)."""

from __future__ import annotations

import signal
import threading
import time
import urllib.request

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from protos import common_pb2 as pb
from protos import draft_worker_pb2 as dpb
from protos import router_pb2 as rpb
from protos import router_pb2_grpc
from specserve import LLM, SamplingParams
from specserve.launch import free_port, service

ARGS = ("--dtype", "float32", "--max-model-len", "1024", "--num-kv-blocks", "1024")


def generate(address: str, prompt: str, max_tokens: int) -> list[rpb.GenerateResponse]:
    with grpc.insecure_channel(address) as channel:
        request = rpb.GenerateRequest(
            text=prompt,
            max_tokens=max_tokens,
            ignore_eos=True,
            sampling=pb.SamplingParams(temperature=0),
        )
        return list(router_pb2_grpc.RouterStub(channel).Generate(request, timeout=120))


@pytest.fixture(scope="module")
def target_only() -> LLM:
    return LLM("specserve/demo-target", dtype="float32", max_model_len=1024)


def greedy(llm: LLM, prompt: str, max_tokens: int) -> list[int]:
    params = SamplingParams(temperature=0, max_tokens=max_tokens, ignore_eos=True)
    return llm.generate(prompt, params, use_tqdm=False)[0].outputs[0].token_ids


def metrics(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as reply:
        return str(reply.read().decode())


def speculation_health(address: str) -> int:
    with grpc.insecure_channel(address) as channel:
        request = health_pb2.HealthCheckRequest(service="specserve.v1.Router/speculation")
        return int(health_pb2_grpc.HealthStub(channel).Check(request, timeout=10).status)


def test_losing_the_draft_worker_breaks_no_stream_and_its_return_restores_speculation() -> None:
    draft_port = free_port()
    with service("target-worker", "--model", "specserve/demo-target", *ARGS) as (target, _):
        metrics_port = free_port()
        draft_cm = service(
            "draft-worker", "--model", "specserve/demo-draft", *ARGS, port=draft_port
        )
        draft, draft_process = draft_cm.__enter__()
        with service(
            "router",
            "--target-workers",
            target,
            "--draft-workers",
            draft,
            "--num-speculative-tokens",
            "4",
            "--metrics-port",
            str(metrics_port),
        ) as (router, _):
            results: dict[int, list[rpb.GenerateResponse]] = {}
            finished_at: list[float] = []

            def run(i: int) -> None:
                results[i] = generate(router, f"def f{i}(x):", 300)
                finished_at.append(time.monotonic())

            threads = [threading.Thread(target=run, args=(i,)) for i in range(8)]
            for t in threads:
                t.start()
            time.sleep(1.5)  # the streams are under way
            draft_process.send_signal(signal.SIGKILL)
            killed_at = time.monotonic()
            draft_cm.__exit__(None, None, None)
            for t in threads:
                t.join(timeout=120)
            assert min(finished_at) > killed_at, "the streams ended before the draft was lost"
            assert speculation_health(router) == health_pb2.HealthCheckResponse.NOT_SERVING
            assert "specserve_speculation_active 0.0" in metrics(metrics_port)
            assert sorted(results) == list(range(8))
            for responses in results.values():
                assert sum(len(r.token_ids) for r in responses) == 300
                assert responses[-1].finish_reason == rpb.FINISH_REASON_LENGTH
            with service("draft-worker", "--model", "specserve/demo-draft", *ARGS, port=draft_port):
                # The router looks for it again every second.
                deadline = time.monotonic() + 20
                while time.monotonic() < deadline:
                    after = generate(router, "def g(x):", 32)
                    if after[-1].speculation.num_draft_tokens:
                        break
                assert after[-1].speculation.num_draft_tokens > 0
                assert after[-1].speculation.num_accepted_tokens > 0
                assert speculation_health(router) == health_pb2.HealthCheckResponse.SERVING
                text = metrics(metrics_port)
                assert "specserve_speculation_active 1.0" in text
                assert "specserve_spec_decode_num_accepted_tokens_total" in text
                assert 'vllm:spec_decode_num_accepted_tokens_total{model_name="' in text


def test_losing_the_target_worker_fails_streams_with_unavailable_promptly() -> None:
    with (
        service("target-worker", "--model", "specserve/demo-target", *ARGS) as (target, tp),
        service("draft-worker", "--model", "specserve/demo-draft", *ARGS) as (draft, _),
        service(
            "router",
            "--target-workers",
            target,
            "--draft-workers",
            draft,
            "--num-speculative-tokens",
            "4",
        ) as (router, router_process),
    ):
        errors: list[grpc.StatusCode] = []

        def run() -> None:
            try:
                generate(router, "def f(x):", 1000)
            except grpc.RpcError as e:
                errors.append(e.code())

        thread = threading.Thread(target=run)
        thread.start()
        time.sleep(1.5)
        tp.send_signal(signal.SIGKILL)
        started = time.monotonic()
        thread.join(timeout=60)
        assert not thread.is_alive() and time.monotonic() - started < 30
        assert errors == [grpc.StatusCode.UNAVAILABLE]
        assert router_process.poll() is None  # the router is still up
        with pytest.raises(grpc.RpcError) as info:  # and says why for new work
            generate(router, "def g(x):", 4)
        assert info.value.code() == grpc.StatusCode.UNAVAILABLE


def test_sigterm_stops_a_worker_cleanly() -> None:
    with service("draft-worker", "--model", "specserve/demo-draft", *ARGS, "--grace-s", "1") as (
        address,
        process,
    ):
        with grpc.insecure_channel(address) as channel:
            health = health_pb2_grpc.HealthStub(channel)
            status = health.Check(health_pb2.HealthCheckRequest(), timeout=10).status
            assert status == health_pb2.HealthCheckResponse.SERVING
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0


def test_a_full_router_answers_resource_exhausted() -> None:
    with (
        service("target-worker", "--model", "specserve/demo-target", *ARGS) as (target, _),
        service("router", "--target-workers", target, "--max-pending-requests", "1") as (r, _),
    ):
        first = threading.Thread(target=generate, args=(r, "def f(x):", 300))
        first.start()
        time.sleep(1.0)
        with pytest.raises(grpc.RpcError) as info:
            generate(r, "def g(x):", 4)
        assert info.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        first.join(timeout=120)
        assert len(generate(r, "def h(x):", 4)) >= 1  # served again once there is room


def test_a_pool_loses_no_stream_when_a_target_and_a_draft_worker_die(target_only: LLM) -> None:
    with (
        service("target-worker", "--model", "specserve/demo-target", *ARGS) as (t0, t0_process),
        service("target-worker", "--model", "specserve/demo-target", *ARGS) as (t1, _),
        service("draft-worker", "--model", "specserve/demo-draft", *ARGS) as (d0, d0_process),
        service("draft-worker", "--model", "specserve/demo-draft", *ARGS) as (d1, _),
        service(
            "router",
            "--target-workers",
            f"{t0},{t1}",
            "--draft-workers",
            f"{d0},{d1}",
            "--num-speculative-tokens",
            "4",
        ) as (router, router_process),
    ):
        outcomes: dict[int, object] = {}

        def run(i: int) -> None:
            try:
                outcomes[i] = generate(router, f"def f{i}(x):", 400)
            except grpc.RpcError as e:
                outcomes[i] = e.code()

        threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
        for t in threads:
            t.start()
        time.sleep(1.5)  # one stream on each target worker, well under way
        d0_process.send_signal(signal.SIGKILL)
        t0_process.send_signal(signal.SIGKILL)
        for t in threads:
            t.join(timeout=120)
        # The stream on the dead target was re-prefilled on the other one and
        # continued: greedy, it is token for token what it would have been.
        for i in range(2):
            responses = outcomes[i]
            assert isinstance(responses, list), responses
            tokens = [t for r in responses for t in r.token_ids]
            assert tokens == greedy(target_only, f"def f{i}(x):", 400)
        assert router_process.poll() is None
        after = generate(router, "def g(x):", 32)  # new work goes to the live workers
        assert sum(len(r.token_ids) for r in after) == 32
        assert after[-1].speculation.num_draft_tokens > 0  # the other draft worker drafts


def test_a_draft_workers_malformed_result_loses_that_worker_not_the_router() -> None:
    from model_runtime.errors import WorkerUnavailableError
    from protos.messages import ProposeRequest, SequenceTokens
    from router.grpc_clients import GrpcDraftClient

    flags = ("--model", "specserve/demo-draft", "--dtype", "float32", "--max-model-len", "128")
    with service("draft-worker", *flags) as (address, _):
        client = GrpcDraftClient(address)
        try:
            rows = pb.PackedDistributions(rows=5, width=1, token_ids=b"\0" * 20, probs=b"\0" * 20)
            drafts = pb.Drafts(num_drafts=[2], token_ids=[5, 6], sampled=[0], probs=rows)
            result = dpb.ProposeResult(drafts=drafts)
            client._propose.start = lambda m: lambda: result  # type: ignore[method-assign]
            request = ProposeRequest(SequenceTokens(1, 0, [3]), SamplingParams().options(0))
            with pytest.raises(WorkerUnavailableError, match=r"malformed result: .*5 distrib"):
                client.propose([request], 2)
        finally:
            client.close()

"""The router process drafts the k it is told to, or chooses it each round."""

from __future__ import annotations

import grpc

from protos import router_pb2 as rpb
from protos import router_pb2_grpc
from router.wire import stats_from_info
from specserve.launch import service

WORKER_ARGS = ("--dtype", "float32", "--max-model-len", "256", "--num-kv-blocks", "64")


def test_a_router_without_adaptive_k_drafts_its_k_every_round() -> None:
    with (
        service("target-worker", "--model", "specserve/demo-target", *WORKER_ARGS) as (t, _),
        service("draft-worker", "--model", "specserve/demo-draft", *WORKER_ARGS) as (d, _),
    ):
        args = ["--target-workers", t, "--draft-workers", d, "--num-speculative-tokens", "3"]
        with service("router", *args, "--no-overlap", "--no-adaptive-k") as (address, _):
            with grpc.insecure_channel(address) as channel:
                stub = router_pb2_grpc.RouterStub(channel)
                request = rpb.GenerateRequest(text="def f(x):", max_tokens=24, ignore_eos=True)
                request.sampling.temperature = 0
                assert sum(len(r.token_ids) for r in stub.Generate(request, timeout=60)) == 24
                info = stub.Describe(rpb.DescribeRouterRequest(), timeout=10)
    rounds = stats_from_info(info).speculation.rounds_per_k
    assert rounds[3] > 0 and sum(rounds) == rounds[3]

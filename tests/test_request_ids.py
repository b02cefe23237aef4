"""Request ids belong to their caller: another connection cannot abort a
request by guessing its id, the same id twice in flight is ALREADY_EXISTS,
and ids the router assigns cannot be guessed."""

from __future__ import annotations

import re
from collections.abc import Iterator

import grpc
import pytest

from protos import common_pb2 as pb
from protos import router_pb2 as rpb
from protos.router_pb2_grpc import RouterStub
from specserve.launch import service

ARGS = ("--dtype", "float32", "--max-model-len", "512", "--num-kv-blocks", "256")


@pytest.fixture(scope="module")
def router() -> Iterator[str]:
    with (
        service("target-worker", "--model", "specserve/demo-target", *ARGS) as (target, _),
        service("router", "--target-workers", target) as (address, _),
    ):
        yield address


def connect(address: str) -> grpc.Channel:
    """A connection of its own (channels of one process share connections otherwise)."""
    return grpc.insecure_channel(address, options=[("grpc.use_local_subchannel_pool", 1)])


def long_request(request_id: str = "") -> rpb.GenerateRequest:
    return rpb.GenerateRequest(
        request_id=request_id,
        text="def f(x):",
        max_tokens=300,
        ignore_eos=True,
        sampling=pb.SamplingParams(temperature=0),
    )


def test_another_connection_cannot_abort_a_request_by_its_id(router: str) -> None:
    with connect(router) as mine, connect(router) as theirs:
        stream = RouterStub(mine).Generate(long_request("req-0"), timeout=120)
        first = next(stream)  # in flight
        assert first.request_id == "req-0"
        for guess in ("req-0", "req-1", ""):
            reply = RouterStub(theirs).Abort(rpb.AbortRequest(request_id=guess), timeout=10)
            assert not reply.aborted
        rest = list(stream)
        assert rest[-1].finish_reason == rpb.FINISH_REASON_LENGTH
        assert sum(len(r.token_ids) for r in [first, *rest]) == 300


def test_the_same_id_twice_in_flight_is_already_exists(router: str) -> None:
    with connect(router) as channel:
        stub = RouterStub(channel)
        first = stub.Generate(long_request("mine"), timeout=120)
        next(first)
        with pytest.raises(grpc.RpcError) as info:
            list(stub.Generate(long_request("mine"), timeout=60))
        assert info.value.code() == grpc.StatusCode.ALREADY_EXISTS
        assert stub.Abort(rpb.AbortRequest(request_id="mine"), timeout=10).aborted
        assert list(first)[-1].finish_reason == rpb.FINISH_REASON_ABORT
    with connect(router) as other:  # another connection may use the id
        responses = list(RouterStub(other).Generate(long_request("mine"), timeout=120))
        assert responses[-1].finish_reason == rpb.FINISH_REASON_LENGTH


def test_an_id_the_router_assigns_is_unguessable_and_aborts_from_anywhere(router: str) -> None:
    with connect(router) as mine, connect(router) as theirs:
        stream = RouterStub(mine).Generate(long_request(), timeout=120)
        assigned = next(stream).request_id
        assert re.fullmatch(r"req-[0-9a-f]{24}", assigned)
        reply = RouterStub(theirs).Abort(rpb.AbortRequest(request_id=assigned), timeout=10)
        assert reply.aborted
        assert list(stream)[-1].finish_reason == rpb.FINISH_REASON_ABORT

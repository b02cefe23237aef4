"""Workers reclaim what a departed router held: sequences are leased to the
router's session, the lease lapses once the router's streams are gone, and a
restarted router frees its previous life's sequences at once."""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable
from functools import partial

import grpc

from protos import common_pb2 as pb
from protos import router_pb2 as rpb
from protos.draft_worker_pb2_grpc import DraftWorkerStub
from protos.router_pb2_grpc import RouterStub
from protos.target_worker_pb2_grpc import TargetWorkerStub
from specserve.launch import ServiceProcess, free_port, service
from worker_base.leases import Leases

ARGS = ("--dtype", "float32", "--max-model-len", "512", "--num-kv-blocks", "256")


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_lease_holds_while_a_stream_is_open_and_lapses_after_the_ttl() -> None:
    clock = Clock()
    leases = Leases(ttl_s=10, clock=clock)
    session, orphans = leases.opened("router-a:1/one")
    assert orphans == []
    leases.hold(session, [1, 2, 3])
    leases.forget([3])  # released normally
    clock.now = 100
    assert leases.lapsed() == []  # its stream is still open
    leases.closed(session)
    clock.now = 105
    assert leases.lapsed() == []
    clock.now = 110
    assert leases.lapsed() == [1, 2]
    assert leases.lapsed() == []


def test_a_new_session_of_the_same_router_orphans_the_old_ones() -> None:
    leases = Leases(ttl_s=600, clock=Clock())
    old, _ = leases.opened("router-a:1/one")
    other, _ = leases.opened("router-b:1/one")
    leases.hold(old, [1, 2])
    leases.hold(other, [3])
    _, orphans = leases.opened("router-a:1/two")
    assert orphans == [1, 2]  # router-b's sequence is not touched


def test_streams_without_a_session_orphan_no_one() -> None:
    leases = Leases(ttl_s=600, clock=Clock())
    first, _ = leases.opened(None)
    leases.hold(first, [1])
    second, orphans = leases.opened(None)
    assert orphans == [] and second != first


def free_blocks(address: str, stub: Callable[[grpc.Channel], object]) -> tuple[int, int]:
    with grpc.insecure_channel(address) as channel:
        info = stub(channel).Describe(pb.DescribeRequest(), timeout=10)  # type: ignore[attr-defined]
        return info.num_free_blocks, info.num_blocks


def in_use(address: str, stub: Callable[[grpc.Channel], object]) -> bool:
    free, total = free_blocks(address, stub)
    return free < total


def all_free(address: str, stub: Callable[[grpc.Channel], object]) -> bool:
    free, total = free_blocks(address, stub)
    return free == total


def start_streams(router: str, count: int) -> list[threading.Thread]:
    def run(i: int) -> None:
        request = rpb.GenerateRequest(text=f"def f{i}(x):", max_tokens=400, ignore_eos=True)
        try:
            with grpc.insecure_channel(router) as channel:
                list(RouterStub(channel).Generate(request, timeout=120))
        except grpc.RpcError:
            pass  # the router was killed under it

    threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(count)]
    for thread in threads:
        thread.start()
    return threads


def wait_until(condition: Callable[[], bool], timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.2)
    return condition()


def test_a_killed_routers_kv_is_reclaimed_on_both_workers() -> None:
    lease = ("--lease-ttl-s", "1")
    with (
        service("target-worker", "--model", "specserve/demo-target", *ARGS, *lease) as (t, _),
        service("draft-worker", "--model", "specserve/demo-draft", *ARGS, *lease) as (d, _),
        service("router", "--target-workers", t, "--draft-workers", d) as (router, process),
    ):
        start_streams(router, 8)
        assert wait_until(partial(in_use, t, TargetWorkerStub), 60), "no stream started"
        process.send_signal(signal.SIGKILL)
        process.wait()
        for address, stub in ((t, TargetWorkerStub), (d, DraftWorkerStub)):
            assert wait_until(partial(all_free, address, stub), 30), free_blocks(address, stub)


def test_a_restarted_router_frees_what_its_previous_life_held_at_once() -> None:
    port = free_port()
    with service(
        "target-worker", "--model", "specserve/demo-target", *ARGS, "--lease-ttl-s", "600"
    ) as (target, _):
        first = ServiceProcess("router", "--target-workers", target, port=port)
        try:
            first.wait_ready()
            start_streams(f"127.0.0.1:{port}", 4)
            assert wait_until(partial(in_use, target, TargetWorkerStub), 60)
        finally:
            first.process.send_signal(signal.SIGKILL)
            first.process.wait()
        assert in_use(target, TargetWorkerStub)  # the lease (600 s) still holds them
        with service("router", "--target-workers", target, port=port) as (again, _):
            request = rpb.GenerateRequest(text="def g(x):", max_tokens=4)
            with grpc.insecure_channel(again) as channel:
                list(RouterStub(channel).Generate(request, timeout=60))
            assert free_blocks(target, TargetWorkerStub) == (256, 256)

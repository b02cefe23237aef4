"""Stopping drains: a router lets streams in flight finish, a worker ends its
idle batch streams at once instead of waiting out its grace, and the gateway
ends a stream it must cut with an error event and [DONE], never mid-body."""

from __future__ import annotations

import json
import signal
import threading
import urllib.request

import grpc

from protos import common_pb2 as pb
from protos import router_pb2 as rpb
from protos.router_pb2_grpc import RouterStub
from specserve.launch import ServiceProcess, service

ARGS = ("--dtype", "float32", "--max-model-len", "512", "--num-kv-blocks", "256")


def test_a_router_lets_its_streams_finish_and_a_worker_stops_without_waiting_its_grace() -> None:
    target = ServiceProcess(
        "target-worker", "--model", "specserve/demo-target", *ARGS, "--grace-s", "600"
    )
    try:
        address = target.wait_ready()
        with service("router", "--target-workers", address, "--grace-s", "60") as (router, proc):
            request = rpb.GenerateRequest(
                text="def f(x):",
                max_tokens=200,
                ignore_eos=True,
                sampling=pb.SamplingParams(temperature=0),
            )
            with grpc.insecure_channel(router) as channel:
                stream = RouterStub(channel).Generate(request, timeout=120)
                first = next(stream)
                proc.send_signal(signal.SIGTERM)  # while the stream runs
                rest = list(stream)
            assert sum(len(r.token_ids) for r in [first, *rest]) == 200
            assert rest[-1].finish_reason == rpb.FINISH_REASON_LENGTH
            assert proc.wait(timeout=60) == 0
        # The worker's streams were the router's; the router is gone, so the
        # worker, though it may drain for 600 s, has nothing to wait for.
        target.process.send_signal(signal.SIGTERM)
        assert target.process.wait(timeout=60) == 0
    finally:
        target.stop()


def test_a_worker_ends_a_live_routers_idle_streams_when_told_to_stop() -> None:
    target = ServiceProcess(
        "target-worker", "--model", "specserve/demo-target", *ARGS, "--grace-s", "600"
    )
    try:
        address = target.wait_ready()
        with service("router", "--target-workers", address) as (router, _):
            request = rpb.GenerateRequest(text="def f(x):", max_tokens=4)
            with grpc.insecure_channel(router) as channel:
                list(RouterStub(channel).Generate(request, timeout=60))  # streams now open
            target.process.send_signal(signal.SIGTERM)
            assert target.process.wait(timeout=60) == 0  # not 600 s
    finally:
        target.stop()


def test_the_gateway_cuts_a_stream_with_an_error_event_and_done() -> None:
    flags = ("--host", "127.0.0.1", "--dtype", "float32", "--grace-s", "3")
    gateway = ServiceProcess("serve", "specserve/demo-target", *flags)
    try:
        address = gateway.wait_ready()
        # Far more tokens than 2 s make: the stream is still open when it is cut.
        body = {"prompt": "def f(x):", "max_tokens": 2000, "ignore_eos": True, "stream": True}
        request = urllib.request.Request(
            f"http://{address}/v1/completions",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )
        lines: list[bytes] = []
        with urllib.request.urlopen(request, timeout=120) as reply:
            lines.append(reply.readline())  # under way
            threading.Timer(0, gateway.process.send_signal, (signal.SIGTERM,)).start()
            lines += reply.readlines()
        events = [line for line in lines if line.startswith(b"data: ")]
        assert events[-1] == b"data: [DONE]\n"
        error = json.loads(events[-2][len(b"data: ") :])
        assert "shutting down" in error["error"]["message"]
        assert gateway.process.wait(timeout=60) == 0
    finally:
        gateway.stop()

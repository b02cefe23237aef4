"""Health tells the truth: a router with no reachable target is NOT_SERVING
(and still describes itself), a gateway says 503 while its backend cannot
serve, and one started before its router serves as soon as the router comes."""

from __future__ import annotations

import json
import signal
import time
import urllib.error
import urllib.request
from collections.abc import Callable

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from protos import router_pb2 as rpb
from protos.router_pb2_grpc import RouterStub
from protos.server import ALIVE
from specserve.launch import free_port, service

HEALTHY = health_pb2.HealthCheckResponse.SERVING
ARGS = ("--dtype", "float32", "--max-model-len", "512", "--num-kv-blocks", "256")


def get(url: str) -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(url, timeout=30) as reply:
            return reply.status, json.loads(reply.read() or b"{}")
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}")


def complete(base: str) -> tuple[int, dict]:
    request = urllib.request.Request(
        f"{base}/v1/completions",
        data=b'{"prompt": "def f():", "max_tokens": 3}',
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as reply:
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def router_health(address: str, service: str = "") -> int:
    with grpc.insecure_channel(address) as channel:
        check = health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(service=service), timeout=10
        )
        return int(check.status)


def wait_until(condition: Callable[[], bool], timeout_s: float = 60) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.2)
    return False


def test_a_gateway_started_before_its_router_serves_once_it_comes() -> None:
    port = free_port()
    flags = ("--host", "127.0.0.1", "--router", f"127.0.0.1:{port}")
    with service("serve", *flags) as (address, _):
        base = f"http://{address}"
        code, body = get(f"{base}/health")
        assert code == 503 and "no router" in body["reason"]
        code, body = complete(base)
        assert code == 503 and body["error"]["type"] == "server_error"
        with (
            service("target-worker", "--model", "specserve/demo-target", *ARGS) as (target, _),
            service("router", "--target-workers", target, port=port),
        ):
            assert wait_until(lambda: get(f"{base}/health")[0] == 200)
            code, body = complete(base)
            assert code == 200 and body["choices"][0]["text"]


def test_a_router_without_a_reachable_target_is_not_serving_and_says_so() -> None:
    target_port = free_port()
    target_cm = service(
        "target-worker", "--model", "specserve/demo-target", *ARGS, port=target_port
    )
    target, target_process = target_cm.__enter__()
    try:
        with (
            service("router", "--target-workers", target) as (router, _),
            service("serve", "--host", "127.0.0.1", "--router", router) as (gateway, _),
        ):
            base = f"http://{gateway}"
            assert router_health(router) == HEALTHY and get(f"{base}/health")[0] == 200
            target_process.send_signal(signal.SIGKILL)
            target_process.wait()
            # Idle, the router notices by itself; its health and the gateway's follow.
            assert wait_until(lambda: router_health(router) != HEALTHY)
            assert wait_until(lambda: get(f"{base}/health")[0] == 503)
            # Both are still alive (what liveness probes ask): nothing should restart them.
            assert router_health(router, ALIVE) == HEALTHY
            assert get(f"{base}/version")[0] == 200
            with grpc.insecure_channel(router) as channel:  # it still describes itself
                info = RouterStub(channel).Describe(rpb.DescribeRouterRequest(), timeout=10)
                assert info.model == "specserve/demo-target"
            with urllib.request.urlopen(f"{base}/metrics", timeout=30) as reply:
                assert b"specserve_num_requests_running" in reply.read()
            with service(
                "target-worker", "--model", "specserve/demo-target", *ARGS, port=target_port
            ):
                assert wait_until(lambda: router_health(router) == HEALTHY)
                assert wait_until(lambda: complete(base)[0] == 200)
    finally:
        target_cm.__exit__(None, None, None)


def speculation(address: str) -> int:
    with grpc.insecure_channel(address) as channel:
        request = health_pb2.HealthCheckRequest(service="specserve.v1.Router/speculation")
        return int(health_pb2_grpc.HealthStub(channel).Check(request, timeout=10).status)


def test_an_idle_router_follows_its_draft_worker_leaving_and_coming_back() -> None:
    draft_port = free_port()
    with service("target-worker", "--model", "specserve/demo-target", *ARGS) as (target, _):
        draft_cm = service(
            "draft-worker", "--model", "specserve/demo-draft", *ARGS, port=draft_port
        )
        draft, draft_process = draft_cm.__enter__()
        try:
            flags = ("--target-workers", target, "--draft-workers", draft)
            with service("router", *flags) as (router, _):
                assert speculation(router) == HEALTHY
                draft_process.send_signal(signal.SIGKILL)
                draft_process.wait()
                # No request runs: the router probes its workers by itself.
                assert wait_until(lambda: speculation(router) != HEALTHY, 20)
                with service(
                    "draft-worker", "--model", "specserve/demo-draft", *ARGS, port=draft_port
                ):
                    assert wait_until(lambda: speculation(router) == HEALTHY, 20)
        finally:
            draft_cm.__exit__(None, None, None)

"""Ray placement of a tensor-parallel target on a local cluster made the way
users make one (`ray start --head`): a target worker that joins it serves
through the router, `specserve serve -tp 2` gives the single-rank output, a
rank that dies fails its worker cleanly and frees the placement, and a group
the cluster cannot hold is refused with what is missing."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from protos import common_pb2, router_pb2, router_pb2_grpc
from protos.server import ALIVE
from specserve import LLM, SamplingParams
from specserve.launch import free_port, service
from tests.test_openai_server import client

NUM_CPUS = 4
PROMPT = "def fibonacci(n):"


def ray_cli(*args: str) -> subprocess.CompletedProcess[str]:
    ray = os.path.join(os.path.dirname(sys.executable), "ray")
    return subprocess.run([ray, *args], capture_output=True, text=True, timeout=180)


@pytest.fixture(scope="module")
def cluster() -> Iterator[str]:
    """A one-node Ray cluster with NUM_CPUS CPUs and no GPU. Yields the address
    users pass for it, ``auto`` (which also finds the cluster's auth token)."""
    port = free_port()
    started = ray_cli(
        "start",
        "--head",
        f"--port={port}",
        f"--num-cpus={NUM_CPUS}",
        "--num-gpus=0",
        "--include-dashboard=false",
        "--disable-usage-stats",
    )
    assert started.returncode == 0, started.stderr
    try:
        yield "auto"
    finally:
        ray_cli("stop", "--force")


def available_cpus(address: str) -> float:
    """What the cluster has free, asked by a driver of its own."""
    code = (
        f"import ray; ray.init(address={address!r}, log_to_driver=False); "
        "print(ray.available_resources().get('CPU', 0))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    return float(result.stdout.strip().splitlines()[-1])


def generate(router: str, max_tokens: int = 16, timeout_s: float = 120) -> list[int]:
    with grpc.insecure_channel(router) as channel:
        request = router_pb2.GenerateRequest(
            text=PROMPT, max_tokens=max_tokens, sampling=common_pb2.SamplingParams(temperature=0)
        )
        stub = router_pb2_grpc.RouterStub(channel)
        return [t for r in stub.Generate(request, timeout=timeout_s) for t in r.token_ids]


def health(address: str, service: str = "") -> int:
    with grpc.insecure_channel(address) as channel:
        reply = health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(service=service), timeout=10
        )
        return int(reply.status)


def test_a_target_worker_joins_the_cluster_and_a_dead_rank_fails_it_cleanly(
    cluster: str,
) -> None:
    flags = (
        "--model",
        "specserve/demo-target",
        "--dtype",
        "float32",
        "-tp",
        "2",
        "--max-model-len",
        "512",
    )
    with service("target-worker", *flags, "--ray-address", cluster) as (target, process):
        pids = re.search(r"2 ranks: pids (\d+), (\d+)", "".join(process.output_tail))  # type: ignore[attr-defined]
        assert pids, "".join(process.output_tail)  # type: ignore[attr-defined]
        assert available_cpus(cluster) == NUM_CPUS - 2  # one bundle per rank
        with service("router", "--target-workers", target) as (router, _):
            expected = LLM("specserve/demo-target", dtype="float32", max_model_len=512).generate(
                [PROMPT], SamplingParams(temperature=0, max_tokens=16), use_tqdm=False
            )
            assert generate(router) == expected[0].outputs[0].token_ids

            os.kill(int(pids.group(2)), signal.SIGKILL)  # rank 1's actor process
            start = time.monotonic()
            with pytest.raises(grpc.RpcError) as failure:
                generate(router, timeout_s=90)
            assert failure.value.code() == grpc.StatusCode.UNAVAILABLE
            assert time.monotonic() - start < 90
            assert health(target) == health_pb2.HealthCheckResponse.NOT_SERVING
            # A worker without its rank cannot recover: liveness says restart it.
            assert health(target, ALIVE) == health_pb2.HealthCheckResponse.NOT_SERVING
            # Its only target is gone: the router says it cannot serve, and lives on.
            assert health(router) == health_pb2.HealthCheckResponse.NOT_SERVING
            assert health(router, ALIVE) == health_pb2.HealthCheckResponse.SERVING
        assert available_cpus(cluster) == NUM_CPUS  # the placement group is gone


def test_serve_with_two_ranks_on_ray_gives_the_single_rank_output(cluster: str) -> None:
    spec = json.dumps({"model": "specserve/demo-draft", "num_speculative_tokens": 4})
    flags = (
        "--host",
        "127.0.0.1",
        "--dtype",
        "float32",
        "--max_model_len",
        "512",
        "--speculative_config",
        spec,
    )
    with service(
        "serve", "specserve/demo-target", *flags, "-tp", "2", "--ray-address", cluster
    ) as (
        address,
        _,
    ):
        reply = client(f"http://{address}").completions.create(
            model="specserve/demo-target", prompt=PROMPT, max_tokens=24, temperature=0
        )
    speculative = {"model": "specserve/demo-draft", "num_speculative_tokens": 4}
    expected = LLM(
        "specserve/demo-target", speculative_config=speculative, dtype="float32", max_model_len=512
    )
    (output,) = expected.generate(
        [PROMPT], SamplingParams(temperature=0, max_tokens=24), use_tqdm=False
    )
    assert reply.choices[0].text == output.outputs[0].text


def test_ranks_the_cluster_cannot_hold_are_refused_with_what_is_missing(cluster: str) -> None:
    result = subprocess.run(
        [
            *(sys.executable, "-m", "specserve", "target-worker"),
            *("--model", "specserve/demo-target", "-tp", "2", "--device", "cuda"),
            *("--ray-address", cluster, "--placement-timeout-s", "3"),
        ],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert result.returncode == 2, result.stderr
    assert "could not place 2 ranks of {'GPU': 1.0, 'CPU': 1.0}" in result.stderr
    assert "available now" in result.stderr
    assert available_cpus(cluster) == NUM_CPUS

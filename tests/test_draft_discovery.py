"""A draft pool behind a DNS name: draft workers that appear in the name's
answer join the router's pool and take new sequences, ones that leave are
retired and their sequences move on, and the output stays the target's."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2

from protos import router_pb2 as rpb
from protos import router_pb2_grpc
from router.config import EngineConfig, SpeculativeConfig
from router.discovery import Discovery, resolve, split_addresses
from router.engine import LLMEngine
from router.grpc_clients import GrpcDraftClient
from router.params import SamplingParams
from router.sequence import SequenceState
from router.service_config import RouterConfig
from router.workers import SameTokenizer, build_remote_workers
from specserve.launch import free_port, service
from tests.test_grpc_failures import speculation_health

K = 4
NAME = "specserve-draft:50053"
ARGS = ("--dtype", "float32", "--max-model-len", "512", "--num-kv-blocks", "256")
GREEDY = SamplingParams(temperature=0.0, max_tokens=24, ignore_eos=True)


@pytest.fixture(scope="module")
def workers(qwen3_checkpoint: Path) -> Iterator[dict[str, str]]:
    """A target, two draft workers of its family, and one of another tokenizer."""
    with (
        service("target-worker", "--model", "specserve/demo-target", *ARGS) as (target, _),
        service("draft-worker", "--model", "specserve/demo-draft", *ARGS) as (a, _),
        service("draft-worker", "--model", "specserve/demo-draft", *ARGS) as (b, _),
        service("draft-worker", "--model", str(qwen3_checkpoint), *ARGS) as (alien, _),
    ):
        yield {"target": target, "a": a, "b": b, "alien": alien}


class Answers:
    """What the name resolves to, as the test sets it (the cluster's DNS, here)."""

    def __init__(self) -> None:
        self.addresses: set[str] = set()

    def __call__(self, name: str) -> set[str]:
        assert name == NAME
        return set(self.addresses)


def engine_with_discovery(
    workers: dict[str, str], answers: Answers
) -> tuple[LLMEngine, Discovery[GrpcDraftClient]]:
    remote = build_remote_workers([workers["target"]], [])
    # k pinned: adaptive k follows measured times, and on a loaded machine may
    # settle at 0, where no round drafts and no sequence moves between workers.
    spec = SpeculativeConfig("dns:///" + NAME, K, adaptive_k=False)
    config = EngineConfig.of("specserve/demo-target", spec)
    engine = LLMEngine(config, remote)
    discovery = Discovery(
        engine.drafts,  # type: ignore[arg-type]
        [NAME],
        partial(GrpcDraftClient, connect_timeout_s=5.0, wait_for_ready=False),
        SameTokenizer(remote.tokenizer, config.model),
        interval_s=10.0,
        resolver=answers,
    )
    return engine, discovery


def add(engine: LLMEngine, prompts: list[str]) -> list[SequenceState]:
    return [
        engine.add_request(f"{p}-{i}", engine.tokenizer.encode(p), GREEDY)[0]
        for i, p in enumerate(prompts)
    ]


def members(engine: LLMEngine) -> list[str]:
    """The draft pool's members once the engine has applied discovery's changes."""
    engine.drafts.up()
    return [engine.drafts.addresses[i] for i in engine.drafts.members()]


def target_only(workers: dict[str, str], prompts: list[str]) -> list[list[int]]:
    engine = LLMEngine(
        EngineConfig.of("specserve/demo-target"),
        build_remote_workers([workers["target"]], []),
    )
    states = add(engine, prompts)
    while engine.has_unfinished():
        engine.step()
    return [s.output_ids for s in states]


def test_the_pool_follows_the_names_answer_and_the_output_stays_the_targets(
    workers: dict[str, str],
) -> None:
    answers = Answers()
    engine, discovery = engine_with_discovery(workers, answers)
    prompts = [f"def f{i}(x):" for i in range(6)]
    expected = target_only(workers, prompts)

    assert engine.step() == [] and not engine.speculating  # nothing found yet

    answers.addresses = {workers["a"]}
    discovery.refresh()
    first = add(engine, prompts[:3])
    engine.step()
    assert members(engine) == [workers["a"]] and engine.speculating
    assert {s.draft_worker for s in first} == {0}

    # Scaled up: the new worker takes the new sequences (it has none yet).
    answers.addresses = {workers["a"], workers["b"]}
    discovery.refresh()
    second = add(engine, prompts[3:])
    engine.step()
    engine.step()
    assert members(engine) == [workers["a"], workers["b"]]
    assert {s.draft_worker for s in second if not s.finished} == {1}

    # Scaled down: a's sequences move to b and are re-prefilled there.
    answers.addresses = {workers["b"]}
    discovery.refresh()
    while engine.has_unfinished():
        engine.step()
    assert members(engine) == [workers["b"]]
    assert {s.draft_worker for s in first + second} == {1}  # all ended on b
    assert [s.output_ids for s in first + second] == expected
    assert engine.metrics.num_accepted_tokens > 0


def test_a_worker_with_another_tokenizer_is_refused_once(workers: dict[str, str]) -> None:
    answers = Answers()
    engine, discovery = engine_with_discovery(workers, answers)
    connected: list[str] = []
    connect = discovery.connect
    discovery.connect = lambda address: connected.append(address) or connect(address)
    answers.addresses = {workers["alien"], workers["a"]}
    discovery.refresh()
    discovery.refresh()
    assert members(engine) == [workers["a"]]
    assert connected.count(workers["alien"]) == 1  # refused, not tried again


def test_a_name_that_stops_resolving_keeps_its_workers(workers: dict[str, str]) -> None:
    answers = Answers()
    engine, discovery = engine_with_discovery(workers, answers)
    answers.addresses = {workers["a"]}
    discovery.refresh()

    def fail(name: str) -> set[str]:
        raise socket.gaierror(socket.EAI_AGAIN, "Temporary failure in name resolution")

    discovery.resolver = fail
    discovery.refresh()
    assert members(engine) == [workers["a"]]


def test_an_address_that_refuses_connections_is_skipped_without_waiting(
    workers: dict[str, str],
) -> None:
    answers = Answers()
    engine, discovery = engine_with_discovery(workers, answers)
    # A connect that waited for the worker would sit out this whole deadline.
    discovery.connect = partial(GrpcDraftClient, connect_timeout_s=60.0, wait_for_ready=False)
    answers.addresses = {f"127.0.0.1:{free_port()}", workers["a"]}
    start = time.monotonic()
    discovery.refresh()
    assert time.monotonic() - start < 30, "the refused address was waited for"
    assert members(engine) == [workers["a"]]


def test_a_router_given_a_dns_name_speculates_with_the_workers_behind_it(
    workers: dict[str, str],
) -> None:
    port = workers["a"].rpartition(":")[2]
    with service(
        "router",
        "--target-workers",
        workers["target"],
        "--draft-workers",
        f"dns:///localhost:{port}",
        "--num-speculative-tokens",
        str(K),
    ) as (router, _):
        with grpc.insecure_channel(router) as channel:
            info = router_pb2_grpc.RouterStub(channel).Describe(
                rpb.DescribeRouterRequest(), timeout=30
            )
    assert info.draft_model == "specserve/demo-draft"
    assert info.speculating


def test_an_idle_router_picks_up_a_draft_worker_that_starts_after_it(
    workers: dict[str, str],
) -> None:
    draft_port = free_port()
    with service(
        "router",
        "--target-workers",
        workers["target"],
        "--draft-workers",
        f"dns:///localhost:{draft_port}",
        "--discovery-interval-s",
        "0.2",
    ) as (router, _):
        assert speculation_health(router) == health_pb2.HealthCheckResponse.NOT_SERVING
        with service("draft-worker", "--model", "specserve/demo-draft", *ARGS, port=draft_port):
            deadline = time.monotonic() + 30
            while speculation_health(router) != health_pb2.HealthCheckResponse.SERVING:
                assert time.monotonic() < deadline, "the router never found the draft worker"
                time.sleep(0.1)


def test_the_system_resolver_gives_every_address_of_a_name() -> None:
    assert "127.0.0.1:50053" in resolve("localhost:50053")


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        ({"target_workers": "dns:///specserve-target:50052"}, "not dns:/// names"),
        ({"target_workers": "t:1", "draft_workers": "dns:///specserve-draft"}, "needs a port"),
        ({"target_workers": "t:1", "draft_workers": "dns://10.0.0.10/d:1"}, "only dns:///"),
        ({"target_workers": "t:1", "discovery_interval_s": 0.0}, "discovery_interval_s"),
    ],
)
def test_bad_worker_addresses_are_refused_with_the_reason(
    flags: dict[str, object], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        RouterConfig(**flags)  # type: ignore[arg-type]


def test_fixed_addresses_and_names_are_told_apart() -> None:
    assert split_addresses(["a:1", "dns:///d:2"]) == (["a:1"], ["d:2"])

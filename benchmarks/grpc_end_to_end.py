"""End-to-end tokens/s in one process against three processes on loopback,
with and without speculation and overlap (``grpc_overhead.py`` runs it after
the per-round times)."""

from __future__ import annotations

import argparse
import json
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import replace
from functools import partial
from typing import Any

import grpc

from protos import common_pb2, router_pb2, router_pb2_grpc
from router.engine import LLMEngine
from router.params import SamplingParams
from router.workers import Workers
from specserve.launch import service


def tokens_per_s(generate_one: Callable[[int], int], concurrency: int, requests: int) -> float:
    start = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as pool:
        tokens = sum(pool.map(generate_one, range(requests)))
    return tokens / (time.perf_counter() - start)


def in_process_tokens_per_s(
    engine: LLMEngine, concurrency: int, requests: int, max_tokens: int
) -> float:
    """As the gRPC clients load the router: ``concurrency`` requests in flight,
    a new one added as soon as one finishes."""
    params = SamplingParams(temperature=0, max_tokens=max_tokens, ignore_eos=True)
    waiting = deque(range(requests))
    in_flight = 0
    start = time.perf_counter()
    while waiting or engine.has_unfinished():
        while waiting and in_flight < concurrency:
            i = waiting.popleft()
            engine.add_request(str(i), engine.tokenizer.encode(f"def f{i}(x):"), params)
            in_flight += 1
        in_flight -= len(engine.step())
    return requests * max_tokens / (time.perf_counter() - start)


def measure_end_to_end(
    args: argparse.Namespace,
    local: LLMEngine,
    local_workers: Workers,
    addresses: tuple[str, str],
    stack: ExitStack,
) -> list[dict[str, Any]]:
    """Tokens/s through a router process and in process, with and without
    speculation and overlap, at 1 and 16 requests in flight."""
    (target, draft), rows = addresses, []
    for speculate, overlap in ((False, False), (True, False), (True, True)):
        router_args = ["--target-workers", target, "--num-speculative-tokens", str(args.k)]
        router_args += ["--overlap" if overlap else "--no-overlap"]
        router_args += ["--draft-workers", draft] if speculate else []
        router, _ = stack.enter_context(service("router", *router_args))
        # The same in-process workers, with speculation or without.
        engine = LLMEngine(
            replace(
                local.config,
                speculative=local.config.speculative if speculate else None,
                overlap=overlap,
            ),
            replace(local_workers, drafts=local_workers.drafts if speculate else []),
        )
        stub = router_pb2_grpc.RouterStub(stack.enter_context(grpc.insecure_channel(router)))
        over_grpc = partial(generate_over_grpc, stub, args.max_tokens)
        for concurrency in (1, 16):
            requests = concurrency * 2
            row = {
                "speculation": speculate,
                "overlap": overlap,
                "concurrency": concurrency,
                "in_process_tokens_per_s": in_process_tokens_per_s(
                    engine, concurrency, requests, args.max_tokens
                ),
                "three_processes_tokens_per_s": tokens_per_s(over_grpc, concurrency, requests),
            }
            rows.append(row)
            print(json.dumps(row), flush=True)
    return rows


def generate_over_grpc(stub: router_pb2_grpc.RouterStub, max_tokens: int, i: int) -> int:
    """Tokens of one greedy completion of prompt ``i`` through the router."""
    request = router_pb2.GenerateRequest(
        text=f"def f{i}(x):",
        max_tokens=max_tokens,
        ignore_eos=True,
        sampling=common_pb2.SamplingParams(temperature=0),
    )
    return sum(len(r.token_ids) for r in stub.Generate(request, timeout=600))

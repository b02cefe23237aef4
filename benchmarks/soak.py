"""Hold load on `specserve serve --disaggregated` (gateway, router, target and
draft worker as four processes) and report what an operator checks before
putting it in front of users: requests served, errors by kind, latency and
time-to-first-token percentiles, every process's memory at the start and the
end, and the KV blocks still in use once the load stops.

    PYTHONPATH=. python benchmarks/soak.py --minutes 3 --clients 8 --out soak.json

The load mixes streamed and whole completions, clients that disconnect half
way, and requests the server must refuse (a prompt too long, a bad value).
"""

from __future__ import annotations

import argparse
import json
import random
import re
import statistics
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from pathlib import Path
from typing import Any

import grpc

from protos import router_pb2 as rpb
from protos.router_pb2_grpc import RouterStub
from specserve.launch import ServiceProcess

BAD_BODIES = [
    {"prompt": "x " * 5000, "max_tokens": 4},  # longer than the context
    {"prompt": "x", "temperature": -1},
    {"prompt": [99999999]},
]


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def processes(root: int) -> dict[str, int]:
    """The gateway and its children (the services it started), by command."""
    out = {"serve": root}
    children = subprocess.run(
        ["ps", "-o", "pid=,args=", "--ppid", str(root)], capture_output=True, text=True
    ).stdout
    for line in children.splitlines():
        pid, args = line.strip().split(" ", 1)
        match = re.search(r"specserve (\S+)", args)
        if match:
            out[match.group(1)] = int(pid)
    return out


class Load:
    """Clients sending one request after another until told to stop."""

    def __init__(self, base: str, max_tokens: int):
        self.base, self.max_tokens = base, max_tokens
        self.outcomes: Counter[str] = Counter()
        self.latency: list[float] = []
        self.ttft: list[float] = []
        self.lock = threading.Lock()
        self.stop = threading.Event()

    def run(self, seed: int) -> None:
        rng = random.Random(seed)
        while not self.stop.is_set():
            roll = rng.random()
            if roll < 0.05:
                self._send(rng.choice(BAD_BODIES), stream=False, cut=False)
            else:
                body = {"prompt": f"def f{rng.randrange(1000)}(x):", "max_tokens": self.max_tokens}
                self._send(body, stream=roll < 0.6, cut=roll > 0.9)

    def _send(self, body: dict[str, Any], stream: bool, cut: bool) -> None:
        request = urllib.request.Request(
            f"{self.base}/v1/completions",
            data=json.dumps({**body, "stream": stream}).encode(),
            headers={"Content-Type": "application/json"},
        )
        start = time.monotonic()
        try:
            with urllib.request.urlopen(request, timeout=300) as reply:
                first = reply.readline() if stream else reply.read()
                ttft = time.monotonic() - start
                if not cut:
                    reply.read()
            outcome = "cut by the client" if cut else "ok"
        except urllib.error.HTTPError as e:
            outcome, ttft = f"HTTP {e.code}", None
        except OSError as e:
            outcome, ttft = f"failed: {type(e).__name__}", None
        with self.lock:
            self.outcomes[outcome] += 1
            if outcome == "ok":
                self.latency.append(time.monotonic() - start)
                if stream and ttft is not None and first:
                    self.ttft.append(ttft)


def percentiles(values: list[float]) -> dict[str, float]:
    if len(values) < 2:
        return {}
    cuts = statistics.quantiles(values, n=100)
    return {"p50": cuts[49], "p90": cuts[89], "p99": cuts[98]}


def kv_in_use(router: str) -> float:
    with grpc.insecure_channel(router) as channel:
        return RouterStub(channel).Describe(rpb.DescribeRouterRequest(), timeout=10).kv_cache_usage


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=3.0)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--out")
    args = parser.parse_args()
    gateway = ServiceProcess(
        "serve", "--host", "127.0.0.1", "--disaggregated", "--dtype", "float32"
    )
    try:
        address = gateway.wait_ready()
        router = re.search(r"router on (\S+:\d+)", "".join(gateway.output_tail))
        assert router, "serve did not say where its router is"
        pids = processes(gateway.process.pid)
        memory_start = {name: rss_mib(pid) for name, pid in pids.items()}
        load = Load(f"http://{address}", args.max_tokens)
        threads = [threading.Thread(target=load.run, args=(i,)) for i in range(args.clients)]
        started = time.monotonic()
        for thread in threads:
            thread.start()
        time.sleep(args.minutes * 60)
        load.stop.set()
        for thread in threads:
            thread.join()
        seconds = time.monotonic() - started
        time.sleep(2)  # the aborts of cut requests reach the workers
        result = {
            "clients": args.clients,
            "seconds": seconds,
            "requests": sum(load.outcomes.values()),
            "outcomes": dict(load.outcomes),
            "latency_s": percentiles(load.latency),
            "ttft_s": percentiles(load.ttft),
            "memory_mib": {
                name: {"start": memory_start[name], "end": rss_mib(pid)}
                for name, pid in pids.items()
            },
            "kv_cache_usage_after": kv_in_use(router.group(1)),
        }
    finally:
        gateway.stop()
    print(json.dumps(result, indent=1))
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()

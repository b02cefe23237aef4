"""What the OpenAI gateway costs, in each shape ``specserve serve`` runs in:
tokens/s of greedy completions through the stock ``openai`` client against the
offline ``LLM`` API on the same bundled pair (k = 5, float32, CPU).

    python benchmarks/gateway_overhead.py --out gateway_overhead.json

Shapes: ``offline`` (LLM.generate, no HTTP), ``serve`` (gateway and engine in
one process), ``serve --disaggregated`` (gateway, router, target worker and
draft worker as four processes on loopback). Each is measured with 1 and with
8 concurrent requests of ``--max-tokens`` tokens (ignore_eos, so every request
generates exactly that many).
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import date

from openai import OpenAI

from specserve import LLM, SamplingParams
from specserve.launch import service

SPEC = {"model": "specserve/demo-draft", "num_speculative_tokens": 5}
PROMPTS = [
    "def fibonacci(n):",
    "import os\nimport sys\n",
    "class Stack:\n    def push(self, item):",
    "# Parse the command line\n",
    "def read_config(path):\n    with open(path) as f:",
    "try:\n    import json\nexcept ImportError:",
    "    for i in range(len(items)):\n",
    "    return self._cache[key]\n\n    def",
]


def offline(concurrency: int, max_tokens: int) -> float:
    llm = LLM("specserve/demo-target", speculative_config=SPEC, dtype="float32")
    params = SamplingParams(temperature=0, max_tokens=max_tokens, ignore_eos=True)
    llm.generate(PROMPTS[:1], params, use_tqdm=False)  # warm up
    start = time.perf_counter()
    llm.generate(PROMPTS[:concurrency], params, use_tqdm=False)
    return concurrency * max_tokens / (time.perf_counter() - start)


def through_http(base: str, concurrency: int, max_tokens: int) -> float:
    client = OpenAI(api_key="EMPTY", base_url=f"{base}/v1")

    def one(prompt: str) -> int:
        reply = client.completions.create(
            model="specserve/demo-target",
            prompt=prompt,
            max_tokens=max_tokens,
            temperature=0,
            extra_body={"ignore_eos": True},
        )
        return reply.usage.completion_tokens

    one(PROMPTS[0])  # warm up
    start = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as pool:
        tokens = sum(pool.map(one, PROMPTS[:concurrency]))
    return tokens / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--out", default="gateway_overhead.json")
    args = parser.parse_args()
    results: dict[str, dict[str, float]] = {}
    for concurrency in (1, 8):
        results.setdefault("offline", {})[str(concurrency)] = offline(concurrency, args.max_tokens)
    spec = json.dumps(SPEC)
    common = ("--host", "127.0.0.1", "--dtype", "float32", "--disable-log-stats")
    for name, extra in (("serve", ()), ("serve --disaggregated", ("--disaggregated",))):
        with service(
            "serve", "specserve/demo-target", *common, "--speculative_config", spec, *extra
        ) as (
            address,
            _,
        ):
            for concurrency in (1, 8):
                rate = through_http(f"http://{address}", concurrency, args.max_tokens)
                results.setdefault(name, {})[str(concurrency)] = rate
    report = {
        "command": f"python benchmarks/gateway_overhead.py --max-tokens {args.max_tokens}",
        "machine": f"{platform.machine()}, {platform.processor() or 'cpu'}, 2 cores (CPU only)",
        "date": date.today().isoformat(),
        "tokens_per_second": results,
    }
    with open(args.out, "w") as f:
        json.dump(report, f, indent=2)
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()

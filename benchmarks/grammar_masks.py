"""What structured outputs cost, and what constraining the draft gains.

    PYTHONPATH=. python benchmarks/grammar_masks.py --out grammar_masks.json

1. The masks of one verify round: B sequences inside a JSON document their
   schema allows, each with k drafts (the document's next tokens): the time
   to compute the B x (k + 1) masks with llguidance and to apply them to the
   logits on the device (``--device cuda`` on a GPU).
2. Acceptance through ``LLM`` with the bundled pair, a JSON schema, greedy
   and at temperature 0.8: with the draft proposing under the grammar (what
   specserve does) and with the draft left free (its requests stripped of
   the grammar; the target still masks, so outputs stay exact).
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import replace
from typing import Any

import torch
from transformers import AutoTokenizer

import specserve
from model_runtime.grammar import GrammarMatchers, apply_bitmask
from protos.messages import ProposeRequest
from specserve import LLM, SamplingParams, StructuredOutputsParams

SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 24},
        "age": {"type": "integer", "minimum": 0, "maximum": 150},
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 12}, "maxItems": 4},
    },
    "required": ["name", "age", "tags"],
    "additionalProperties": False,
}
DOCUMENT = '{"name": "Ada Lovelace", "age": 36, "tags": ["math", "engines", "notes"]}'


def mask_costs(batch: int, k: int, device: str, rounds: int = 20) -> dict[str, Any]:
    """Mean ms per verify round to compute and to apply the masks."""
    tokenizer = AutoTokenizer.from_pretrained(specserve.resolve_model("specserve/demo-target"))
    vocab = len(tokenizer)
    grammar = StructuredOutputsParams(json=SCHEMA).text
    ids = tokenizer.encode(DOCUMENT, add_special_tokens=False)
    matchers = GrammarMatchers(lambda: tokenizer, vocab)
    drafted = []
    for seq in range(batch):  # each sequence somewhere inside the document
        at = seq % max(1, len(ids) - k)
        matchers.sync(seq, grammar, ids[:at])
        drafted.append((seq, ids[at : at + k]))
    logits = torch.randn(batch * (k + 1), vocab, device=device)
    rows = torch.arange(batch * (k + 1), device=device)
    apply_bitmask(logits, matchers.masks(drafted), rows)  # llguidance builds its states lazily
    compute = apply = 0.0
    for _ in range(rounds):
        start = time.perf_counter()
        bitmask = matchers.masks(drafted)
        compute += time.perf_counter() - start
        start = time.perf_counter()
        apply_bitmask(logits, bitmask, rows)
        if device == "cuda":
            torch.cuda.synchronize()
        apply += time.perf_counter() - start
    return {
        "batch": batch,
        "k": k,
        "device": device,
        "compute_ms": compute / rounds * 1e3,
        "apply_ms": apply / rounds * 1e3,
    }


def free_draft(llm: LLM) -> None:
    """Let the draft propose without the grammar (the target still masks)."""
    draft = llm.engine.workers.drafts[0]
    propose = draft.propose

    def unconstrained(requests: list[ProposeRequest], k: int) -> Any:
        return propose([replace(r, sampling=replace(r.sampling, grammar="")) for r in requests], k)

    draft.propose = unconstrained  # type: ignore[method-assign]


def acceptance(constrain_draft: bool, temperature: float, k: int) -> dict[str, Any]:
    spec = {"model": "specserve/demo-draft", "num_speculative_tokens": k, "adaptive_k": False}
    llm = LLM("specserve/demo-target", dtype="float32", speculative_config=spec)
    if not constrain_draft:
        free_draft(llm)
    schema = StructuredOutputsParams(json=SCHEMA, disable_any_whitespace=True)
    params = SamplingParams(
        temperature=temperature, seed=1, max_tokens=96, structured_outputs=schema
    )
    prompts = [f"Person {i} as JSON:" for i in range(16)]
    start = time.perf_counter()
    outputs = llm.generate(prompts, params, use_tqdm=False)
    seconds = time.perf_counter() - start
    stats = llm.speculation_stats()
    return {
        "draft_constrained": constrain_draft,
        "temperature": temperature,
        "k": k,
        "acceptance_rate": stats["acceptance_rate"],
        "mean_acceptance_length": stats["mean_acceptance_length"],
        "tokens_per_s": sum(len(o.outputs[0].token_ids) for o in outputs) / seconds,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--batch", nargs="+", type=int, default=[1, 16, 64])
    parser.add_argument("--k", type=int, default=4)
    parser.add_argument("--skip-acceptance", action="store_true")
    parser.add_argument("--out")
    args = parser.parse_args()
    result: dict[str, Any] = {"masks": [], "acceptance": []}
    for batch in args.batch:
        result["masks"].append(mask_costs(batch, args.k, args.device))
        print(json.dumps(result["masks"][-1]), flush=True)
    if not args.skip_acceptance:
        for temperature in (0.0, 0.8):  # untimed: a process's first rounds compile kernels
            acceptance(True, temperature, args.k)
        for temperature in (0.0, 0.8):
            for constrained in (True, False):
                result["acceptance"].append(acceptance(constrained, temperature, args.k))
                print(json.dumps(result["acceptance"][-1]), flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()

"""Greedy outputs of speculative rows against k = 0's, and the target's
top-two gap where they part: on a GPU a bf16 tie rounds differently in a
verify's k + 1 rows than in a decode's one row."""

from __future__ import annotations

from typing import Any

from benchmarks.prompts import Workload, timed_prompts
from specserve import LLM, SamplingParams


def same_as_plain(
    llm: LLM,
    rows: list[dict[str, Any]],
    outputs: list[list[list[int]]],
    work: Workload,
) -> None:
    """Mark each row with the share of its sequences whose greedy tokens equal
    those of k = 0 (a plain target step every round) at the same concurrency,
    and where one differs, the gap between the target's two likeliest tokens
    (k = 0's logprobs) at the first token where they part. bf16 logits of a
    random model often tie to within rounding, which the k + 1 rows of a
    verify and the one row of a decode round differently: a gap of a unit or
    two of bf16 at the logits' size (0.125 to 0.25) is such a tie, a wider one
    would be a lost token."""
    plain = {r["batch"]: out for r, out in zip(rows, outputs, strict=True) if r["k"] == 0}
    for row, out in zip(rows, outputs, strict=True):
        if row["batch"] not in plain:
            continue
        same = [a == b for a, b in zip(out, plain[row["batch"]], strict=True)]
        row["same_tokens_as_k0"] = sum(same) / len(same)
        batches = timed_prompts(row["batch"], work)
        asked = [p for ps in batches for p in ps]
        parted = []
        for prompt, a, b in zip(asked, out, plain[row["batch"]], strict=True):
            if a != b:
                first = next(i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y)
                parted.append({"prompt_token_ids": prompt["prompt_token_ids"] + b[:first]})
        if parted:
            row["parting_gaps"] = top_two_gaps(llm, parted[:8])


def top_two_gaps(llm: LLM, prefixes: list[dict[str, list[int]]]) -> list[float]:
    """The target's logprob gap between its two likeliest next tokens after each prefix."""
    assert llm.engine.rounds.chooser is not None
    llm.engine.rounds.chooser.pin(0)
    params = SamplingParams(temperature=0, max_tokens=1, logprobs=2)
    gaps = []
    for out in llm.generate(prefixes, params, use_tqdm=False):
        assert out.outputs[0].logprobs is not None
        top = sorted((p.logprob for p in out.outputs[0].logprobs[0].values()), reverse=True)
        gaps.append(round(top[0] - top[1], 4))
    return gaps

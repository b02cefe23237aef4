"""One timed row of a GPU benchmark through ``LLM``: greedy batches of
prompts at one concurrency, and what its rounds did."""

from __future__ import annotations

import statistics
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict
from typing import Any

from benchmarks.choices import tail_choices
from benchmarks.prompts import Workload, prompts, timed_prompts
from benchmarks.round_costs import Entry, round_log
from benchmarks.stalls import stalls
from router.adaptive import KChooser
from specserve import LLM, SamplingParams


class Fixed(KChooser):
    """k fixed, as ``adaptive_k: false`` with num_speculative_tokens = k runs:
    no round is timed and nothing is measured (``KChooser.pin`` keeps timing
    rounds, to choose again later)."""

    def __init__(self, k_max: int, k: int):
        super().__init__(k_max)
        self.pin(k)

    def timed(self, round_number: int) -> bool:
        return False

    def observe_between(self, batch: int, seconds: float) -> None:
        pass

    def observe_acceptance(self, k: int, accepted: int, kind: str = "") -> None:
        pass


def warm_up(llm: LLM, batch: int, text: bool = False) -> None:
    """A short batch before a timed row, untimed."""
    params = SamplingParams(temperature=0, max_tokens=8)
    llm.generate(prompts(batch, 0, text), params, use_tqdm=False)


def decode(llm: LLM, batch: int, work: Workload) -> tuple[float, list[list[int]], list[Entry]]:
    """Tokens/s of greedy decoding of the row's prompts, ``batch`` at a time
    (closed batches, or refilled: ``Workload``), the tokens in the prompts'
    order, and the rounds' log."""
    params = SamplingParams(temperature=0, max_tokens=work.max_tokens, ignore_eos=True)
    batches = timed_prompts(batch, work)
    if work.refill:  # one call, the scheduler running at most ``batch`` of them
        batches = [[p for asked in batches for p in asked]]
    tokens = []
    with round_log(llm.engine.rounds) as log, at_most(llm, batch if work.refill else None):
        start = time.perf_counter()
        for asked in batches:
            outs = llm.generate(asked, params, use_tqdm=False)
            tokens += [list(o.outputs[0].token_ids) for o in outs]
        rate = sum(map(len, tokens)) / (time.perf_counter() - start)
    return rate, tokens, log


@contextmanager
def at_most(llm: LLM, running: int | None) -> Iterator[None]:
    """``llm``'s scheduler running at most ``running`` sequences while inside
    (None: as it was built), waiting ones admitted as others end."""
    scheduler = llm.engine.scheduler
    built = scheduler.max_num_seqs
    if running is not None and running > built:
        raise ValueError(f"the LLM runs at most {built} sequences, not {running}")
    scheduler.max_num_seqs = built if running is None else running
    try:
        yield
    finally:
        scheduler.max_num_seqs = built


def step_counts(llm: LLM) -> dict[str, dict[str, float]]:
    """How the in-process target's and draft's forwards have run so far."""
    workers = {"target": llm.engine.workers.target, "draft": llm.engine.workers.drafts[0]}
    return {name: asdict(w.runner.counts) for name, w in workers.items()}  # type: ignore[attr-defined]


def counts_since(before: dict, after: dict) -> dict[str, dict[str, float]]:
    return {w: {n: round(after[w][n] - v, 4) for n, v in before[w].items()} for w in before}


def engine_row(llm: LLM, batch: int, work: Workload) -> tuple[dict[str, Any], list[list[int]]]:
    """One timed row: tokens/s, acceptance, rounds by k, the rounds' log
    (benchmarks/round_costs.py), the forwards' counts, what may have
    stalled a round (benchmarks/stalls.py) and what an adaptive k saw in
    the batches' tails (benchmarks/choices.py)."""
    warm_up(llm, batch, work.text)
    before, steps = llm.engine.metrics.copy(), step_counts(llm)
    chooser = llm.engine.rounds.chooser
    assert chooser is not None, "a row's k is pinned or chosen by the engine's chooser"
    with stalls() as stalled, tail_choices(chooser, batch) as choices:
        rate, tokens, log = decode(llm, batch, work)
    after = llm.engine.metrics.copy()
    drafted = after.num_draft_tokens - before.num_draft_tokens
    accepted = after.num_accepted_tokens - before.num_accepted_tokens
    rounds = [a - b for a, b in zip(after.rounds_per_k, before.rounds_per_k, strict=True)]
    row = {"tokens_per_s": rate, "acceptance": accepted / drafted if drafted else None,
           "rounds_per_k": rounds, "round_costs": log, "stalls": stalled, "tail_choices": choices,
           "refill": work.refill,
           "steps": counts_since(steps, step_counts(llm))}  # fmt: skip
    return row, tokens


def median_run(found: list[dict[str, Any]]) -> dict[str, Any]:
    """The first run's counts with the median tokens/s of all runs, each run's
    tokens/s, rounds by k, rounds' log, stalls and tail choices beside it
    (an adaptive run's choices vary)."""
    rates = [r["tokens_per_s"] for r in found]
    each = ("round_costs", "stalls", "tail_choices")
    first = {n: v for n, v in found[0].items() if n not in each}
    return {**first, "tokens_per_s": statistics.median(rates), "runs_tokens_per_s": rates,
            "runs_rounds_per_k": [r["rounds_per_k"] for r in found],
            "runs_round_costs": [r["round_costs"] for r in found],
            "runs_stalls": [r["stalls"] for r in found],
            "runs_tail_choices": [r.get("tail_choices", []) for r in found]}  # fmt: skip

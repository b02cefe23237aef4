"""A worker in this process, over one runner: what every worker offers besides
its batch calls (releasing sequences, the room in its KV cache, a description
of itself). DraftWorker and TargetWorker add their batch calls."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from model_runtime.grammar import GrammarMatchers, load_tokenizer
from model_runtime.runner import ModelRunner
from protos.messages import WorkerInfo


class LocalWorker:
    def __init__(self, runner: ModelRunner, model_name: str):
        self.runner = runner
        self.model_name = model_name
        self.device = runner.device
        # The grammars of its constrained sequences (structured outputs).
        self.grammars = GrammarMatchers(load_tokenizer(model_name), runner.vocab_size)

    @property
    def vocab_size(self) -> int:
        return self.runner.vocab_size

    @property
    def num_free_blocks(self) -> int:
        return self.runner.kv_cache.num_free_blocks

    def release(self, seq_ids: Sequence[int]) -> int:
        self.grammars.forget(seq_ids)
        return sum(self.runner.free(s) for s in seq_ids)

    def describe(self) -> WorkerInfo:
        cache = self.runner.kv_cache
        return WorkerInfo(
            model=self.model_name,
            vocab_size=self.runner.vocab_size,
            max_model_len=self.runner.max_positions,
            block_size=cache.block_size,
            num_blocks=cache.num_blocks,
            num_free_blocks=cache.num_free_blocks,
            max_num_batched_tokens=self.runner.limits.max_tokens,
            max_num_seqs=self.runner.limits.max_seqs,
            forwards=replace(self.runner.counts),
        )

    def probe(self, timeout_s: float) -> bool:
        return True  # in-process: always there

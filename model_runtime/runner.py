"""Runs one batched forward of a model over a ragged batch and a paged KV cache."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import replace

import torch

from model_runtime.batch import BatchLimits, HostBatch, PreparedBatch, SequenceChunk, host_batch
from model_runtime.graphs import StepGraphs
from model_runtime.kernels.paged_attention import split_counts
from model_runtime.kv_cache import PagedKVCache
from model_runtime.layers.attention import ForwardContext
from model_runtime.models.llama import LlamaForCausalLM
from model_runtime.ops import Ops, ops_for
from model_runtime.ops.triton_ops import TritonOps
from model_runtime.status import OK, SequenceStatus, StatusCode
from model_runtime.step_counts import StepCounts

# The sequence id of startup forwards (the router's ids are never negative).
WARM_UP_SEQ = -1


class SequenceNotFoundError(KeyError):
    """The KV cache holds no tokens of a sequence that should have some."""


class ModelRunner:
    """A model, its KV cache, and the batched forward over both.

    ``forward`` takes any mix of prefills, decode steps and verify chunks and
    returns only the logits asked for. Rolling back rejected tokens is
    ``truncate``; finishing a sequence is ``free``. ``ops`` are the kernels
    (by default Triton on GPUs, PyTorch elsewhere).
    """

    def __init__(
        self,
        model: LlamaForCausalLM,
        kv_cache: PagedKVCache,
        max_positions: int,
        limits: BatchLimits | None = None,
        ops: Ops | None = None,
    ):
        self.model = model
        self.kv_cache = kv_cache
        self.max_positions = max_positions
        self.limits = limits or BatchLimits()
        self.device = model.lm_head.weight.device
        self.vocab_size = model.config.vocab_size
        group = model.config.num_attention_heads // model.config.num_key_value_heads
        self.ops = ops or ops_for(self.device, model.num_kv_heads_per_rank, group)
        self.graphs: StepGraphs | None = None
        self.counts = StepCounts()
        self._windows = set(model.config.sliding_windows)

    def ready_steps(self, max_batch: int, query_len: int, enforce_eager: bool) -> None:
        """Before serving on a GPU: capture the CUDA graphs (and with them
        compile the attention variants eager steps pick), or, with
        ``enforce_eager``, compile those variants only, where every step
        will pick one."""
        if enforce_eager:
            self.compile_attention_variants()
        else:
            self.capture_graphs(max_batch, query_len)

    def capture_graphs(self, max_batch: int, query_len: int = 1) -> None:
        """Replay decode, draft and verify steps of up to ``max_batch``
        sequences from CUDA graphs, capturing now those of up to ``query_len``
        new tokens per sequence (``StepGraphs.capture_startup``)."""
        if not isinstance(self.ops, TritonOps):
            raise ValueError("CUDA graphs need the Triton kernels of a CUDA device")
        self.graphs = StepGraphs(
            self.model, self.kv_cache, self.ops, self.max_positions, max_batch, self.counts
        )
        self.graphs.capture_startup(query_len)
        self.compile_attention_variants()

    @torch.inference_mode()
    def compile_attention_variants(self) -> None:
        """Run one eager forward per variant of the attention kernel an eager
        step (a catch-up, a prefill, a batch no graph holds) can pick: per
        query-tile size (``query_block``: 1 to 64 new tokens) and per split
        count (``split_counts``, which grow with the longest sequence). Each
        variant compiles once, for a third to a half of a second: mid-run, a
        round would stall on it."""
        assert isinstance(self.ops, TritonOps)
        splits = split_counts(self.max_positions)
        for length in (1, 2, 3, 5, 9, 17, 33):
            if length > min(self.max_positions, self.limits.max_tokens):
                break
            batch = self.to_device(self.plan([SequenceChunk(WARM_UP_SEQ, [0] * length)]))
            for count in splits:  # the same slots rewritten: the cache ends as it was
                batch.context.attention = replace(batch.context.attention, num_splits=count)
                started = time.perf_counter()
                self.execute(batch)
                self.counts.eager += 1
                self.counts.eager_s += time.perf_counter() - started
            self.free(WARM_UP_SEQ)

    @torch.inference_mode()
    def forward(
        self, chunks: Sequence[SequenceChunk], token_ids: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Append every chunk to its sequence and return logits [sum of num_logits, vocab].

        Rows come in chunk order, and within a chunk in position order. If the
        cache cannot hold the batch, OutOfBlocksError is raised and no
        sequence has changed. ``token_ids`` [T], on the device, replace the
        chunks' tokens (which then only count them): a draft step feeds the
        last step's tokens without reading them back. With graphs the logits
        are valid until the next forward.
        """
        batch = self.plan(chunks)
        if self.graphs is not None:
            logits = self.graphs.run(batch, token_ids)
            if logits is not None:
                return logits
        started = time.perf_counter()
        prepared = self.to_device(batch)
        if token_ids is not None:
            prepared.input_ids = token_ids
        logits = self.execute(prepared)
        self.counts.eager += 1
        self.counts.eager_s += time.perf_counter() - started
        return logits

    def execute(self, batch: PreparedBatch) -> torch.Tensor:
        """Run the forward of a prepared batch: device work only, no host sync.

        Replaying the same batch recomputes the same logits (its keys and
        values are written to the same slots), which is what a CUDA graph
        captures.
        """
        hidden = self.model(batch.input_ids, batch.positions, batch.context, batch.logits_indices)
        return self.model.compute_logits(hidden, batch.context.ops)

    def truncate(self, seq_id: int, length: int) -> None:
        self.kv_cache.truncate(seq_id, length)

    def rewind(self, seq_id: int, cached_len: int) -> None:
        """Make ``seq_id`` hold exactly its first ``cached_len`` tokens.

        ``cached_len == 0`` starts the sequence afresh. Raises
        SequenceNotFoundError when the cache holds nothing for a sequence
        expected to have tokens, ValueError when it holds fewer than expected.
        """
        held = self.kv_cache.num_tokens(seq_id)
        if cached_len == 0:
            self.kv_cache.free(seq_id)
        elif seq_id not in self.kv_cache:
            raise SequenceNotFoundError(f"sequence {seq_id} is not in this worker's KV cache")
        elif cached_len > held:
            raise ValueError(
                f"sequence {seq_id}: cached_len {cached_len} exceeds the {held} tokens held"
            )
        else:
            self.kv_cache.truncate(seq_id, cached_len)

    def admit(
        self, requests: Sequence[tuple[int, int, Sequence[int], int]]
    ) -> list[SequenceStatus]:
        """Check and rewind each sequence of a batch before its forward.

        Each request is (seq_id, cached_len, new token ids, extra tokens the
        step will append later, such as drafts). A sequence that is unknown,
        malformed or too long is INVALID_ARGUMENT (or NOT_FOUND); one that does
        not fit in the free blocks left by the ones before it, or past the
        batch limits, is RESOURCE_EXHAUSTED. Either must be left out of the
        batch.
        """
        statuses = []
        free = self.kv_cache.num_free_blocks
        tokens_left, seqs_left = self.limits.max_tokens, self.limits.max_seqs
        for seq_id, cached_len, token_ids, extra in requests:
            status = self._check(seq_id, cached_len, token_ids, extra)
            new = len(token_ids) + extra
            needed = self.kv_cache.blocks_needed(seq_id, new) if status is None else 0
            if status is None and (needed > free or new > tokens_left or not seqs_left):
                status = SequenceStatus(
                    StatusCode.RESOURCE_EXHAUSTED,
                    f"sequence {seq_id} needs {needed} KV blocks ({free} free) and {new} of "
                    f"this call's tokens ({tokens_left} left); send it again",
                )
            if status is None:
                free, tokens_left, seqs_left = free - needed, tokens_left - new, seqs_left - 1
            statuses.append(status or OK)
        return statuses

    def _check(
        self, seq_id: int, cached_len: int, token_ids: Sequence[int], extra: int
    ) -> SequenceStatus | None:
        """Rewind the sequence to ``cached_len``; a status when it cannot go on."""
        try:
            self.rewind(seq_id, cached_len)
        except SequenceNotFoundError as e:
            return SequenceStatus(StatusCode.NOT_FOUND, str(e.args[0]))
        except ValueError as e:
            return SequenceStatus(StatusCode.INVALID_ARGUMENT, str(e))
        total = cached_len + len(token_ids) + extra
        bad = [t for t in token_ids if not 0 <= t < self.vocab_size]
        if not token_ids:
            problem = "no new tokens"
        elif bad:
            problem = f"token ids {bad[:5]} outside [0, {self.vocab_size})"
        elif total > self.max_positions:
            problem = f"{total} tokens exceed the maximum model length {self.max_positions}"
        else:
            return None
        return SequenceStatus(StatusCode.INVALID_ARGUMENT, f"sequence {seq_id}: {problem}")

    def free(self, seq_id: int) -> bool:
        return self.kv_cache.free(seq_id)

    def _validate(self, chunks: Sequence[SequenceChunk]) -> None:
        seen: set[int] = set()
        for chunk in chunks:
            if chunk.seq_id in seen:
                raise ValueError(f"sequence {chunk.seq_id} appears twice in one batch")
            seen.add(chunk.seq_id)
            bad = [t for t in chunk.token_ids if not 0 <= t < self.vocab_size]
            if bad:
                raise ValueError(
                    f"sequence {chunk.seq_id}: token ids {bad[:5]} are outside the "
                    f"vocabulary [0, {self.vocab_size})"
                )
            end = self.kv_cache.num_tokens(chunk.seq_id) + len(chunk.token_ids)
            if end > self.max_positions:
                raise ValueError(
                    f"sequence {chunk.seq_id} would reach {end} tokens, more than the "
                    f"maximum model length {self.max_positions}"
                )

    def _append_all(self, chunks: Sequence[SequenceChunk]) -> list[list[int]]:
        """Append every chunk to the cache, all or nothing; the slots of each."""
        done: list[tuple[int, int]] = []  # (seq_id, length before)
        try:
            slots = []
            for chunk in chunks:
                before = self.kv_cache.num_tokens(chunk.seq_id)
                slots.append(self.kv_cache.append(chunk.seq_id, len(chunk.token_ids)))
                done.append((chunk.seq_id, before))
            return slots
        except Exception:
            for seq_id, before in done:
                if before == 0:
                    self.kv_cache.free(seq_id)
                else:
                    self.kv_cache.truncate(seq_id, before)
            raise

    def prepare(self, chunks: Sequence[SequenceChunk]) -> PreparedBatch:
        """Append every chunk to the cache and lay the batch out for ``execute``.

        The flat inputs and the attention layout are built on the host and
        copied to the device once. All or nothing: on an error (a bad chunk,
        OutOfBlocksError) no sequence has changed.
        """
        return self.to_device(self.plan(chunks))

    def plan(self, chunks: Sequence[SequenceChunk]) -> HostBatch:
        """Append every chunk to the cache (all or nothing) and lay the batch
        out on the host."""
        self._validate(chunks)
        starts = [self.kv_cache.num_tokens(c.seq_id) for c in chunks]
        slots = self._append_all(chunks)
        tables = [self.kv_cache.block_table(c.seq_id) for c in chunks]
        return host_batch(chunks, starts, slots, tables, self.kv_cache.block_size)

    def to_device(self, batch: HostBatch) -> PreparedBatch:
        """The device tensors of a host batch, for an eager forward."""

        def tensor(data: list) -> torch.Tensor:
            return torch.tensor(data, dtype=torch.int64, device=self.device)

        return PreparedBatch(
            input_ids=tensor(batch.input_ids),
            positions=tensor(batch.positions),
            logits_indices=tensor(batch.logits_indices),
            context=ForwardContext(
                self.kv_cache, self.ops.metadata(batch.layout, self.device, self._windows), self.ops
            ),
        )

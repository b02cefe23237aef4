"""Which sequences run: the waiting queue, the running batch, and the
decisions about them (the engine carries them out).

A waiting sequence is admitted, first come first served, onto the target
worker with the most room, while that worker's KV cache has room for it and
for one round of growth of everything already on it (k + 1 tokens a
sequence, never past max_model_len). When a round would not fit, the newest
sequences of that target are preempted (their KV freed, recomputed from their
tokens later), never the last one: a worker holds one max_model_len sequence,
so a sequence alone always fits.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable

from model_runtime.kv_cache import blocks_for
from protos.messages import WorkerInfo
from router.sequence import SequenceState


class Scheduler:
    def __init__(
        self,
        block_size: int,
        k: int,
        max_model_len: int,
        max_num_seqs: int,
        max_batched_tokens: int | None = None,
    ):
        """``max_batched_tokens``: the most prompt tokens one prefill call to a
        target worker may carry (None: no limit)."""
        self.block_size = block_size
        self.k = k
        self.max_model_len = max_model_len
        self.max_num_seqs = max_num_seqs
        self.max_batched_tokens = max_batched_tokens
        self.waiting: deque[SequenceState] = deque()
        self.running: list[SequenceState] = []

    @classmethod
    def within(
        cls,
        infos: Iterable[WorkerInfo],
        block_size: int,
        k: int,
        max_model_len: int,
        max_num_seqs: int,
    ) -> Scheduler:
        """A scheduler whose batches every target worker in ``infos`` takes in one call."""
        infos = list(infos)
        tokens = [i.max_num_batched_tokens for i in infos if i.max_num_batched_tokens]
        seqs = [i.max_num_seqs for i in infos if i.max_num_seqs]
        return cls(
            block_size, k, max_model_len, min([max_num_seqs, *seqs]), min(tokens, default=None)
        )

    def on(self, target: int) -> list[SequenceState]:
        """The running sequences whose KV lives on ``target``, oldest first."""
        return [s for s in self.running if s.target_worker == target]

    def growth_blocks(self, seqs: Iterable[SequenceState]) -> int:
        """Blocks the next round may take: every sequence plus k + 1 tokens, but
        never past max_model_len (drafts are cut there)."""
        bs, most = self.block_size, self.max_model_len
        return sum(
            blocks_for(min(s.num_tokens + self.k + 1, most), bs) - blocks_for(s.target_cached, bs)
            for s in seqs
        )

    def admit(self, free_blocks: dict[int, int]) -> dict[int, list[SequenceState]]:
        """Take the waiting sequences that fit, each placed on the reachable
        target (a key of ``free_blocks``) with the most room; they are not
        running until their prefill succeeds."""
        if not self.waiting:  # most rounds: spare the sums over the running batch
            return {}
        room = {t: free - self.growth_blocks(self.on(t)) for t, free in free_blocks.items()}
        placed: dict[int, list[SequenceState]] = {t: [] for t in free_blocks}
        tokens = dict.fromkeys(free_blocks, 0)  # of each target's prefill call
        admitted = 0
        while self.waiting and len(self.running) + admitted < self.max_num_seqs:
            need = self.growth_blocks([self.waiting[0]])
            target = max(room, key=lambda t: room[t])
            if need > room[target] or not self._fits_call(tokens[target], self.waiting[0]):
                break
            room[target] -= need
            tokens[target] += self.waiting[0].num_tokens
            seq = self.waiting.popleft()
            seq.target_worker = target
            seq.micro_batch = self._smaller_micro_batch()
            placed[target].append(seq)
            admitted += 1
        return {t: seqs for t, seqs in placed.items() if seqs}

    def take(self, request_id: str) -> list[SequenceState]:
        """Remove the request's sequences, waiting and running (an abort); return them."""
        taken = [s for s in (*self.waiting, *self.running) if s.request_id == request_id]
        kept = [s for s in self.waiting if s.request_id != request_id]
        self.waiting.clear()
        self.waiting.extend(kept)
        self.running[:] = [s for s in self.running if s.request_id != request_id]
        return taken

    def victims(self, target: int, free_blocks: int) -> list[SequenceState]:
        """The newest sequences of ``target`` to preempt so that its next round
        fits in its ``free_blocks`` (counting what preempting them frees)."""
        on_target, chosen = self.on(target), []
        # A running sequence's target lacks its last token: a round adds k + 2
        # tokens at most, which span one block more than they fill at most.
        most = blocks_for(self.k + 2, self.block_size) + 1
        if free_blocks >= most * len(on_target):  # most rounds: room for all, surely
            return []
        while len(on_target) > 1 and free_blocks < self.growth_blocks(on_target):
            victim = on_target.pop()
            free_blocks += blocks_for(victim.target_cached, self.block_size)
            chosen.append(victim)
        return chosen

    def _fits_call(self, tokens: int, seq: SequenceState) -> bool:
        """Whether ``seq``'s prefill joins a call of ``tokens`` tokens within the
        limit (the first of a call always does: the worker takes a whole prompt)."""
        limit = self.max_batched_tokens
        return limit is None or tokens == 0 or tokens + seq.num_tokens <= limit

    def _smaller_micro_batch(self) -> int:
        in_first = sum(s.micro_batch == 0 for s in self.running)
        return 0 if 2 * in_first <= len(self.running) else 1

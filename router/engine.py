"""The in-process engine: requests in, speculation rounds over a continuous
batch, finished completions out.

Each ``step`` admits waiting sequences while the KV caches have room and
prefills them on the target, then runs one round for every running sequence:
the draft worker proposes k tokens for the whole batch, the target worker
verifies them in one forward, and each sequence gains 1..k+1 tokens.
Sequences that finish leave at once; a sequence that cannot grow is preempted
(its KV freed on both workers) and recomputed from its tokens later. Without a
draft worker a round is plain decoding: a verify with no drafts.
"""

from __future__ import annotations

import itertools
import logging
import secrets
import time
from collections import deque
from collections.abc import Iterable, Sequence

import torch

from model_runtime.kv_cache import blocks_for
from protos.messages import ProposeRequest, SequenceTokens, StatusCode, VerifyRequest
from router.clients import WorkerUnavailableError
from router.config import EngineConfig
from router.detokenizer import IncrementalDetokenizer
from router.metrics import SpeculationMetrics
from router.params import SamplingParams
from router.sequence import SequenceState
from router.workers import Workers, build_local_workers

logger = logging.getLogger(__name__)

LOG_INTERVAL_S = 10.0
# How often to look for a lost draft worker again.
DRAFT_RETRY_S = 1.0
DRAFT_PROBE_S = 0.05  # how long a round may wait for the answer

# One sequence's proposal: k tokens, and the support and probabilities of each q.
Draft = tuple[list[int], torch.Tensor | None, torch.Tensor | None]


class LLMEngine:
    def __init__(self, config: EngineConfig, workers: Workers | None = None):
        self.config = config
        self.workers = workers or build_local_workers(config)
        self.tokenizer = self.workers.tokenizer
        self.max_model_len = self.workers.max_model_len
        self.k = config.speculative.num_speculative_tokens if config.speculative else 0
        self.metrics = SpeculationMetrics(self.k)
        self.waiting: deque[SequenceState] = deque()
        self.running: list[SequenceState] = []
        # Sequence ids start at a random point, so that several routers can share
        # workers without their ids meeting.
        self._seq_ids = itertools.count(secrets.randbits(56))
        self.speculating = self.workers.draft is not None
        self._draft_lost_at = 0.0
        self._last_log = time.monotonic()
        self._tokens_since_log = 0

    # ------------------------------------------------------------------ requests

    def add_request(
        self, request_id: str, prompt_ids: Sequence[int], params: SamplingParams
    ) -> list[SequenceState]:
        """Queue ``params.n`` completions of a tokenized prompt; return their states."""
        self.check_prompt(request_id, prompt_ids)
        states = [
            SequenceState(
                seq_id=next(self._seq_ids),
                request_id=request_id,
                index=i,
                prompt_ids=list(prompt_ids),
                params=params,
                options=params.options(i),
                detokenizer=IncrementalDetokenizer(
                    self.tokenizer, prompt_ids, params.skip_special_tokens
                ),
                eos_token_id=self.tokenizer.eos_token_id,
                max_model_len=self.max_model_len,
            )
            for i in range(params.n)
        ]
        self.waiting.extend(states)
        return states

    def check_prompt(self, request_id: str, prompt_ids: Sequence[int]) -> None:
        """Raise ValueError, naming the request, for a prompt this engine cannot serve."""
        if not prompt_ids:
            raise ValueError(f"request {request_id}: the prompt is empty")
        if len(prompt_ids) >= self.max_model_len:
            raise ValueError(
                f"request {request_id}: the prompt has {len(prompt_ids)} tokens; the maximum "
                f"model length is {self.max_model_len}, leaving no room to generate"
            )
        vocab = self.workers.target.vocab_size
        bad = [t for t in prompt_ids if not 0 <= t < vocab]
        if bad:
            raise ValueError(f"request {request_id}: token ids {bad[:5]} outside [0, {vocab})")

    def abort(self, request_id: str) -> None:
        for seq in [s for s in self.running if s.request_id == request_id]:
            self._finish(seq, "abort")
        self.waiting = deque(s for s in self.waiting if s.request_id != request_id)

    def has_unfinished(self) -> bool:
        return bool(self.waiting or self.running)

    # ---------------------------------------------------------------- scheduling

    def step(self) -> list[SequenceState]:
        """Admit and prefill, then run one round; return the sequences that finished."""
        finished: list[SequenceState] = []
        self._admit(finished)
        self._make_room()
        if self.running:
            self._round(finished)
        self._maybe_log()
        return finished

    def _maybe_log(self) -> None:
        """Log throughput and the speculation counters every LOG_INTERVAL_S seconds."""
        now = time.monotonic()
        if now - self._last_log < LOG_INTERVAL_S:
            return
        rate = self._tokens_since_log / (now - self._last_log)
        logger.info(
            "running %d, waiting %d, generation %.1f tokens/s%s",
            len(self.running),
            len(self.waiting),
            rate,
            f"; {self.metrics.summary()}" if self.k else "",
        )
        self._last_log, self._tokens_since_log = now, 0

    def _free_blocks(self) -> int:
        workers = [self.workers.target, self.workers.draft]
        return min(w.num_free_blocks for w in workers if w is not None)

    def _growth_blocks(self, seqs: Iterable[SequenceState]) -> int:
        """Blocks the next round may take: every sequence plus k + 1 tokens."""
        bs = self.workers.block_size
        return sum(
            blocks_for(s.num_tokens + self.k + 1, bs) - blocks_for(s.target_cached, bs)
            for s in seqs
        )

    def _admit(self, finished: list[SequenceState]) -> None:
        admitted: list[SequenceState] = []
        budget = self._free_blocks() - self._growth_blocks(self.running)
        while self.waiting and len(self.running) + len(admitted) < self.config.max_num_seqs:
            need = self._growth_blocks([self.waiting[0]])
            if need > budget:
                break
            budget -= need
            admitted.append(self.waiting.popleft())
        if not admitted:
            return
        outputs = self.workers.target.prefill(
            [VerifyRequest(SequenceTokens(s.seq_id, 0, s.all_ids), s.options) for s in admitted]
        )
        for seq, out in zip(admitted, outputs, strict=True):
            if out.status.code == StatusCode.RESOURCE_EXHAUSTED:
                self.waiting.appendleft(seq)
                continue
            if not out.status.ok:
                raise RuntimeError(f"prefill of sequence {seq.seq_id} failed: {out.status}")
            seq.target_cached = seq.num_tokens
            self.running.append(seq)
            self._append(seq, out.token_ids, finished)

    def _make_room(self) -> None:
        """Preempt the newest running sequences until the round fits in the caches."""
        while len(self.running) > 1 and self._growth_blocks(self.running) > self._free_blocks():
            victim = self.running.pop()
            self._release(victim)
            victim.reset_workers()
            self.waiting.appendleft(victim)
            logger.info("preempted sequence %d to free KV blocks", victim.seq_id)

    def _round(self, finished: list[SequenceState]) -> None:
        seqs = list(self.running)
        drafts = self._propose(seqs) if self._draft_available() else {}
        requests = []
        for s in seqs:
            tokens, ids, probs = drafts.get(s.seq_id, ([], None, None))
            # Never draft past the context length.
            k = max(0, min(len(tokens), self.max_model_len - s.num_tokens - 1))
            requests.append(
                VerifyRequest(
                    SequenceTokens(s.seq_id, s.target_cached, s.all_ids[s.target_cached :]),
                    s.options,
                    tokens[:k],
                    None if ids is None else ids[:k],
                    None if probs is None else probs[:k],
                )
            )
        outputs = self.workers.target.verify(requests)
        for seq, req, out in zip(seqs, requests, outputs, strict=True):
            if out.status.code in (StatusCode.NOT_FOUND, StatusCode.RESOURCE_EXHAUSTED):
                self.running.remove(seq)  # recompute it from its tokens later
                self._release(seq)
                seq.reset_workers()
                self.waiting.appendleft(seq)
                continue
            if not out.status.ok:
                raise RuntimeError(f"verify of sequence {seq.seq_id} failed: {out.status}")
            before = seq.num_tokens
            k = len(req.draft_token_ids)
            seq.target_cached = before + out.num_accepted_drafts
            if seq.seq_id in drafts:
                # The draft holds the tokens and its first k-1 drafts; keep what was accepted.
                seq.draft_cached = min(seq.draft_cached, before + out.num_accepted_drafts)
            if k:
                seq.counts.num_drafts += 1
                seq.counts.num_draft_tokens += k
                seq.counts.num_accepted_tokens += out.num_accepted_drafts
                self.metrics.record(k, out.num_accepted_drafts)
            self._append(seq, out.token_ids, finished)

    def _propose(self, seqs: list[SequenceState]) -> dict[int, Draft]:
        draft = self.workers.draft
        assert draft is not None
        requests = [
            ProposeRequest(
                SequenceTokens(s.seq_id, s.draft_cached, s.all_ids[s.draft_cached :]), s.options
            )
            for s in seqs
        ]
        try:
            proposals = draft.propose(requests, self.k)
        except WorkerUnavailableError as e:
            logger.warning("draft worker lost (%s): decoding without speculation", e)
            self.speculating = False
            self._draft_lost_at = time.monotonic()
            for seq in self.running + list(self.waiting):
                seq.draft_cached = 0  # whatever it held is gone
            return {}
        result: dict[int, Draft] = {}
        for seq, p in zip(seqs, proposals, strict=True):
            if p.status.code == StatusCode.NOT_FOUND:
                seq.draft_cached = 0  # re-prefilled on the draft next round
            if p.status.ok:
                seq.draft_cached = seq.num_tokens + self.k - 1
                result[seq.seq_id] = (p.token_ids, p.draft_ids, p.draft_probs)
        return result

    def _draft_available(self) -> bool:
        """Whether to speculate this round; a lost draft worker is retried now and then."""
        draft = self.workers.draft
        if draft is None:
            return False
        if self.speculating:
            return True
        if time.monotonic() - self._draft_lost_at < DRAFT_RETRY_S:
            return False
        if not draft.probe(DRAFT_PROBE_S):
            self._draft_lost_at = time.monotonic()
            return False
        logger.info("draft worker is back: speculating again")
        self.speculating = True
        return True

    def _append(self, seq: SequenceState, tokens: list[int], finished: list[SequenceState]) -> None:
        before = len(seq.output_ids)
        seq.append(tokens)
        self._tokens_since_log += len(seq.output_ids) - before
        if seq.finished:
            self.running.remove(seq)
            self._release(seq)
            finished.append(seq)

    def _finish(self, seq: SequenceState, reason: str) -> None:
        seq.finish_reason = reason
        self.running.remove(seq)
        self._release(seq)

    def _release(self, seq: SequenceState) -> None:
        self.workers.target.release([seq.seq_id])
        if self.workers.draft is not None:
            self.workers.draft.release([seq.seq_id])

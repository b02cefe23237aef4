"""The engine: requests in, speculation rounds over a continuous batch,
finished completions out, over worker clients in this process or over gRPC.

Each ``step`` admits waiting sequences while a target worker's KV cache has
room, placing each on the least-loaded target (where its KV then lives) and
prefilling it there; then it runs one round for every running sequence: each
draft worker proposes k tokens for its share (k chosen per round when
adaptive: ``router.rounds``), each target worker verifies its share in one
forward (``router.drafting``, ``router.verifying``); each gains 1..k+1 tokens.
Finished sequences leave at once; one that cannot grow is preempted.

Draft workers are interchangeable: a sequence whose draft worker is lost is
re-prefilled on another; with none reachable a round is plain decoding. A lost
target's sequences are re-prefilled on another target (a replica loss costs
latency, not requests); with no target left they fail.
"""

from __future__ import annotations

import itertools
import logging
import secrets
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import replace

from model_runtime.errors import WorkerUnavailableError
from model_runtime.logprobs import TokenLogprob
from model_runtime.sampling import SamplingOptions
from model_runtime.status import OK, SequenceStatus, StatusCode
from protos.messages import VerifyOutput, VerifyRequest
from router.adaptive import KChooser
from router.config import EngineConfig
from router.drafting import Drafter
from router.metrics import EngineStats, RequestCounts, SpeculationMetrics, StatsLog
from router.params import SamplingParams
from router.pool import WorkerPool
from router.releases import PendingReleases
from router.rounds import Rounds
from router.scheduler import Scheduler
from router.sequence import SequenceState, check_prompt, new_sequences
from router.verifying import Verifier
from router.workers import Workers

logger = logging.getLogger(__name__)


class LLMEngine:
    def __init__(self, config: EngineConfig, workers: Workers):
        """An engine over ``workers``: in-process ones or gRPC clients, built by the caller."""
        self.config = config
        self.workers = workers
        self.tokenizer = self.workers.tokenizer
        self.max_model_len = self.workers.max_model_len
        self.k = config.num_speculative_tokens
        self.metrics = SpeculationMetrics(self.k)
        self.requests = RequestCounts()
        self.targets = WorkerPool(self.workers.targets, "target")
        self.drafts = WorkerPool(self.workers.drafts, "draft")
        self.drafter = Drafter(self.drafts, self.k, config.overlap)
        self.verifier = Verifier(self.targets, self.max_model_len)
        adaptive = bool(config.speculative and config.speculative.adaptive_k)
        chooser = KChooser(self.k) if adaptive and not config.overlap else None
        self.rounds = Rounds(self.drafter, self.verifier, self.metrics, chooser, config.overlap)
        max_seqs = config.runner.max_num_seqs
        self.scheduler = Scheduler.within(
            self.targets.infos, workers.block_size, self.k, self.max_model_len, max_seqs
        )
        # Ids start at random, so that several routers' ids meet on no worker.
        self._seq_ids = itertools.count(secrets.randbits(56))
        shared: dict[SamplingOptions, SamplingOptions] = {}  # equal options, one object
        self._new_with = (self.tokenizer, self.max_model_len, shared)  # for new_sequences
        self.stats_log = StatsLog(config.log_stats_interval_s, logger)
        self.releases = PendingReleases()

    @property
    def waiting(self) -> deque[SequenceState]:
        return self.scheduler.waiting

    @property
    def running(self) -> list[SequenceState]:
        return self.scheduler.running

    @property
    def speculating(self) -> bool:
        """Whether the last round could reach a draft worker."""
        return self.drafts.any_up()

    @property
    def serving(self) -> bool:
        """Whether a target worker was reachable at the last look."""
        return self.targets.any_up()

    def check_workers(self) -> None:
        """Probe both pools while idle (``WorkerPool.check``)."""
        self.targets.check()
        self.drafts.check()

    def stats(self) -> EngineStats:
        """The engine's state now, from what the workers last said (no call made)."""
        return EngineStats(
            speculating=self.speculating,
            num_running=len(self.running),
            num_waiting=len(self.waiting),
            kv_cache_usage=self.targets.kv_cache_usage(),
            speculation=self.metrics.copy(),
            requests=self.requests.copy(),
        )

    def add_request(
        self, request_id: str, prompt_ids: Sequence[int], params: SamplingParams
    ) -> list[SequenceState]:
        """Queue ``params.n`` completions of a tokenized prompt; return their states."""
        self.check_prompt(request_id, prompt_ids)
        params.check_token_ids(self.workers.vocab_size)
        states = new_sequences(self._seq_ids, request_id, prompt_ids, params, *self._new_with)
        self.waiting.extend(states)
        self.requests.prompt_tokens += len(prompt_ids) * len(states)
        return states

    def check_prompt(self, request_id: str, prompt_ids: Sequence[int]) -> None:
        """Raise ValueError, naming the request, for a prompt this engine cannot serve."""
        check_prompt(request_id, prompt_ids, self.max_model_len, self.workers.vocab_size)

    def abort(self, request_id: str) -> None:
        for seq in self.scheduler.take(request_id):  # a waiting one may hold draft KV
            seq.finish_reason = "abort"
            seq.stamp()
            self.requests.finish("abort")
            self._release(seq)
        self.releases.flush()

    def has_unfinished(self) -> bool:
        return bool(self.waiting or self.running)

    def close(self) -> None:
        """Stop the threads that call workers (the workers themselves stay)."""
        self.rounds.drop_ahead()
        self.drafter.close()

    def step(self) -> list[SequenceState]:
        """Admit and prefill, then run one round; return the sequences that finished
        (failed ones too: they carry an ``error``)."""
        finished: list[SequenceState] = []
        targets = self.targets.up()
        if not targets:
            self._fail(list(self.waiting), "no target worker is reachable", finished)
            self.waiting.clear()
        else:
            self.verifier.release_abandoned(targets)
            self._admit(targets, finished)
            self._make_room()
            self.releases.flush()  # the preempted sequences' room, before the round
            if self.stalled:  # nothing runs: the free counts may be old news
                self.verifier.refresh_room(targets)
        if self.running:
            self._round(finished)
        if not self.running:  # the drafts sent ahead have no round to go to
            self.rounds.drop_ahead()
        self.releases.flush()
        self.stats_log.maybe_log(self.stats)
        for seq in finished:
            self.requests.finish(seq.finish_reason)
        return finished

    @property
    def stalled(self) -> bool:
        """Requests wait and none runs (the loop then waits a little between steps)."""
        return bool(self.waiting) and not self.running

    def _admit(self, targets: list[int], finished: list[SequenceState]) -> None:
        free = {t: self.workers.targets[t].num_free_blocks for t in targets}
        for target, seqs in self.scheduler.admit(free).items():
            self._prefill(target, seqs, finished)

    def _prefill(
        self, target: int, seqs: list[SequenceState], finished: list[SequenceState]
    ) -> None:
        self.rounds.skip_gap()
        for seq in seqs:
            seq.times.first_scheduled_time = seq.times.first_scheduled_time or time.time()
        outputs = self.verifier.prefill(target, seqs)
        if isinstance(outputs, WorkerUnavailableError):
            self.targets.lose(target, outputs)
            for seq in seqs:  # nothing of theirs was there yet: place them again
                seq.reset_workers()
            self.waiting.extendleft(reversed(seqs))
            return
        for seq, out in zip(seqs, outputs, strict=True):
            if out.status.code == StatusCode.RESOURCE_EXHAUSTED:
                seq.reset_workers()
                self.waiting.appendleft(seq)
                continue
            if not out.status.ok:
                self._fail([seq], f"the target worker refused it: {out.status.message}", finished)
                continue
            seq.target_cached = seq.num_tokens
            if seq.prompt_logprobs is None and seq.options.prompt_logprobs is not None:
                seq.prompt_logprobs = out.prompt_logprobs
                seq.options = replace(seq.options, prompt_logprobs=None)  # not again
            self.running.append(seq)
            self._append(seq, out.token_ids, out.logprobs, finished)

    def _make_room(self) -> None:
        """Preempt the newest sequences of a target until its round fits in its cache."""
        for target in self.targets.up():
            free = self.workers.targets[target].num_free_blocks
            for victim in self.scheduler.victims(target, free):
                self._requeue(victim)
                logger.info("preempted sequence %d to free KV blocks", victim.seq_id)

    def _requeue(self, seq: SequenceState) -> None:
        """Free a running sequence everywhere; it is recomputed from its tokens later."""
        self.rounds.skip_gap()
        self.running.remove(seq)
        self._release(seq)
        seq.reset_workers()
        self.waiting.appendleft(seq)

    def _round(self, finished: list[SequenceState]) -> None:
        """Draft and verify one round, and apply what comes back."""
        shares = self.rounds.run(self.running, waiting=len(self.waiting))
        for share in shares:
            if isinstance(share.outputs, WorkerUnavailableError):
                self.targets.lose(share.target, share.outputs)
                self._move_off(share.seqs)
                continue
            now = time.time()  # one clock read stamps the round's sequences
            for seq, req, out in zip(share.seqs, share.requests, share.outputs, strict=True):
                self._apply_verify(seq, req, out, finished, now)

    def _apply_verify(
        self,
        seq: SequenceState,
        req: VerifyRequest,
        out: VerifyOutput,
        finished: list[SequenceState],
        now: float,
    ) -> None:
        if out.status is not OK and not out.status.ok:  # (a shared OK is checked first)
            return self._refused(seq, out.status, finished)
        before, k = seq.num_tokens, len(req.draft_token_ids)
        seq.target_cached = before + out.num_accepted_drafts
        if k:
            seq.counts.record(k, out.num_accepted_drafts)
            self.rounds.accepted(seq, k, out.num_accepted_drafts)
        self._append(seq, out.token_ids, out.logprobs, finished, now)

    def _append(
        self,
        seq: SequenceState,
        tokens: list[int],
        logprobs: list[TokenLogprob],
        finished: list[SequenceState],
        now: float | None = None,
    ) -> None:
        before = len(seq.output_ids)
        seq.append(tokens, logprobs)
        seq.stamp(now)
        self.requests.generation_tokens += len(seq.output_ids) - before
        if seq.finished:
            self.running.remove(seq)
            self._release(seq)
            finished.append(seq)

    def _refused(self, seq: SequenceState, status: SequenceStatus, finished: list) -> None:
        if status.code in (StatusCode.NOT_FOUND, StatusCode.RESOURCE_EXHAUSTED):
            self._requeue(seq)
        else:  # only this sequence fails
            self._fail([seq], f"the target worker refused it: {status.message}", finished)

    def _move_off(self, seqs: list[SequenceState]) -> None:
        """A lost target's sequences wait at the front for another (draft KV stays)."""
        self.rounds.skip_gap()
        for seq in seqs:
            self.running.remove(seq)
            self.verifier.abandon(seq.target_worker, [seq.seq_id])
            seq.target_worker, seq.target_cached = -1, 0
        self.waiting.extendleft(reversed(seqs))
        logger.warning("%d sequences move to another target worker", len(seqs))

    def _fail(self, seqs: list[SequenceState], error: str, finished: list[SequenceState]) -> None:
        for seq in seqs:
            if seq in self.running:
                self.running.remove(seq)
                self._release(seq)
            seq.finish_reason, seq.error = "abort", error
            seq.stamp()
            finished.append(seq)

    def _release(self, seq: SequenceState) -> None:
        """Queue freeing its KV on its workers (``releases.flush``: one call each)."""
        if self.targets.is_up(seq.target_worker):
            self.releases.add(self.workers.targets[seq.target_worker], seq.seq_id)
        if self.drafts.is_member(seq.draft_worker):
            self.releases.add(self.drafts.workers[seq.draft_worker], seq.seq_id)

"""The next round's draft batches, cut from a round's verify outputs column
by column.

A round asks for the next round's drafts as soon as its outputs come, before
the engine applies them (router/rounds.py). Building that batch from every
sequence's state would put a pass over the sequences on the round's path;
instead what each sequence's next request needs is noted while the draft
drafts (``ShareFacts``, as the verify batch is prepared), and when the
outputs come the batch is cut from their columns. A sequence drafted for
this round holds on the draft its tokens and its first k - 1 drafts, so it
keeps those the target accepted and lacks the rest of what it gained (1 or
2 tokens). A sequence that surely finishes (EOS, a stop token, its length)
is left out; so is one whose draft worker is not up or cannot hold it. One
that was not drafted for is read from its state (rounds after k = 0).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from itertools import accumulate

from model_runtime.sampling import SamplingOptions
from protos.batch_columns import ProposeColumns, VerifyColumns
from router.sequence import SequenceState


@dataclass
class ShareFacts:
    """What the next draft request of each sequence of a verify share needs,
    noted off the round's path."""

    seqs: list[SequenceState]
    seq_ids: list[int]
    before: list[int]  # tokens at the round's start
    draft_worker: list[int]
    room: list[int]  # tokens it may still gain before its length ends it
    stops: list[frozenset[int]]  # tokens that end it
    samplings: list[SamplingOptions]  # the distinct options, by identity
    sampling_index: list[int]  # each one's; -1: asked of the sequence (min_tokens)
    kinds: list[str]  # whose acceptance its drafts count in
    seeded: bool  # a seeded sample rides in the share
    drafted: list[int] = field(default_factory=list)  # drafts each got, when they come

    @classmethod
    def of(cls, seqs: list[SequenceState]) -> ShareFacts:
        samplings: list[SamplingOptions] = []
        seen: dict[int, int] = {}
        index = []
        for s in seqs:
            if s.params.min_tokens > len(s.output_ids):
                index.append(-1)
                continue
            i = seen.get(id(s.options))
            if i is None:
                i = seen[id(s.options)] = len(samplings)
                samplings.append(s.options)
            index.append(i)
        return cls(
            seqs,
            [s.seq_id for s in seqs],
            [s.num_tokens for s in seqs],
            [s.draft_worker for s in seqs],
            [s.room for s in seqs],
            [s.stop_ids for s in seqs],
            samplings,
            index,
            [s.acceptance_kind for s in seqs],
            any(s.options.seed is not None and not s.options.greedy for s in seqs),
        )


@dataclass
class NextDrafts:
    """One draft worker's part of the next round: its sequences, each one's
    length once this round's tokens are appended, and the batch."""

    seqs: list[SequenceState] = field(default_factory=list)
    num_tokens: list[int] = field(default_factory=list)
    batch: ProposeColumns = field(default_factory=lambda: ProposeColumns([], [], [], [], [], []))


def cut_next(
    facts: ShareFacts,
    outputs: VerifyColumns,
    k: int,
    workers: Collection[int],
    max_len: int,
    into: dict[int, NextDrafts],
) -> list[int]:
    """Add to ``into`` (by draft worker) the next round's ``k`` drafts for each
    sequence of a share that goes on: its workers ``workers`` hold ``max_len``.
    Return the sequences whose next drafts are seen to (sent, or none to send:
    they finish, or are too long to draft for); left out are those that
    failed (a requeued one starts again) and those whose draft worker is gone
    (placed on another when the next round drafts for them)."""
    covered, kept, cached_lens, lacking_lens, lacking = _cut(facts, outputs, k, workers, max_len)
    samplings, index = facts.samplings, facts.sampling_index
    if any(index[i] < 0 for i in kept):  # min_tokens: their options change as tokens come
        samplings, index = list(samplings), list(index)
        for i in kept:
            if index[i] < 0:
                index[i] = len(samplings)
                samplings.append(facts.seqs[i].sampling(outputs.num_tokens[i]))
    by_worker = {facts.draft_worker[i] for i in kept}
    ends = list(accumulate(lacking_lens))
    for worker in by_worker:
        rows = [j for j, i in enumerate(kept) if facts.draft_worker[i] == worker]
        part = into.setdefault(worker, NextDrafts())
        b, offset = part.batch, len(part.batch.samplings)
        part.seqs += [facts.seqs[kept[j]] for j in rows]
        part.num_tokens += [facts.before[kept[j]] + outputs.num_tokens[kept[j]] for j in rows]
        b.seq_ids += [facts.seq_ids[kept[j]] for j in rows]
        b.cached_lens += [cached_lens[j] for j in rows]
        b.num_tokens += [lacking_lens[j] for j in rows]
        if len(by_worker) == 1:
            b.token_ids += lacking
        else:
            for j in rows:
                b.token_ids += lacking[ends[j] - lacking_lens[j] : ends[j]]
        b.samplings += samplings
        b.sampling_index += [index[kept[j]] + offset for j in rows]
    return [facts.seq_ids[i] for i in covered]


def goes_on(facts: ShareFacts, i: int, gained: int, tokens: Sequence[int]) -> bool:
    """Whether sequence ``i`` of a share goes on after gaining ``tokens``
    (``gained`` of them): neither its length nor a stop token (or EOS) ends it."""
    stops = facts.stops[i]
    return gained < facts.room[i] and not (stops and not stops.isdisjoint(tokens))


def _cut(
    facts: ShareFacts, outputs: VerifyColumns, k: int, workers: Collection[int], max_len: int
) -> tuple[list[int], list[int], list[int], list[int], list[int]]:
    """The indices of the sequences seen to, and of those that go on to a
    draft worker up, what the draft keeps of each, and what it lacks (counts,
    and the tokens concatenated)."""
    flat, failed, accepted = outputs.token_ids, outputs.failed, outputs.num_accepted
    worker, before = facts.draft_worker, facts.before
    drafted, seqs = facts.drafted, facts.seqs
    limit = max_len - k + 1  # the longest a sequence may be to hold k - 1 drafts more
    covered: list[int] = []
    kept: list[int] = []
    cached_lens: list[int] = []
    lacking_lens: list[int] = []
    lacking: list[int] = []
    end = 0
    for i, gained in enumerate(outputs.num_tokens):
        start, end = end, end + gained
        length = before[i] + gained
        if i in failed or (worker[i] not in workers and length <= limit):
            continue  # it starts again, or is placed on another draft worker
        covered.append(i)
        if length > limit or worker[i] not in workers:
            continue  # too long to draft for
        tokens = flat[start:end]
        if not goes_on(facts, i, gained, tokens):
            continue  # it surely finishes
        n = drafted[i]
        if n:  # it holds its first n - 1 drafts: it keeps those accepted
            keep = min(n - 1, accepted[i])
            cached, tokens = before[i] + keep, tokens[keep:]
        else:  # not drafted for: what it lacks from before this round, too
            cached = seqs[i].draft_cached
            tokens = seqs[i].tokens_from(cached) + tokens
        kept.append(i)
        cached_lens.append(cached)
        lacking_lens.append(len(tokens))
        lacking += tokens
    return covered, kept, cached_lens, lacking_lens, lacking

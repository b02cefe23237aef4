"""A batch on the wire, column by column (common.proto SequenceBatch, Drafts;
the statuses of the sequences that failed): one message per batch whose
fields are flat lists, so that building and parsing it costs a few calls
whatever the batch's size, not a message per sequence.

Everything read here is checked: a column of the wrong length or an index out
of range raises ValueError (the receiver's INVALID_ARGUMENT, or a malformed
result for a client).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from itertools import accumulate

import torch
import torch.nn.functional as F

from model_runtime.sampling import SamplingOptions
from model_runtime.status import OK, SequenceStatus
from protos import common_pb2 as pb
from protos.batch_columns import ProposeColumns
from protos.distributions import pack_distributions, unpack_distributions
from protos.fields import sampling_from_proto, sampling_to_proto, status_from_proto, status_to_proto
from protos.messages import SequenceTokens

# A sequence's drafts as they travel: the tokens, and the [k, N] support and
# probabilities of the distributions they were sampled from (None: greedy).
Drafted = tuple[Sequence[int], torch.Tensor | None, torch.Tensor | None]


def split(flat: Sequence[int], counts: Sequence[int]) -> list[list[int]]:
    """``flat`` cut into consecutive lists of ``counts[i]`` items (which must add up)."""
    flat = list(flat)  # one copy out of a protobuf field; its slices are lists then
    if sum(counts) != len(flat):
        raise ValueError(f"{len(flat)} tokens for counts adding up to {sum(counts)}")
    ends = list(accumulate(counts))
    return [flat[end - n : end] for n, end in zip(counts, ends, strict=True)]


def _check_lengths(what: str, expected: int, **columns: Sequence[object]) -> None:
    for name, column in columns.items():
        if len(column) != expected:
            raise ValueError(f"{what}: {name} has {len(column)} entries for {expected} sequences")


def sequences_to_proto(
    tokens: Sequence[SequenceTokens], options: Sequence[SamplingOptions]
) -> pb.SequenceBatch:
    distinct: dict[SamplingOptions, int] = {}
    seen: dict[int, int] = {}  # by identity first: sequences mostly share one object
    index = []
    for o in options:
        i = seen.get(id(o))
        if i is None:
            i = seen[id(o)] = distinct.setdefault(o, len(distinct))
        index.append(i)
    seq_ids, cached_lens, num_tokens, flat = [], [], [], []
    for t in tokens:
        seq_ids.append(t.seq_id)
        cached_lens.append(t.cached_len)
        num_tokens.append(len(t.token_ids))
        flat += t.token_ids
    return columns_to_proto(
        ProposeColumns(seq_ids, cached_lens, num_tokens, flat, list(distinct), index)
    )


def columns_to_proto(c: ProposeColumns) -> pb.SequenceBatch:
    """A batch already in columns, as it is."""
    return pb.SequenceBatch(
        seq_ids=c.seq_ids,
        cached_lens=c.cached_lens,
        num_tokens=c.num_tokens,
        token_ids=c.token_ids,
        samplings=[sampling_to_proto(o) for o in c.samplings],
        sampling_index=c.sampling_index,
    )


def sequences_from_proto(
    m: pb.SequenceBatch,
) -> tuple[list[SequenceTokens], list[SamplingOptions]]:
    n = len(m.seq_ids)
    _check_lengths(
        "a batch",
        n,
        cached_lens=m.cached_lens,
        num_tokens=m.num_tokens,
        sampling_index=m.sampling_index,
    )
    samplings = [sampling_from_proto(s) for s in m.samplings]  # each checked once
    if any(i >= len(samplings) for i in m.sampling_index):
        raise ValueError(f"a sampling_index beyond the batch's {len(samplings)} samplings")
    appended = split(m.token_ids, m.num_tokens)
    tokens = [
        SequenceTokens(seq_id, cached, ids)
        for seq_id, cached, ids in zip(m.seq_ids, m.cached_lens, appended, strict=True)
    ]
    return tokens, [samplings[i] for i in m.sampling_index]


def drafts_to_proto(drafts: Sequence[Drafted]) -> pb.Drafts:
    """Each sequence's drafts (none: an empty list), their distributions packed
    together, padded to the widest with probability 0 (one copy off the device)."""
    flat: list[int] = []
    for tokens, _, _ in drafts:
        flat += tokens
    sampled = [i for i, (t, ids, p) in enumerate(drafts) if len(t) and ids is not None]
    probs = None
    if sampled:
        width = max(drafts[i][1].shape[1] for i in sampled)  # type: ignore[union-attr]
        parts = [_padded(*drafts[i], width) for i in sampled]
        probs = pack_distributions(
            torch.cat([i for i, _ in parts]), torch.cat([p for _, p in parts])
        )
    return pb.Drafts(
        num_drafts=[len(t) for t, _, _ in drafts], token_ids=flat, sampled=sampled, probs=probs
    )


def _padded(
    tokens: Sequence[int], ids: torch.Tensor | None, probs: torch.Tensor | None, width: int
) -> tuple[torch.Tensor, torch.Tensor]:
    assert ids is not None
    if probs is None or ids.shape != probs.shape or ids.shape[0] != len(tokens):
        raise ValueError(
            f"{len(tokens)} drafts need [k, N] distributions of one shape, "
            f"got {tuple(ids.shape)} and {None if probs is None else tuple(probs.shape)}"
        )
    pad = (0, width - ids.shape[1])
    return F.pad(ids, pad), F.pad(probs, pad)


def check_drafts(m: pb.Drafts, n: int) -> list[int]:
    """Check the shape of a batch of ``n`` sequences' drafts (ValueError if
    wrong); the rows of each sampled sequence's distributions."""
    _check_lengths("drafts", n, num_drafts=m.num_drafts)
    if sum(m.num_drafts) != len(m.token_ids):
        raise ValueError(f"{len(m.token_ids)} tokens for counts adding up to {sum(m.num_drafts)}")
    sampled = list(m.sampled)
    if sampled != sorted(set(sampled)) or any(i >= n or not m.num_drafts[i] for i in sampled):
        raise ValueError("drafts: sampled must list sequences with drafts, ascending, once each")
    rows = [m.num_drafts[i] for i in sampled]
    size = m.probs.rows * m.probs.width * 4  # bytes of token ids, and of probabilities
    if sampled and (sum(rows) != m.probs.rows or len(m.probs.probs) != size):
        raise ValueError(f"drafts: {m.probs.rows} distributions for {sum(rows)} sampled drafts")
    if sampled and len(m.probs.token_ids) != size:
        raise ValueError(f"drafts: {len(m.probs.token_ids)} bytes of token ids, not {size}")
    if not sampled and m.HasField("probs"):
        raise ValueError("drafts: distributions sent for no sampled sequence")
    return rows


def drafts_from_proto(m: pb.Drafts, n: int) -> list[Drafted]:
    """The drafts of a batch of ``n`` sequences, in order."""
    rows = check_drafts(m, n)
    tokens = split(m.token_ids, m.num_drafts)
    dists: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
    if rows:
        ids, probs = unpack_distributions(m.probs)
        for i, end, k in zip(m.sampled, accumulate(rows), rows, strict=True):
            dists[i] = (ids[end - k : end], probs[end - k : end])
    return [(t, *dists.get(i, (None, None))) for i, t in enumerate(tokens)]


def failed_to_proto(statuses: Iterable[SequenceStatus]) -> dict[int, pb.SequenceStatus]:
    """The statuses that are not OK, by index (an OK batch sends nothing)."""
    return {i: status_to_proto(s) for i, s in enumerate(statuses) if not s.ok}


def statuses_from_proto(failed: Mapping[int, pb.SequenceStatus], n: int) -> list[SequenceStatus]:
    statuses = [OK] * n
    for i, s in failed.items():
        if i >= n:
            raise ValueError(f"a failed sequence at index {i} of a batch of {n}")
        statuses[i] = status_from_proto(s)
    return statuses

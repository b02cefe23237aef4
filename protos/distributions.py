"""The draft's distributions on the wire: a sequence's k distributions over N
tokens each, packed into bytes (what this project sends: converting them is a
copy) or as sparse rows (still read from callers that send them). A batch's
sequences travel in one packed message when they share a width (``pack_rows``,
``unpack_rows``): one conversion per batch instead of one per sequence."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import numpy as np
import torch

from protos import common_pb2 as pb
from protos import draft_worker_pb2 as dpb
from protos import target_worker_pb2 as tpb


def distributions_from_proto(
    rows: Sequence[pb.SparseDistribution],
) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """k sparse distributions -> [k, N] tensors padded with probability 0."""
    if not rows:
        return None, None
    lengths = [len(r.token_ids) for r in rows]
    for r, n in zip(rows, lengths, strict=True):
        if len(r.probs) != n:
            raise ValueError(f"a sparse distribution has {n} token ids but {len(r.probs)} probs")
    width = max(1, *lengths)
    # One flat list each, padded per row, then one tensor: far fewer Python
    # calls than a tensor per row.
    flat_ids: list[int] = []
    flat_probs: list[float] = []
    for r, n in zip(rows, lengths, strict=True):
        flat_ids += r.token_ids
        flat_ids += [0] * (width - n)
        flat_probs += r.probs
        flat_probs += [0.0] * (width - n)
    ids = torch.tensor(flat_ids, dtype=torch.int64).view(len(rows), width)
    probs = torch.tensor(flat_probs, dtype=torch.float32).view(len(rows), width)
    return ids, probs


def pack_distributions(
    ids: torch.Tensor | None, probs: torch.Tensor | None
) -> pb.PackedDistributions | None:
    """[k, N] support and probabilities (on any device) -> one packed message
    (None for no distributions, k = 0 included)."""
    if ids is None or probs is None or not ids.numel():
        return None
    rows, width = ids.shape
    return pb.PackedDistributions(
        rows=rows,
        width=width,
        token_ids=ids.to("cpu", torch.int32).numpy().astype("<i4").tobytes(),
        probs=probs.to("cpu", torch.float32).numpy().astype("<f4").tobytes(),
    )


def unpack_distributions(m: pb.PackedDistributions) -> tuple[torch.Tensor, torch.Tensor]:
    """A packed message -> [rows, width] token ids (int64) and probabilities."""
    size = m.rows * m.width * 4
    if len(m.token_ids) != size or len(m.probs) != size:
        raise ValueError(
            f"packed distributions of {m.rows} x {m.width} need {size} bytes of token ids "
            f"and of probs, got {len(m.token_ids)} and {len(m.probs)}"
        )
    shape = (m.rows, m.width)
    ids = np.frombuffer(m.token_ids, dtype="<i4").astype(np.int64).reshape(shape)
    probs = np.frombuffer(m.probs, dtype="<f4").astype(np.float32).reshape(shape)
    return torch.from_numpy(ids), torch.from_numpy(probs)


def pack_rows(parts: Sequence[tuple[torch.Tensor, torch.Tensor]]) -> pb.PackedDistributions | None:
    """Several sequences' [k_i, N] support and probabilities -> one packed
    message of all their rows in order (one copy off the device); None when
    there are none or their widths differ."""
    if not parts or len({ids.shape[1] for ids, _ in parts}) != 1:
        return None
    return pack_distributions(torch.cat([i for i, _ in parts]), torch.cat([p for _, p in parts]))


class _Sent(Protocol):
    @property
    def draft_ids(self) -> torch.Tensor | None: ...
    @property
    def draft_probs(self) -> torch.Tensor | None: ...


def sent_rows(
    items: Sequence[_Sent], counts: Sequence[int]
) -> list[tuple[torch.Tensor, torch.Tensor]] | None:
    """Each item's (ids, probs) when every one has exactly its count of rows
    (a batch can then travel packed together), else None."""
    parts = []
    for item, n in zip(items, counts, strict=True):
        ids, probs = item.draft_ids, item.draft_probs
        if ids is None or probs is None or ids.dim() != 2 or ids.shape != probs.shape:
            return None
        if ids.shape[0] != n:
            return None
        parts.append((ids, probs))
    return parts


def refuse_both_forms(items: Sequence[dpb.Proposal] | Sequence[tpb.VerifyRequest]) -> None:
    """A batch that carries packed rows must carry no sequence's own."""
    if any(m.HasField("packed_probs") or m.draft_probs for m in items):
        raise ValueError(
            "draft distributions came both packed for the batch and with a sequence: "
            "send each batch's one way"
        )


def unpack_rows(
    m: pb.PackedDistributions, counts: Sequence[int]
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """One packed message -> each sequence's rows, ``counts[i]`` of them, in order."""
    ids, probs = unpack_distributions(m)
    if sum(counts) != m.rows:
        raise ValueError(
            f"packed distributions have {m.rows} rows for {sum(counts)} drafts of the batch"
        )
    parts, start = [], 0
    for n in counts:
        parts.append((ids[start : start + n], probs[start : start + n]))
        start += n
    return parts


def received_distributions(
    m: dpb.Proposal | tpb.VerifyRequest,
) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """The distributions a proposal or verify request carries: packed if it has
    them, else its sparse rows."""
    if m.HasField("packed_probs"):
        return unpack_distributions(m.packed_probs)
    return distributions_from_proto(m.draft_probs)

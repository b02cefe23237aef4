"""The draft's distributions on the wire: a sequence's k distributions over N
tokens each, packed into bytes (what this project sends: converting them is a
copy) or as sparse rows (still read from callers that send them)."""

from __future__ import annotations

from collections.abc import Sequence

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


def received_distributions(
    m: dpb.Proposal | tpb.VerifyRequest,
) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """The distributions a proposal or verify request carries: packed if it has
    them, else its sparse rows."""
    if m.HasField("packed_probs"):
        return unpack_distributions(m.packed_probs)
    return distributions_from_proto(m.draft_probs)

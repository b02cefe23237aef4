"""The draft's distributions on the wire: rows of N (token id, probability)
pairs packed into bytes, so that converting a batch's costs a copy, not a
loop over its numbers."""

from __future__ import annotations

import numpy as np
import torch

from protos import common_pb2 as pb


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

"""How a verify takes its drafts: as host lists (from the wire) or still on
the device where an in-process draft worker drafted them (``DeviceTokens``).

Drafts on the device are never read by the host before the verify: the
step's chunks count them with placeholder tokens, the token ids go to the
forward as one device tensor with the drafts written in, and their values
come back with the verify's own results. A draft token outside the target's
vocabulary (a draft model with more embedding rows) is fed as the last id
and can never be accepted: no argmax equals it.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F

from model_runtime.host_copy import device_tensor
from protos.messages import VerifyRequest, device_drafts
from target_worker.rejection_sampler import densify


def chunk_tokens(r: VerifyRequest) -> list[int]:
    """What the sequence appends: its tokens and drafts, a 0 for each draft on the device."""
    if device_drafts(r.draft_token_ids) is not None:
        return [*r.tokens.token_ids, *[0] * len(r.draft_token_ids)]
    return [*r.tokens.token_ids, *r.draft_token_ids]


def input_ids(
    batch: Sequence[VerifyRequest], vocab: int, device: torch.device
) -> torch.Tensor | None:
    """The step's token ids [T] on the device with the device drafts written
    in; None when every draft is on the host (the chunks then carry them)."""
    flat: list[int] = []
    where: list[int] = []  # positions of device drafts in ``flat``
    parts: list[torch.Tensor] = []
    for r in batch:
        tokens = chunk_tokens(r)
        drafts = device_drafts(r.draft_token_ids)
        if drafts is not None and len(drafts):
            start = len(flat) + len(r.tokens.token_ids)
            where.extend(range(start, start + len(drafts)))
            parts.append(drafts)
        flat.extend(tokens)
    if not parts:
        return None
    ids = device_tensor(flat, torch.int64, device)
    values = torch.cat(parts).to(device).clamp(0, vocab - 1)
    ids[device_tensor(where, torch.int64, device)] = values
    return ids


def draft_tensor(batch: Sequence[VerifyRequest], device: torch.device) -> torch.Tensor:
    """Every request's drafts in order, flat [D] on ``device``."""
    host = [t for r in batch if device_drafts(r.draft_token_ids) is None for t in r.draft_token_ids]
    if len(host) == sum(len(r.draft_token_ids) for r in batch):
        return device_tensor(host, torch.int64, device)
    parts = [
        device_tensor(list(r.draft_token_ids), torch.int64, device)
        if (d := device_drafts(r.draft_token_ids)) is None
        else d.to(device)
        for r in batch
        if len(r.draft_token_ids)
    ]
    return torch.cat(parts)


def dense_draft_probs(
    batch: Sequence[VerifyRequest], vocab: int, device: torch.device
) -> torch.Tensor:
    """q of every draft, dense [T, V]; one-hot where a request sent no q (greedy).

    The sparse rows are padded to one width and joined where they arrived
    (the draft's device in process, the host over gRPC), then moved and
    scattered in one go: no copy or launch per sequence.
    """
    parts = [(r.draft_ids, r.draft_probs, r.draft_token_ids) for r in batch]
    parts = [part for part in parts if len(part[2])]  # sequences with drafts
    if not parts:
        return torch.zeros(0, vocab, device=device)
    sent = [ids for ids, probs, _ in parts if ids is not None and probs is not None]
    drafted = [d for _, _, tokens in parts if (d := device_drafts(tokens)) is not None]
    home = next((t.device for t in [*sent, *drafted]), torch.device("cpu"))
    width = max((ids.shape[1] for ids in sent), default=1)
    all_ids, all_probs = [], []
    for ids, probs, tokens in parts:
        if ids is None or probs is None:
            on_device = device_drafts(tokens)
            ids = (
                torch.tensor(list(tokens), device=home) if on_device is None else on_device.to(home)
            ).unsqueeze(1)  # [k, 1]
            probs = torch.ones(len(tokens), 1, device=home)
        ids, probs = ids.to(home), probs.to(home, torch.float32)
        if pad := width - ids.shape[1]:  # narrower than the widest: zeros after
            ids, probs = F.pad(ids, (0, pad)), F.pad(probs, (0, pad))
        all_ids.append(ids)
        all_probs.append(probs)
    ids = torch.cat(all_ids).to(device, non_blocking=True)  # [T, width]
    probs = torch.cat(all_probs).to(device, non_blocking=True)
    return densify(ids, probs, vocab)

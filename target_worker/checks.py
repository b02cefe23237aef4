"""What the target worker checks of a verify request's drafts before it runs
anything: a caller's drafts must be what a draft worker could have sent, or
rejection sampling would divide by nonsense.

The shapes are checked per request on the host; the values of every
request's distributions are checked together, in one pass over the batch
with one read back (on a GPU, one synchronisation per round rather than a
few per sequence). Drafts that never left this process (``DeviceTokens``,
from an in-process draft worker's sampler) are this code's own: their
distributions' values are not checked again, so a sampled round in process
reads nothing back before its verify runs, as a greedy one. A draft whose
embedding is padded past the target's may name ids the target lacks: the
verify clamps such draft tokens as inputs and drops such ids' mass from q
(``drafts.input_ids``, ``rejection_sampler.densify``), as the design allows.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from protos.messages import MAX_DRAFT_TOKENS, DeviceTokens, VerifyRequest

# Bits of a distribution row's problems, and what each one means.
_BAD_ID, _BAD_PROB, _OVER_ONE = 1, 2, 4


def _sampling_problem(request: VerifyRequest, vocab_size: int) -> str | None:
    o = request.sampling
    ids = [t for t, _ in o.logit_bias] + list(o.suppressed_ids)
    ids += [t for word in o.bad_words for t in word]
    if any(t >= vocab_size for t in ids):
        return f"logit_bias, suppressed or bad word token ids outside [0, {vocab_size})"
    return None


def _shape_problem(request: VerifyRequest) -> str | None:
    k = len(request.draft_token_ids)
    if k > MAX_DRAFT_TOKENS:
        return f"{k} drafts; at most {MAX_DRAFT_TOKENS} are verified at once"
    ids, probs = request.draft_ids, request.draft_probs  # [k, N] each, or None
    if ids is None and probs is None:
        return None  # greedy drafts: q is one-hot
    if ids is None or probs is None or ids.shape != probs.shape or ids.dim() != 2:
        return "draft distributions need token ids and probabilities of one [k, N] shape"
    if ids.shape[0] != k:
        return f"{k} drafts but {ids.shape[0]} draft distributions"
    if k and ids.shape[1] == 0:
        return "a draft distribution needs at least one token"
    return None


def _value_problem(flags: int, vocab_size: int) -> str | None:
    if flags & _BAD_ID:
        return f"draft distribution token ids outside [0, {vocab_size})"
    if flags & _BAD_PROB:
        return "draft probabilities must be finite and >= 0"
    if flags & _OVER_ONE:
        return "a draft distribution's probabilities sum to more than 1"
    return None


def draft_problems(requests: Sequence[VerifyRequest], vocab_size: int) -> list[str | None]:
    """What is wrong with each request's drafts and their distributions, if anything.

    The draft tokens themselves are checked with the sequence's other tokens.
    """
    problems = [_sampling_problem(r, vocab_size) or _shape_problem(r) for r in requests]
    # Well-shaped distributions, grouped by width N (draft workers may differ).
    groups: dict[int, list[tuple[int, torch.Tensor, torch.Tensor]]] = {}
    for i, (r, problem) in enumerate(zip(requests, problems, strict=True)):
        if problem is None and r.draft_ids is not None and r.draft_probs is not None:
            if isinstance(r.draft_token_ids, DeviceTokens):
                continue  # sampled by this process's draft worker: not read back
            groups.setdefault(r.draft_ids.shape[1], []).append((i, r.draft_ids, r.draft_probs))
    if not groups:
        return problems
    owners: list[int] = []  # the request of each row
    flags = []
    home = next(iter(groups.values()))[0][1].device  # checked where the first ones are
    for group in groups.values():
        for i, ids, _ in group:
            owners.extend([i] * ids.shape[0])
        ids = torch.cat([g[1].to(home) for g in group])  # [rows, N]
        probs = torch.cat([g[2].to(home) for g in group])
        flags.append(_row_flags(ids, probs, vocab_size))
    worst: dict[int, int] = {}
    for i, f in zip(owners, torch.cat(flags).tolist(), strict=True):  # the one read back
        worst[i] = worst.get(i, 0) | f
    for i, f in worst.items():
        problems[i] = _value_problem(f, vocab_size)
    return problems


def _row_flags(ids: torch.Tensor, probs: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """ids, probs [R, N] -> each row's problem bits [R]."""
    bad_id = ((ids < 0) | (ids >= vocab_size)).any(-1)
    bad_prob = (~torch.isfinite(probs) | (probs < 0)).any(-1)
    over_one = probs.sum(-1) > 1 + 1e-3
    return bad_id.int() * _BAD_ID + bad_prob.int() * _BAD_PROB + over_one.int() * _OVER_ONE

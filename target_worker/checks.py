"""What the target worker checks of a verify request's drafts before it runs
anything: a caller's drafts must be what a draft worker could have sent, or
rejection sampling would divide by nonsense."""

from __future__ import annotations

import torch

from protos.messages import MAX_DRAFT_TOKENS, VerifyRequest


def draft_problem(request: VerifyRequest, vocab_size: int) -> str | None:
    """What is wrong with the request's drafts and their distributions, if anything.

    The draft tokens themselves are checked with the sequence's other tokens.
    """
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
    if bool(((ids < 0) | (ids >= vocab_size)).any()):
        return f"draft distribution token ids outside [0, {vocab_size})"
    if not bool(torch.isfinite(probs).all()) or bool((probs < 0).any()):
        return "draft probabilities must be finite and >= 0"
    if bool((probs.sum(-1) > 1 + 1e-3).any()):
        return "a draft distribution's probabilities sum to more than 1"
    return None

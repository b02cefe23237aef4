"""Rejection sampling of drafts against the target: the rule that makes
speculative decoding lossless.

Words, for one sequence with k drafts d_1..d_k sampled from the draft's
distributions q_1..q_k, and the target's distributions p_1..p_{k+1} at the same
positions (p_{k+1} follows the last draft):

- **accepted** tokens: walking i = 1..k, d_i is accepted with probability
  min(1, p_i(d_i) / q_i(d_i)) (never when q_i(d_i) = 0); greedy requests
  accept while d_i equals argmax p_i;
- **recovered** token: at the first rejection, a token drawn from
  norm(max(0, p_i - q_i)) (greedy: argmax p_i) replaces d_i and the walk stops;
- **bonus** token: when all k drafts are accepted, one more token drawn from
  p_{k+1} (greedy: its argmax).

So each sequence gains 1..k+1 tokens, distributed exactly as if sampled from
the target alone. Outputs are ``[B, max_k + 1]`` with the placeholder -1 in
the slots after a sequence's last token. Batches are ragged: sequences may
have different k (0 included, which is plain sampling from p).

``rejection_sample_reference`` is the plain PyTorch definition; the Triton
kernels in rejection_kernels.py compute the same function from the same
random draws (float64 uniforms for acceptance, Exp(1) noise for sampling).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from model_runtime.host_copy import device_tensor

PLACEHOLDER = -1


@dataclass
class RejectionInputs:
    """One verify batch, laid out flat (B sequences, T drafts, R = T + B rows)."""

    target_probs: torch.Tensor  # [R, V] float32, processed p (rows of sequence b contiguous)
    target_argmax: torch.Tensor  # [R] int64, argmax of the raw target logits
    draft_ids: torch.Tensor  # [T] int64
    draft_probs: torch.Tensor  # [T, V] float32, dense q (0 outside the draft's support)
    num_drafts: Sequence[int]  # [B] k of each sequence, on the host
    is_greedy: torch.Tensor  # [B] bool
    uniforms: torch.Tensor  # [T] float64
    noise: torch.Tensor  # [B, V] float32, Exp(1)

    @property
    def cu_num_drafts(self) -> list[int]:
        cu = [0]
        for k in self.num_drafts:
            cu.append(cu[-1] + k)
        return cu


def densify(ids: torch.Tensor, probs: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """Sparse distributions (ids [T, N], probs [T, N]) -> dense [T, vocab_size].

    Ids outside the vocabulary are dropped (a draft whose embedding table is
    larger than the target's); their mass simply is not in q.
    """
    inside = ids < vocab_size
    dense = torch.zeros(ids.shape[0], vocab_size, dtype=torch.float32, device=ids.device)
    dense.scatter_add_(1, torch.where(inside, ids, 0), torch.where(inside, probs.float(), 0.0))
    return dense


def _residual_sample(p: torch.Tensor, q: torch.Tensor | None, noise: torch.Tensor) -> int:
    """One draw from norm(max(0, p - q)) (from p when q is None or p == q)."""
    residual = p if q is None else (p - q).clamp_min(0.0)
    if residual.max() <= 0:
        residual = p
    return int((residual / noise).argmax())


def rejection_sample_reference(inputs: RejectionInputs) -> torch.Tensor:
    """The definition, one sequence and one draft at a time."""
    k_max = max(inputs.num_drafts, default=0)
    batch = len(inputs.num_drafts)
    out = torch.full((batch, k_max + 1), PLACEHOLDER, dtype=torch.int64)
    cu = inputs.cu_num_drafts
    p_all, q_all = inputs.target_probs.cpu(), inputs.draft_probs.cpu()
    argmax, drafts = inputs.target_argmax.cpu(), inputs.draft_ids.cpu()
    uniforms, noise = inputs.uniforms.cpu(), inputs.noise.cpu()
    vocab = p_all.shape[1]
    for b, k in enumerate(inputs.num_drafts):
        row0, slot0 = cu[b] + b, cu[b]
        greedy = bool(inputs.is_greedy[b])
        for i in range(k + 1):
            if i == k:  # every draft accepted: the bonus token
                out[b, i] = (
                    argmax[row0 + k]
                    if greedy
                    else _residual_sample(p_all[row0 + k], None, noise[b])
                )
                break
            token = int(drafts[slot0 + i])
            if greedy:
                out[b, i] = argmax[row0 + i]
                if token != int(argmax[row0 + i]):
                    break
                continue
            p = float(p_all[row0 + i, token]) if token < vocab else 0.0
            q = float(q_all[slot0 + i, token]) if token < vocab else 0.0
            if q > 0 and float(uniforms[slot0 + i]) * q < p:
                out[b, i] = token
                continue
            out[b, i] = _residual_sample(p_all[row0 + i], q_all[slot0 + i], noise[b])
            break
    return out.to(inputs.target_probs.device)


def rejection_sample_triton(inputs: RejectionInputs) -> torch.Tensor:
    """The same function through the Triton kernels."""
    from target_worker import rejection_kernels as kernels

    device = inputs.target_probs.device
    batch = len(inputs.num_drafts)
    k_max = max(inputs.num_drafts, default=0)
    rows, vocab = inputs.target_probs.shape
    cu = inputs.cu_num_drafts
    row_seq = [b for b, k in enumerate(inputs.num_drafts) for _ in range(k + 1)]
    row_draft = [s for b, k in enumerate(inputs.num_drafts) for s in [*range(cu[b], cu[b] + k), -1]]
    cu_t = device_tensor(cu, torch.int64, device)
    out = torch.full((batch, k_max + 1), PLACEHOLDER, dtype=torch.int64, device=device)
    sampled = torch.zeros(rows, dtype=torch.int64, device=device)
    draft_probs = inputs.draft_probs
    if draft_probs.shape[0] == 0:  # kernels index it; give them one row of zeros
        draft_probs = torch.zeros(1, vocab, dtype=torch.float32, device=device)
    draft_ids = inputs.draft_ids if inputs.draft_ids.numel() else cu_t[:1]
    uniforms = (
        inputs.uniforms
        if inputs.uniforms.numel()
        else torch.zeros(1, dtype=torch.float64, device=device)
    )
    kernels.greedy_accept_kernel[(batch,)](
        out, out.stride(0), cu_t, draft_ids, inputs.target_argmax, inputs.is_greedy
    )
    kernels.residual_sample_kernel[(rows,)](
        sampled,
        device_tensor(row_seq, torch.int64, device),
        device_tensor(row_draft, torch.int64, device),
        draft_probs,
        inputs.target_probs,
        inputs.noise,
        inputs.is_greedy,
        vocab,
        BLOCK=1024,
    )
    kernels.random_accept_kernel[(batch,)](
        out,
        out.stride(0),
        cu_t,
        draft_ids,
        draft_probs,
        inputs.target_probs,
        uniforms,
        sampled,
        inputs.is_greedy,
        vocab,
    )
    return out

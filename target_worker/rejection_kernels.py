"""Triton kernels of the rejection sampler (see rejection_sampler.py for the
words and the reference). One program per sequence for the acceptance walks,
one per target row for sampling from the residual distribution.

Layouts (B sequences, k_b drafts for sequence b, T = sum k_b, R = T + B):
- target rows of sequence b: ``row_start[b] .. row_start[b] + k_b``, the last
  one being its bonus row (row_start[b] = cu_num_drafts[b] + b);
- draft slots of sequence b: ``cu_num_drafts[b] .. + k_b``;
- output ``[B, max_k + 1]`` pre-filled with the placeholder -1.
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def greedy_accept_kernel(
    out_ptr,  # [B, max_k + 1] int64
    out_stride,
    cu_num_drafts_ptr,  # [B + 1] int64
    draft_ids_ptr,  # [T] int64
    target_argmax_ptr,  # [R] int64
    is_greedy_ptr,  # [B] bool
):
    seq = tl.program_id(0)
    if tl.load(is_greedy_ptr + seq):
        start = tl.load(cu_num_drafts_ptr + seq)
        k = tl.load(cu_num_drafts_ptr + seq + 1) - start
        row_start = start + seq
        rejected = False
        for i in range(k):
            if not rejected:
                target = tl.load(target_argmax_ptr + row_start + i)
                tl.store(out_ptr + seq * out_stride + i, target)
                rejected = tl.load(draft_ids_ptr + start + i) != target
        if not rejected:
            bonus = tl.load(target_argmax_ptr + row_start + k)
            tl.store(out_ptr + seq * out_stride + k, bonus)


@triton.jit
def random_accept_kernel(
    out_ptr,  # [B, max_k + 1] int64
    out_stride,
    cu_num_drafts_ptr,  # [B + 1] int64
    draft_ids_ptr,  # [T] int64
    draft_probs_ptr,  # [T, V] float32, dense q
    target_probs_ptr,  # [R, V] float32, processed p
    uniforms_ptr,  # [T] float64
    sampled_ptr,  # [R] int64: residual sample of every row (bonus rows: from p)
    is_greedy_ptr,  # [B] bool
    vocab_size,
):
    seq = tl.program_id(0)
    if not tl.load(is_greedy_ptr + seq):
        start = tl.load(cu_num_drafts_ptr + seq)
        k = tl.load(cu_num_drafts_ptr + seq + 1) - start
        row_start = start + seq
        rejected = False
        for i in range(k):
            if not rejected:
                token = tl.load(draft_ids_ptr + start + i)
                inside = token < vocab_size  # a draft token outside p's vocabulary has p = 0
                safe = tl.where(inside, token, 0)
                p = tl.load(target_probs_ptr + (row_start + i) * vocab_size + safe)
                p = tl.where(inside, p, 0.0)
                q = tl.load(draft_probs_ptr + (start + i) * vocab_size + safe)
                q = tl.where(inside, q, 0.0)
                u = tl.load(uniforms_ptr + start + i)
                # accept with probability min(1, p/q): u * q < p, strict, so p = 0 never
                # passes; q = 0 never accepts.
                accepted = (q > 0) & (u * q.to(tl.float64) < p.to(tl.float64))
                if accepted:
                    tl.store(out_ptr + seq * out_stride + i, token)
                else:
                    rejected = True
                    recovered = tl.load(sampled_ptr + row_start + i)
                    tl.store(out_ptr + seq * out_stride + i, recovered)
        if not rejected:
            bonus = tl.load(sampled_ptr + row_start + k)
            tl.store(out_ptr + seq * out_stride + k, bonus)


@triton.jit
def residual_sample_kernel(
    sampled_ptr,  # [R] int64 out
    row_seq_ptr,  # [R] int64: sequence of each row
    row_draft_ptr,  # [R] int64: draft slot of each row, -1 for bonus rows
    draft_probs_ptr,  # [T, V] float32, dense q
    target_probs_ptr,  # [R, V] float32
    noise_ptr,  # [B, V] float32, Exp(1)
    is_greedy_ptr,  # [B] bool
    vocab_size,
    BLOCK: tl.constexpr,
):
    """Sample from norm(max(0, p - q)) by the exponential race argmax(r / E).

    On a bonus row q is 0, so this samples from p. Should the residual vanish
    (p == q, where rejection has probability 0) it falls back to p.
    """
    row = tl.program_id(0)
    seq = tl.load(row_seq_ptr + row)
    if not tl.load(is_greedy_ptr + seq):
        slot = tl.load(row_draft_ptr + row)
        has_draft = slot >= 0
        safe_slot = tl.where(has_draft, slot, 0)
        best_r = -1.0
        arg_r = 0
        best_p = -1.0
        arg_p = 0
        for block in range(0, vocab_size, BLOCK):
            offs = block + tl.arange(0, BLOCK)
            mask = offs < vocab_size
            p = tl.load(target_probs_ptr + row * vocab_size + offs, mask=mask, other=0.0)
            q = tl.load(draft_probs_ptr + safe_slot * vocab_size + offs, mask=mask, other=0.0)
            q = tl.where(has_draft, q, 0.0)
            e = tl.load(noise_ptr + seq * vocab_size + offs, mask=mask, other=1.0)
            r = tl.maximum(p - q, 0.0) / e
            pe = p / e
            r = tl.where(mask, r, -1.0)
            pe = tl.where(mask, pe, -1.0)
            block_r = tl.max(r, axis=0)
            block_p = tl.max(pe, axis=0)
            if block_r > best_r:
                best_r = block_r
                arg_r = tl.argmax(r, axis=0) + block
            if block_p > best_p:
                best_p = block_p
                arg_p = tl.argmax(pe, axis=0) + block
        tl.store(sampled_ptr + row, tl.where(best_r > 0, arg_r, arg_p).to(tl.int64))

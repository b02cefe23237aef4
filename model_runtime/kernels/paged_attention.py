"""Triton paged attention: new queries attend over the KV block pool in place.

One kernel serves every step. A ragged batch of B sequences brings q_len_b new
tokens each (1 for a decode step, k + 1 to verify k drafts, a whole prompt or
a chunk of one), already written into the pool; each new query at position p
sees the keys at positions <= p (and, with a sliding window w, > p - w).

A program takes one tile of a sequence's queries for one KV head: BLOCK_Q
tokens times the GROUP query heads that share that KV head, so a decode step
of a grouped-query model still fills the rows of a ``tl.dot``. It walks the
keys BLOCK_N at a time, looking each position's block up in the block table,
with an online softmax. A decode or verify step at small batch has too few
tiles to fill the GPU, so the keys of one tile are split NUM_SPLITS ways
across programs (flash-decoding); a second kernel merges the partial results
by their log-sum-exp. Padding sequences (q_len 0) write
nothing.

Layouts: q and out ``[T, Hq, D]``; each layer's key and value pool
``[num_blocks, block_size, Hkv, D]``; ``block_tables [B, W]``;
``query_starts [B + 1]`` (sequence b's new tokens are rows query_starts[b] ..
query_starts[b + 1]); ``seq_lens [B]`` (tokens in the cache, the new included).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

LOG2E = 1.4426950408889634
# Programs wanted in flight before keys are split further (two waves on an H200).
TARGET_PROGRAMS = 264
MAX_SPLITS = 16
KEY_BLOCK = 64  # keys per step of the walk (32 for heads over 128)
NUM_WARPS = 4


@triton.jit
def _attend_keys(
    q, k_ptr, v_ptr, table_ptr, position, start, end,
    head_offset, stride_kb, stride_ks, scale_log2, window,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
    HEAD_DIM: tl.constexpr, PAGE: tl.constexpr, PRECISION: tl.constexpr,
):  # fmt: skip
    """Online softmax of queries q [M, D] at ``position`` [M] over the keys at
    positions [start, end): (unnormalised output [M, D], row max, row sum),
    in log2 units."""
    dims = tl.arange(0, BLOCK_D)
    dim_ok = dims < HEAD_DIM
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
    for key_start in range(start, end, BLOCK_N):
        keys = key_start + tl.arange(0, BLOCK_N)  # [N] positions
        key_ok = keys < end
        block = tl.load(table_ptr + keys // PAGE, mask=key_ok, other=0)
        kv_rows = block.to(tl.int64) * stride_kb + (keys % PAGE) * stride_ks
        kv_rows += head_offset
        kv_mask = key_ok[:, None] & dim_ok[None, :]
        k = tl.load(k_ptr + kv_rows[:, None] + dims[None, :], mask=kv_mask, other=0.0)
        scores = tl.dot(q, tl.trans(k), input_precision=PRECISION) * scale_log2  # [M, N]
        seen = key_ok[None, :] & (keys[None, :] <= position[:, None])
        if window > 0:
            seen = seen & (position[:, None] - keys[None, :] < window)
        scores = tl.where(seen, scores, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(scores, 1))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        p = tl.math.exp2(scores - m_safe[:, None])
        alpha = tl.math.exp2(m_i - m_safe)
        l_i = l_i * alpha + tl.sum(p, 1)
        v = tl.load(v_ptr + kv_rows[:, None] + dims[None, :], mask=kv_mask, other=0.0)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=PRECISION)
        m_i = m_new
    return acc, m_i, l_i


@triton.jit
def _key_range(
    seq_len, q_len, tile, split, window,
    BLOCK_Q: tl.constexpr, BLOCK_N: tl.constexpr, NUM_SPLITS: tl.constexpr,
):  # fmt: skip
    """The key positions [start, end) one split of a query tile attends to:
    its share of those the tile's queries can see."""
    # Keys this tile can see, [lo, hi), then this program's share of them.
    last = seq_len - q_len + tl.minimum(tile * BLOCK_Q + BLOCK_Q, q_len)  # max position + 1
    lo = 0
    if window > 0:
        lo = tl.maximum(seq_len - q_len + tile * BLOCK_Q - window + 1, 0)
        lo = lo // BLOCK_N * BLOCK_N
    per_split = tl.cdiv(tl.cdiv(last - lo, BLOCK_N), NUM_SPLITS) * BLOCK_N
    start = lo + split * per_split
    end = tl.minimum(start + per_split, last)

    return start, end


# q_tiles varies with the longest query and stride_bt (the block table's
# padded width) with the longest sequence: compiling a variant for a value of
# either (Triton specialises 1 and multiples of 16) would stall a catch-up or
# prefill step for about half a second, mid-run, once per query tile size.
DATA_DEPENDENT = ["stride_bt", "q_tiles"]


@triton.jit(do_not_specialize=DATA_DEPENDENT)
def _attend_tile(
    q_ptr, k_ptr, v_ptr, out_ptr, part_out_ptr, part_lse_ptr,
    block_tables_ptr, seq_lens_ptr, query_starts_ptr,
    scale_log2, window,
    stride_qt, stride_qh, stride_kb, stride_ks, stride_kh, stride_bt, stride_ot, stride_oh,
    q_tiles,
    GROUP: tl.constexpr, BLOCK_Q: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, PAGE: tl.constexpr,
    NUM_SPLITS: tl.constexpr, PRECISION: tl.constexpr,
):  # fmt: skip
    seq = tl.program_id(0) // q_tiles
    tile = tl.program_id(0) % q_tiles
    kv_head = tl.program_id(1)
    split = tl.program_id(2)
    q_start = tl.load(query_starts_ptr + seq).to(tl.int32)
    q_len = tl.load(query_starts_ptr + seq + 1).to(tl.int32) - q_start
    if tile * BLOCK_Q < q_len:
        seq_len = tl.load(seq_lens_ptr + seq).to(tl.int32)
        rows = tl.arange(0, BLOCK_M)
        token = tile * BLOCK_Q + rows // GROUP  # [M] index among the new tokens
        head = kv_head * GROUP + rows % GROUP  # [M] query head
        row_ok = (rows < BLOCK_Q * GROUP) & (token < q_len)
        position = seq_len - q_len + token  # [M]
        dims = tl.arange(0, BLOCK_D)
        dim_ok = dims < HEAD_DIM
        row = (q_start + token).to(tl.int64)  # [M] flat token index; offsets in int64
        q_rows = row * stride_qt + head * stride_qh
        q = tl.load(
            q_ptr + q_rows[:, None] + dims[None, :],
            mask=row_ok[:, None] & dim_ok[None, :],
            other=0.0,
        )  # [M, D]

        start, end = _key_range(seq_len, q_len, tile, split, window, BLOCK_Q, BLOCK_N, NUM_SPLITS)
        acc, m_i, l_i = _attend_keys(
            q, k_ptr, v_ptr, block_tables_ptr + seq * stride_bt, position, start, end,
            kv_head * stride_kh, stride_kb, stride_ks, scale_log2, window,
            BLOCK_M, BLOCK_N, BLOCK_D, HEAD_DIM, PAGE, PRECISION,
        )  # fmt: skip
        out = acc / tl.where(l_i == 0.0, 1.0, l_i)[:, None]
        if NUM_SPLITS == 1:
            out_rows = row * stride_ot + head * stride_oh
            tl.store(
                out_ptr + out_rows[:, None] + dims[None, :],
                out.to(out_ptr.dtype.element_ty),
                mask=row_ok[:, None] & dim_ok[None, :],
            )
        else:  # partial results: [T, Hq, NUM_SPLITS, D] and their lse [T, Hq, NUM_SPLITS]
            lse = tl.where(l_i == 0.0, float("-inf"), m_i + tl.math.log2(tl.maximum(l_i, 1e-30)))
            part = (row * (stride_ot // HEAD_DIM) + head) * NUM_SPLITS + split
            tl.store(part_lse_ptr + part, lse, mask=row_ok)
            tl.store(
                part_out_ptr + part[:, None] * HEAD_DIM + dims[None, :],
                out,
                mask=row_ok[:, None] & dim_ok[None, :],
            )


@triton.jit
def _merge_splits(
    out_ptr, part_out_ptr, part_lse_ptr, num_heads,
    HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, NUM_SPLITS: tl.constexpr,
):  # fmt: skip
    row = tl.program_id(0).to(tl.int64)  # token * num_heads + head
    splits = tl.arange(0, NUM_SPLITS)
    dims = tl.arange(0, BLOCK_D)
    dim_ok = dims < HEAD_DIM
    lse = tl.load(part_lse_ptr + row * NUM_SPLITS + splits)  # [S]
    top = tl.max(lse, 0)
    top = tl.where(top == float("-inf"), 0.0, top)
    weight = tl.math.exp2(lse - top)  # empty splits weigh 0
    parts = tl.load(
        part_out_ptr + (row * NUM_SPLITS + splits)[:, None] * HEAD_DIM + dims[None, :],
        mask=dim_ok[None, :],
        other=0.0,
    )  # [S, D]
    total = tl.sum(weight, 0)
    out = tl.sum(parts * weight[:, None], 0) / tl.where(total == 0.0, 1.0, total)
    tl.store(out_ptr + row * HEAD_DIM + dims, out.to(out_ptr.dtype.element_ty), mask=dim_ok)


def num_splits_for(num_programs: int, max_keys: int, block_n: int = KEY_BLOCK) -> int:
    """How many ways to split each tile's keys so that ``num_programs`` tiles
    fill the GPU: a power of two, no more than the BLOCK_N-key steps of the
    longest walk (rounded up: a short walk split finer ends sooner)."""
    most = most_splits(max_keys, block_n)
    splits = 1
    while splits < most and num_programs * splits * 2 <= TARGET_PROGRAMS:
        splits *= 2
    return splits


def most_splits(max_keys: int, block_n: int = KEY_BLOCK) -> int:
    """The most ways a walk of ``max_keys`` keys is split: MAX_SPLITS, or its
    BLOCK_N-key steps rounded up to a power of two where fewer."""
    return min(MAX_SPLITS, triton.next_power_of_2(max(triton.cdiv(max_keys, block_n), 1)))


def split_counts(max_keys: int, block_n: int = KEY_BLOCK) -> list[int]:
    """Every count ``num_splits_for`` can choose for walks of up to ``max_keys``
    keys: each is a compile-time constant, so a kernel variant to compile."""
    return [1 << i for i in range(most_splits(max_keys, block_n).bit_length())]


def query_block(max_query_len: int, group: int) -> int:
    """New tokens per tile: the longest query rounded up to a power of two,
    at most what 64 rows of tile hold. It is a compile-time constant, so
    rounding keeps the kernel's variants to a handful: a draft catching up on
    any number of tokens, or a verify of any k, compiles nothing new."""
    if max_query_len == 1:
        return 1
    most = max(1, 64 // group)
    return min(triton.next_power_of_2(max_query_len), 1 << (most.bit_length() - 1))


def query_tiles(max_query_len: int, group: int) -> int:
    """Query tiles of the longest sequence (programs per sequence and KV head)."""
    return triton.cdiv(max_query_len, query_block(max_query_len, group))


def paged_attention(
    q: torch.Tensor,
    k_pool: torch.Tensor,
    v_pool: torch.Tensor,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    query_starts: torch.Tensor,
    max_query_len: int,
    scale: float,
    window: int | None = None,
    num_splits: int = 1,
) -> torch.Tensor:
    """q [T, Hq, D] over pools [N, page, Hkv, D] -> out [T, Hq, D].

    ``max_query_len`` bounds the new tokens of any sequence and
    ``num_splits`` (a power of two) divides the keys of each tile: both are
    host numbers, fixed for a captured graph.
    """
    num_tokens, num_heads, head_dim = q.shape
    num_kv_heads, page = k_pool.shape[2], k_pool.shape[1]
    group = num_heads // num_kv_heads
    block_q = query_block(max_query_len, group)
    block_m = max(16, triton.next_power_of_2(block_q * group))
    q_tiles = query_tiles(max_query_len, group)
    block_n = KEY_BLOCK if head_dim <= 128 else KEY_BLOCK // 2
    batch = seq_lens.shape[0]
    out = torch.empty_like(q)
    if num_splits > 1:
        part_out = torch.empty(
            num_tokens, num_heads, num_splits, head_dim, dtype=torch.float32, device=q.device
        )
        part_lse = torch.empty(
            num_tokens, num_heads, num_splits, dtype=torch.float32, device=q.device
        )
    else:
        part_out = part_lse = out
    _attend_tile[(batch * q_tiles, num_kv_heads, num_splits)](
        q, k_pool, v_pool, out, part_out, part_lse,
        block_tables, seq_lens, query_starts,
        scale * LOG2E, window or 0,
        q.stride(0), q.stride(1), k_pool.stride(0), k_pool.stride(1), k_pool.stride(2),
        block_tables.stride(0), out.stride(0), out.stride(1),
        q_tiles,
        GROUP=group, BLOCK_Q=block_q, BLOCK_M=block_m, BLOCK_N=block_n,
        HEAD_DIM=head_dim, BLOCK_D=triton.next_power_of_2(head_dim), PAGE=page,
        NUM_SPLITS=num_splits,
        # float32 models get float32 products (not TF32): the reference's numbers
        PRECISION="ieee" if q.dtype == torch.float32 else "tf32",
        num_warps=NUM_WARPS,
    )  # fmt: skip
    if num_splits > 1:
        _merge_splits[(num_tokens * num_heads,)](
            out, part_out, part_lse, num_heads,
            HEAD_DIM=head_dim, BLOCK_D=triton.next_power_of_2(head_dim), NUM_SPLITS=num_splits,
        )  # fmt: skip
    return out

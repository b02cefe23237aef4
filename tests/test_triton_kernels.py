"""Each Triton kernel of the GPU forward gives the PyTorch path's numbers on
random ragged batches (run by the interpreter on the CPU)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from model_runtime.kernels.activation import silu_and_mul
from model_runtime.kernels.norm import rms_norm
from model_runtime.kernels.paged_attention import num_splits_for, paged_attention, query_block
from model_runtime.kernels.rotary_cache import rotary_and_cache
from model_runtime.kernels.skinny_matmul import MAX_ROWS, MOST_ROWS, TileConfig, skinny_matmul
from model_runtime.layers.norm import rms_norm_reference
from model_runtime.layers.rotary import rotate_half
from model_runtime.ops.triton_ops import TritonOps


def ragged_pool(
    seq_lens: list[int], page: int, heads: int, dim: int, dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Random key and value pools [N, page, heads, dim] and block tables
    [B, W] that scatter each sequence over shuffled blocks."""
    blocks = [-(-n // page) for n in seq_lens]
    order = torch.randperm(sum(blocks) + 3).tolist()
    tables, used = [], 0
    for n in blocks:
        tables.append(order[used : used + n] + [0] * (max(blocks) - n))
        used += n
    shape = (len(order), page, heads, dim)
    return torch.randn(shape, dtype=dtype), torch.randn(shape, dtype=dtype), torch.tensor(tables)


def attention_reference(
    q: torch.Tensor,
    pools: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
    seq_lens: list[int],
    query_lens: list[int],
    window: int | None,
) -> torch.Tensor:
    """Each sequence's new queries over its gathered context, in float32."""
    k_pool, v_pool, tables = pools
    page, group = k_pool.shape[1], q.shape[1] // k_pool.shape[2]
    outs, start = [], 0
    for b, (length, n) in enumerate(zip(seq_lens, query_lens, strict=True)):
        positions = torch.arange(length)
        blocks = tables[b][positions // page]
        keys = k_pool[blocks, positions % page].float().repeat_interleave(group, 1)
        values = v_pool[blocks, positions % page].float().repeat_interleave(group, 1)
        scores = torch.einsum("qhd,khd->hqk", q[start : start + n].float(), keys)
        distance = torch.arange(length - n, length)[:, None] - positions[None, :]
        seen = (distance >= 0) & (distance < (window or length + 1))
        probs = (scores * q.shape[-1] ** -0.5).masked_fill(~seen, float("-inf")).softmax(-1)
        outs.append(torch.einsum("hqk,khd->qhd", probs, values))
        start += n
    return torch.cat(outs)


@pytest.mark.parametrize(
    ("heads", "kv_heads", "dim", "page", "window", "splits", "dtype", "tolerance"),
    [
        (4, 2, 32, 4, None, 1, torch.float32, 1e-5),  # grouped queries, several blocks
        (8, 2, 64, 16, None, 4, torch.float32, 1e-5),  # keys split four ways
        (4, 4, 16, 8, 5, 2, torch.float32, 1e-5),  # a sliding window, split
        (6, 2, 24, 4, None, 1, torch.float32, 1e-5),  # a head size that is no power of two
        (4, 1, 32, 16, 7, 1, torch.float16, 2e-3),  # half precision
    ],
)
def test_paged_attention_matches_the_reference_on_a_ragged_batch(
    heads: int,
    kv_heads: int,
    dim: int,
    page: int,
    window: int | None,
    splits: int,
    dtype: torch.dtype,
    tolerance: float,
) -> None:
    torch.manual_seed(0)
    # decode steps, a verify chunk, whole prompts and a chunk of a long one
    query_lens, seq_lens = [1, 6, 20, 1, 3], [9, 30, 20, 1, 70]
    pools = ragged_pool(seq_lens, page, kv_heads, dim, dtype)
    q = torch.randn(sum(query_lens), heads, dim, dtype=dtype)
    starts = torch.tensor([0, *torch.tensor(query_lens).cumsum(0).tolist()], dtype=torch.int32)
    out = paged_attention(
        q, pools[0], pools[1], pools[2], torch.tensor(seq_lens), starts, max(query_lens),
        dim**-0.5, window, splits,
    )  # fmt: skip
    expected = attention_reference(q, pools, seq_lens, query_lens, window)
    assert (out.float() - expected).abs().max().item() < tolerance


def test_a_sequence_without_new_tokens_is_left_alone() -> None:
    # A padding sequence of a captured batch: no new tokens, no context.
    pools = ragged_pool([5, 4], 4, 2, 16, torch.float32)
    q = torch.randn(1, 2, 16)
    starts = torch.tensor([0, 1, 1], dtype=torch.int32)
    out = paged_attention(q, *pools, torch.tensor([5, 0]), starts, 1, 0.25, None, 2)
    expected = attention_reference(q, pools, [5], [1], None)
    assert (out - expected).abs().max().item() < 1e-5


def test_small_batches_split_their_keys_and_large_ones_do_not() -> None:
    assert num_splits_for(8, max_keys=4096) == 16
    assert num_splits_for(8, max_keys=128) == 2
    assert num_splits_for(512, max_keys=4096) == 1


def test_a_verify_at_small_batch_splits_its_keys_and_a_long_prefill_does_not() -> None:
    ops = TritonOps(num_kv_heads=8, group=4)  # Qwen3-8B's heads
    assert ops.num_splits(1, max_query_len=9, max_keys=4096) == 16  # 8 tiles
    assert ops.num_splits(4, max_query_len=9, max_keys=4096) == 8  # 32 tiles
    assert ops.num_splits(1, max_query_len=512, max_keys=4096) == 1  # 256 tiles


@pytest.mark.parametrize("group", [1, 2, 3, 4, 8])
def test_any_query_length_compiles_one_of_a_handful_of_tile_sizes(group: int) -> None:
    # The tile size is a compile-time constant: one per query length would
    # compile a kernel for every new catch-up length or k.
    sizes = {query_block(n, group) for n in range(1, 257)}
    assert all(size & (size - 1) == 0 for size in sizes)  # powers of two
    assert len(sizes) <= 7
    assert max(sizes) * group <= 64


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rms_norm_with_the_residual_add_gives_the_reference(dtype: torch.dtype) -> None:
    x, residual = torch.randn(5, 48, dtype=dtype), torch.randn(5, 48, dtype=dtype)
    weight = torch.randn(48, dtype=dtype)
    # The interpreter rounds bfloat16 toward zero, a GPU to nearest: one unit apart.
    close = {"rtol": 0, "atol": 0} if dtype == torch.float32 else {"rtol": 2e-2, "atol": 2e-2}
    out, summed = rms_norm(x, weight, 1e-6, residual)
    torch.testing.assert_close(summed, x + residual, **close)
    reference = rms_norm_reference(x + residual, weight, 1e-6)
    torch.testing.assert_close(out, reference, rtol=2e-2, atol=5e-2)
    alone, same = rms_norm(x, weight, 1e-6)
    assert same is x
    torch.testing.assert_close(alone, rms_norm_reference(x, weight, 1e-6), rtol=2e-2, atol=5e-2)


def test_silu_and_mul_gives_the_reference() -> None:
    x = torch.randn(3, 2 * 1500)  # wider than one program's block
    gate, up = x.chunk(2, dim=-1)
    assert torch.allclose(silu_and_mul(x), F.silu(gate) * up, atol=1e-6)


# The interpreter multiplies bfloat16 tiles wrongly in tl.dot on the CPU, so
# the matmul is checked in float32 here and in bfloat16 by the GPU check.
@pytest.mark.parametrize("rows", [1, 5, MAX_ROWS, 36, MOST_ROWS])
@pytest.mark.parametrize("bias", [False, True])
def test_skinny_matmul_gives_the_linear_layer(rows: int, bias: bool) -> None:
    # 80 outputs over tiles of 32 and 72 inputs over steps of 32: both ragged.
    x, weight = torch.randn(rows, 72), torch.randn(80, 72)
    b = torch.randn(80) if bias else None
    out = skinny_matmul(x, weight, b, TileConfig(block_n=32, block_k=32))
    torch.testing.assert_close(out, F.linear(x, weight, b), rtol=1e-5, atol=1e-5)


def test_skinny_matmul_reads_rows_with_a_stride() -> None:
    wide = torch.randn(3, 96)
    weight = torch.randn(40, 64)
    out = skinny_matmul(wide[:, :64], weight, tiles=TileConfig(block_n=16, block_k=16))
    torch.testing.assert_close(out, F.linear(wide[:, :64], weight), rtol=1e-5, atol=1e-5)


def test_skinny_matmul_refuses_more_rows_than_it_pads_to() -> None:
    with pytest.raises(ValueError, match="at most 64 rows"):
        skinny_matmul(torch.randn(MOST_ROWS + 1, 32), torch.randn(16, 32))


def test_skinny_tiles_widen_for_wide_weights() -> None:
    assert TileConfig.for_shape(1024, 2048) == TileConfig(block_n=32, block_k=256)
    assert TileConfig.for_shape(151936, 4096) == TileConfig(block_n=64, block_k=128)
    with pytest.raises(ValueError, match="block_k must be a power of two"):
        TileConfig(block_k=48)


@pytest.mark.parametrize("qk_norm", [False, True])
def test_rotary_and_cache_rotates_queries_and_writes_keys_and_values(qk_norm: bool) -> None:
    heads, kv_heads, dim, tokens = 4, 2, 16, 5
    qkv = torch.randn(tokens, (heads + 2 * kv_heads) * dim)
    positions = torch.tensor([3, 0, 7, 8, 2])
    slots = torch.tensor([5, 1, -1, 9, 0])  # token 2 is padding: written nowhere
    angles = torch.randn(16, dim // 2).repeat(1, 2)
    cos, sin = angles.cos(), angles.sin()
    norms = (torch.randn(dim), torch.randn(dim)) if qk_norm else (None, None)
    # Each pool sits after a guard of one slot, which a write at slot -1 would hit.
    guarded = torch.zeros(2, 13, kv_heads, dim)
    k_pool, v_pool = (g[1:].view(3, 4, kv_heads, dim) for g in guarded)
    q_out = rotary_and_cache(qkv, positions, slots, cos, sin, k_pool, v_pool, heads, *norms)
    assert guarded[:, 0].abs().sum() == 0

    q, k, v = qkv.split([heads * dim, kv_heads * dim, kv_heads * dim], -1)
    q, k, v = q.view(tokens, heads, dim), k.view(tokens, kv_heads, dim), v.view(tokens, -1, dim)
    if qk_norm:
        q, k = rms_norm_reference(q, norms[0], 1e-6), rms_norm_reference(k, norms[1], 1e-6)
    c, s = cos[positions].unsqueeze(1), sin[positions].unsqueeze(1)
    q, k = q * c + rotate_half(q) * s, k * c + rotate_half(k) * s
    assert torch.allclose(q_out, q, atol=1e-5)
    written = slots >= 0
    flat_k, flat_v = k_pool.view(-1, kv_heads, dim), v_pool.view(-1, kv_heads, dim)
    assert torch.allclose(flat_k[slots[written]], k[written], atol=1e-5)
    assert torch.equal(flat_v[slots[written]], v[written])
    untouched = torch.ones(12, dtype=torch.bool)
    untouched[slots[written]] = False
    assert flat_k[untouched].abs().sum() == 0 and flat_v[untouched].abs().sum() == 0


def test_the_triton_path_sends_few_rows_to_the_skinny_matmul_and_more_to_the_library(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import model_runtime.ops.triton_ops as triton_ops

    calls: list[int] = []

    def spy(
        x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None
    ) -> torch.Tensor:
        calls.append(x.shape[0])
        return skinny_matmul(x, weight, bias)

    monkeypatch.setattr(triton_ops, "skinny_matmul", spy)
    ops, weight = triton_ops.TritonOps(num_kv_heads=1, group=1), torch.randn(24, 32)
    for rows in (1, MAX_ROWS, MAX_ROWS + 1):
        x = torch.randn(rows, 32)
        torch.testing.assert_close(ops.linear(x, weight), F.linear(x, weight), rtol=1e-5, atol=1e-5)
    assert calls == [1, MAX_ROWS]

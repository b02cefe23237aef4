"""The Llama family: Llama, Mistral, Qwen2 and Qwen3 decoders.

Module names copy the Hugging Face checkpoints (``model.layers.0.self_attn``...)
so that weights load by name. Two kinds of fused parameters hold several
checkpoint tensors each; ``PACKED_MODULES`` says which, for the loader.

The family members differ only in a few switches, set by the subclasses at the
end of this file: whether q/k/v and o have biases, and whether queries and keys
are RMS-normalised per head before the rotary embedding (Qwen3).
"""

from __future__ import annotations

from typing import ClassVar

import torch
from torch import nn

from model_runtime.config import ModelConfig
from model_runtime.distributed import TensorParallelGroup
from model_runtime.layers.attention import Attention, ForwardContext
from model_runtime.layers.embedding import ParallelLMHead, VocabParallelEmbedding
from model_runtime.layers.linear import (
    MergedColumnParallelLinear,
    QKVParallelLinear,
    RowParallelLinear,
)
from model_runtime.layers.norm import RMSNorm
from model_runtime.layers.rotary import RotaryEmbedding, rope_frequencies
from model_runtime.ops.protocol import Ops


class LlamaAttention(nn.Module):
    def __init__(
        self,
        config: ModelConfig,
        layer_index: int,
        rotary: RotaryEmbedding,
        tp: TensorParallelGroup,
        qkv_bias: bool,
        o_bias: bool,
        qk_norm: bool,
    ):
        super().__init__()
        d = config.head_dim
        self.qkv_proj = QKVParallelLinear(
            config.hidden_size,
            d,
            config.num_attention_heads,
            config.num_key_value_heads,
            qkv_bias,
            tp,
        )
        self.o_proj = RowParallelLinear(
            config.num_attention_heads * d, config.hidden_size, o_bias, tp
        )
        self.q_norm = RMSNorm(d, config.rms_norm_eps) if qk_norm else None
        self.k_norm = RMSNorm(d, config.rms_norm_eps) if qk_norm else None
        self.attn = Attention(
            self.qkv_proj.num_heads,
            self.qkv_proj.num_kv_heads,
            d,
            layer_index,
            rotary,
            config.sliding_windows[layer_index],
            (self.q_norm, self.k_norm) if self.q_norm and self.k_norm else None,
        )

    def forward(
        self, positions: torch.Tensor, hidden: torch.Tensor, ctx: ForwardContext
    ) -> torch.Tensor:
        """positions [T], hidden [T, hidden_size] -> [T, hidden_size]."""
        qkv = self.qkv_proj(hidden, ctx.ops)
        return self.o_proj(self.attn(qkv, positions, ctx), ctx.ops)


class LlamaMLP(nn.Module):
    def __init__(self, config: ModelConfig, tp: TensorParallelGroup):
        super().__init__()
        n, bias = config.intermediate_size, config.mlp_bias
        self.gate_up_proj = MergedColumnParallelLinear(config.hidden_size, [n, n], bias, tp)
        self.down_proj = RowParallelLinear(n, config.hidden_size, bias, tp)

    def forward(self, x: torch.Tensor, ctx: ForwardContext) -> torch.Tensor:
        return self.down_proj(ctx.ops.silu_and_mul(self.gate_up_proj(x, ctx.ops)), ctx.ops)


class LlamaDecoderLayer(nn.Module):
    def __init__(self, self_attn: LlamaAttention, mlp: LlamaMLP, config: ModelConfig):
        super().__init__()
        self.self_attn = self_attn
        self.mlp = mlp
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)

    def forward(
        self,
        positions: torch.Tensor,
        hidden: torch.Tensor,
        residual: torch.Tensor | None,
        ctx: ForwardContext,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(this layer's input = hidden + residual) -> (the next layer's hidden,
        residual), each [T, hidden_size]: every add is fused into the norm after it."""
        norm = self.input_layernorm
        hidden, residual = ctx.ops.rms_norm(hidden, norm.weight, norm.eps, residual)
        hidden = self.self_attn(positions, hidden, ctx)
        norm = self.post_attention_layernorm
        hidden, residual = ctx.ops.rms_norm(hidden, norm.weight, norm.eps, residual)
        return self.mlp(hidden, ctx), residual


class LlamaModel(nn.Module):
    def __init__(
        self, layers: list[LlamaDecoderLayer], config: ModelConfig, tp: TensorParallelGroup
    ):
        super().__init__()
        self.embed_tokens = VocabParallelEmbedding(config.vocab_size, config.hidden_size, tp)
        self.layers = nn.ModuleList(layers)
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)

    def forward(
        self, input_ids: torch.Tensor, positions: torch.Tensor, ctx: ForwardContext
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """input_ids [T], positions [T] -> the last layer's (hidden, residual),
        [T, hidden_size] each, before the final norm (``final_hidden``)."""
        hidden, residual = self.embed_tokens(input_ids), None
        for layer in self.layers:
            hidden, residual = layer(positions, hidden, residual, ctx)
        return hidden, residual


class LlamaForCausalLM(nn.Module):
    """A Llama-family causal LM over a ragged batch and a paged KV cache."""

    # checkpoint name part -> (fused parameter name part, shard id in it)
    PACKED_MODULES: ClassVar[dict[str, tuple[str, str | int]]] = {
        "q_proj": ("qkv_proj", "q"),
        "k_proj": ("qkv_proj", "k"),
        "v_proj": ("qkv_proj", "v"),
        "gate_proj": ("gate_up_proj", 0),
        "up_proj": ("gate_up_proj", 1),
    }
    QK_NORM = False

    def attention_biases(self, config: ModelConfig) -> tuple[bool, bool]:
        """(q/k/v bias, o bias) as this family member's checkpoints have them."""
        return config.attention_bias, config.attention_bias

    def __init__(self, config: ModelConfig, tp: TensorParallelGroup, max_positions: int):
        super().__init__()
        self.config = config
        # This rank's share of the KV heads: what its KV cache holds.
        self.num_kv_heads_per_rank = tp.shard_size(
            config.num_key_value_heads, "num_key_value_heads"
        )
        inv_freq, scaling = rope_frequencies(config.hf_config, config.head_dim)
        self.rotary = RotaryEmbedding(inv_freq, scaling, max_positions)
        qkv_bias, o_bias = self.attention_biases(config)
        layers = [
            LlamaDecoderLayer(
                LlamaAttention(config, i, self.rotary, tp, qkv_bias, o_bias, self.QK_NORM),
                LlamaMLP(config, tp),
                config,
            )
            for i in range(config.num_hidden_layers)
        ]
        self.model = LlamaModel(layers, config, tp)
        self.lm_head = ParallelLMHead(config.vocab_size, config.hidden_size, tp)
        if config.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight

    def forward(
        self,
        input_ids: torch.Tensor,
        positions: torch.Tensor,
        ctx: ForwardContext,
        rows: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """input_ids [T], positions [T] -> final hidden states [R, hidden_size]
        of the rows ``rows`` [R] (all T by default): the final norm runs on
        those rows only."""
        hidden, residual = self.model(input_ids, positions, ctx)
        if rows is not None:
            hidden = hidden[rows]
            residual = None if residual is None else residual[rows]
        norm = self.model.norm
        return ctx.ops.rms_norm(hidden, norm.weight, norm.eps, residual)[0]

    def compute_logits(self, hidden: torch.Tensor, ops: Ops) -> torch.Tensor:
        """hidden [N, hidden_size] -> logits [N, vocab_size]."""
        return self.lm_head(hidden, ops)


class MistralForCausalLM(LlamaForCausalLM):
    def attention_biases(self, config: ModelConfig) -> tuple[bool, bool]:
        return False, False


class Qwen2ForCausalLM(LlamaForCausalLM):
    def attention_biases(self, config: ModelConfig) -> tuple[bool, bool]:
        return True, False


class Qwen3ForCausalLM(LlamaForCausalLM):
    QK_NORM = True


MODELS: dict[str, type[LlamaForCausalLM]] = {
    cls.__name__: cls
    for cls in (LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM)
}

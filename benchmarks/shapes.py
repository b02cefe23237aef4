"""Random checkpoints in the shapes of the published Qwen3 configs, for
measurements at realistic sizes where no hub is reachable.

    PYTHONPATH=. python benchmarks/shapes.py --out /tmp/checkpoints

writes ``qwen3-8b`` and ``qwen3-0.6b`` folders there (with ``--pair-scale S``,
the realistic-shape pair below at scale S instead): Hugging Face checkpoints
(config.json, safetensors) with random bf16 weights drawn the way transformers
initialises them (normal, std 0.02), built on the GPU when there is one, and
the bundled pair's tokenizer (so the two share one tokenizer, and every token
id is inside the 151936-entry vocabulary).

Random weights give a draft no acceptance. ``speculative_pair`` builds a pair
whose acceptance is tunable at a real target's cost: a random draft of a few
layers, written into the first layers of a random target (``embed_draft``:
zero-padded when the draft is narrower), whose later layers have their output
projections (o_proj, down_proj) scaled by ``scale``; both final norms are
scaled by ``NORM_GAIN`` so the logits are peaked. At scale 0 the later layers
add nothing to the residual stream and the target computes the draft's logits;
as the scale grows the later layers move the target away from its draft.
Scaling changes no shape, so the target costs what the random one does.

The draft's width is free. At the target's own width (4 layers of the 8B)
the draft reads 17% of the target's bytes, its 1.2 GB LM head among them,
where real pairs read 2-7% (Qwen3-0.6B for Qwen3-8B: 7%; Qwen3-1.7B for
Qwen3-32B: 5%); at Qwen3-0.6B's width (hidden 1024, 16 query heads) four
layers and its head read 3%, and cost about what a real draft does once its
launches are counted.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    PreTrainedModel,
    PreTrainedTokenizerBase,
    Qwen3Config,
)

from model_runtime.resolve import resolve_model

SHAPES = {
    "qwen3-0.6b": dict(
        hidden_size=1024,
        intermediate_size=3072,
        num_hidden_layers=28,
        num_attention_heads=16,
        num_key_value_heads=8,
        head_dim=128,
        vocab_size=151936,
        tie_word_embeddings=True,
    ),
    "qwen3-8b": dict(
        hidden_size=4096,
        intermediate_size=12288,
        num_hidden_layers=36,
        num_attention_heads=32,
        num_key_value_heads=8,
        head_dim=128,
        vocab_size=151936,
        tie_word_embeddings=False,
    ),
}


NORM_GAIN = 6.0


def qwen3_config(shape: dict, eos: int, max_len: int = 4096, eps: float = 1e-6) -> Qwen3Config:
    config = Qwen3Config(
        **shape, max_position_embeddings=max_len, eos_token_id=eos, bos_token_id=eos,
        pad_token_id=eos, rms_norm_eps=eps,
    )  # fmt: skip
    config.architectures = ["Qwen3ForCausalLM"]
    return config


def bundled_tokenizer() -> PreTrainedTokenizerBase:
    return AutoTokenizer.from_pretrained(resolve_model("specserve/demo-target"))


def random_qwen3(config: Qwen3Config, seed: int, dtype: torch.dtype) -> PreTrainedModel:
    """A Qwen3 model with weights drawn as transformers draws them, on the GPU if any."""
    torch.manual_seed(seed)
    with torch.device("cuda" if torch.cuda.is_available() else "cpu"):
        return AutoModelForCausalLM.from_config(config, dtype=dtype).eval()


def save(model: PreTrainedModel, folder: Path, tokenizer: PreTrainedTokenizerBase) -> Path:
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def save_random_qwen3(folder: Path, shape: str, seed: int = 0, max_len: int = 4096) -> Path:
    tokenizer = bundled_tokenizer()
    config = qwen3_config(SHAPES[shape], tokenizer.eos_token_id, max_len)
    save(random_qwen3(config, seed, torch.bfloat16), folder, tokenizer)
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    return folder


def speculative_pair(
    shape: dict,
    draft_layers: int,
    eos: int,
    seed: int = 0,
    dtype: torch.dtype = torch.bfloat16,
    draft_shape: dict | None = None,
) -> tuple[PreTrainedModel, PreTrainedModel]:
    """(target, draft) as the module docstring says, the target at scale 1
    (``set_scale`` moves it). The draft is random, ``draft_layers`` layers of
    ``draft_shape`` (the target's own width by default), and is written into
    the target's first layers by ``embed_draft``."""
    if not 0 < draft_layers < shape["num_hidden_layers"]:
        raise ValueError(f"draft_layers must be in 1..{shape['num_hidden_layers'] - 1}")
    narrow = {**(draft_shape or shape), "num_hidden_layers": draft_layers}
    narrow["tie_word_embeddings"] = False  # its head is a slice of the target's
    draft_config = qwen3_config(narrow, eos)
    # The target's norms average over more dimensions; a smaller epsilon keeps
    # them exactly the draft's on the dimensions the draft uses (embed_draft).
    eps = draft_config.rms_norm_eps * narrow["hidden_size"] / shape["hidden_size"]
    target = random_qwen3(qwen3_config(shape, eos, eps=eps), seed, dtype)
    draft = random_qwen3(draft_config, seed + 1, dtype)
    with torch.no_grad():
        draft.model.norm.weight.mul_(NORM_GAIN)
        embed_draft(target, draft)
    return target, draft


def embed_draft(target: PreTrainedModel, draft: PreTrainedModel) -> None:
    """Make ``target``'s first layers compute what ``draft`` computes.

    The target's embedding is the draft's, zero past the draft's width h, and
    its first layers read and write only those h dimensions of the residual
    stream: each weight is the draft's, zero-padded (draft query heads go to
    target heads of the same key/value group). An RMSNorm over the target's
    width H of a vector that is zero past h is sqrt(H/h) times the norm over
    h, so the target's norm weights are the draft's times sqrt(h/H). The LM
    head's first h columns are the draft's head; the rest stay random, where
    the target's later layers write.
    """
    t, d = target.config, draft.config
    h, width, hd = d.hidden_size, t.hidden_size, t.head_dim
    group_t = t.num_attention_heads // t.num_key_value_heads
    group_d = d.num_attention_heads // d.num_key_value_heads
    fits = (
        h <= width
        and d.intermediate_size <= t.intermediate_size
        and d.num_key_value_heads <= t.num_key_value_heads
        and group_d <= group_t
        and d.head_dim == hd
        and d.vocab_size == t.vocab_size
    )
    if not fits:
        raise ValueError("the draft shape must be no wider than the target's in every dimension")
    heads = [(j // group_d) * group_t + j % group_d for j in range(d.num_attention_heads)]
    gain = (h / width) ** 0.5
    inner = d.intermediate_size
    tm, dm = target.model, draft.model
    tm.embed_tokens.weight.zero_()[:, :h] = dm.embed_tokens.weight
    target.lm_head.weight[:, :h] = draft.lm_head.weight
    tm.norm.weight.fill_(NORM_GAIN * gain)[:h] = dm.norm.weight * gain
    for tl, dl in zip(tm.layers[: len(dm.layers)], dm.layers, strict=True):
        ta, da = tl.self_attn, dl.self_attn
        for tn, dn in ((tl.input_layernorm, dl.input_layernorm),
                       (tl.post_attention_layernorm, dl.post_attention_layernorm)):  # fmt: skip
            tn.weight.zero_()[:h] = dn.weight * gain
        ta.q_proj.weight.zero_().view(-1, hd, width)[heads, :, :h] = da.q_proj.weight.view(
            -1, hd, h
        )
        for tp, dp in ((ta.k_proj, da.k_proj), (ta.v_proj, da.v_proj)):
            tp.weight.zero_().view(-1, hd, width)[: d.num_key_value_heads, :, :h] = dp.weight.view(
                -1, hd, h
            )
        ta.o_proj.weight.zero_().view(width, -1, hd)[:h, heads] = da.o_proj.weight.view(h, -1, hd)
        ta.q_norm.weight.copy_(da.q_norm.weight)
        ta.k_norm.weight.copy_(da.k_norm.weight)
        tl.mlp.gate_proj.weight.zero_()[:inner, :h] = dl.mlp.gate_proj.weight
        tl.mlp.up_proj.weight.zero_()[:inner, :h] = dl.mlp.up_proj.weight
        tl.mlp.down_proj.weight.zero_()[:h, :inner] = dl.mlp.down_proj.weight


def set_scale(target: PreTrainedModel, draft_layers: int, scale: float, base: dict) -> None:
    """Scale the output projections of ``target``'s layers from ``draft_layers``
    on to ``scale`` times ``base`` (their weights at scale 1, by name; filled on
    the first call)."""
    with torch.no_grad():
        for i, layer in enumerate(target.model.layers):
            if i < draft_layers:
                continue
            for name, weight in (
                (f"{i}.o", layer.self_attn.o_proj.weight),
                (f"{i}.down", layer.mlp.down_proj.weight),
            ):
                original = base.setdefault(name, weight.detach().clone())
                weight.copy_(original * scale)


def agreement(target: PreTrainedModel, draft: PreTrainedModel, ids: torch.Tensor) -> float:
    """The share of positions of ``ids`` [batch, length] where both pick the same token greedily."""
    with torch.no_grad():
        return (target(ids).logits.argmax(-1) == draft(ids).logits.argmax(-1)).float().mean().item()


def calibrate(
    target: PreTrainedModel, draft: PreTrainedModel, layers: int, wanted: float, base: dict
) -> float:
    """The scale whose greedy agreement on random text is ``wanted`` (bisection)."""
    ids = torch.randint(1000, 100000, (4, 256), device=target.device)
    low, high = 0.0, 0.5
    for _ in range(12):
        middle = (low + high) / 2
        set_scale(target, layers, middle, base)
        low, high = (middle, high) if agreement(target, draft, ids) > wanted else (low, middle)
    scale = (low + high) / 2
    set_scale(target, layers, scale, base)
    return scale


def save_pair(
    out: Path,
    scale: float,
    draft_layers: int = 4,
    shape: dict = SHAPES["qwen3-8b"],
    draft_shape: dict = SHAPES["qwen3-0.6b"],
) -> tuple[Path, Path]:
    """Write the realistic-shape pair (by default a Qwen3-8B-shape target and
    a draft at Qwen3-0.6B's width) at ``scale`` as ``pair-target`` and
    ``pair-draft``."""
    tokenizer = bundled_tokenizer()
    eos = tokenizer.eos_token_id
    target, draft = speculative_pair(shape, draft_layers, eos, draft_shape=draft_shape)
    set_scale(target, draft_layers, scale, {})
    return save(target, out / "pair-target", tokenizer), save(draft, out / "pair-draft", tokenizer)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--shapes", nargs="+", default=list(SHAPES), choices=list(SHAPES))
    parser.add_argument(
        "--pair-scale", type=float,
        help="write the realistic-shape pair at this scale instead (0.00226: acceptance ~0.8)",
    )  # fmt: skip
    args = parser.parse_args()
    if args.pair_scale is not None:
        print(*save_pair(args.out, args.pair_scale), flush=True)
        return
    for seed, shape in enumerate(args.shapes):
        print(save_random_qwen3(args.out / shape, shape, seed), flush=True)


if __name__ == "__main__":
    main()

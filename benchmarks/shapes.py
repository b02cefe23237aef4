"""Random checkpoints in the shapes of the published Qwen3 configs, for
measurements at realistic sizes where no hub is reachable.

    PYTHONPATH=. python benchmarks/shapes.py --out /tmp/checkpoints

writes ``qwen3-8b`` and ``qwen3-0.6b`` folders there: Hugging Face checkpoints
(config.json, safetensors) with random bf16 weights drawn the way transformers
initialises them (normal, std 0.02), built on the GPU when there is one, and
the bundled pair's tokenizer (so the two share one tokenizer, and every token
id is inside the 151936-entry vocabulary).

Random weights give a draft no acceptance. ``speculative_pair`` builds a pair
whose acceptance is tunable at a real target's cost: a random target whose
layers from ``draft_layers`` on have their output projections (o_proj,
down_proj) scaled by ``scale``, and whose final norm is scaled by
``NORM_GAIN`` so its logits are peaked; the draft is the target's first
``draft_layers`` layers with the same embedding, final norm and LM head. At
scale 0 the later layers add nothing to the residual stream and the draft
computes the target's logits exactly; as the scale grows the later layers
move the target away from its draft. Scaling changes no shape, so the target
costs what the random one does.
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


def qwen3_config(shape: dict, eos: int, max_len: int = 4096) -> Qwen3Config:
    config = Qwen3Config(
        **shape, max_position_embeddings=max_len, eos_token_id=eos, bos_token_id=eos,
        pad_token_id=eos,
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
    shape: dict, draft_layers: int, eos: int, seed: int = 0, dtype: torch.dtype = torch.bfloat16
) -> tuple[PreTrainedModel, PreTrainedModel]:
    """(target, draft) as the module docstring says, the target at scale 1
    (``set_scale`` moves it); the draft shares the target's tensors."""
    if not 0 < draft_layers < shape["num_hidden_layers"]:
        raise ValueError(f"draft_layers must be in 1..{shape['num_hidden_layers'] - 1}")
    target = random_qwen3(qwen3_config(shape, eos), seed, dtype)
    with torch.no_grad():
        target.model.norm.weight.mul_(NORM_GAIN)
    draft_shape = {**shape, "num_hidden_layers": draft_layers}
    draft = random_qwen3(qwen3_config(draft_shape, eos), seed, dtype)
    own = dict(target.named_parameters())
    draft.load_state_dict({name: own[name] for name, _ in draft.named_parameters()}, assign=True)
    if shape.get("tie_word_embeddings"):
        draft.tie_weights()
    return target, draft.eval()


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--shapes", nargs="+", default=list(SHAPES), choices=list(SHAPES))
    args = parser.parse_args()
    for seed, shape in enumerate(args.shapes):
        print(save_random_qwen3(args.out / shape, shape, seed), flush=True)


if __name__ == "__main__":
    main()

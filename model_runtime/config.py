"""What the runtime needs to know about a checkpoint, read from its config.json."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import torch
from transformers import AutoConfig, PretrainedConfig

from model_runtime.errors import CheckpointError, UnsupportedModelError
from model_runtime.specs import DTYPE_NAMES

SUPPORTED_ARCHITECTURES = (
    "LlamaForCausalLM",
    "MistralForCausalLM",
    "Qwen2ForCausalLM",
    "Qwen3ForCausalLM",
)

DTYPES = {
    "float32": torch.float32,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
}
assert tuple(DTYPES) == DTYPE_NAMES


def resolve_dtype(
    name: str | torch.dtype, hf_config: PretrainedConfig | None = None
) -> torch.dtype:
    """A dtype from its name; ``"auto"`` takes the checkpoint's own dtype."""
    if isinstance(name, torch.dtype):
        if name not in DTYPES.values():
            raise ValueError(f"dtype {name} is not supported; use one of {', '.join(DTYPES)}")
        return name
    if name == "auto":
        stored = getattr(hf_config, "dtype", None) or getattr(hf_config, "torch_dtype", None)
        if isinstance(stored, torch.dtype) and stored in DTYPES.values():
            return stored
        if isinstance(stored, str) and stored in DTYPES:
            return DTYPES[stored]
        return torch.float32
    if name not in DTYPES:
        raise ValueError(f"dtype {name!r} is not supported; use auto or one of {', '.join(DTYPES)}")
    return DTYPES[name]


def _read_config_json(folder: Path) -> dict:
    path = folder / "config.json"
    if not path.is_file():
        raise CheckpointError(
            f"{folder} has no config.json; is it a Hugging Face checkpoint folder?"
        )
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise CheckpointError(f"{path} is not valid JSON: {e}") from e
    if not isinstance(data, dict):
        raise CheckpointError(f"{path} must hold a JSON object")
    return data


def _sliding_windows(hf_config: PretrainedConfig, num_layers: int) -> tuple[int | None, ...]:
    """The attention window of every layer; None means full causal attention."""
    window = getattr(hf_config, "sliding_window", None)
    layer_types = getattr(hf_config, "layer_types", None)
    if window is None:
        return (None,) * num_layers
    if layer_types is None:
        return (int(window),) * num_layers
    return tuple(int(window) if t == "sliding_attention" else None for t in layer_types)


@dataclass(frozen=True)
class ModelConfig:
    """The shape of a Llama-family decoder, as its checkpoint describes it."""

    architecture: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    rms_norm_eps: float
    max_position_embeddings: int
    tie_word_embeddings: bool
    attention_bias: bool
    mlp_bias: bool
    sliding_windows: tuple[int | None, ...]
    hf_config: PretrainedConfig = field(repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.architecture not in SUPPORTED_ARCHITECTURES:
            raise UnsupportedModelError(
                f"architecture {self.architecture!r} is not supported; "
                f"supported: {', '.join(SUPPORTED_ARCHITECTURES)}"
            )
        if self.num_attention_heads % self.num_key_value_heads:
            raise CheckpointError(
                f"num_attention_heads ({self.num_attention_heads}) must be a multiple of "
                f"num_key_value_heads ({self.num_key_value_heads})"
            )
        if len(self.sliding_windows) != self.num_hidden_layers:
            raise CheckpointError(
                f"layer_types lists {len(self.sliding_windows)} layers, "
                f"num_hidden_layers is {self.num_hidden_layers}"
            )

    def check_tensor_parallel(self, size: int) -> None:
        """ValueError unless ``size`` ranks can split the heads and the MLP evenly."""
        for name in ("num_attention_heads", "num_key_value_heads", "intermediate_size"):
            total = getattr(self, name)
            if total % size:
                raise ValueError(
                    f"tensor_parallel_size {size} does not divide {name} ({total}) of "
                    f"{self.architecture}; choose a tensor_parallel_size that divides it"
                )

    @classmethod
    def from_pretrained(cls, folder: str | Path) -> ModelConfig:
        folder = Path(folder)
        raw = _read_config_json(folder)
        architectures = raw.get("architectures") or []
        if len(architectures) != 1:
            raise UnsupportedModelError(
                f"{folder}/config.json names architectures {architectures}; expected exactly one "
                f"of {', '.join(SUPPORTED_ARCHITECTURES)}"
            )
        if architectures[0] not in SUPPORTED_ARCHITECTURES:
            raise UnsupportedModelError(
                f"architecture {architectures[0]!r} in {folder}/config.json is not supported; "
                f"supported: {', '.join(SUPPORTED_ARCHITECTURES)}"
            )
        try:
            hf = AutoConfig.from_pretrained(folder)
        except (ValueError, KeyError, TypeError) as e:
            raise CheckpointError(f"transformers cannot read {folder}/config.json: {e}") from e
        return cls.from_hf(hf, architectures[0])

    @classmethod
    def from_hf(cls, hf: PretrainedConfig, architecture: str) -> ModelConfig:
        act = getattr(hf, "hidden_act", "silu")
        if act != "silu":
            raise UnsupportedModelError(f"hidden_act {act!r} is not supported; only silu is")
        num_layers = hf.num_hidden_layers
        num_heads = hf.num_attention_heads
        return cls(
            architecture=architecture,
            vocab_size=hf.vocab_size,
            hidden_size=hf.hidden_size,
            intermediate_size=hf.intermediate_size,
            num_hidden_layers=num_layers,
            num_attention_heads=num_heads,
            num_key_value_heads=getattr(hf, "num_key_value_heads", None) or num_heads,
            head_dim=getattr(hf, "head_dim", None) or hf.hidden_size // num_heads,
            rms_norm_eps=hf.rms_norm_eps,
            max_position_embeddings=hf.max_position_embeddings,
            tie_word_embeddings=bool(getattr(hf, "tie_word_embeddings", False)),
            attention_bias=bool(getattr(hf, "attention_bias", False)),
            mlp_bias=bool(getattr(hf, "mlp_bias", False)),
            sliding_windows=_sliding_windows(hf, num_layers),
            hf_config=hf,
        )

"""Shared fixtures: tiny random checkpoints of every supported architecture,
saved by transformers, and transformers' own logits to compare against."""

from __future__ import annotations

import os

os.environ["HF_HUB_OFFLINE"] = "1"  # no hub is reachable; never try it
# Triton kernels run on the CPU through the interpreter (set before they are defined).
os.environ.setdefault("TRITON_INTERPRET", "1")

import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from transformers import AutoModelForCausalLM

from model_runtime.build import allowed_length, build_runner
from model_runtime.random_checkpoint import save_random_checkpoint
from model_runtime.runner import ModelRunner
from model_runtime.specs import RunnerSpec
from specserve.launch import service

# Each architecture with the settings that exercise its own code paths.
ARCHITECTURES = {
    # biases on q/k/v/o and the MLP; llama3 rope scaling
    "LlamaForCausalLM": {
        "attention_bias": True,
        "mlp_bias": True,
        "rope_parameters": {
            "rope_type": "llama3",
            "rope_theta": 10000.0,
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 64,
        },
    },
    # a sliding window shorter than the test sequences
    "MistralForCausalLM": {"sliding_window": 7},
    # q/k/v biases, no o bias
    "Qwen2ForCausalLM": {},
    # q/k norms, tied embeddings
    "Qwen3ForCausalLM": {"tie_word_embeddings": True},
}


@pytest.fixture(scope="session")
def checkpoints(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("checkpoints")
    return {
        arch: save_random_checkpoint(root / arch, arch, **overrides)
        for arch, overrides in ARCHITECTURES.items()
    }


@pytest.fixture(scope="session")
def grpc_workers() -> Iterator[tuple[str, str]]:
    """The bundled target and draft as worker processes on loopback: their addresses."""
    args = ("--dtype", "float32", "--max-model-len", "512", "--num-kv-blocks", "256")
    with (
        service("target-worker", "--model", "specserve/demo-target", *args) as (target, _),
        service("draft-worker", "--model", "specserve/demo-draft", *args) as (draft, _),
    ):
        yield target, draft


@pytest.fixture(scope="session")
def qwen3_checkpoint(checkpoints: dict[str, Path]) -> Path:
    return checkpoints["Qwen3ForCausalLM"]


def hf_logits(folder: Path, token_ids: list[int]) -> torch.Tensor:
    """transformers' float32 logits [len(token_ids), vocab] for one sequence."""
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    with torch.no_grad():
        return model(torch.tensor([token_ids])).logits[0]


def random_tokens(n: int, seed: int, vocab_size: int = 512) -> list[int]:
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(1, vocab_size, (n,), generator=generator).tolist()


def runner_of(folder: Path, num_blocks: int, **options: Any) -> ModelRunner:
    """A runner of the checkpoint in ``folder`` with a cache of ``num_blocks``
    blocks, and (unless given) a max_model_len that cache holds."""
    if "max_model_len" not in options:
        holds = num_blocks * options.get("block_size", 16)
        options["max_model_len"] = min(holds, allowed_length(str(folder)))
    return build_runner(RunnerSpec(str(folder), num_kv_blocks=num_blocks, **options))


# `specserve serve` as the seed document starts it (the bundled pair, k = 5).
SPEC = '{"model": "specserve/demo-draft", "num_speculative_tokens": 5, "method": "draft_model"}'
SEED_FLAGS = (
    "--host",
    "127.0.0.1",
    "--seed",
    "42",
    "-tp",
    "1",
    "--max_model_len",
    "2048",
    "--gpu_memory_utilization",
    "0.8",
    "--speculative_config",
    SPEC,
)


@pytest.fixture(scope="session")
def served() -> Iterator[tuple[str, subprocess.Popen[str]]]:
    # Statistics logged after every step, so that a test can find them at once.
    flags = ("--dtype", "float32", "--log-stats-interval-s", "0")
    with service("serve", "specserve/demo-target", *SEED_FLAGS, *flags) as (address, process):
        yield f"http://{address}", process
        tail = "".join(process.output_tail)  # type: ignore[attr-defined]
        assert process.poll() is None, f"the server exited early:\n{tail}"


@pytest.fixture(scope="session")
def server(served: tuple[str, subprocess.Popen[str]]) -> str:
    return served[0]

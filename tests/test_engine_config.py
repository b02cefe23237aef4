"""speculative_config and the engine's arguments: what is accepted, and the
error for everything that is not."""

from __future__ import annotations

from pathlib import Path

import pytest

from model_runtime.random_checkpoint import save_random_checkpoint
from model_runtime.specs import RunnerSpec
from router.config import EngineConfig, SpeculativeConfig
from router.params import SamplingParams
from specserve import LLM


def test_the_seeds_config_is_accepted() -> None:
    config = SpeculativeConfig.from_dict(
        {"model": "Qwen/Qwen3-0.6B", "num_speculative_tokens": 5, "method": "draft_model"}
    )
    assert config.model == "Qwen/Qwen3-0.6B" and config.num_speculative_tokens == 5


def test_method_defaults_to_draft_model() -> None:
    config = SpeculativeConfig.from_dict({"model": "m", "num_speculative_tokens": 2})
    assert config.method == "draft_model"


@pytest.mark.parametrize(
    ("config", "message"),
    [
        (
            {"model": "m", "num_speculative_tokens": 2, "speculative_model": "x"},
            "unknown speculative_config keys: speculative_model",
        ),
        (
            {"model": "m", "num_speculative_tokens": 2, "method": "eagle"},
            "method 'eagle' is not supported",
        ),
        (
            {"model": "m", "num_speculative_tokens": 2, "tensor_parallel_size": 2},
            "use draft_tensor_parallel_size",
        ),
        (
            {"model": "m", "num_speculative_tokens": 0},
            "num_speculative_tokens must be an integer >= 1",
        ),
        ({"num_speculative_tokens": 2}, 'needs "model"'),
        ({"model": "m"}, "needs num_speculative_tokens"),
        ("not a dict", "must be a JSON object"),
        (
            {"model": "m", "num_speculative_tokens": 2, "adaptive_k": "no"},
            "adaptive_k must be true or false",
        ),
    ],
)
def test_a_malformed_config_names_what_is_wrong(config: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        SpeculativeConfig.from_dict(config)  # type: ignore[arg-type]


def test_a_draft_with_another_tokenizer_is_refused(tmp_path: Path) -> None:
    other = save_random_checkpoint(tmp_path / "other", "Qwen3ForCausalLM", vocab_size=4096)
    with pytest.raises(ValueError, match="draft model's tokenizer differs from the target's"):
        LLM(
            "specserve/demo-target",
            speculative_config={"model": str(other), "num_speculative_tokens": 2},
        )


def test_unknown_llm_arguments_are_refused() -> None:
    with pytest.raises(TypeError, match="unknown arguments: speculative_model"):
        LLM("specserve/demo-target", speculative_model="specserve/demo-draft")


def test_a_too_long_max_model_len_is_refused() -> None:
    with pytest.raises(ValueError, match="max_model_len 100000 exceeds"):
        LLM("specserve/demo-target", max_model_len=100000)


def test_a_memory_budget_smaller_than_the_weights_is_refused() -> None:
    with pytest.raises(ValueError, match="leaves room for 0 KV blocks"):
        LLM("specserve/demo-target", cpu_memory_bytes=1 << 20, device="cpu")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"max_tokens": 0}, "max_tokens must be >= 1"),
        ({"n": 0}, "n must be in"),
        ({"n": 1000}, "n must be in"),
        ({"temperature": -1.0}, "temperature must be a finite number >= 0"),
        ({"temperature": float("inf")}, "temperature must be a finite number >= 0"),
        ({"stop": ["s"] * 65}, "at most 64 stop strings"),
        ({"top_p": 0.0}, "top_p must be in"),
        ({"top_k": -5}, "top_k must be"),
        ({"min_p": 2.0}, "min_p must be in"),
        ({"stop": [""]}, "stop strings must not be empty"),
    ],
)
def test_bad_sampling_params_name_the_field(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        SamplingParams(**kwargs)


def test_engine_config_validates_its_fields() -> None:
    with pytest.raises(ValueError, match="gpu_memory_utilization must be in"):
        EngineConfig.of("m", gpu_memory_utilization=1.5)
    with pytest.raises(ValueError, match="tensor_parallel_size must be >= 1"):
        EngineConfig.of("m", tensor_parallel_size=0)
    with pytest.raises(ValueError, match="distributed_executor_backend must be mp or ray"):
        EngineConfig.of("m", distributed_executor_backend="threads")
    with pytest.raises(ValueError, match="ray_address needs the ray executor backend"):
        EngineConfig.of("m", distributed_executor_backend="mp", ray_address="auto")


def test_enforce_eager_reaches_the_runner_and_every_worker_command() -> None:
    from specserve.commands.disaggregated import worker_flags

    config = EngineConfig.of("m", enforce_eager=True)
    assert config.runner.enforce_eager
    assert "--enforce-eager" in worker_flags(config, "m", None, None, 1, 0.5)
    assert "--enforce-eager" not in worker_flags(EngineConfig.of("m"), "m", None, None, 1, 0.5)


def test_the_target_captures_a_verify_of_every_k_and_the_draft_its_catch_up() -> None:
    from specserve.commands.disaggregated import worker_flags
    from specserve.local_workers import verify_capture_len

    spec = SpeculativeConfig.from_dict({"model": "d", "num_speculative_tokens": 5})
    assert verify_capture_len(EngineConfig.of("m", spec)) == 6
    assert verify_capture_len(EngineConfig.of("m")) == 1
    flags = worker_flags(EngineConfig.of("m"), "m", None, None, 1, 0.5, 6)
    assert flags[flags.index("--capture-query-len") + 1] == "6"


def test_a_capture_length_past_the_graphs_limit_is_refused() -> None:
    with pytest.raises(ValueError, match=r"capture_query_len must be in 1\.\.16, got 17"):
        RunnerSpec("m", capture_query_len=17)


def test_a_prompt_longer_than_the_context_is_refused() -> None:
    llm = LLM("specserve/demo-target", max_model_len=16, dtype="float32")
    with pytest.raises(ValueError, match="the maximum model length is 16"):
        llm.generate(["def f():", "x " * 40], use_tqdm=False)
    assert not llm.engine.has_unfinished()  # the good prompt was not left queued
    # and the engine keeps serving
    assert llm.generate("def f():", SamplingParams(max_tokens=4), use_tqdm=False)[0].outputs

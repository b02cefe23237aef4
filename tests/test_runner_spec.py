"""One spec of a runner, one function that builds it: what a RunnerSpec accepts,
what the builder checks, and that the in-process engine honours max_model_len
(the worker services, the tensor-parallel ranks and `serve --disaggregated`
are held to the same in test_grpc_workers, test_tensor_parallel and
test_disaggregated_serve)."""

from __future__ import annotations

import json
import shutil
import urllib.request
from pathlib import Path

import pytest

from model_runtime.build import build_runner, build_runners, resolve_device
from model_runtime.resolve import resolve_model
from model_runtime.specs import RunnerSpec
from router.config import EngineConfig, SpeculativeConfig
from specserve import LLM, SamplingParams
from specserve.arguments import config_from_args
from specserve.cli import build_parser
from specserve.launch import service
from specserve.local_workers import build_local_workers

SPEC = {"model": "specserve/demo-draft", "num_speculative_tokens": 3}


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"gpu_memory_utilization": 0.0}, "gpu_memory_utilization must be in"),
        ({"gpu_memory_utilization": 1.5}, "gpu_memory_utilization must be in"),
        ({"max_model_len": 1}, "max_model_len must be >= 2"),
        ({"block_size": 0}, "block_size must be >= 1"),
        ({"num_kv_blocks": 0}, "num_kv_blocks must be >= 1"),
        ({"max_num_seqs": 0}, "max_num_seqs must be >= 1"),
        ({"dtype": "int8"}, "dtype 'int8' is not supported"),
        ({"model": ""}, "model must name"),
    ],
)
def test_a_bad_runner_spec_names_its_field(fields: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        RunnerSpec(**{"model": "m", **fields})


def test_auto_is_the_cpu_without_cuda_and_a_bad_device_is_named() -> None:
    assert resolve_device("auto").type == "cpu"  # the test machines have no GPU
    with pytest.raises(ValueError, match="device 'gpu0' is not a torch device"):
        resolve_device("gpu0")


def test_a_runner_holds_its_specs_max_model_len(qwen3_checkpoint: Path) -> None:
    # The random checkpoint allows 512 positions.
    spec = RunnerSpec(str(qwen3_checkpoint), dtype="float32", max_model_len=64, num_kv_blocks=8)
    assert build_runner(spec).max_positions == 64
    unset = RunnerSpec(str(qwen3_checkpoint), dtype="float32", num_kv_blocks=32)
    assert build_runner(unset).max_positions == 512


def test_a_length_the_model_does_not_allow_is_refused_before_loading(tmp_path: Path) -> None:
    # The draft's checkpoint is missing its weights: the length is refused first.
    (tmp_path / "config.json").write_text(
        (Path(__file__).parent.parent / "model_runtime/bundled/demo-draft/config.json").read_text()
    )
    spec = RunnerSpec(str(tmp_path), max_model_len=4096)
    with pytest.raises(ValueError, match=r"max_model_len 4096 exceeds what .* allows \(2048"):
        build_runner(spec)


def test_runners_on_one_device_share_a_budget() -> None:
    target = RunnerSpec("specserve/demo-target", dtype="float32", max_model_len=128)
    other_budget = RunnerSpec("specserve/demo-draft", dtype="float32", block_size=8)
    with pytest.raises(ValueError, match="need the same device, block size and memory budget"):
        build_runners([target, other_budget])
    draft = RunnerSpec("specserve/demo-draft", dtype="float32", max_model_len=128)
    runners = build_runners([target, draft])
    assert [r.kv_cache.num_blocks for r in runners] == [runners[0].kv_cache.num_blocks] * 2


def test_the_in_process_engine_honours_max_model_len() -> None:
    llm = LLM("specserve/demo-target", speculative_config=SPEC, dtype="float32", max_model_len=96)
    workers = llm.engine.workers
    assert llm.engine.max_model_len == 96
    assert [w.describe().max_model_len for w in (*workers.targets, *workers.drafts)] == [96, 96]


def test_the_speculative_configs_max_model_len_bounds_the_engine_too() -> None:
    spec = SpeculativeConfig("specserve/demo-draft", 3, max_model_len=80)
    config = EngineConfig.of("specserve/demo-target", spec, dtype="float32", max_model_len=96)
    assert build_local_workers(config).max_model_len == 80


@pytest.fixture(scope="module")
def short_draft(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The bundled draft, declared to hold only 256 positions."""
    folder = tmp_path_factory.mktemp("short-draft")
    shutil.copytree(resolve_model("specserve/demo-draft"), folder, dirs_exist_ok=True)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "max_position_embeddings": 256}))
    return folder


def test_a_shorter_draft_keeps_its_length_and_the_output_stays_the_targets(
    short_draft: Path,
) -> None:
    spec = {"model": str(short_draft), "num_speculative_tokens": 3}
    llm = LLM("specserve/demo-target", speculative_config=spec, dtype="float32", max_model_len=512)
    assert llm.engine.max_model_len == 512
    assert llm.engine.workers.drafts[0].describe().max_model_len == 256
    prompt = {"prompt_token_ids": list(range(10, 250))}  # drafts stop past 256 tokens
    params = SamplingParams(temperature=0, max_tokens=40, ignore_eos=True)
    plain = LLM("specserve/demo-target", dtype="float32", max_model_len=512)
    expected = plain.generate(prompt, params, use_tqdm=False)[0].outputs[0].token_ids
    assert llm.generate(prompt, params, use_tqdm=False)[0].outputs[0].token_ids == expected


def test_serve_disaggregated_gives_a_shorter_draft_its_own_length(short_draft: Path) -> None:
    spec = json.dumps({"model": str(short_draft), "num_speculative_tokens": 3})
    flags = ("--host", "127.0.0.1", "--dtype", "float32", "--max_model_len", "512")
    with service("serve", *flags, "--speculative_config", spec, "--disaggregated") as (address, _):
        (card,) = json.load(urllib.request.urlopen(f"http://{address}/v1/models"))["data"]
        assert card["max_model_len"] == 512


def test_engine_arguments_go_to_the_config_that_holds_them() -> None:
    config = EngineConfig.of("m", max_model_len=64, tensor_parallel_size=2, overlap=True)
    assert config.runner.max_model_len == 64
    assert config.parallel.tensor_parallel_size == 2
    assert config.overlap
    assert EngineConfig.of("m", num_gpu_blocks_override=7).runner.num_kv_blocks == 7
    with pytest.raises(TypeError, match="unknown engine argument: speculative_model"):
        EngineConfig.of("m", speculative_model="d")


@pytest.mark.parametrize("command", ["draft-worker", "target-worker"])
def test_a_worker_command_takes_the_runner_spec_as_flags(command: str) -> None:
    args = build_parser().parse_args(
        [
            command,
            "--model",
            "m",
            "--revision",
            "v2",
            "--max_model_len",
            "64",
            "--dtype",
            "bfloat16",
        ]
    )
    expected = RunnerSpec("m", revision="v2", max_model_len=64, dtype="bfloat16")
    assert config_from_args(RunnerSpec, args) == expected

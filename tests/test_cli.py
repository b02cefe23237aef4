"""The ``specserve`` command, run as a user runs it: a real process."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

PROMPT = "def fibonacci(n):"


def specserve(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    full_env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONIOENCODING": "utf-8", **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "specserve", *args],
        capture_output=True,
        text=True,
        timeout=300,
        env=full_env,
    )


def transformers_greedy(folder: Path, prompt: str, max_tokens: int) -> str:
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    ids = torch.tensor([tokenizer.encode(prompt)])
    out = model.generate(ids, max_new_tokens=max_tokens, do_sample=False)
    return tokenizer.decode(out[0, ids.shape[1] :], skip_special_tokens=True)


def test_generate_prints_the_greedy_continuation_of_transformers(qwen3_checkpoint: Path) -> None:
    result = specserve(
        "generate",
        "--model",
        str(qwen3_checkpoint),
        PROMPT,
        "--max-tokens",
        "24",
        "--dtype",
        "float32",
        "--max_model_len",
        "128",
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout[:-1] == transformers_greedy(qwen3_checkpoint, PROMPT, 24)


def test_generate_finds_a_hub_id_in_the_local_cache(qwen3_checkpoint: Path, tmp_path: Path) -> None:
    # The layout huggingface_hub keeps: refs/main names a snapshot folder.
    repo = tmp_path / "hub" / "models--acme--tiny-qwen3"
    shutil.copytree(qwen3_checkpoint, repo / "snapshots" / "0123abcd")
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("0123abcd")
    result = specserve(
        "generate",
        "--model",
        "acme/tiny-qwen3",
        PROMPT,
        "--max-tokens",
        "4",
        env={"HF_HUB_CACHE": str(tmp_path / "hub")},
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout[:-1] == transformers_greedy(qwen3_checkpoint, PROMPT, 4)


def test_generate_names_a_model_it_cannot_find(tmp_path: Path) -> None:
    result = specserve(
        "generate", "--model", "acme/no-such-model", PROMPT, env={"HF_HUB_CACHE": str(tmp_path)}
    )
    assert result.returncode == 2
    assert "model 'acme/no-such-model' not found" in result.stderr
    assert "not in the local Hugging Face cache" in result.stderr


def test_generate_refuses_bad_arguments_with_a_message(qwen3_checkpoint: Path) -> None:
    result = specserve("generate", "--model", str(qwen3_checkpoint), PROMPT, "--max-tokens", "0")
    assert result.returncode == 2
    assert "max_tokens must be >= 1, got 0" in result.stderr


def test_serve_refuses_the_deprecated_flags_and_shows_the_replacement() -> None:
    result = specserve(
        "serve",
        "specserve/demo-target",
        "--speculative_model",
        "specserve/demo-draft",
        "--num_speculative_tokens",
        "4",
    )
    assert result.returncode == 2
    assert (
        '--speculative_config \'{"model": "specserve/demo-draft", "num_speculative_tokens": 4'
        in result.stderr
    )


def test_serve_refuses_to_protect_metrics_without_an_api_key() -> None:
    result = specserve("serve", "--protect-metrics", env={"SPECSERVE_API_KEY": ""})
    assert result.returncode == 2
    assert "--protect-metrics needs an API key" in result.stderr


def test_generate_with_speculation_prints_the_same_greedy_text() -> None:
    spec = '{"model": "specserve/demo-draft", "num_speculative_tokens": 4}'
    plain = specserve("generate", PROMPT, "--max-tokens", "24", "--dtype", "float32")
    fast = specserve(
        "generate", PROMPT, "--max-tokens", "24", "--dtype", "float32", "--speculative_config", spec
    )
    assert plain.returncode == 0 and fast.returncode == 0, fast.stderr
    assert fast.stdout == plain.stdout
    assert "acceptance rate" in fast.stderr


def test_generate_names_a_malformed_speculative_config() -> None:
    result = specserve("generate", PROMPT, "--speculative_config", '{"model": ')
    assert result.returncode == 2
    assert "--speculative_config is not valid JSON" in result.stderr


def test_a_revision_selects_that_snapshot_of_the_cache(
    qwen3_checkpoint: Path, tmp_path: Path
) -> None:
    repo = tmp_path / "models--acme--tiny"
    for commit in ("1111aaaa", "2222bbbb"):
        shutil.copytree(qwen3_checkpoint, repo / "snapshots" / commit)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("2222bbbb")
    (repo / "refs" / "v1").write_text("1111aaaa")
    code = (
        "from model_runtime.resolve import resolve_model; "
        "print(resolve_model('acme/tiny').name, resolve_model('acme/tiny', 'v1').name)"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={**os.environ, "HF_HUB_OFFLINE": "1", "HF_HUB_CACHE": str(tmp_path)},
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["2222bbbb", "1111aaaa"]


def test_the_worker_and_router_commands_load_no_http_stack() -> None:
    """Workers and the router share the CLI with ``serve`` but not its HTTP
    server: they run where FastAPI and uvicorn are not installed."""
    code = (
        "import sys, specserve.cli, router.service, target_worker.service, draft_worker.service\n"
        "specserve.cli.build_parser()\n"
        "loaded = {m.split('.')[0] for m in sys.modules}\n"
        "print(sorted(loaded & {'fastapi', 'uvicorn', 'starlette'}))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_no_process_compiles_anything_at_import() -> None:
    """torch.compile's machinery (torch._dynamo, inductor) costs about 1.6 s
    to import: no command loads it unless a compile is asked for (a library
    that decorates a function with torch.compile at import would)."""
    code = (
        "import sys, specserve.cli, router.service, target_worker.service, draft_worker.service\n"
        "import gateway.app, model_runtime.grammar\n"
        "print(sorted(m for m in ('torch._dynamo', 'torch._inductor') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"

"""The house keeps its shape: the import contracts hold and fail when a
forbidden import is added, files and functions stay short, and the docs name
only files that exist."""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = [
    "specserve",
    "gateway",
    "router",
    "draft_worker",
    "target_worker",
    "worker_base",
    "protos",
    "model_runtime",
]
MAX_FILE_LINES = 300
MAX_FUNCTION_LINES = 60
DOCS = ["README.md", "docs/architecture.md", "deploy/README.md", "benchmarks/README.md"]


def lint_imports(cwd: Path) -> subprocess.CompletedProcess[str]:
    command = Path(sys.executable).with_name("lint-imports")
    return subprocess.run(
        [str(command), "--no-cache"], cwd=cwd, capture_output=True, text=True, timeout=120
    )


def test_the_import_contracts_hold() -> None:
    result = lint_imports(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The packages' sources and the contracts, copied to be broken one at a time."""
    root = tmp_path_factory.mktemp("house")
    shutil.copy(ROOT / "pyproject.toml", root)
    for package in PACKAGES:
        shutil.copytree(ROOT / package, root / package, ignore=shutil.ignore_patterns("bundled"))
    return root


@pytest.mark.parametrize(
    ("module", "forbidden", "contract"),
    [
        ("router/engine.py", "draft_worker.worker", "reach workers only through the client"),
        ("gateway/app.py", "target_worker.worker", "reach workers only through the client"),
        ("router/engine.py", "model_runtime.runner", "reach workers only through the client"),
        ("gateway/app.py", "specserve.cli", "The serving stack"),
        ("protos/convert.py", "router.engine", "The serving stack"),
        ("protos/convert.py", "model_runtime.runner", "never imports what runs models"),
        ("draft_worker/worker.py", "target_worker.worker", "The workers"),
        ("worker_base/servicer.py", "router.engine", "Workers know nothing of the router"),
        ("model_runtime/kv_cache.py", "grpc", "knows nothing of transport"),
        ("model_runtime/models/llama.py", "model_runtime.rank", "Model files know nothing"),
    ],
)
def test_a_forbidden_import_breaks_a_contract(
    tree: Path, module: str, forbidden: str, contract: str
) -> None:
    path = tree / module
    original = path.read_text()
    path.write_text(f"{original}\nimport {forbidden}  # noqa\n")
    try:
        result = lint_imports(tree)
    finally:
        path.write_text(original)
    assert result.returncode != 0, result.stdout
    # Each contract is reported as "NAME KEPT" or "NAME BROKEN" (names may wrap).
    reports = re.findall(r"(.*?) (KEPT|BROKEN)", " ".join(result.stdout.split()))
    assert any(contract in name for name, status in reports if status == "BROKEN"), result.stdout


def sources() -> list[Path]:
    """Every Python file of the project but the generated stubs."""
    tracked = subprocess.run(
        ["git", "ls-files", "*.py"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    return [ROOT / p for p in tracked if "_pb2" not in p and (ROOT / p).exists()]


def test_no_file_is_much_over_300_lines() -> None:
    long = {
        str(p.relative_to(ROOT)): n
        for p in sources()
        if (n := len(p.read_text().splitlines())) > MAX_FILE_LINES
    }
    assert not long, f"split these along their concepts: {long}"


def test_no_function_is_over_60_lines() -> None:
    long = []
    for path in sources():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    long.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name} ({lines})")
    assert not long, f"split these: {long}"


def mentioned_paths(doc: Path) -> list[str]:
    """Files and folders a document names, in backquotes or as link targets:
    paths with a folder in them that end in a file type or a slash."""
    text = doc.read_text()
    named = re.findall(r"`([\w./*-]+/[\w./*-]*)`", text) + re.findall(r"\]\(([\w./-]+)\)", text)
    kinds = (".py", ".md", ".proto", ".sh", ".json", ".yaml", ".toml", "/")
    return [p for p in named if p.endswith(kinds) and not p.startswith(("/", "specserve/demo"))]


@pytest.mark.parametrize("doc", DOCS)
def test_the_docs_name_only_files_that_exist(doc: str) -> None:
    path = ROOT / doc
    # A path may be relative to the repository, to the document, or to the
    # package a section is about (model_runtime's layers/, say).
    bases = [ROOT, path.parent, *(ROOT / p for p in PACKAGES)]
    missing = [p for p in mentioned_paths(path) if not any(list(b.glob(p)) for b in bases)]
    assert not missing, f"{doc} names files that do not exist: {missing}"

"""Turning a model argument (a folder, a bundled name or a hub id) into a local
checkpoint folder."""

from __future__ import annotations

from pathlib import Path

from huggingface_hub import snapshot_download
from huggingface_hub.errors import HFValidationError, LocalEntryNotFoundError
from huggingface_hub.utils import HfHubHTTPError

from model_runtime.errors import CheckpointError

# The trained demo pair that ships inside the package (training/train_demo_pair.py).
BUNDLED_DIR = Path(__file__).resolve().parent / "bundled"
BUNDLED_MODELS = {
    "specserve/demo-target": BUNDLED_DIR / "demo-target",
    "specserve/demo-draft": BUNDLED_DIR / "demo-draft",
}
DEFAULT_TARGET = "specserve/demo-target"
DEFAULT_DRAFT = "specserve/demo-draft"

# What a checkpoint needs from a hub repository; nothing else is fetched.
CHECKPOINT_PATTERNS = ["*.json", "*.safetensors", "*.jinja", "tokenizer*", "*.model", "*.txt"]


def resolve_model(name: str | Path, revision: str | None = None) -> Path:
    """The local folder that holds the checkpoint ``name``.

    Tried in order: an existing folder; a model bundled with specserve
    (``specserve/demo-target``, ``specserve/demo-draft``); the local Hugging
    Face cache; the hub itself (unless HF_HUB_OFFLINE=1). ``revision`` (a
    branch, tag or commit) applies to hub ids. The error lists everything tried.
    """
    path = Path(name).expanduser()
    if path.is_dir():
        return path
    tried = [f"no folder {path}"]
    repo_id = str(name)
    if repo_id in BUNDLED_MODELS:
        return BUNDLED_MODELS[repo_id]
    tried.append(f"not a bundled model ({', '.join(BUNDLED_MODELS)})")
    try:
        return Path(
            snapshot_download(
                repo_id,
                revision=revision,
                allow_patterns=CHECKPOINT_PATTERNS,
                local_files_only=True,
            )
        )
    except HFValidationError:
        tried.append("not a valid hub id")
        raise CheckpointError(f"model {repo_id!r} not found: {'; '.join(tried)}") from None
    except LocalEntryNotFoundError:
        tried.append("not in the local Hugging Face cache")
    try:
        return Path(
            snapshot_download(repo_id, revision=revision, allow_patterns=CHECKPOINT_PATTERNS)
        )
    except (LocalEntryNotFoundError, HfHubHTTPError, OSError) as e:
        tried.append(f"not downloadable from the hub ({type(e).__name__})")
    raise CheckpointError(f"model {repo_id!r} not found: {'; '.join(tried)}")

"""The examples a newcomer runs keep working."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_the_offline_example_runs() -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "offline_inference.py")],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("Prompt: ") == 2
    assert "'acceptance_rate'" in result.stdout

"""README's commands are the ones CI runs, so a newcomer's first steps stay working."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_ci_runs_each_readme_command_verbatim() -> None:
    readme = (ROOT / "README.md").read_text()
    commands = re.findall(r"```bash\n(.*?)\n```", readme, flags=re.DOTALL)
    assert len(commands) == 2, "README should show one install-and-run and one test command"
    ci = (ROOT / ".ci" / "run").read_text()
    for command in commands:
        assert command in ci, f".ci/run does not run README's command: {command}"

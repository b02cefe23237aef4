"""Entry point of the ``specserve`` console script."""

from __future__ import annotations

from router.cli import main, run_command

__all__ = ["main", "run_command"]

if __name__ == "__main__":
    run_command()

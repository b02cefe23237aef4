"""Services stop when told to, however the signals arrive."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

WAITER = """
from protos.server import catch_termination, wait_for
received = catch_termination()
print("ready", flush=True)
wait_for(received)
"""


def test_a_storm_of_sigterms_always_ends_the_wait() -> None:
    # A handler that set a threading.Event deadlocked now and then against the
    # main thread waiting on it (about one run in twenty under such a storm),
    # leaving a worker that no signal could stop.
    for _ in range(10):
        process = subprocess.Popen(
            [sys.executable, "-c", WAITER], stdout=subprocess.PIPE, text=True, cwd=ROOT
        )
        assert process.stdout is not None
        assert process.stdout.readline().strip() == "ready"
        for _ in range(200):
            try:
                process.send_signal(signal.SIGTERM)
            except ProcessLookupError:
                break
        try:
            assert process.wait(timeout=10) == 0
        finally:
            process.kill()
            process.wait()

"""Services stop when told to, however the signals arrive."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
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


PARENT = """
import time
import grpc
from specserve.launch import ServiceProcess
channel = grpc.insecure_channel("127.0.0.1:1")  # a parent holding gRPC state
child = ServiceProcess("draft-worker", "--model", "specserve/demo-draft", "--dtype", "float32")
child.wait_ready()
print(child.process.pid, flush=True)
time.sleep(600)
"""


def test_a_service_dies_with_the_process_that_started_it() -> None:
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT], stdout=subprocess.PIPE, text=True, cwd=ROOT
    )
    assert parent.stdout is not None
    try:
        child = int(parent.stdout.readline())
    finally:
        parent.kill()  # no goodbye: SIGKILL
        parent.wait()
    deadline = time.monotonic() + 60
    while alive(child) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not alive(child), "the service outlived its parent"


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie nobody has reaped yet does not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"

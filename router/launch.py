"""Starting specserve services as processes on this machine and waiting until
they are ready (tests, benchmarks, and single-machine deployments)."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import threading
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager

READY = re.compile(r"ready on (\S+:\d+)")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def service(
    *args: str, port: int = 0, timeout_s: float = 120
) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    """Run ``specserve ARGS`` until it prints its ready line; yield (address, process).

    Its output is read on (and kept, the last lines, in ``process.output_tail``)
    so that a chatty service never blocks on a full pipe. Leaving the block
    sends SIGTERM, then SIGKILL after ``timeout_s``.
    """
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    process = subprocess.Popen(
        [sys.executable, "-m", "specserve", *args, "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )
    try:
        assert process.stdout is not None
        seen = []
        for line in process.stdout:
            seen.append(line)
            match = READY.search(line)
            if match:
                break
        else:
            raise RuntimeError(f"specserve {args[0]} exited before it was ready:\n{''.join(seen)}")
        tail: deque[str] = deque(seen, maxlen=200)
        process.output_tail = tail  # type: ignore[attr-defined]
        threading.Thread(target=tail.extend, args=(process.stdout,), daemon=True).start()
        yield match.group(1), process
    finally:
        process.terminate()
        try:
            process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            process.kill()

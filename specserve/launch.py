"""Starting specserve services as processes on this machine and waiting until
they are ready (tests, benchmarks, and ``specserve serve --disaggregated``)."""

from __future__ import annotations

import ctypes
import os
import re
import signal
import socket
import subprocess
import sys
import threading
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager

READY = re.compile(r"ready on (\S+:\d+)")


# Set by a parent that starts specserve services: the child dies with it.
PARENT_PID_ENV = "SPECSERVE_PARENT_PID"


def die_with_parent() -> None:
    """In a service started by ``ServiceProcess``: on Linux, get SIGTERM when
    the parent dies, so that a killed ``serve --disaggregated`` leaves no
    workers behind. Done in the child itself rather than between fork and
    exec, where it would make Popen fork for real and run gRPC's fork
    handlers, which can hang a parent that holds gRPC channels."""
    parent = os.environ.pop(PARENT_PID_ENV, None)
    if parent is None or not sys.platform.startswith("linux"):
        return
    PR_SET_PDEATHSIG = 1
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != int(parent):  # it died before the line above
        os.kill(os.getpid(), signal.SIGTERM)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class ServiceStartError(RuntimeError):
    """A service exited before it was ready; the message holds its last output."""


class ServiceProcess:
    """``specserve ARGS --port PORT`` as a child process.

    Its output is read on another thread once it is ready, so that a chatty
    service never blocks on a full pipe: the last lines are kept in
    ``output_tail``, and with ``echo_prefix`` they are also printed here.
    ``env`` adds to (or overrides) this process's environment.
    """

    def __init__(
        self,
        *args: str,
        port: int = 0,
        echo_prefix: str | None = None,
        env: dict[str, str] | None = None,
    ):
        self.name = args[0]
        self.echo_prefix = echo_prefix
        self.output_tail: deque[str] = deque(maxlen=200)
        self.process = subprocess.Popen(
            [sys.executable, "-m", "specserve", *args, "--port", str(port)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env={
                **os.environ,
                "PYTHONUNBUFFERED": "1",
                PARENT_PID_ENV: str(os.getpid()),
                **(env or {}),
            },
        )
        self.process.output_tail = self.output_tail  # type: ignore[attr-defined]

    def wait_ready(self) -> str:
        """Block until the service prints its ready line; return its host:port."""
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.output_tail.append(line)
            match = READY.search(line)
            if match:
                threading.Thread(target=self._drain, daemon=True).start()
                return match.group(1)
        self.process.wait()
        raise ServiceStartError(
            f"specserve {self.name} exited before it was ready:\n{''.join(self.output_tail)}"
        )

    def _drain(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.output_tail.append(line)
            if self.echo_prefix is not None:
                print(f"[{self.echo_prefix}] {line}", end="", flush=True)

    def stop(self, timeout_s: float = 120) -> None:
        """SIGTERM (the service drains), then SIGKILL after ``timeout_s``."""
        self.process.terminate()
        try:
            self.process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


@contextmanager
def service(
    *args: str, port: int = 0, timeout_s: float = 120, env: dict[str, str] | None = None
) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    """Run ``specserve ARGS`` until it prints its ready line; yield (address, process).

    Leaving the block sends SIGTERM, then SIGKILL after ``timeout_s``.
    """
    running = ServiceProcess(*args, port=port, env=env)
    try:
        yield running.wait_ready(), running.process
    finally:
        running.stop(timeout_s)

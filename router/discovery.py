"""Draft workers found through DNS, so that a draft pool can be scaled by
adding and removing replicas behind one name.

``--draft-workers dns:///specserve-draft:50053`` names a Kubernetes headless
Service (``clusterIP: None``): its name resolves to one address per ready
pod. The router keeps one connection per draft worker and a sequence's draft
KV lives on one of them, so gRPC's own balancing across a name (which picks a
worker per call) does not fit; instead the name is resolved again every
``interval_s`` and the pool follows the answer: a new address is connected,
checked (same tokenizer as the target) and joins; an address that is gone
leaves, and its sequences move to the other draft workers, where they are
re-prefilled from their tokens. A name that fails to resolve keeps the
workers it had.
"""

from __future__ import annotations

import logging
import socket
import threading
from collections.abc import Callable, Iterable
from typing import Generic

from model_runtime.errors import IncompatibleWorkerError, WorkerUnavailableError
from protos.messages import WorkerInfo
from router.clients import close_worker
from router.pool import W, WorkerPool

logger = logging.getLogger(__name__)

DNS_SCHEME = "dns:///"


def split_addresses(addresses: Iterable[str]) -> tuple[list[str], list[str]]:
    """Fixed ``host:port`` addresses, and the ``host:port`` of each ``dns:///``
    entry (resolved again and again)."""
    fixed, names = [], []
    for address in addresses:
        if address.startswith(DNS_SCHEME):
            name = address[len(DNS_SCHEME) :]
            host, _, port = name.rpartition(":")
            if not host or not port.isdigit():
                raise ValueError(f"{address!r} needs a port: dns:///NAME:PORT")
            names.append(name)
        elif address.startswith("dns:"):
            raise ValueError(
                f"{address!r}: only dns:///NAME:PORT is understood "
                "(the system's resolver; no DNS server in the address)"
            )
        else:
            fixed.append(address)
    return fixed, names


def resolve(name: str) -> set[str]:
    """Every ``ip:port`` that ``host:port`` resolves to now (``[ip]:port`` for IPv6)."""
    host, _, port = name.rpartition(":")
    found = set()
    for family, _, _, _, sockaddr in socket.getaddrinfo(host, int(port), type=socket.SOCK_STREAM):
        ip = sockaddr[0]
        found.add(f"[{ip}]:{port}" if family == socket.AF_INET6 else f"{ip}:{port}")
    return found


class Discovery(Generic[W]):
    """Keeps ``pool`` in step with what ``names`` resolve to.

    ``connect(address)`` makes a worker client (raising WorkerUnavailableError
    if it does not answer: tried again next time); ``check(info)`` raises
    ValueError for a worker that must not join (not tried again);
    ``on_change()`` is called after a refresh that offered or withdrew workers.
    """

    def __init__(
        self,
        pool: WorkerPool[W],
        names: list[str],
        connect: Callable[[str], W],
        check: Callable[[WorkerInfo], None],
        interval_s: float,
        resolver: Callable[[str], set[str]] = resolve,
        on_change: Callable[[], None] | None = None,
    ):
        if interval_s <= 0:
            raise ValueError(f"the discovery interval must be > 0 seconds, got {interval_s}")
        self.pool = pool
        self.names = names
        self.connect = connect
        self.check = check
        self.interval_s = interval_s
        self.resolver = resolver
        self.on_change = on_change
        self._found: dict[str, set[str]] = {name: set() for name in names}
        self._joined: set[str] = set()
        self._rejected: set[str] = set()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def refresh(self) -> None:
        """Resolve every name once and offer or withdraw workers to match."""
        for name in self.names:
            try:
                self._found[name] = self.resolver(name)
            except OSError as e:
                logger.warning(
                    "cannot resolve %s (%s); keeping its %d workers",
                    name,
                    e,
                    len(self._found[name]),
                )
        wanted = set().union(*self._found.values())
        before = set(self._joined)
        for address in sorted(wanted - self._joined - self._rejected):
            self._join(address)
        for address in sorted(self._joined - wanted):
            self.pool.withdraw(address)
            self._joined.discard(address)
        self._rejected &= wanted
        if self._joined != before and self.on_change is not None:
            self.on_change()

    def _join(self, address: str) -> None:
        try:
            worker = self.connect(address)
        except IncompatibleWorkerError as e:  # for good, while the name lists it
            logger.error("%s worker %s cannot join: %s", self.pool.kind, address, e)
            self._rejected.add(address)
            return
        except WorkerUnavailableError as e:
            logger.info("%s worker %s does not answer yet: %s", self.pool.kind, address, e)
            return
        try:
            info = worker.describe()
            self.check(info)
        except Exception as e:  # refused (ValueError) for good; anything else: next time
            logger.error("%s worker %s cannot join: %s", self.pool.kind, address, e)
            close_worker(worker)
            if isinstance(e, ValueError):
                self._rejected.add(address)
            return
        self.pool.offer(address, worker, info)
        self._joined.add(address)

    def start(self) -> None:
        """Refresh every ``interval_s`` in a background thread until ``stop``."""
        self._thread = threading.Thread(target=self._run, name="discovery", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.refresh()
            except Exception:  # never let one bad pass end discovery
                logger.exception("%s discovery failed; trying again", self.pool.kind)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

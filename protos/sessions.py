"""The session a router's batch streams carry in their gRPC metadata, part of
the wire: ``specserve-session: NAME/ID``, NAME the router's (stable across its
restarts: host and port) and ID new in every router process. Workers lease
what a session's streams carry to it (``worker_base.leases``)."""

from __future__ import annotations

import uuid

SESSION_KEY = "specserve-session"


def new_session(name: str) -> str:
    """The session of one process of a router called ``name``."""
    return f"{name}/{uuid.uuid4().hex}"


def session_name(session: str) -> str:
    return session.rsplit("/", 1)[0]

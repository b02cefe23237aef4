"""Errors the model runtime raises: for input a user can fix, and for a worker
(or one of its tensor-parallel ranks) that is gone."""

from __future__ import annotations


class CheckpointError(ValueError):
    """A checkpoint folder is missing something or holds something we cannot load."""


class UnsupportedModelError(ValueError):
    """A checkpoint's architecture or one of its settings is not implemented."""


class WorkerUnavailableError(RuntimeError):
    """A worker could not be reached, its stream broke, or (tensor-parallel) one of
    its ranks died; the caller decides what to do."""


class IncompatibleWorkerError(WorkerUnavailableError):
    """A worker answered but speaks another version of the batch wire: it cannot
    serve this router until one of the two runs the other's release."""

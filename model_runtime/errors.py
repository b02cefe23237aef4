"""Errors the model runtime raises for input a user can fix."""

from __future__ import annotations


class CheckpointError(ValueError):
    """A checkpoint folder is missing something or holds something we cannot load."""


class UnsupportedModelError(ValueError):
    """A checkpoint's architecture or one of its settings is not implemented."""

"""Errors raised for input the warehouse refuses. Every message names the file and the problem."""

from __future__ import annotations

from pathlib import Path


class TraceError(Exception):
    """A file could not be ingested. `str()` is the message recorded in the manifest."""

    def __init__(self, path: str | Path, problem: str) -> None:
        self.path = str(path)
        self.problem = problem
        super().__init__(f"{self.path}: {problem}")


class NotKinetoTrace(TraceError):
    """The file is readable but is something else (host execution trace, memory timeline, ...)."""


class MalformedTrace(TraceError):
    """The file claims to be a Kineto trace but is truncated, corrupt or has wrongly typed fields."""

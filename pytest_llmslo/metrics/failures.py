"""Failed requests: how many of each kind, and the messages they gave.

``error_rate`` = failed / all requests; failures are counted by ``error_kind``. Requests
the load generator cut while in flight (the duration bound's grace period ran out, or an
interrupt) are failures of kind ``cancelled``: they are the slowest requests of the run,
and leaving them out would bias every percentile low. ``failure_messages`` keeps the most
frequent error messages of each kind, so a report says *why* (``HTTP 401: ...``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pytest_llmslo.records import Run

__all__ = ["MAX_ERROR_MESSAGES", "ErrorMessage", "failure_counts", "failure_messages"]


def failure_counts(run: Run) -> dict[str, int]:
    """Failed requests of ``run`` per failure kind, sorted by kind: the record's
    ``error_kind``, else ``http`` for a failure with a status, else ``unknown``."""
    counts: dict[str, int] = {}
    for r in run.failed_records:
        kind: str | None = r.error_kind
        if kind is None:
            kind = "http" if r.status else "unknown"
        counts[kind] = counts.get(kind, 0) + 1
    return dict(sorted(counts.items()))


MAX_ERROR_MESSAGES = 5
_MAX_MESSAGE_CHARS = 300


@dataclass(frozen=True, slots=True)
class ErrorMessage:
    """One error message of a run and how many failed requests gave it."""

    kind: str
    message: str
    count: int

    def __str__(self) -> str:
        return f"{self.kind} {self.count}: {self.message}"

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "message": self.message, "count": self.count}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ErrorMessage:
        return cls(str(d["kind"]), str(d["message"]), int(d["count"]))


def failure_messages(run: Run, limit: int = MAX_ERROR_MESSAGES) -> tuple[ErrorMessage, ...]:
    """The ``limit`` most frequent (kind, message) pairs of the failed requests, most
    frequent first, each message cut to 300 characters. Bounded whatever the run's size:
    a run of a million distinct errors still reports five lines."""
    counts: dict[tuple[str, str], int] = {}
    for r in run.failed_records:
        kind = r.error_kind or ("http" if r.status else "unknown")
        fallback = f"status {r.status}" if r.status else "no message"
        msg = (r.error or fallback).strip()
        if len(msg) > _MAX_MESSAGE_CHARS:
            msg = msg[: _MAX_MESSAGE_CHARS - 3] + "..."
        key = (kind, msg)
        counts[key] = counts.get(key, 0) + 1
    top = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:limit]
    return tuple(ErrorMessage(k, m, c) for (k, m), c in top)

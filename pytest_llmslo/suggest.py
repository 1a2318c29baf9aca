""" "Did you mean": the closest of the valid names to a misspelt one (an option, a metric,
an engine, a profile, a run-file key), for the error that names it."""

from __future__ import annotations

import difflib
from collections.abc import Iterable

__all__ = ["closest", "did_you_mean"]


def closest(word: str, candidates: Iterable[str]) -> str | None:
    """The valid name closest to ``word``, or None when none is close."""
    found = difflib.get_close_matches(word, list(candidates), n=1, cutoff=0.6)
    return found[0] if found else None


def did_you_mean(word: str, candidates: Iterable[str]) -> str:
    """`` (did you mean 'x'?)`` for the closest valid name, or ``""``."""
    match = closest(word, candidates)
    return f" (did you mean {match!r}?)" if match else ""

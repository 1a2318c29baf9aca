"""A user's eval file: one JSON object per line, a prompt (or chat messages), its reference
and its scorer.

    {"prompt": "Capital of France?", "reference": "Paris", "scorer": "exact"}
    {"messages": [{"role": "system", "content": "Answer in one word."},
                  {"role": "user", "content": "Capital of Italy?"}], "reference": "Rome"}
    {"prompt": "2.5 * 4 =", "reference": 10, "scorer": "numeric", "tolerance": 0.01}
    {"prompt": "Give a JSON user", "reference": {"name": "string"}, "scorer": "json"}

``messages`` (instead of ``prompt``): an optional ``system`` message, then ``user`` and
``assistant`` messages in turn, the last one the user's; the earlier turns travel as the
request's history (chat messages, or the texts joined for the completions endpoint), the
last user message is the item's prompt. ``scorer`` is one of ``scorers.SCORERS`` (default
``exact``); ``tolerance`` is for
``numeric``; ``max_tokens`` (default ``DEFAULT_MAX_TOKENS``) is the output the item asks
for. A ``json`` reference may be the object of key types itself. The file is data from
outside: it is read up to ``MAX_FILE_BYTES``, ``MAX_ROWS`` rows of at most
``MAX_PROMPT_CHARS`` characters of prompt, and a bad row is an error that names its line
and says what is wrong. Item ``i`` of a level is the row at position ``i`` of an order
seeded by the level's seed, cycled when the level has more requests than the file rows.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from ..errors import WorkloadError
from .scorers import check_reference

__all__ = ["DEFAULT_MAX_TOKENS", "EvalRow", "read_eval_file", "validate_row"]

MAX_FILE_BYTES = 64 * 1024 * 1024
MAX_ROWS = 1_000_000
MAX_PROMPT_CHARS = 1_000_000
MAX_REFERENCE_CHARS = 10_000
DEFAULT_MAX_TOKENS = 64

#: Messages a ``messages`` row may hold.
MAX_MESSAGES = 64


class EvalRow(NamedTuple):
    """One row of an eval file, validated."""

    prompt: str
    reference: str
    scorer: str
    tolerance: float
    max_tokens: int
    #: The earlier turns of a ``messages`` row, as (user, assistant) pairs.
    history: tuple[tuple[str, str], ...] = ()
    #: The system message of a ``messages`` row.
    system: str | None = None


def _messages(obj: Any, where: str) -> tuple[str, tuple[tuple[str, str], ...], str | None]:
    """The last user message, the turns before it and the system message of a row's
    ``messages``; a ``WorkloadError`` saying what is wrong otherwise."""
    msgs = obj.get("messages")
    if not isinstance(msgs, list) or not 1 <= len(msgs) <= MAX_MESSAGES:
        raise WorkloadError(
            f"{where}: 'messages' must be a list of 1 to {MAX_MESSAGES} messages, each "
            '{"role": "system"|"user"|"assistant", "content": "..."}'
        )
    pairs: list[tuple[str, str]] = []
    for m in msgs:
        role = m.get("role") if isinstance(m, dict) else None
        content = m.get("content") if isinstance(m, dict) else None
        if role not in ("system", "user", "assistant") or not isinstance(content, str):
            raise WorkloadError(
                f"{where}: every message is an object with a role (system, user or assistant) "
                "and a string content"
            )
        if len(content) > MAX_PROMPT_CHARS:
            raise WorkloadError(f"{where}: a message is longer than 1M chars")
        pairs.append((role, content))
    system = pairs.pop(0)[1] if pairs and pairs[0][0] == "system" else None
    roles = [r for r, _ in pairs]
    if (
        not roles
        or roles[-1] != "user"
        or roles != ["user", "assistant"] * (len(roles) // 2) + ["user"]
    ):
        raise WorkloadError(
            f"{where}: after an optional system message, 'messages' alternate user and "
            "assistant and end with the user's (the question the reference answers)"
        )
    texts = [c for _, c in pairs]
    history = tuple(zip(texts[:-1:2], texts[1:-1:2], strict=True))
    return texts[-1], history, system


def validate_row(obj: Any, where: str) -> EvalRow:
    """A row (a decoded JSON object, or a dataset's row as a dict) checked as an eval row;
    a ``WorkloadError`` naming ``where`` and what is wrong otherwise."""
    if not isinstance(obj, dict):
        raise WorkloadError(f"{where}: expected a JSON object with prompt and reference")
    if "messages" in obj and "prompt" in obj:
        raise WorkloadError(f"{where}: a row has 'prompt' or 'messages', not both")
    history: tuple[tuple[str, str], ...] = ()
    system = None
    prompt: Any
    if "messages" in obj:
        prompt, history, system = _messages(obj, where)
    else:
        prompt = obj.get("prompt")
    ref = obj.get("reference")
    if not isinstance(prompt, str) or not prompt or len(prompt) > MAX_PROMPT_CHARS:
        raise WorkloadError(
            f"{where}: 'prompt' (or the last user message) must be a non-empty string "
            "(at most 1M chars)"
        )
    scorer = obj.get("scorer", "exact")
    if scorer in ("json", "schema") and isinstance(ref, dict):
        ref = json.dumps(ref)
    if ref is None and scorer == "json":
        ref = ""
    if isinstance(ref, bool) or not isinstance(ref, str | int | float):
        raise WorkloadError(f"{where}: 'reference' must be a string or a number")
    reference = str(ref)
    if len(reference) > MAX_REFERENCE_CHARS:
        raise WorkloadError(f"{where}: 'reference' is longer than {MAX_REFERENCE_CHARS} chars")
    tol = obj.get("tolerance", 0.0)
    if isinstance(tol, bool) or not isinstance(tol, int | float) or not math.isfinite(tol):
        raise WorkloadError(f"{where}: 'tolerance' must be a finite number")
    max_tokens = obj.get("max_tokens", DEFAULT_MAX_TOKENS)
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
        raise WorkloadError(f"{where}: 'max_tokens' must be an integer >= 1")
    try:
        check_reference(str(scorer), reference)
    except (ValueError, TypeError, re.error) as e:
        raise WorkloadError(f"{where}: bad reference for the {scorer} scorer: {e}") from None
    return EvalRow(prompt, reference, str(scorer), abs(float(tol)), max_tokens, history, system)


def read_eval_file(path: str) -> list[EvalRow]:
    """The rows of an eval file (see the module docstring)."""
    p = Path(path)
    try:
        size = p.stat().st_size
    except OSError as e:
        raise WorkloadError(f"eval file {path}: {e.strerror or e}") from None
    if size > MAX_FILE_BYTES:
        raise WorkloadError(f"eval file {path} is larger than {MAX_FILE_BYTES >> 20} MiB")
    rows: list[EvalRow] = []
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise WorkloadError(f"eval file {path}: not readable as UTF-8 text ({e})") from None
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        if len(rows) >= MAX_ROWS:
            raise WorkloadError(f"eval file {path} has more than {MAX_ROWS} rows")
        try:
            obj = json.loads(line)
        except ValueError as e:
            raise WorkloadError(f"eval file {path}, line {n}: not JSON ({e})") from None
        rows.append(validate_row(obj, f"eval file {path}, line {n}"))
    if not rows:
        raise WorkloadError(f"eval file {path} has no rows: one JSON object per line")
    return rows


def row_order(rows: int, seed: int) -> np.ndarray:
    """The seeded order in which a level takes the rows."""
    return np.random.default_rng([seed & 0xFFFFFFFF, 0xE7A1F11E]).permutation(rows)

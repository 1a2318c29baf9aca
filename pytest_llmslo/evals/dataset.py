"""A user's eval file: one JSON object per line, a prompt, its reference and its scorer.

    {"prompt": "Capital of France?", "reference": "Paris", "scorer": "exact"}
    {"prompt": "2.5 * 4 =", "reference": 10, "scorer": "numeric", "tolerance": 0.01}
    {"prompt": "Give a JSON user", "reference": {"name": "string"}, "scorer": "json"}

``scorer`` is one of ``scorers.SCORERS`` (default ``exact``); ``tolerance`` is for
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
from typing import Any

import numpy as np

from ..errors import WorkloadError
from .scorers import check_reference

__all__ = ["DEFAULT_MAX_TOKENS", "EvalRow", "read_eval_file"]

MAX_FILE_BYTES = 64 * 1024 * 1024
MAX_ROWS = 1_000_000
MAX_PROMPT_CHARS = 1_000_000
MAX_REFERENCE_CHARS = 10_000
DEFAULT_MAX_TOKENS = 64

#: (prompt, reference, scorer, tolerance, max_tokens)
EvalRow = tuple[str, str, str, float, int]


def _row(obj: Any, where: str) -> EvalRow:
    if not isinstance(obj, dict):
        raise WorkloadError(f"{where}: expected a JSON object with prompt and reference")
    prompt, ref = obj.get("prompt"), obj.get("reference")
    if not isinstance(prompt, str) or not prompt or len(prompt) > MAX_PROMPT_CHARS:
        raise WorkloadError(f"{where}: 'prompt' must be a non-empty string (at most 1M chars)")
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
    return prompt, reference, str(scorer), abs(float(tol)), max_tokens


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
        rows.append(_row(obj, f"eval file {path}, line {n}"))
    if not rows:
        raise WorkloadError(f"eval file {path} has no rows: one JSON object per line")
    return rows


def row_order(rows: int, seed: int) -> np.ndarray:
    """The seeded order in which a level takes the rows."""
    return np.random.default_rng([seed & 0xFFFFFFFF, 0xE7A1F11E]).permutation(rows)

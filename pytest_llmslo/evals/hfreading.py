"""How a Hugging Face dataset becomes eval items: which of its columns is the prompt (or the
chat messages), which the reference, how the answers are scored, and how much is read.

``--slo-eval=hf:NAME[:SHARE]`` names the dataset (as the eval file's path is named), and
``--slo-eval-hf`` (marker and run file ``eval_hf``, ini ``llmslo_eval_hf``) says how to read
it, as ``KEY=VALUE`` pairs separated by commas, or a mapping in the marker and the run file:

    config=main,split=test,prompt=question,reference=answer,reference_after=####,scorer=numeric

Keys: ``config`` (the dataset's configuration), ``split`` (default: its only split),
``prompt`` (the prompt column, default ``prompt``) or ``messages`` (a column of chat
messages, ``[{"role": ..., "content": ...}, ...]``, as in an eval file's rows),
``reference`` (default ``reference``), ``reference_after`` (the reference is the text after
the last occurrence of this marker in that column, stripped: GSM8K's ``####``),
``scorer`` (one of ``scorers.SCORERS`` or ``custom``; default ``exact``), ``tolerance``
(``numeric``), ``max_tokens`` (the output an item asks for), ``max_items`` (the rows read,
from the first; default ``DEFAULT_ITEMS``) and ``cache_dir`` (the ``datasets`` cache to
read instead of the default one). Nothing here is loaded or imported: ``hfdataset.py``
reads the dataset where the items are built.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .custom import CUSTOM
from .dataset import DEFAULT_MAX_TOKENS, MAX_ROWS
from .scorers import SCORERS

__all__ = ["DEFAULT_ITEMS", "HfReading", "parse_hf_reading"]

#: Rows read from a dataset when ``max_items`` does not say.
DEFAULT_ITEMS = 10_000
_COLUMN = re.compile(r"[^\x00-\x1f\x7f]{1,200}")
_MAX_TEXT = 4096


@dataclass(frozen=True)
class HfReading:
    """How to read a Hugging Face dataset's rows as eval items (see the module docstring).
    Checked when made, wherever from (the settings, or a worker's plan off the wire)."""

    config: str | None = None
    split: str | None = None
    prompt: str | None = None
    messages: str | None = None
    reference: str = "reference"
    reference_after: str | None = None
    scorer: str = "exact"
    tolerance: float = 0.0
    max_tokens: int = DEFAULT_MAX_TOKENS
    max_items: int = DEFAULT_ITEMS
    cache_dir: str | None = None

    def __post_init__(self) -> None:
        for name in ("config", "split", "prompt", "messages", "reference"):
            value = getattr(self, name)
            if value is not None and not (isinstance(value, str) and _COLUMN.fullmatch(value)):
                raise ValueError(f"eval_hf {name}= must be a name of 1 to 200 characters")
        for name in ("reference_after", "cache_dir"):
            value = getattr(self, name)
            if value is not None and not (isinstance(value, str) and 0 < len(value) <= _MAX_TEXT):
                raise ValueError(f"eval_hf {name}= must be a non-empty text")
        if self.prompt is not None and self.messages is not None:
            raise ValueError("eval_hf takes a prompt= column or a messages= column, not both")
        if self.scorer not in (*SCORERS, CUSTOM):
            raise ValueError(
                f"eval_hf scorer={self.scorer!r:.40}: scorers are {', '.join(SCORERS)}, or "
                "custom (the function named by --slo-eval-scorer)"
            )
        tol = self.tolerance
        if isinstance(tol, bool) or not isinstance(tol, int | float):
            raise ValueError("eval_hf tolerance= must be a number")
        if not (math.isfinite(tol) and tol >= 0):
            raise ValueError(f"eval_hf tolerance= must be a finite number >= 0, got {tol!r}")
        for name, top in (("max_tokens", 1 << 20), ("max_items", MAX_ROWS)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= top:
                raise ValueError(f"eval_hf {name}= must be an integer from 1 to {top}")

    @property
    def text_column(self) -> str:
        """The column of the prompts (or of the chat messages)."""
        return self.messages or self.prompt or "prompt"

    def to_dict(self) -> dict[str, Any]:
        """What differs from the defaults (kept with a level's answers)."""
        default = HfReading()
        return {
            f.name: getattr(self, f.name)
            for f in dataclasses.fields(self)
            if getattr(self, f.name) != getattr(default, f.name)
        }


_NUMBERS = {"tolerance": float, "max_tokens": int, "max_items": int}


def _typed(key: str, value: Any) -> Any:
    kind = _NUMBERS.get(key)
    if kind is None or not isinstance(value, str):
        return value
    try:
        return kind(value)
    except ValueError:
        raise ValueError(f"eval_hf {key}={value!r:.40} is not a number") from None


def parse_hf_reading(value: Any) -> HfReading | None:
    """``KEY=VALUE,...`` (or a mapping; ``none``: the defaults) as an ``HfReading``;
    ``ValueError`` naming the key that is wrong."""
    if value is None or isinstance(value, HfReading):
        return value
    if isinstance(value, Mapping):
        pairs = {str(k): v for k, v in value.items()}
    else:
        text = str(value).strip()
        if text.lower() in ("", "none"):
            return None
        pairs = {}
        for part in text.split(","):
            key, sep, val = part.partition("=")
            if not sep or not key.strip():
                raise ValueError(
                    f"eval_hf {text!r:.80}: give KEY=VALUE pairs separated by commas "
                    "(prompt=question,reference=answer,scorer=numeric)"
                )
            pairs[key.strip()] = val.strip()
    known = {f.name for f in dataclasses.fields(HfReading)}
    unknown = sorted(set(pairs) - known)
    if unknown:
        raise ValueError(f"eval_hf: unknown key(s) {', '.join(unknown)}; keys: {', '.join(known)}")
    return HfReading(**{k: _typed(k, v) for k, v in pairs.items()})

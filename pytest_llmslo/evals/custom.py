"""A scorer the user writes: a Python function named in the user's own configuration
(``--slo-eval-scorer mypkg.scoring:judge``, the marker's or the run file's
``eval_scorer``), never in the eval file, whose rows only ask for it (``"scorer":
"custom"``): the data file is data, and nothing it says is imported or run.

The function takes the reply and the row's reference and returns whether the reply is
right: ``judge(reply: str, reference: str) -> bool``. It is imported where the answers are
scored (the test run's process: a load worker ships its streams and scores nothing); a
reply it raises on counts as wrong, with the error kept on the answer book
(``AnswerBook.scorer_error``) so a broken scorer is seen, not silent.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable
from typing import Any

from ..errors import WorkloadError

__all__ = ["CUSTOM", "CustomScorer", "load_scorer", "parse_scorer_ref"]

#: The ``scorer`` of an eval row that the configured function scores.
CUSTOM = "custom"
CustomScorer = Callable[[str, str], Any]

_REF = re.compile(r"[A-Za-z_][\w.]{0,200}:[A-Za-z_]\w{0,100}")


def parse_scorer_ref(value: Any) -> str | None:
    """``module:function`` as given (None or ``none``: no custom scorer); ``ValueError``
    saying the form otherwise. Nothing is imported here."""
    if value is None:
        return None
    text = str(value).strip()
    if text.lower() in ("", "none"):
        return None
    if not _REF.fullmatch(text):
        raise ValueError(
            f"{text!r} is not a scorer: name a Python function as module:function "
            "(mypkg.scoring:judge), taking the reply and the reference, returning a bool"
        )
    return text


def load_scorer(ref: str) -> CustomScorer:
    """The function ``ref`` names; ``WorkloadError`` saying what failed and what to do."""
    module, _, name = ref.partition(":")
    try:
        found = getattr(importlib.import_module(module), name)
    except ImportError as e:
        raise WorkloadError(
            f"eval scorer {ref}: module {module!r} cannot be imported ({e}); put it on the "
            "Python path of the test run"
        ) from None
    except AttributeError:
        raise WorkloadError(f"eval scorer {ref}: module {module!r} has no {name!r}") from None
    if not callable(found):
        raise WorkloadError(f"eval scorer {ref}: {name!r} is not a function")
    scorer: CustomScorer = found
    return scorer

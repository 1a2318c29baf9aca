"""Eval items that travel inside a level's traffic, and the scoring of their answers.

``tasks`` builds seeded items with exact answers (no download): multi-digit arithmetic, the
retrieval of a key planted at a chosen depth of a long context, ordering, a JSON schema;
``dataset`` reads a user's eval file and ``hfdataset`` a Hugging Face dataset, offline.
``answers`` collects the answers a level's eval requests streamed, scores them and keeps a
digest of each, so a level's accuracy is measured at the load it was gated at
(``slo.quality`` judges it).
"""

from __future__ import annotations

from .answers import ANSWER_CHARS, SAMPLE_ANSWERS, AnswerBook, digest, first_integer
from .hfreading import HfReading, parse_hf_reading
from .scorers import SCORERS, score
from .source import EvalSource, eval_problem
from .tasks import (
    EVAL_TASKS,
    EvalChoice,
    EvalItem,
    EvalTask,
    is_eval_index,
    make_item,
    parse_eval,
    solve,
)

__all__ = [
    "ANSWER_CHARS",
    "EVAL_TASKS",
    "SAMPLE_ANSWERS",
    "SCORERS",
    "AnswerBook",
    "EvalChoice",
    "EvalItem",
    "EvalSource",
    "EvalTask",
    "HfReading",
    "digest",
    "eval_problem",
    "first_integer",
    "is_eval_index",
    "make_item",
    "parse_eval",
    "parse_hf_reading",
    "score",
    "solve",
]

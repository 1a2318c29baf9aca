"""Built-in eval tasks: seeded items with exact answers, built with no download.

- ``arithmetic``: ``Calculate 4821 + 937.`` with a sum, a difference or a product of
  multi-digit numbers; the answer is the integer.
- ``retrieval``: a long context of filler words with one sentence ``The key of the red fox
  is 482913.`` planted at a depth drawn per item (0: the start, 1: the end), then the
  question; the answer is the key. The context is ``context_words`` words long (the
  workload's ``isl``), so a level's eval items load the engine's prefill as its other
  requests do.
- ``ordering``: ``Sort these numbers from smallest to largest: 41, 7, 93.`` with 5 to 8
  distinct numbers; the answer is the sorted list, scored by ``sequence`` (the reply's
  first integers, in order).
- ``schema``: a small seeded JSON schema (an object of 2 to 4 properties, each an integer
  between bounds, a string from an enum, a boolean or a constant) and the request to reply
  with a JSON object valid against it; scored by ``schema`` (``evals.schema.validate``).

Item ``i`` of a seed depends on the seed and ``i`` alone (like the workload's prompts), so
a run's answers can be scored after it by rebuilding the items, and a later run against a
bumped engine asks the very same questions. The arithmetic and retrieval answers are integers:
the scorer reads the first integer of the reply (``answers.first_integer``), which
tolerates an engine that says more than the number.

Which requests of a level are eval items: ``is_eval_index`` draws it from the seed and the
index, so a share of 0.2 puts about one request in five through the eval, spread over the
level's arrivals, and every request with a share of 1. About one eval request in twenty
asks again the item of the eval request before it (``repeat_of``): the two answers say
whether the engine is deterministic at that load.

``solve`` is what the sim engine's "model" does: it reads an item back from a prompt and
returns the right answer (None for a prompt that is no eval item); the sim's error model
then decides whether it says it, or ``wrong_answer``. A real engine sees a plain prompt.
"""

from __future__ import annotations

import json
import re
import zlib
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

import numpy as np

from .schema import example

__all__ = [
    "EVAL_TASKS",
    "USER_TASKS",
    "EvalChoice",
    "EvalItem",
    "EvalTask",
    "is_eval_index",
    "make_item",
    "parse_eval",
    "repeat_of",
    "solve",
    "wrong_answer",
]

EvalTask = Literal["arithmetic", "retrieval", "ordering", "schema", "jsonl", "hf"]
#: The built-in tasks, ``jsonl``: a user's eval file (``dataset.py``), and ``hf``: a Hugging
#: Face dataset (``hfdataset.py``).
EVAL_TASKS: tuple[EvalTask, ...] = (
    "arithmetic",
    "retrieval",
    "ordering",
    "schema",
    "jsonl",
    "hf",
)
#: The built-in tasks alone.
BUILT_IN: tuple[EvalTask, ...] = EVAL_TASKS[:4]
#: The tasks whose items are a user's rows: ``EvalChoice.path`` names their source.
USER_TASKS: tuple[EvalTask, ...] = EVAL_TASKS[4:]

#: Output tokens an eval request asks for: enough for the number and a few words.
ANSWER_TOKENS = 16
#: Longest context a retrieval item builds, in words (a prompt is bounded whatever asked).
MAX_CONTEXT_WORDS = 200_000

_ITEM_STREAM = 0x5EED_E7A1
_SHARE_STREAM = 0x5EED_5A4E
_REPEAT_STREAM = 0x5EED_2E9E
#: The share of eval requests that ask again the item of the eval request before them: at
#: temperature 0 the two answers must be the same (``repeat_of``).
REPEAT_SHARE = 0.05
#: How far back a repeat looks for the eval request it repeats.
_REPEAT_REACH = 200
_TAIL = " Reply with the number only."

_COLOURS = "red blue green amber grey white black golden silver violet".split()
_ANIMALS = "fox owl hare wolf crane otter lynx heron bison raven".split()
_FILLER = (
    "the river ran past the old mill where farmers brought grain each autumn and the "
    "miller kept a ledger of every sack while children watched the wheel turn slowly in "
    "the cold water and merchants argued about prices on the bridge until the evening "
    "bells rang across the valley"
).split()

_ARITH_RE = re.compile(r"Calculate (\d{1,12}) ([+\-*]) (\d{1,12})\." + re.escape(_TAIL))
_QUESTION_RE = re.compile(r"What is the key of the (\w{1,20} \w{1,20})\?" + re.escape(_TAIL))
_ORDER_TAIL = " Reply with the numbers only, separated by commas."
_ORDER_RE = re.compile(
    r"Sort these numbers from smallest to largest: ((?:\d{1,6}, ){1,20}\d{1,6})\."
    + re.escape(_ORDER_TAIL)
)
_SCHEMA_HEAD = "Reply with only a JSON object valid against this JSON schema: "
_SCHEMA_RE = re.compile(re.escape(_SCHEMA_HEAD) + r"(\{.{1,1500}\})\Z", re.S)
#: Output tokens an ordering or schema item asks for.
LONG_ANSWER_TOKENS = 64


@dataclass(frozen=True, slots=True)
class EvalItem:
    """One eval question: its task, index in the level's sequence, the prompt sent, the
    answer (the reference), the output tokens it asks for, for retrieval the depth of the
    key, and how an answer is scored (``scorers.score``)."""

    task: EvalTask
    index: int
    prompt: str
    answer: str
    max_tokens: int = ANSWER_TOKENS
    depth: float | None = None
    scorer: str = "integer"
    tolerance: float = 0.0
    #: A chat row's earlier turns, as (user, assistant) pairs, and its system message.
    history: tuple[tuple[str, str], ...] = ()
    system: str | None = None

    @property
    def words(self) -> int:
        turns = [t for pair in self.history for t in pair] + [self.system or ""]
        return len(self.prompt.split()) + sum(len(t.split()) for t in turns)


class EvalChoice(NamedTuple):
    """The eval a level carries: its task and the share of requests that carry an item."""

    task: EvalTask
    share: float = 1.0
    #: The eval file of the ``jsonl`` task, the dataset of the ``hf`` task.
    path: str | None = None

    def __str__(self) -> str:
        name = self.path if self.task == "jsonl" and self.path else self.task
        if self.task == "hf":
            name = f"hf:{self.path}"
        return name if self.share >= 1.0 else f"{name}:{self.share:.0%}"


def _share(text: str, whole: str) -> float:
    pct = text.endswith("%")
    try:
        share = float(text.rstrip("%")) / (100.0 if pct else 1.0)
    except ValueError:
        share = -1.0
    if not 0.0 < share <= 1.0:
        raise ValueError(f"the eval share in {whole!r} must be in (0, 1] (or 1% to 100%)")
    return share


def parse_eval(value: Any) -> EvalChoice | None:
    """``arithmetic`` (every request), ``retrieval:20%`` or ``retrieval:0.2`` (that share of
    them), a user's eval file ``PATH.jsonl`` (``PATH.jsonl:20%``), a Hugging Face dataset
    ``hf:NAME`` (``hf:openai/gsm8k:20%``, ``hf:PATH``), ``none`` (no eval)."""
    if value is None or isinstance(value, EvalChoice):
        return value
    text = str(value).strip()
    if text.lower() in ("", "none", "off"):
        return None
    head, sep, tail = text.rpartition(":")
    is_share = sep and tail[:1].isdigit() and head.lower() != "hf"
    name, share_text = (head, tail) if is_share else (text, "")
    share = _share(share_text, text) if share_text else 1.0
    if name[:3].lower() == "hf:":
        if not name[3:].strip():
            raise ValueError(f"{text!r}: name the dataset, hf:NAME or hf:PATH")
        return EvalChoice("hf", share, name[3:].strip())
    if name.lower().endswith(".jsonl"):
        return EvalChoice("jsonl", share, name)
    task = name.lower()
    if task not in BUILT_IN:
        raise ValueError(
            f"{name!r} is not an eval task. Valid: {', '.join(BUILT_IN)}, an eval file "
            "PATH.jsonl or a Hugging Face dataset hf:NAME (optionally with the share of "
            "requests that carry an item: retrieval:20%), or none."
        )
    return EvalChoice(task, share)


def is_eval_index(seed: int, index: int, share: float) -> bool:
    """Whether request ``index`` of a level seeded ``seed`` carries an eval item."""
    if share >= 1.0:
        return True
    if share <= 0.0:
        return False
    key = f"{_SHARE_STREAM}:{seed}:{index}".encode()
    return zlib.crc32(key) / 2**32 < share


def repeat_of(seed: int, index: int, share: float) -> int | None:
    """The earlier index whose item eval request ``index`` asks again, or None (most).

    About ``REPEAT_SHARE`` of a level's eval requests repeat the item of the nearest eval
    request before them, so a level tells whether the engine gives the same answer to the
    same question twice under the same load (at temperature 0 it must)."""
    key = f"{_REPEAT_STREAM}:{seed}:{index}".encode()
    if index < 1 or zlib.crc32(key) / 2**32 >= REPEAT_SHARE:
        return None
    for j in range(index - 1, max(-1, index - _REPEAT_REACH), -1):
        if is_eval_index(seed, j, share):
            return j
    return None


def _arithmetic(rng: np.random.Generator, index: int) -> EvalItem:
    op = ("+", "-", "*")[int(rng.integers(3))]
    if op == "*":
        a, b = int(rng.integers(12, 99)), int(rng.integers(101, 999))
        value = a * b
    else:
        a, b = int(rng.integers(1000, 99_999)), int(rng.integers(100, 9_999))
        value = a + b if op == "+" else a - b
    return EvalItem("arithmetic", index, f"Calculate {a} {op} {b}.{_TAIL}", str(value))


def _retrieval(rng: np.random.Generator, index: int, context_words: int) -> EvalItem:
    name = f"{_COLOURS[int(rng.integers(len(_COLOURS)))]} {_ANIMALS[int(rng.integers(10))]}"
    key = str(int(rng.integers(100_000, 999_999)))
    n = max(8, min(context_words, MAX_CONTEXT_WORDS))
    depth = float(rng.uniform(0.0, 1.0))
    start = int(rng.integers(len(_FILLER)))
    words = [_FILLER[(start + k) % len(_FILLER)] for k in range(n)]
    at = round(depth * n)
    fact = f"The key of the {name} is {key}."
    text = " ".join([*words[:at], fact, *words[at:]])
    prompt = f"{text}\nWhat is the key of the {name}?{_TAIL}"
    return EvalItem("retrieval", index, prompt, key, depth=round(depth, 4))


def _ordering(rng: np.random.Generator, index: int) -> EvalItem:
    n = int(rng.integers(5, 9))
    values = [int(v) for v in rng.choice(np.arange(1, 1000), size=n, replace=False)]
    shown = ", ".join(map(str, values))
    prompt = f"Sort these numbers from smallest to largest: {shown}.{_ORDER_TAIL}"
    answer = ", ".join(map(str, sorted(values)))
    return EvalItem("ordering", index, prompt, answer, LONG_ANSWER_TOKENS, scorer="sequence")


_FIELDS = ("id", "name", "colour", "count", "active", "level", "animal")


def _property(rng: np.random.Generator) -> dict[str, Any]:
    kind = int(rng.integers(4))
    if kind == 0:
        lo = int(rng.integers(0, 500))
        return {"type": "integer", "minimum": lo, "maximum": lo + int(rng.integers(1, 100))}
    if kind == 1:
        picks = rng.choice(len(_COLOURS), size=3, replace=False)
        return {"type": "string", "enum": [_COLOURS[int(i)] for i in picks]}
    if kind == 2:
        return {"type": "boolean"}
    return {"type": "string", "const": _ANIMALS[int(rng.integers(len(_ANIMALS)))]}


def _schema(rng: np.random.Generator, index: int) -> EvalItem:
    n = int(rng.integers(2, 5))
    names = [_FIELDS[int(i)] for i in rng.choice(len(_FIELDS), size=n, replace=False)]
    schema = {
        "type": "object",
        "properties": {k: _property(rng) for k in names},
        "required": names,
        "additionalProperties": False,
    }
    text = json.dumps(schema, separators=(",", ":"))
    return EvalItem("schema", index, _SCHEMA_HEAD + text, text, LONG_ANSWER_TOKENS, scorer="schema")


def make_item(task: EvalTask, seed: int, index: int, context_words: int = 512) -> EvalItem:
    """Item ``index`` of ``task`` for ``seed`` (see the module docstring)."""
    rng = np.random.default_rng([_ITEM_STREAM, seed & 0xFFFFFFFF, index])
    if task == "arithmetic":
        return _arithmetic(rng, index)
    if task == "retrieval":
        return _retrieval(rng, index, context_words)
    if task == "ordering":
        return _ordering(rng, index)
    if task == "schema":
        return _schema(rng, index)
    raise ValueError(f"{task!r} is not a built-in eval task: {', '.join(BUILT_IN)}")


def solve(prompt: str) -> str | None:
    """The right answer to an eval item read back from its prompt, or None when the prompt
    is no eval item (what the sim engine's "model" knows)."""
    tail = prompt[-200:]
    order = _ORDER_RE.search(tail)
    if order is not None:
        return ", ".join(map(str, sorted(int(v) for v in order.group(1).split(", "))))
    shape = _SCHEMA_RE.search(prompt[-1600:])
    if shape is not None:
        try:
            return json.dumps(example(json.loads(shape.group(1))))
        except (ValueError, TypeError, AttributeError, RecursionError):
            return None
    m = _ARITH_RE.search(tail)
    if m is not None:
        a, op, b = int(m.group(1)), m.group(2), int(m.group(3))
        return str(a + b if op == "+" else a - b if op == "-" else a * b)
    q = _QUESTION_RE.search(tail)
    if q is None:
        return None
    fact = re.search(r"The key of the " + re.escape(q.group(1)) + r" is (\d{1,12})\.", prompt)
    return fact.group(1) if fact else None


def wrong_answer(right: str, shift: int) -> str:
    """A wrong answer beside ``right`` (what the sim says when its error model draws an
    error): an integer moved by ``shift``, a list whose first number is, or a JSON object
    without its first property."""
    if re.fullmatch(r"-?\d+", right):
        return str(int(right) + shift)
    if right.startswith("{"):
        obj = json.loads(right)
        return json.dumps({k: v for k, v in list(obj.items())[1:]})
    head, sep, rest = right.partition(", ")
    return f"{int(head) + shift}{sep}{rest}" if head.isdigit() else right + " no"

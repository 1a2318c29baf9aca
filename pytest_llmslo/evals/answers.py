"""A level's eval answers: scored as they are decoded, kept as digests.

``AnswerBook`` sits beside the backlog that decodes a level's records: for each measured
request that carried an eval item (``tasks.is_eval_index``) it takes the text the stream
delivered (a failed request has none, and is wrong: failures are never green), rebuilds the
item from the seed and the index, and keeps one row per item: its index, whether the answer
was right, and a digest of the answer (``digest``: the text with its whitespace folded,
hashed), so two runs can be compared answer by answer without keeping the texts. The text of
the ``SAMPLE_ANSWERS`` answers of the lowest indices is kept too, cut to ``SAMPLE_CHARS``,
for the reports and to show where a changed answer diverges (``regression.answers``).

An answer is read up to ``ANSWER_CHARS`` characters (a reply is bytes from an endpoint: it
is bounded, and only ever compared, never run). The built-in tasks' answers are integers;
``first_integer`` reads the first one of the reply, so ``"The answer is 5759."`` scores.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from typing import Any

from .custom import CUSTOM, load_scorer
from .hfreading import HfReading
from .scorers import score
from .source import EvalSource
from .tasks import EvalItem, EvalTask, is_eval_index

__all__ = ["ANSWER_CHARS", "SAMPLE_ANSWERS", "AnswerBook", "digest", "first_integer"]

ANSWER_CHARS = 4096
SAMPLE_ANSWERS = 20
SAMPLE_CHARS = 200

_INT_RE = re.compile(r"-?\d[\d,]*")
_SPACE_RE = re.compile(r"\s+")


def first_integer(text: str) -> str | None:
    """The first integer of ``text`` (thousands separators dropped), or None."""
    m = _INT_RE.search(text[:ANSWER_CHARS])
    return None if m is None else m.group(0).replace(",", "")


def digest(text: str | None) -> str:
    """A short digest of an answer: its whitespace folded, hashed (``-`` for no answer)."""
    if text is None:
        return "-"
    folded = _SPACE_RE.sub(" ", text[:ANSWER_CHARS]).strip()
    return hashlib.blake2b(folded.encode(), digest_size=8).hexdigest()


@dataclass
class AnswerBook:
    """The eval answers of one level (see the module docstring)."""

    task: EvalTask
    seed: int
    share: float
    context_words: int = 512
    path: str | None = None
    #: The ``module:function`` scoring the eval file's ``custom`` rows (``custom.py``).
    scorer: str | None = None
    #: How the ``hf`` task reads the dataset ``path`` names (``hfreading.py``).
    hf: HfReading | None = None
    rows: dict[int, tuple[bool, str]] = field(default_factory=dict)
    samples: list[dict[str, Any]] = field(default_factory=list)
    failed: int = 0
    #: The first error the custom scorer raised, if it raised one.
    scorer_error: str | None = None

    def __post_init__(self) -> None:
        self._source = EvalSource(
            self.task, self.seed, self.context_words, self.path, self.share, self.scorer, self.hf
        )
        self._custom = None if self.scorer is None else load_scorer(self.scorer)

    def __getstate__(self) -> dict[str, Any]:
        # Sent back from a worker process without its items (rebuilt from the seed).
        return {k: v for k, v in self.__dict__.items() if k not in ("_source", "_custom")}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self.__post_init__()

    def _score(self, item: EvalItem, text: str) -> bool:
        if item.scorer != CUSTOM or self._custom is None:
            return score(item.scorer, text, item.answer, item.tolerance)
        try:
            return self._custom(text, item.answer) is True
        except Exception as exc:  # the user's function: a reply it raises on is wrong
            if self.scorer_error is None:
                self.scorer_error = f"{self.scorer} raised {exc!r:.300} on item {item.index}"
            return False

    @property
    def fingerprint(self) -> str:
        """The eval source's (``EvalSource.fingerprint``): a user's rows, as read here."""
        return self._source.fingerprint

    def wants(self, index: int) -> bool:
        return is_eval_index(self.seed, index, self.share)

    def item(self, index: int) -> EvalItem:
        return self._source.item(index)

    def add(self, index: int, text: str | None) -> bool:
        """Score the answer of item ``index`` (None: the request failed); True if right."""
        item = self.item(index)
        if text is not None:
            text = text[:ANSWER_CHARS]
        right = text is not None and self._score(item, text)
        if text is None:
            self.failed += 1
        self.rows[index] = (right, digest(text))
        self._sample(
            {
                "index": index,
                "expected": item.answer,
                "answer": None if text is None else text[:SAMPLE_CHARS],
                "correct": right,
            }
        )
        return right

    def _sample(self, sample: dict[str, Any]) -> None:
        """Keep the answers of the lowest indices: two runs of a level keep the same items'."""
        samples = self.samples
        if len(samples) < SAMPLE_ANSWERS:
            samples.append(sample)
            return
        top = max(range(len(samples)), key=lambda k: int(samples[k]["index"]))
        if int(sample["index"]) < int(samples[top]["index"]):
            samples[top] = sample

    @property
    def correct(self) -> int:
        return sum(1 for right, _ in self.rows.values() if right)

    def repeats(self) -> tuple[int, list[list[int]]]:
        """(pairs of a repeated item answered twice, those whose two answers differ as
        ``[index, repeated index]``, at most ``SAMPLE_ANSWERS``)."""
        pairs = 0
        unstable: list[list[int]] = []
        for index in sorted(self.rows):
            base = self._source.repeat_of(index)
            if base is None or base not in self.rows:
                continue
            if self.rows[index][1] == "-" or self.rows[base][1] == "-":
                continue  # a failed request has no answer to compare
            pairs += 1
            if self.rows[index][1] != self.rows[base][1] and len(unstable) < SAMPLE_ANSWERS:
                unstable.append([base, index])
        return pairs, unstable

    def to_dict(self) -> dict[str, Any]:
        """What the run keeps (``Run.meta["quality"]``): counts, one row per item
        (``[index, 1 or 0, digest]``, by index), the sample answers, and the items asked
        twice: how many pairs were answered, and those answered differently."""
        repeated, unstable = self.repeats()
        return {
            "task": self.task,
            **({"path": self.path} if self.path else {}),
            **({"scorer": self.scorer} if self.scorer else {}),
            **({"hf": self.hf.to_dict()} if self.hf is not None else {}),
            **({"scorer_error": self.scorer_error} if self.scorer_error else {}),
            "seed": self.seed,
            "share": self.share,
            "items": len(self.rows),
            "correct": self.correct,
            "failed": self.failed,
            "answers": [[i, int(r), d] for i, (r, d) in sorted(self.rows.items())],
            "repeated": repeated,
            "unstable": unstable,
            "samples": sorted(self.samples, key=lambda s: int(s["index"])),
        }

    def merge(self, other: AnswerBook) -> None:
        """Take the answers of another book of the same level (another worker's)."""
        self.rows.update(other.rows)
        self.failed += other.failed
        self.scorer_error = self.scorer_error or other.scorer_error
        for sample in other.samples:
            self._sample(sample)

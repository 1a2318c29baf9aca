"""The eval items of a level by index, built-in or from a user's file.

``EvalSource`` is what the workload (the prompt of an eval request) and the answer book
(its reference and scorer) both read: item ``i`` depends on the level's seed and ``i``
alone, so the two, in whatever process, agree on it without shipping it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json

from ..errors import WorkloadError
from .custom import CUSTOM
from .dataset import EvalRow, read_eval_file, row_order
from .hfdataset import read_hf_rows
from .hfreading import HfReading
from .tasks import EVAL_TASKS, USER_TASKS, EvalItem, EvalTask, make_item, repeat_of

__all__ = ["EvalSource", "eval_problem"]


def eval_problem(
    task: str | None, share: float, path: str | None, kind: str, turns: int
) -> str | None:
    """What is wrong with an eval asked of a workload of ``kind`` and ``turns`` (None:
    nothing): eval items travel in single-turn synthetic or shared-prefix workloads."""
    if task is None:
        return None
    if task not in EVAL_TASKS:
        return f"{task!r} is not an eval task. Valid tasks: {', '.join(EVAL_TASKS)}."
    if not 0.0 < share <= 1.0:
        return f"eval share must be in (0, 1], got {share!r}"
    if (task in USER_TASKS) != bool(path):
        return "an eval file or dataset (eval_path) goes with the jsonl and hf eval tasks alone"
    if kind not in ("synthetic", "shared_prefix") or turns > 1:
        return (
            "eval items travel in single-turn synthetic or shared-prefix workloads, not "
            f"{kind!r} with {turns} turn(s)"
        )
    return None


class EvalSource:
    """Item ``index`` of ``task`` for a level seeded ``seed`` (``path``: the eval file of
    the ``jsonl`` task; ``context_words``: the retrieval task's context; ``share``: the
    share of requests that carry an item, which says which ones a repeat repeats;
    ``scorer``: the ``module:function`` that scores the file's ``custom`` rows; ``hf``: how
    the ``hf`` task reads its dataset, named by ``path``)."""

    def __init__(
        self,
        task: EvalTask,
        seed: int,
        context_words: int = 512,
        path: str | None = None,
        share: float = 1.0,
        scorer: str | None = None,
        hf: HfReading | None = None,
    ) -> None:
        self.task = task
        self.seed = seed
        self.share = share
        self.context_words = context_words
        self._rows: list[EvalRow] = []
        if task in USER_TASKS:
            if not path:
                raise ValueError(f"the {task} eval needs the path of its file or dataset")
            if task == "jsonl":
                self._rows = read_eval_file(path)
            else:
                self._rows = read_hf_rows(path, hf or HfReading())
            self._order = row_order(len(self._rows), seed)
            if scorer is None and any(r.scorer == CUSTOM for r in self._rows):
                what = f"eval file {path}" if task == "jsonl" else f"eval dataset hf:{path}"
                raise WorkloadError(
                    f"{what}: rows ask for the custom scorer, and none is named: "
                    "name the function with --slo-eval-scorer module:function (or "
                    "eval_scorer= in the marker or the run file)"
                )

    @property
    def fingerprint(self) -> str:
        """A digest of a user's rows (empty for the built-in tasks, made by the code): two
        processes whose fingerprints differ read different data under the same name."""
        if not self._rows:
            return ""
        h = hashlib.blake2b(digest_size=16)
        for row in self._rows:
            h.update(json.dumps(row, separators=(",", ":")).encode())
            h.update(b"\n")
        return h.hexdigest()

    def repeat_of(self, index: int) -> int | None:
        """The index whose item request ``index`` asks again (``tasks.repeat_of``)."""
        return repeat_of(self.seed, index, self.share)

    def item(self, index: int) -> EvalItem:
        base = self.repeat_of(index)
        if base is not None:
            return dataclasses.replace(self._item(base), index=index)
        return self._item(index)

    def _item(self, index: int) -> EvalItem:
        if not self._rows:
            return make_item(self.task, self.seed, index, self.context_words)
        row = self._rows[int(self._order[index % len(self._rows)])]
        return EvalItem(
            self.task,
            index,
            row.prompt,
            row.reference,
            row.max_tokens,
            None,
            row.scorer,
            row.tolerance,
            row.history,
            row.system,
        )

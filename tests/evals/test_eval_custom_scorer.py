"""A scorer the user writes: named in the configuration as module:function, asked for by
an eval file's rows as "custom", never named by the data itself."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_llmslo.errors import WorkloadError
from pytest_llmslo.evals import AnswerBook, EvalSource
from pytest_llmslo.evals.custom import load_scorer, parse_scorer_ref
from pytest_llmslo.load import WorkloadSpec

SCORING = """
def judge(reply, reference):
    return reply.strip().lower().startswith(reference.lower())

def broken(reply, reference):
    raise RuntimeError("no model to ask")

NOT_A_FUNCTION = 3
"""

ROWS = [
    {"prompt": "Capital of France?", "reference": "Paris", "scorer": "custom"},
    {"prompt": "2 + 2 =", "reference": "4", "scorer": "integer"},
]


@pytest.fixture
def scoring(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    (tmp_path / "my_scoring.py").write_text(SCORING)
    monkeypatch.syspath_prepend(str(tmp_path))
    path = tmp_path / "evals.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    return str(path)


def test_the_named_function_scores_the_custom_rows(scoring: str) -> None:
    book = AnswerBook("jsonl", 0, 1.0, path=scoring, scorer="my_scoring:judge")
    replies = {"Capital of France?": "paris, of course", "2 + 2 =": "4"}
    for i in range(2):
        assert book.add(i, replies[book.item(i).prompt]) is True
    wrong = AnswerBook("jsonl", 0, 1.0, path=scoring, scorer="my_scoring:judge")
    for i in range(2):
        wrong.add(i, "Lyon" if wrong.item(i).scorer == "custom" else "4")
    d = wrong.to_dict()
    assert (d["items"], d["correct"], d["scorer"]) == (2, 1, "my_scoring:judge")


def test_a_scorer_that_raises_counts_the_answer_wrong_and_says_so(scoring: str) -> None:
    book = AnswerBook("jsonl", 0, 1.0, path=scoring, scorer="my_scoring:broken")
    custom = next(i for i in range(2) if book.item(i).scorer == "custom")
    assert book.add(custom, "Paris") is False
    assert "RuntimeError('no model to ask')" in book.to_dict()["scorer_error"]


def test_custom_rows_without_a_named_scorer_say_how_to_name_one(scoring: str) -> None:
    with pytest.raises(WorkloadError, match="--slo-eval-scorer module:function"):
        EvalSource("jsonl", 0, path=scoring)
    with pytest.raises(WorkloadError, match="--slo-eval-scorer"):
        WorkloadSpec(isl=16, osl=8, eval_task="jsonl", eval_path=scoring).answer_book()


def test_the_data_file_cannot_name_code(tmp_path: Path) -> None:
    path = tmp_path / "evil.jsonl"
    path.write_text(json.dumps({"prompt": "p", "reference": "x", "scorer": "os:system"}) + "\n")
    with pytest.raises(WorkloadError, match="unknown scorer 'os:system'"):
        EvalSource("jsonl", 0, path=str(path), scorer="my_scoring:judge")


@pytest.mark.parametrize("ref", ["judge", "my scoring:judge", "a:b:c", "os.system()", ":f"])
def test_a_scorer_is_named_module_colon_function(ref: str) -> None:
    with pytest.raises(ValueError, match="module:function"):
        parse_scorer_ref(ref)
    assert parse_scorer_ref("pkg.mod:judge") == "pkg.mod:judge"
    assert parse_scorer_ref("none") is None


def test_a_scorer_that_cannot_be_loaded_says_why(scoring: str) -> None:
    with pytest.raises(WorkloadError, match="cannot be imported"):
        load_scorer("no_such_module_here:judge")
    with pytest.raises(WorkloadError, match="has no 'missing'"):
        load_scorer("my_scoring:missing")
    with pytest.raises(WorkloadError, match="is not a function"):
        load_scorer("my_scoring:NOT_A_FUNCTION")
    assert load_scorer("my_scoring:judge")("Paris!", "paris") is True

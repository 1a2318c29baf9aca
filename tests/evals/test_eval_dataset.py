"""A user's eval file: its rows validated line by line, taken in a seeded order, and each
scorer's rule."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_llmslo.errors import WorkloadError
from pytest_llmslo.evals import AnswerBook, EvalChoice, EvalSource, parse_eval, score
from pytest_llmslo.load import WorkloadSpec
from pytest_llmslo.load.workload import PromptSource


def write(path: Path, rows: list[object]) -> str:
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return str(path)


ROWS = [
    {"prompt": "Capital of France?", "reference": "Paris"},
    {"prompt": "2.5 * 4 =", "reference": 10, "scorer": "numeric", "tolerance": 0.01},
    {"prompt": "A user as JSON", "reference": {"name": "string"}, "scorer": "json"},
    {"prompt": "Say hello", "reference": "^hel+o", "scorer": "regex", "max_tokens": 4},
]


@pytest.mark.parametrize(
    ("scorer", "text", "reference", "right"),
    [
        ("exact", '  "Paris."  ', "paris", True),
        ("exact", "Paris, France", "Paris", False),
        ("contains", "It is Paris, France.", "paris", True),
        ("numeric", "about 10.004 units", "10", False),
        ("numeric", "= 1,000", "1000", True),
        ("regex", "helllo world", "^hel+o", True),
        ("regex", "oh hello", "^hel+o", False),
        ("json", 'Here: {"name": "Ada", "age": 3}', '{"name": "string"}', True),
        ("json", '{"name": 3}', '{"name": "string"}', False),
        ("json", "not json at all", "", False),
        ("integer", "The answer is -42.", "-42", True),
    ],
)
def test_scorers(scorer: str, text: str, reference: str, right: bool) -> None:
    assert score(scorer, text, reference) is right


def test_numeric_tolerance() -> None:
    assert score("numeric", "10.004", "10", 0.01)


def test_rows_are_read_and_taken_in_a_seeded_order(tmp_path: Path) -> None:
    path = write(tmp_path / "e.jsonl", ROWS)
    a, b = EvalSource("jsonl", 1, path=path), EvalSource("jsonl", 1, path=path)
    items = [a.item(i) for i in range(8)]
    assert [i.prompt for i in items] == [b.item(i).prompt for i in range(8)]
    assert sorted(i.prompt for i in items[:4]) == sorted(r["prompt"] for r in ROWS)  # type: ignore[type-var]
    assert items[4].prompt == items[0].prompt  # cycled
    regex = next(i for i in items if i.scorer == "regex")
    assert regex.max_tokens == 4 and regex.answer == "^hel+o"
    other = [EvalSource("jsonl", 2, path=path).item(i).prompt for i in range(4)]
    assert other != [i.prompt for i in items[:4]] or len(ROWS) < 3


def test_the_answer_book_scores_by_each_rows_scorer(tmp_path: Path) -> None:
    path = write(tmp_path / "e.jsonl", ROWS)
    book = AnswerBook("jsonl", 1, 1.0, path=path)
    replies = {"Capital of France?": "Paris.", "2.5 * 4 =": "10", "Say hello": "nope"}
    for i in range(4):
        prompt = book.item(i).prompt
        book.add(i, replies.get(prompt, '{"name": "Ada"}'))
    d = book.to_dict()
    assert (d["items"], d["correct"], d["path"]) == (4, 3, path)


def test_a_workload_sends_the_files_prompts(tmp_path: Path) -> None:
    path = write(tmp_path / "e.jsonl", ROWS)
    spec = WorkloadSpec(isl=16, osl=8, eval_task="jsonl", eval_path=path)
    prompts = {PromptSource(spec).prompt(i).text for i in range(4)}
    assert prompts == {r["prompt"] for r in ROWS}  # type: ignore[misc]
    with pytest.raises(WorkloadError, match="jsonl and hf eval tasks alone"):
        WorkloadSpec(eval_task="arithmetic", eval_path=path)


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("not json", "line 2: not JSON"),
        ('{"reference": "x"}', "line 2: 'prompt' .*must be"),
        ('{"prompt": "p", "reference": "x", "scorer": "bleu"}', "unknown scorer 'bleu'"),
        ('{"prompt": "p", "reference": "(", "scorer": "regex"}', "line 2"),
        ('{"prompt": "p", "reference": "x", "scorer": "numeric"}', "line 2"),
        ('{"prompt": "p", "reference": {"a": "date"}, "scorer": "json"}', "key.*type"),
        ('{"prompt": "p", "reference": "x", "max_tokens": 0}', "max_tokens"),
    ],
)
def test_a_bad_row_names_its_line(tmp_path: Path, line: str, message: str) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps(ROWS[0]) + "\n" + line + "\n")
    with pytest.raises(WorkloadError, match=message):
        EvalSource("jsonl", 0, path=str(path))


def test_an_empty_or_missing_file_says_so(tmp_path: Path) -> None:
    (tmp_path / "empty.jsonl").write_text("\n")
    with pytest.raises(WorkloadError, match="no rows"):
        EvalSource("jsonl", 0, path=str(tmp_path / "empty.jsonl"))
    with pytest.raises(WorkloadError, match=r"missing\.jsonl"):
        EvalSource("jsonl", 0, path=str(tmp_path / "missing.jsonl"))


def test_parse_an_eval_file() -> None:
    assert parse_eval("data/evals.jsonl") == EvalChoice("jsonl", 1.0, "data/evals.jsonl")
    assert parse_eval("C:/x/Evals.JSONL:25%") == EvalChoice("jsonl", 0.25, "C:/x/Evals.JSONL")
    half = EvalChoice("jsonl", 0.5, "e.jsonl")
    assert parse_eval(str(half)) == half

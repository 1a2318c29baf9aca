"""The built-in eval tasks: seeded items with exact answers, read back by the sim, chosen
among a level's requests by share, and scored from a reply's text."""

from __future__ import annotations

import pytest

from pytest_llmslo.errors import WorkloadError
from pytest_llmslo.evals import (
    AnswerBook,
    EvalChoice,
    digest,
    first_integer,
    is_eval_index,
    make_item,
    parse_eval,
    solve,
)
from pytest_llmslo.load import WorkloadSpec
from pytest_llmslo.load.workload import PromptSource


@pytest.mark.parametrize("task", ["arithmetic", "retrieval"])
def test_items_are_seeded_by_seed_and_index_alone(task: str) -> None:
    a = make_item(task, 7, 3, 200)  # type: ignore[arg-type]
    assert a == make_item(task, 7, 3, 200)  # type: ignore[arg-type]
    assert a.prompt != make_item(task, 7, 4, 200).prompt  # type: ignore[arg-type]
    assert a.prompt != make_item(task, 8, 3, 200).prompt  # type: ignore[arg-type]


def test_arithmetic_answers_are_exact() -> None:
    for i in range(200):
        item = make_item("arithmetic", 1, i)
        a, op, b = item.prompt.split()[1:4]
        b = b.rstrip(".")
        expected = {"+": int(a) + int(b), "-": int(a) - int(b), "*": int(a) * int(b)}[op]
        assert item.answer == str(expected)
        assert solve(item.prompt) == item.answer


def test_retrieval_plants_the_key_at_its_depth_in_a_context_of_the_asked_length() -> None:
    depths = []
    for i in range(50):
        item = make_item("retrieval", 2, i, 300)
        assert 300 <= item.words <= 330
        assert f"is {item.answer}." in item.prompt
        assert solve(item.prompt) == item.answer
        assert item.depth is not None
        at = item.prompt.index(f"is {item.answer}.") / len(item.prompt)
        assert abs(at - item.depth) < 0.1
        depths.append(item.depth)
    assert min(depths) < 0.2 and max(depths) > 0.8


def test_a_plain_prompt_is_no_eval_item() -> None:
    assert solve("the model serves tokens as fast as the batch allows") is None
    assert solve("What is the key of the red fox? Reply with the number only.") is None


def test_the_share_picks_about_that_many_requests() -> None:
    picked = sum(is_eval_index(5, i, 0.2) for i in range(5000))
    assert 900 < picked < 1100
    assert all(is_eval_index(5, i, 1.0) for i in range(100))


def test_eval_items_take_their_share_of_a_workloads_prompts() -> None:
    spec = WorkloadSpec(isl=64, osl=32, eval_task="arithmetic", eval_share=0.5, seed=4)
    source = PromptSource(spec)
    prompts = [source.prompt(i) for i in range(200)]
    evals = [p for p in prompts if p.text.startswith("Calculate ")]
    assert 70 < len(evals) < 130
    assert all(p.osl == 16 for p in evals)
    assert all(p.osl == 32 for p in prompts if p not in evals)
    book = spec.answer_book()
    assert book is not None
    assert [book.wants(i) for i in range(200)] == [p in evals for p in prompts]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"eval_task": "trivia"}, "not an eval task"),
        ({"eval_task": "arithmetic", "eval_share": 0.0}, "eval share"),
        ({"eval_task": "arithmetic", "turns": 2}, "single-turn"),
    ],
)
def test_a_bad_eval_says_what_to_do(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(WorkloadError, match=message):
        WorkloadSpec(**kwargs)  # type: ignore[arg-type]


def test_parse_eval() -> None:
    assert parse_eval("arithmetic") == EvalChoice("arithmetic", 1.0)
    assert parse_eval("Retrieval:20%") == EvalChoice("retrieval", 0.2)
    assert parse_eval("retrieval:0.5") == EvalChoice("retrieval", 0.5)
    assert parse_eval("none") is None
    assert parse_eval(str(EvalChoice("retrieval", 0.25))) == EvalChoice("retrieval", 0.25)
    with pytest.raises(ValueError, match="not an eval task"):
        parse_eval("mmlu")
    with pytest.raises(ValueError, match="share"):
        parse_eval("arithmetic:150%")


def test_the_first_integer_of_a_reply_is_its_answer() -> None:
    assert first_integer("The answer is 5,759. Then 12") == "5759"
    assert first_integer("-42 apples") == "-42"
    assert first_integer("no number here") is None


def test_digests_fold_whitespace_and_tell_answers_apart() -> None:
    assert digest(" 42  the\nmodel ") == digest("42 the model")
    assert digest("42") != digest("43")
    assert digest(None) == "-"


def test_the_answer_book_scores_bounds_and_samples() -> None:
    book = AnswerBook("arithmetic", 9, 1.0)
    right = book.item(0).answer
    assert book.add(0, f"{right} the model")
    assert not book.add(1, "7" * 10_000)  # wrong, and cut to ANSWER_CHARS
    assert not book.add(2, None)  # a failed request is a wrong answer
    d = book.to_dict()
    assert (d["items"], d["correct"], d["failed"]) == (3, 1, 1)
    assert [row[:2] for row in d["answers"]] == [[0, 1], [1, 0], [2, 0]]
    assert d["answers"][2][2] == "-"
    assert all(s["answer"] is None or len(s["answer"]) <= 200 for s in d["samples"])
    other = AnswerBook("arithmetic", 9, 1.0)
    other.add(3, other.item(3).answer)
    book.merge(other)
    assert book.to_dict()["correct"] == 2


def test_a_few_eval_requests_repeat_the_item_before_them() -> None:
    from pytest_llmslo.evals import EvalSource
    from pytest_llmslo.evals.tasks import repeat_of

    repeats = {i: repeat_of(3, i, 0.5) for i in range(2000)}
    pairs = {i: j for i, j in repeats.items() if j is not None}
    assert 20 < len(pairs) < 100  # about 5 %
    source = EvalSource("arithmetic", 3, share=0.5)
    for i, j in pairs.items():
        assert j < i and is_eval_index(3, j, 0.5)
        assert source.item(i).prompt == source.item(j).prompt and source.item(i).index == i


def test_the_answer_book_names_repeated_items_answered_differently() -> None:
    from pytest_llmslo.evals.tasks import repeat_of

    book = AnswerBook("arithmetic", 3, 1.0)
    i = next(i for i in range(1, 1000) if repeat_of(3, i, 1.0) is not None)
    j = repeat_of(3, i, 1.0)
    assert j is not None
    book.add(j, "1 the model")
    book.add(i, "1 the model")
    assert book.to_dict()["repeated"] == 1 and book.to_dict()["unstable"] == []
    book.add(i, "2 the model")
    assert book.to_dict()["unstable"] == [[j, i]]

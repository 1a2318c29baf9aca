"""The ordering and schema eval tasks: seeded items with exact answers, the JSON-schema
subset they are validated against, and the scorers that judge a reply."""

from __future__ import annotations

import json

import pytest

from pytest_llmslo.evals import make_item, parse_eval, score, solve
from pytest_llmslo.evals.schema import check_schema, validate
from pytest_llmslo.evals.scorers import check_reference
from pytest_llmslo.evals.tasks import wrong_answer


@pytest.mark.parametrize("task", ["ordering", "schema"])
def test_items_are_seeded_answered_by_the_sim_and_a_wrong_answer_scores_wrong(task: str) -> None:
    for i in range(100):
        item = make_item(task, 5, i)  # type: ignore[arg-type]
        assert item == make_item(task, 5, i)  # type: ignore[arg-type]
        right = solve(item.prompt)
        assert right is not None and score(item.scorer, right, item.answer)
        assert not score(item.scorer, wrong_answer(right, 1 + i % 9), item.answer)
    assert make_item(task, 5, 0).prompt != make_item(task, 6, 0).prompt  # type: ignore[arg-type]


def test_an_ordering_answer_is_the_sorted_list() -> None:
    for i in range(50):
        item = make_item("ordering", 1, i)
        shown = item.prompt.split(": ", 1)[1].split(".")[0]
        values = [int(v) for v in shown.split(", ")]
        assert 5 <= len(values) <= 8 and len(set(values)) == len(values)
        assert item.answer == ", ".join(map(str, sorted(values)))
        assert item.scorer == "sequence"


def test_a_schema_item_asks_for_an_object_its_schema_describes() -> None:
    item = make_item("schema", 3, 0)
    schema = json.loads(item.answer)
    check_schema(schema)
    assert schema["type"] == "object" and 2 <= len(schema["required"]) <= 4
    assert schema["additionalProperties"] is False
    assert item.prompt.endswith(item.answer) and item.scorer == "schema"


@pytest.mark.parametrize(
    ("text", "right"),
    [
        ("7, 12, 41", True),
        ("Sorted: 7,12,41.", True),
        ("7, 12, 41, 99", True),  # the first integers are the answer
        ("7, 41, 12", False),
        ("7, 12", False),
        ("none", False),
    ],
)
def test_the_sequence_scorer(text: str, right: bool) -> None:
    assert score("sequence", text, "7, 12, 41") is right


SCHEMA = {
    "type": "object",
    "properties": {
        "id": {"type": "integer", "minimum": 10, "maximum": 20},
        "colour": {"type": "string", "enum": ["red", "blue"]},
        "ok": {"type": "boolean"},
        "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 2},
    },
    "required": ["id", "colour"],
    "additionalProperties": False,
}


@pytest.mark.parametrize(
    ("value", "valid"),
    [
        ({"id": 12, "colour": "red"}, True),
        ({"id": 12, "colour": "red", "ok": False, "tags": ["a"]}, True),
        ({"id": 9, "colour": "red"}, False),  # below the minimum
        ({"id": 12.5, "colour": "red"}, False),  # not an integer
        ({"id": True, "colour": "red"}, False),  # a boolean is no integer
        ({"id": 12, "colour": "green"}, False),  # not in the enum
        ({"id": 12}, False),  # a required key missing
        ({"id": 12, "colour": "red", "extra": 1}, False),  # additionalProperties false
        ({"id": 12, "colour": "red", "tags": ["a", "b", "c"]}, False),  # maxItems
        ({"id": 12, "colour": "red", "tags": [1]}, False),  # items' type
        ([{"id": 12, "colour": "red"}], False),  # not an object
    ],
)
def test_the_schema_subset_validates(value: object, valid: bool) -> None:
    assert validate(value, SCHEMA) is valid


def test_the_schema_scorer_reads_the_json_in_a_reply() -> None:
    ref = json.dumps(SCHEMA)
    assert score("schema", 'Here it is: {"id": 15, "colour": "blue"} done', ref)
    assert not score("schema", "no json here", ref)
    assert not score("schema", '{"id": 15', ref)


@pytest.mark.parametrize(
    ("schema", "message"),
    [
        ({"type": "object", "patternProperties": {}}, "unsupported schema keyword"),
        ({"type": "tuple"}, "unknown schema type"),
        ({"required": "id"}, "list of property names"),
        ([1, 2], "a schema is a JSON object"),
    ],
)
def test_a_schema_outside_the_subset_is_refused_with_why(schema: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        check_schema(schema)
    with pytest.raises(ValueError, match=message):
        check_reference("schema", json.dumps(schema))


def test_a_bad_sequence_reference_says_what_it_should_be() -> None:
    with pytest.raises(ValueError, match="integers separated by commas"):
        check_reference("sequence", "seven, twelve")
    check_reference("sequence", "7, 12, 41")


def test_parse_eval_knows_the_new_tasks() -> None:
    assert parse_eval("ordering:20%") == ("ordering", 0.2, None)
    assert parse_eval("schema") == ("schema", 1.0, None)
    with pytest.raises(ValueError, match="ordering, schema"):
        parse_eval("sorting")

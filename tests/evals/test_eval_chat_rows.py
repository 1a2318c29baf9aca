"""An eval file's chat rows: ``messages`` instead of ``prompt``, validated, sent as the
request's messages (or the texts joined for the completions endpoint) and scored on the
reply to the last user message."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_llmslo.errors import WorkloadError
from pytest_llmslo.evals import EvalSource
from pytest_llmslo.load import ClientSettings, WorkloadSpec
from pytest_llmslo.load.client import request_body
from pytest_llmslo.load.workload import PromptSource

CHAT = {
    "messages": [
        {"role": "system", "content": "Answer in one word."},
        {"role": "user", "content": "Capital of France?"},
        {"role": "assistant", "content": "Paris"},
        {"role": "user", "content": "And of Italy?"},
    ],
    "reference": "Rome",
}


def _file(tmp_path: Path, *rows: object) -> str:
    path = tmp_path / "chat.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def test_a_chat_row_is_its_last_user_message_after_its_turns(tmp_path: Path) -> None:
    item = EvalSource("jsonl", 0, path=_file(tmp_path, CHAT)).item(0)
    assert item.prompt == "And of Italy?" and item.answer == "Rome"
    assert item.history == (("Capital of France?", "Paris"),)
    assert item.system == "Answer in one word."
    assert item.words == 3 + 3 + 1 + 4  # every message's words count toward the prompt


def test_a_chat_row_is_sent_as_its_messages(tmp_path: Path) -> None:
    spec = WorkloadSpec(isl=16, osl=8, eval_task="jsonl", eval_path=_file(tmp_path, CHAT))
    p = PromptSource(spec).prompt(0)
    chat = ClientSettings("http://127.0.0.1:1", "m", endpoint="chat")
    body = json.loads(request_body(chat, p.text, p.osl, history=p.history, system=p.system))
    assert body["messages"] == CHAT["messages"]
    plain = ClientSettings("http://127.0.0.1:1", "m", endpoint="completions")
    body = json.loads(request_body(plain, p.text, p.osl, history=p.history, system=p.system))
    assert body["prompt"] == "Answer in one word.\nCapital of France?\nParis\nAnd of Italy?"


@pytest.mark.parametrize(
    ("messages", "message"),
    [
        ([], "list of 1 to 64 messages"),
        ([{"role": "user"}], "a string content"),
        ([{"role": "tool", "content": "x"}], "role"),
        ([{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}], "end with"),
        ([{"role": "user", "content": "a"}, {"role": "user", "content": "b"}], "alternate"),
        ([{"role": "system", "content": "s"}], "end with"),
    ],
)
def test_a_bad_chat_row_says_what_is_wrong(tmp_path: Path, messages: object, message: str) -> None:
    row = {"messages": messages, "reference": "x"}
    with pytest.raises(WorkloadError, match=f"line 1: .*{message}"):
        EvalSource("jsonl", 0, path=_file(tmp_path, row))


def test_a_row_has_a_prompt_or_messages_not_both(tmp_path: Path) -> None:
    row = {**CHAT, "prompt": "p"}
    with pytest.raises(WorkloadError, match="'prompt' or 'messages', not both"):
        EvalSource("jsonl", 0, path=_file(tmp_path, row))

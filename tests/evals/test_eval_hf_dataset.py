"""Eval items from a Hugging Face dataset: read offline through ``datasets`` from a folder
saved with ``save_to_disk``, a Parquet file or the local cache of a Hub dataset; its
columns named by ``--slo-eval-hf``; its contents bounded and checked like an eval file's."""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

from pytest_llmslo.errors import WorkloadError
from pytest_llmslo.evals import AnswerBook, EvalChoice, EvalSource, hfdataset, make_item, parse_eval
from pytest_llmslo.evals.hfreading import HfReading, parse_hf_reading
from pytest_llmslo.load import WorkloadSpec

needs_datasets = pytest.mark.skipif(
    importlib.util.find_spec("datasets") is None, reason="the datasets library is not installed"
)


def _columns(n: int = 6) -> dict[str, list[Any]]:
    items = [make_item("arithmetic", 7, i) for i in range(n)]
    return {
        "question": [it.prompt for it in items],
        "answer": [f"Work it out.\n#### {it.answer}" for it in items],
        "id": list(range(n)),
    }


def test_hf_names_a_dataset_with_or_without_a_share() -> None:
    assert parse_eval("hf:openai/gsm8k") == EvalChoice("hf", 1.0, "openai/gsm8k")
    assert parse_eval("hf:gsm8k:20%") == EvalChoice("hf", 0.2, "gsm8k")
    assert parse_eval("HF:/data/evals:0.5") == EvalChoice("hf", 0.5, "/data/evals")
    assert parse_eval("hf:2wiki") == EvalChoice("hf", 1.0, "2wiki")  # a name, not a share
    assert str(parse_eval("hf:gsm8k:20%")) == "hf:gsm8k:20%"
    with pytest.raises(ValueError, match="name the dataset"):
        parse_eval("hf:")


def test_the_reading_is_pairs_or_a_mapping_and_is_checked() -> None:
    r = parse_hf_reading("config=main, split=test,prompt=question,reference=answer,max_items=50")
    assert r == HfReading("main", "test", "question", reference="answer", max_items=50)
    assert parse_hf_reading({"messages": "chat", "tolerance": 0.5}) == HfReading(
        messages="chat", tolerance=0.5
    )
    assert parse_hf_reading("none") is None
    assert r is not None and r.to_dict() == {
        "config": "main",
        "split": "test",
        "prompt": "question",
        "reference": "answer",
        "max_items": 50,
    }
    for bad, why in [
        ("prompt", "KEY=VALUE"),
        ("colour=red", "unknown key"),
        ("scorer=os:system", "scorers are"),
        ("max_items=0", "max_items"),
        ("max_items=many", "not a number"),
        ("tolerance=-1", "tolerance"),
        ("prompt=a,messages=b", "not both"),
        ("prompt=a\nb", "prompt="),
    ]:
        with pytest.raises(ValueError, match=why):
            parse_hf_reading(bad)


def test_the_hf_task_needs_its_dataset() -> None:
    with pytest.raises(WorkloadError, match="jsonl and hf eval tasks"):
        WorkloadSpec(eval_task="hf")
    with pytest.raises(WorkloadError, match="jsonl and hf eval tasks"):
        WorkloadSpec(eval_task="arithmetic", eval_path="x")


def test_without_the_library_the_eval_says_to_install_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "datasets", None)  # import datasets raises ImportError
    with pytest.raises(WorkloadError, match=r"install datasets \(pip install datasets\)"):
        EvalSource("hf", 0, path="gsm8k")


@needs_datasets
def test_a_saved_dataset_dict_is_read_by_split_and_scored(tmp_path: Path) -> None:
    from datasets import Dataset, DatasetDict

    cols = _columns()
    DatasetDict(
        {"test": Dataset.from_dict(cols), "train": Dataset.from_dict(_columns(2))}
    ).save_to_disk(str(tmp_path / "ds"))
    reading = HfReading(split="test", prompt="question", reference="answer", reference_after="####")
    reading = dataclasses.replace(reading, scorer="numeric")
    source = EvalSource("hf", 3, path=str(tmp_path / "ds"), hf=reading)
    items = [source.item(i) for i in range(6)]
    assert sorted(it.prompt for it in items) == sorted(cols["question"])
    assert {it.task for it in items} == {"hf"} and {it.scorer for it in items} == {"numeric"}
    by_prompt = {make_item("arithmetic", 7, i).prompt: make_item("arithmetic", 7, i).answer
                 for i in range(6)}  # fmt: skip
    assert all(it.answer == by_prompt[it.prompt] for it in items)
    # The answer book rebuilds the same items, and scores the right answer right.
    book = AnswerBook("hf", 3, 1.0, path=str(tmp_path / "ds"), hf=reading)
    assert book.add(0, f"The answer is {items[0].answer}.") and not book.add(1, "no idea")
    assert book.to_dict()["hf"]["reference_after"] == "####"
    # Two splits and none named: the error names them.
    with pytest.raises(WorkloadError, match=r"has the splits test, train.*split=NAME"):
        EvalSource("hf", 0, path=str(tmp_path / "ds"), hf=HfReading(prompt="question"))


@needs_datasets
def test_a_parquet_file_of_chat_messages(tmp_path: Path) -> None:
    from datasets import Dataset

    chats = [
        [
            {"role": "system", "content": "Answer in one word."},
            {"role": "user", "content": f"Capital number {i}?"},
        ]
        for i in range(4)
    ]
    Dataset.from_dict({"chat": chats, "gold": [f"City{i}" for i in range(4)]}).to_parquet(
        str(tmp_path / "chat.parquet")
    )
    reading = HfReading(messages="chat", reference="gold", cache_dir=str(tmp_path / "cache"))
    source = EvalSource("hf", 0, path=str(tmp_path / "chat.parquet"), hf=reading)
    item = source.item(0)
    assert item.system == "Answer in one word." and item.prompt.startswith("Capital number")
    assert item.answer == "City" + item.prompt.split()[-1].rstrip("?")


@needs_datasets
def test_a_cached_hub_dataset_is_read_offline_and_a_missing_one_says_what_to_do(
    tmp_path: Path,
) -> None:
    import datasets
    from datasets import Dataset, load_dataset

    Dataset.from_dict(_columns(3)).to_parquet(str(tmp_path / "x.parquet"))
    cache = tmp_path / "cache"
    load_dataset("parquet", data_files={"test": str(tmp_path / "x.parquet")}, cache_dir=str(cache))
    # The cache as the library leaves a Hub dataset it downloaded: NAME/CONFIG/VERSION/HASH.
    built = next(p for p in cache.glob("parquet/*/*/*") if p.is_dir())
    into = cache / "someone___tiny" / "default" / "0.0.0" / built.name
    shutil.copytree(built, into)
    for arrow in into.glob("parquet-*.arrow"):
        arrow.rename(arrow.with_name(arrow.name.replace("parquet-", "tiny-")))
    offline_before = datasets.config.HF_HUB_OFFLINE, os.environ.get("HF_HUB_OFFLINE")
    reading = HfReading(prompt="question", reference="answer", cache_dir=str(cache))
    source = EvalSource("hf", 0, path="someone/tiny", hf=reading)
    assert source.item(0).prompt in _columns(3)["question"]
    # Offline for the load alone: the library's flags are back as they were.
    assert (datasets.config.HF_HUB_OFFLINE, os.environ.get("HF_HUB_OFFLINE")) == offline_before
    with pytest.raises(WorkloadError) as err:
        EvalSource("hf", 0, path="someone/absent", hf=reading)
    text = str(err.value)
    assert "read offline, from the local datasets cache" in text
    assert "download it once where the network is open" in text and "PATH.jsonl" in text
    with pytest.raises(WorkloadError, match="no such folder or file"):
        EvalSource("hf", 0, path="./no/such/../dir?", hf=reading)


@needs_datasets
def test_hostile_contents_are_bounded_and_checked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from datasets import Dataset

    def saved(name: str, cols: dict[str, list[Any]]) -> str:
        Dataset.from_dict(cols).save_to_disk(str(tmp_path / name))
        return str(tmp_path / name)

    plain = HfReading(prompt="question", reference="answer")
    ok = saved("ok", _columns(20))
    # At most max_items rows are read, the first ones.
    source = EvalSource("hf", 0, path=ok, hf=dataclasses.replace(plain, max_items=4))
    assert {source.item(i).prompt for i in range(12)} == set(_columns(20)["question"][:4])
    with pytest.raises(WorkloadError, match=r"no column 'prompt'.*columns: question, answer"):
        EvalSource("hf", 0, path=ok)
    # A field over the bound is refused before it is turned into Python.
    monkeypatch.setattr(hfdataset, "MAX_FIELD_BYTES", 100)
    big = saved("big", {"question": ["x" * 101], "answer": ["1"]})
    with pytest.raises(WorkloadError, match="rows 0 to 0, column 'question': a field of 101"):
        EvalSource("hf", 0, path=big, hf=plain)
    monkeypatch.setattr(hfdataset, "MAX_READ_BYTES", 500)
    with pytest.raises(WorkloadError, match="more than 0 MiB of text"):
        EvalSource("hf", 0, path=ok, hf=plain)
    monkeypatch.undo()
    # A row of the wrong type is named by its index, as an eval file's line is.
    nums = saved("nums", {"question": ["Capital?", ""], "answer": ["Paris", "Rome"]})
    with pytest.raises(WorkloadError, match="row 1: 'prompt'"):
        EvalSource("hf", 0, path=nums, hf=plain)
    odd = saved("odd", {"question": [{"a": [1.5]}], "answer": ["x"]})
    with pytest.raises(WorkloadError, match="row 0: 'prompt'"):
        EvalSource("hf", 0, path=odd, hf=plain)
    mapped, cache = tmp_path / "m.parquet", str(tmp_path / "cache")
    _timestamp_parquet(mapped)
    with pytest.raises(WorkloadError, match="no text, number or list"):
        EvalSource("hf", 0, path=str(mapped), hf=dataclasses.replace(plain, cache_dir=cache))
    custom = dataclasses.replace(plain, scorer="custom")
    with pytest.raises(WorkloadError, match=r"eval dataset hf:.*--slo-eval-scorer"):
        EvalSource("hf", 0, path=ok, hf=custom)
    no_marker = dataclasses.replace(plain, reference_after="@@")
    with pytest.raises(WorkloadError, match="row 0: the reference holds no '@@'"):
        EvalSource("hf", 0, path=ok, hf=no_marker)


def _timestamp_parquet(path: Path) -> None:
    """A Parquet file whose prompt column is a timestamp: no type an eval row is made of."""
    import datetime

    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.table(
        {"question": pa.array([datetime.datetime(2026, 1, 1)]), "answer": pa.array(["x"])}
    )
    pq.write_table(table, str(path))


def test_the_load_is_offline_local_and_never_runs_a_loading_script(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Against a stand-in for a library before 4.0 (whose ``load_dataset`` can run a
    dataset's script): what the load was asked, and the flags while it ran."""
    seen: dict[str, Any] = {}

    def load_dataset(path: str, name: str | None = None, *, trust_remote_code: bool = True,
                     **kw: Any) -> Any:  # fmt: skip
        seen.update(kw, path=path, name=name, trust_remote_code=trust_remote_code)
        seen["offline"] = (fake.config.HF_HUB_OFFLINE, os.environ.get("HF_DATASETS_OFFLINE"))
        raise FileNotFoundError("not cached")

    class Utils:
        @staticmethod
        def are_progress_bars_disabled() -> bool:
            return False

    fake: Any = type(sys)("datasets")
    fake.config = type(sys)("datasets.config")
    fake.config.HF_HUB_OFFLINE = False
    fake.utils = Utils
    fake.disable_progress_bars = fake.enable_progress_bars = lambda: None
    fake.DownloadConfig = lambda **kw: kw
    fake.load_dataset = load_dataset
    monkeypatch.setitem(sys.modules, "datasets", fake)
    monkeypatch.delenv("HF_DATASETS_OFFLINE", raising=False)
    with pytest.raises(WorkloadError, match=r"cannot be loaded \(FileNotFoundError: not cached\)"):
        EvalSource("hf", 0, path="openai/gsm8k", hf=HfReading(config="main"))
    assert seen["trust_remote_code"] is False
    assert (seen["path"], seen["name"]) == ("openai/gsm8k", "main")
    assert seen["download_mode"] == "reuse_dataset_if_exists"
    assert seen["download_config"] == {"local_files_only": True}
    assert seen["offline"] == (True, "1")
    assert fake.config.HF_HUB_OFFLINE is False and "HF_DATASETS_OFFLINE" not in os.environ


def test_a_run_file_names_the_dataset_and_how_to_read_it(tmp_path: Path) -> None:
    from pytest_llmslo.settings.runfile import read_run_file

    path = tmp_path / "run.toml"
    path.write_text(
        'engine = "sim"\n[workload]\neval = "hf:openai/gsm8k:20%"\n'
        'eval_hf = { config = "main", split = "test", prompt = "question", max_items = 500 }\n'
    )
    values = read_run_file(path).values
    assert values["eval"] == EvalChoice("hf", 0.2, "openai/gsm8k")
    assert values["eval_hf"] == HfReading("main", "test", "question", max_items=500)

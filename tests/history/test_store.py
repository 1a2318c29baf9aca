"""The run history's files: ids, listing, pruning, hostile files, run references and
provenance."""

from __future__ import annotations

import json
import subprocess
from datetime import timedelta
from pathlib import Path

import pytest
from history_helpers import T0, run_document, save

from pytest_llmslo import cli
from pytest_llmslo.document import DocumentError
from pytest_llmslo.history import provenance, refs, store


def test_run_ids_sort_as_the_runs_happened() -> None:
    a = store.new_run_id(T0)
    b = store.new_run_id(T0 + timedelta(microseconds=1))
    assert a == "20260101T000000.000000Z"
    assert a < b
    assert store.run_time(b) == T0 + timedelta(microseconds=1)
    assert store.run_time("main") is None


def test_save_and_list_oldest_first_with_the_record(tmp_path: Path) -> None:
    for i in (2, 0, 1):
        save(tmp_path, i, 10.0 + i)
    runs, problems = store.list_runs(tmp_path)
    assert problems == []
    assert [r.time for r in runs] == [T0 + timedelta(days=i) for i in range(3)]
    assert runs[0].commit == "a" * 40
    assert runs[0].record["engines"]["sim"]["version"] == "0.9.2"
    assert runs[0].points == 1 and runs[0].complete
    doc = store.read_run(runs[0].path)
    assert doc["run"]["id"] == runs[0].id


def test_a_second_run_with_the_same_id_gets_a_suffix(tmp_path: Path) -> None:
    first = save(tmp_path, 0, 10.0)
    second = save(tmp_path, 0, 11.0)
    assert second.name == f"{first.stem}-2.json"
    assert [r.id for r in store.list_runs(tmp_path)[0]] == [first.stem, second.stem]


def test_files_not_named_like_a_run_are_left_alone(tmp_path: Path) -> None:
    save(tmp_path, 0, 10.0)
    (tmp_path / "notes.json").write_text("{}")
    (tmp_path / "20260101T000000.000001Z.json").write_text("not json")
    runs, problems = store.list_runs(tmp_path)
    assert len(runs) == 1
    assert len(problems) == 1 and "not valid JSON" in problems[0]
    store.prune(tmp_path, keep=1)
    assert (tmp_path / "notes.json").exists()


def test_an_oversized_document_is_not_read(tmp_path: Path, monkeypatch) -> None:
    path = save(tmp_path, 0, 10.0)
    monkeypatch.setattr(store, "MAX_DOCUMENT_BYTES", 100)
    with pytest.raises(DocumentError, match="more than a run document holds"):
        store.read_run(path)


def test_prune_keeps_the_newest_and_the_young(tmp_path: Path) -> None:
    paths = [save(tmp_path, i, 10.0) for i in range(6)]
    removed = store.prune(tmp_path, keep=4)
    assert removed == paths[:2]
    removed = store.prune(tmp_path, days=2.5, now=T0 + timedelta(days=5), spare=paths[2].stem)
    assert removed == []  # paths[2] is spared; 3, 4, 5 are younger than 2.5 days
    removed = store.prune(tmp_path, days=1.5, now=T0 + timedelta(days=5))
    assert removed == paths[2:4]
    assert [r.path for r in store.list_runs(tmp_path)[0]] == paths[4:]
    with pytest.raises(ValueError, match="keep and days"):
        store.prune(tmp_path, keep=-1)


def test_refs_name_runs_by_latest_and_by_id(tmp_path: Path) -> None:
    paths = [save(tmp_path, i, 10.0 + i) for i in range(3)]
    name, doc = refs.load_ref("latest", runs_root=tmp_path)
    assert name == paths[2].stem and doc["run"]["id"] == name
    assert refs.load_ref("latest~2", runs_root=tmp_path)[0] == paths[0].stem
    assert refs.load_ref(paths[1].stem[:11], runs_root=tmp_path)[0] == paths[1].stem
    with pytest.raises(DocumentError, match=r"no run 3 before the latest \(it holds 3 runs\)"):
        refs.load_ref("latest~3", runs_root=tmp_path)
    save(tmp_path, 0, 10.0)  # a second run on the first day
    with pytest.raises(DocumentError, match="names several runs"):
        refs.load_ref("20260101", runs_root=tmp_path)
    with pytest.raises(DocumentError, match="no run '20250101'"):
        refs.load_ref("20250101", runs_root=tmp_path)


def test_refs_fall_back_to_baselines_and_paths(tmp_path: Path) -> None:
    doc = run_document(10.0)
    (tmp_path / "base").mkdir()
    (tmp_path / "base" / "main.json").write_text(json.dumps(doc))
    name, read = refs.load_ref(
        "main", runs_root=tmp_path / "runs", baselines_root=tmp_path / "base"
    )
    assert name == "main" and read["points"]
    with pytest.raises(DocumentError, match="no baseline named 'dev'"):
        refs.load_ref("dev", runs_root=tmp_path / "runs", baselines_root=tmp_path / "base")


def test_provenance_records_the_commit_engines_and_machine(tmp_path: Path) -> None:
    assert provenance.git_commit(tmp_path) == {}  # not a repository
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false"]
    subprocess.run(["git", "init", "-q", "-b", "main", str(tmp_path)], check=True)
    (tmp_path / "f").write_text("1")
    subprocess.run(["git", "-C", str(tmp_path), "add", "f"], check=True)
    subprocess.run([*git, "-C", str(tmp_path), "commit", "-qm", "one"], check=True)
    head = subprocess.run(
        ["git", "-C", str(tmp_path), "rev-parse", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    (tmp_path / "f").write_text("2")
    doc = run_document(10.0)
    doc["engines"]["sim"]["metadata"]["image"] = "llmslo/sim:1"
    doc["machine_info"] = {"node": "ci-1", "cpus": 2, "cpu": {"brand_raw": "EPYC"}}
    record = provenance.run_record(doc, tmp_path, now=T0)
    assert record["id"] == "20260101T000000.000000Z"
    assert record["commit"] == {"id": head, "branch": "main", "dirty": True}
    assert record["engines"] == {"sim": {"version": "0.9.2", "image": "llmslo/sim:1"}}
    assert record["machine"] == {"node": "ci-1", "cpus": 2, "cpu": "EPYC"}


def test_recorded_texts_are_made_safe_to_print(tmp_path: Path, capsys) -> None:
    assert store.printable("0.9.2\x1b[2J") == "0.9.2?[2J"
    assert store.printable("x" * 100, 10) == "xxxxxxx..."
    assert store.printable(3) is None
    path = save(tmp_path, 0, 10.0)
    doc = json.loads(path.read_text())
    doc["run"]["commit"]["id"] = "\x1b]0;pwned\x07"
    doc["run"]["engines"]["sim"]["version"] = "1.0\x1b[31m"
    path.write_text(json.dumps(doc))
    (run,) = store.list_runs(tmp_path)[0]
    assert run.commit is None
    assert cli.main(["history", "--history", str(tmp_path)]) == cli.EXIT_OK
    out = capsys.readouterr().out
    assert "\x1b" not in out and "sim 1.0?[31m" in out

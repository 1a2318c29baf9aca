"""Named baselines: saved, listed, loaded by name or path, partial ones kept apart."""

from __future__ import annotations

import pytest
from regression_helpers import document, point

from pytest_llmslo.document import (
    SCHEMA,
    DocumentError,
    read_document,
)
from pytest_llmslo.errors import ConfigError
from pytest_llmslo.regression import baselines


def test_save_and_load_baseline(tmp_path):
    doc = document([point([100.0] * 30)])
    root = tmp_path / ".llmslo" / "baselines"
    path = baselines.save_baseline(doc, "vllm-0.9", root=root)
    assert path == root / "vllm-0.9.json"
    assert baselines.list_baselines(root) == ["vllm-0.9"]
    assert baselines.load_baseline("vllm-0.9", root=root) == read_document(path)
    assert baselines.load_baseline(str(path), root=tmp_path / "elsewhere")["points"]
    assert baselines.load_baseline(path)["schema"] == SCHEMA


@pytest.mark.parametrize("name", ["../x", "a/b", "x.json", "", ".hidden", "a b"])
def test_baseline_names_are_checked(tmp_path, name):
    with pytest.raises(ConfigError, match="not a valid baseline name"):
        baselines.save_baseline(document([point([100.0] * 30)]), name, root=tmp_path)


def test_missing_baseline_lists_the_saved_ones(tmp_path):
    baselines.save_baseline(document([point([100.0] * 30)]), "main", root=tmp_path)
    with pytest.raises(ConfigError, match=r"no baseline named 'nightly'.*saved baselines: main"):
        baselines.load_baseline("nightly", root=tmp_path)
    with pytest.raises(ConfigError, match="no baseline is saved there"):
        baselines.load_baseline("nightly", root=tmp_path / "empty")


def test_malformed_baseline_file(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(DocumentError, match="not valid JSON"):
        baselines.load_baseline(bad)
    with pytest.raises(DocumentError, match="no such file"):
        baselines.load_baseline(tmp_path / "missing.json")


def test_partial_document_never_replaces_a_baseline(tmp_path):
    full = document([point([100.0] * 30)])
    path = baselines.save_baseline(full, "main", root=tmp_path)
    before = path.read_bytes()
    partial = {**document([point([300.0] * 5)]), "complete": False}
    saved = baselines.save_baseline(partial, "main", root=tmp_path)
    assert saved == tmp_path / "main.partial.json"
    assert path.read_bytes() == before
    assert baselines.load_baseline("main.partial", root=tmp_path)["complete"] is False
    assert baselines.partial_name("main.partial") == "main.partial"

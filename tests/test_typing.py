"""The package's typing contract: its annotations ship (``py.typed``, PEP 561) and every
``type: ignore`` names its error code and says why. mypy itself runs in CI (``.ci/run``,
``[tool.mypy]`` in pyproject.toml), not here: it takes a minute on a loaded machine."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

import pytest_llmslo

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib

PACKAGE = Path(pytest_llmslo.__file__).parent
ROOT = PACKAGE.parent
_IGNORE = re.compile(r"#\s*type:\s*ignore(?P<codes>\[[^\]]*\])?(?P<after>.*)$")


def _pyproject() -> dict[str, Any]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))


def test_py_typed_is_in_the_package_and_its_package_data() -> None:
    assert (PACKAGE / "py.typed").is_file()
    data = _pyproject()["tool"]["setuptools"]["package-data"]
    assert "py.typed" in data["pytest_llmslo"]


def test_mypy_is_configured_strict_over_the_package() -> None:
    mypy = _pyproject()["tool"]["mypy"]
    assert mypy["strict"] is True
    assert mypy["warn_unused_ignores"] is True
    assert "ignore-without-code" in mypy["enable_error_code"]
    assert mypy["files"] == ["pytest_llmslo"]


def _unexplained(lines: list[str]) -> list[tuple[int, str]]:
    """The ``type: ignore`` comments of ``lines`` without a code, or without a reason (a
    comment after it on its line, or a comment line just above)."""
    bad: list[tuple[int, str]] = []
    for i, line in enumerate(lines):
        m = _IGNORE.search(line)
        if m is None:
            continue
        above = lines[i - 1].strip() if i else ""
        reason = m["after"].strip().startswith("#") or above.startswith("#")
        if not m["codes"] or not reason:
            bad.append((i + 1, line.strip()))
    return bad


def test_the_check_finds_a_bare_and_an_unexplained_ignore() -> None:
    lines = [
        "x = f()  # type: ignore",
        "y = g()  # type: ignore[arg-type]",
        "# arg-type: h takes any string and checks it",
        "z = h()  # type: ignore[arg-type]",
        "w = k()  # type: ignore[misc]  # k is generated",
    ]
    assert [n for n, _ in _unexplained(lines)] == [1, 2]


def test_every_type_ignore_names_its_code_and_its_reason() -> None:
    bad = [
        f"{path.relative_to(ROOT)}:{n}: {text}"
        for path in sorted(PACKAGE.rglob("*.py"))
        for n, text in _unexplained(path.read_text(encoding="utf-8").splitlines())
    ]
    assert not bad, "type: ignore without [code] or a reason:\n" + "\n".join(bad)

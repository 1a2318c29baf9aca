"""The package's rooms stay small enough to walk: no module over 600 lines, no function
over 80 lines or 8 parameters (``self``/``cls`` not counted)."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "pytest_llmslo"
MAX_LINES = 600
MAX_FUNCTION_LINES = 80
MAX_PARAMETERS = 8


def _modules() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def _functions(path: Path) -> list[ast.FunctionDef | ast.AsyncFunctionDef]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]


def _parameters(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    a = fn.args
    names = [*a.posonlyargs, *a.args, *a.kwonlyargs]
    count = len(names) + (a.vararg is not None) + (a.kwarg is not None)
    if a.args and a.args[0].arg in ("self", "cls"):
        count -= 1
    return count


def test_no_module_is_over_600_lines() -> None:
    long = {
        str(p.relative_to(PACKAGE)): n
        for p in _modules()
        if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES
    }
    assert long == {}, f"split these by concept: {long}"


def test_no_function_is_over_80_lines_or_8_parameters() -> None:
    found: list[str] = []
    for path in _modules():
        for fn in _functions(path):
            lines = (fn.end_lineno or fn.lineno) - fn.lineno + 1
            params = _parameters(fn)
            if lines > MAX_FUNCTION_LINES or params > MAX_PARAMETERS:
                where = f"{path.relative_to(PACKAGE)}:{fn.lineno} {fn.name}"
                found.append(f"{where} ({lines} lines, {params} parameters)")
    assert found == [], "split these into named steps or pass one value:\n" + "\n".join(found)


def test_the_checks_see_the_whole_package() -> None:
    # A wrong root would make both checks pass on nothing.
    assert len(_modules()) > 200
    assert any(fn.name == "run_load" for fn in _functions(PACKAGE / "load" / "runner.py"))

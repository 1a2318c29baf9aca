"""No decoder that can run code is reachable in the package (docs/security.md): what
comes from a network peer or a file the user may have been sent (a run document, a
records file, a baseline, a spill file) is read as data. Read from the source with
``ast``, so an import under another name or inside a function is found too."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "pytest_llmslo"

#: Modules whose import alone is a decoder that runs code.
_CODE_DECODERS = {
    "pickle",
    "cPickle",
    "_pickle",
    "dill",
    "cloudpickle",
    "marshal",
    "shelve",
    "jsonpickle",
}
#: ``multiprocessing``'s pickling connections and queues.
_PICKLING = {"Connection", "Client", "Listener", "Pipe", "Queue", "SimpleQueue", "Manager"}
#: yaml's loaders that build arbitrary objects.
_UNSAFE_YAML = {"load", "load_all", "unsafe_load", "unsafe_load_all", "full_load", "full_load_all"}


def _problems(path: Path, root: Path = PACKAGE.parent) -> list[str]:
    tree = ast.parse(path.read_text(), str(path))
    out: list[str] = []
    where = path.relative_to(root)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in _CODE_DECODERS:
                    out.append(f"{where}:{node.lineno}: import {alias.name}")
        elif isinstance(node, ast.ImportFrom):
            mod = node.module or ""
            if mod.split(".")[0] in _CODE_DECODERS:
                out.append(f"{where}:{node.lineno}: from {mod} import ...")
            if mod.startswith("multiprocessing") and any(a.name in _PICKLING for a in node.names):
                out.append(f"{where}:{node.lineno}: from {mod} import a pickling channel")
        elif isinstance(node, ast.Call):
            out.extend(_call_problems(node, where))
    return out


def _call_problems(node: ast.Call, where: Path) -> list[str]:
    func = node.func
    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
    owner = getattr(func.value, "id", "") if isinstance(func, ast.Attribute) else ""
    out = []
    for kw in node.keywords:
        if kw.arg == "allow_pickle" and not (
            isinstance(kw.value, ast.Constant) and kw.value.value is False
        ):
            out.append(f"{where}:{node.lineno}: {name}(allow_pickle=...)")
    if owner == "yaml" and name in _UNSAFE_YAML:
        out.append(f"{where}:{node.lineno}: yaml.{name}")
    if name in ("loads", "load") and owner in {"pickle", "marshal", "dill"}:
        out.append(f"{where}:{node.lineno}: {owner}.{name}")
    return out


def test_no_decoder_that_runs_code_is_in_the_package() -> None:
    problems = [p for f in sorted(PACKAGE.rglob("*.py")) for p in _problems(f)]
    assert not problems, "\n".join(problems)


def test_the_scan_finds_what_it_looks_for(tmp_path: Path) -> None:
    bad = tmp_path / "probe.py"
    bad.write_text(
        "import pickle\nimport numpy as np\nimport yaml\n"
        "from multiprocessing.connection import Connection\n"
        "def f(p):\n"
        "    import dill as d\n"
        "    np.load(p, allow_pickle=True)\n"
        "    yaml.load(p)\n"
        "    yaml.full_load(p)\n"
        "    return pickle.loads(p)\n"
    )
    text = "\n".join(_problems(bad, tmp_path))
    for what in ("import pickle", "import dill", "allow_pickle", "yaml.load", "yaml.full_load",
                 "pickling channel", "pickle.loads"):  # fmt: skip
        assert what in text, what

"""A run file: the settings of a sweep written down once, in TOML or YAML, and reviewed like
code (``llmslo run -f slo.toml``, ``pytest --slo-config slo.toml``, or ``[tool.llmslo]``
in ``pyproject.toml``).

Its keys are the settings' names (``SPECS``, as in ``docs/options.md``: ``concurrency``,
``duration``, ``slo``, ``slo_html``; a dash for an underscore is taken), at the top or in
a table named for a topic (``[load]``, ``[workload]``); its values are typed as a marker's
are (``concurrency = [1, 4, 8]``, ``duration = "5m"``, ``slo_strict = true``). A TOML
file's ``[engines.NAME]`` tables are its engine configs. The file is a source of its own:
the command line and the environment override it, it overrides ini keys and markers.

The file is not ours: it is read whole only up to ``MAX_BYTES``, parsed with ``tomllib`` or
``yaml.safe_load`` (never a loader that builds objects), and every key and value is checked
here; an error names the file, the line and the key, with the closest valid key.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_llmslo.errors import ConfigError
from pytest_llmslo.suggest import did_you_mean

from .specs import SPEC_BY_NAME, SPECS, TOPICS

__all__ = ["MAX_BYTES", "RunFile", "pyproject_run_file", "read_run_file"]

#: The largest run file read (a sweep's settings fit in a few kilobytes).
MAX_BYTES = 1024 * 1024
#: The label every value of a run file carries as its source (``sources.lookup``).
LABEL_PREFIX = "run file "
_KEYS = {spec.name for spec in SPECS if spec.cli}


@dataclass(frozen=True)
class RunFile:
    """The settings a run file gives, parsed (``values``: setting name to value), and the
    line each was on."""

    path: str
    values: Mapping[str, Any] = field(default_factory=dict)
    lines: Mapping[str, int] = field(default_factory=dict)

    def label(self, name: str) -> str:
        """Where ``name`` was given: ``run file slo.toml:3 concurrency``."""
        line = self.lines.get(name)
        return f"{LABEL_PREFIX}{self.path}{f':{line}' if line else ''} {name}"


def _load(path: Path) -> tuple[Mapping[str, Any], str]:
    try:
        with path.open("rb") as f:
            data = f.read(MAX_BYTES + 1)
    except OSError as exc:
        raise ConfigError(f"run file {path}: cannot be read: {exc.strerror or exc}") from None
    if len(data) > MAX_BYTES:
        raise ConfigError(f"run file {path}: larger than {MAX_BYTES} bytes; not a run file?")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigError(f"run file {path}: not UTF-8 text") from None
    if path.suffix.lower() in (".yaml", ".yml"):
        doc = _yaml(path, text)
    elif path.suffix.lower() == ".toml":
        doc = _toml(path, text)
    else:
        raise ConfigError(f"run file {path}: give a .toml, .yaml or .yml file")
    if not isinstance(doc, Mapping):
        raise ConfigError(f"run file {path}: expected a table of settings at the top")
    return doc, text


def _toml(path: Path, text: str) -> Any:
    try:
        import tomllib
    except ImportError:  # pragma: no cover - Python 3.10
        # no-redef: Python 3.10 reads TOML with tomli, the same API as tomllib.
        import tomli as tomllib  # type: ignore[no-redef]
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"run file {path}: {exc}") from None


def _yaml(path: Path, text: str) -> Any:
    try:
        import yaml
    except ImportError:
        raise ConfigError(
            f"run file {path}: a YAML run file needs PyYAML (pip install PyYAML), or write it "
            "in TOML"
        ) from None
    try:
        return yaml.safe_load(text) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"run file {path}: {exc}") from None


def _line_of(text: str, key: str) -> int:
    """The line of ``key``'s first assignment (TOML ``key =``, YAML ``key:``), or 0."""
    spelled = re.escape(key).replace("_", "[_-]")
    pattern = re.compile(rf"^\s*['\"]?{spelled}['\"]?\s*[=:]", re.MULTILINE)
    match = pattern.search(text)
    return text.count("\n", 0, match.start()) + 1 if match else 0


def _flatten(doc: Mapping[str, Any], path: Path, text: str) -> dict[str, Any]:
    """The settings of ``doc``: its top-level keys and those of its topic tables."""
    out: dict[str, Any] = {}
    for key, value in doc.items():
        name = str(key).replace("-", "_")
        if name == "engines":
            continue  # engine configs (TOML), read by the engines' loader
        if isinstance(value, Mapping) and name in TOPICS:
            out.update(_flatten(value, path, text))
            continue
        if name not in _KEYS:
            hint = did_you_mean(name, [*_KEYS, *TOPICS])
            line = _line_of(text, str(key))
            where = f"{path}:{line}" if line else str(path)
            raise ConfigError(
                f"run file {where}: unknown key {key!r}{hint}; docs/options.md lists every key"
            )
        if name in out:
            raise ConfigError(f"run file {path}: {name!r} is given twice")
        out[name] = value
    return out


def _engines(doc: Mapping[str, Any], path: Path) -> str | None:
    """The file itself as the engine configs, when it holds ``[engines.NAME]`` tables."""
    if "engines" not in doc:
        return None
    if path.suffix.lower() != ".toml":
        raise ConfigError(
            f"run file {path}: engine configs ([engines.NAME]) are read from TOML only; put "
            "them in a TOML file and name it with engine_config"
        )
    return str(path)


def read_run_file(path: str | Path, doc: Mapping[str, Any] | None = None) -> RunFile:
    """The settings of the run file at ``path`` (``doc``: its table, already read, as
    ``[tool.llmslo]`` of a ``pyproject.toml``), each parsed as its setting parses a marker
    value. ``ConfigError`` names the file, the line and the key."""
    p = Path(path)
    text = p.read_text(encoding="utf-8", errors="replace") if doc is not None else ""
    if doc is None:
        doc, text = _load(p)
    raw = _flatten(doc, p, text)
    engines = _engines(doc, p)
    if engines is not None and "engine_config" not in raw:
        raw["engine_config"] = engines
    values: dict[str, Any] = {}
    lines = {name: _line_of(text, name) for name in raw}
    for name, value in raw.items():
        spec = SPEC_BY_NAME[name]
        try:
            values[name] = spec.coerce_marker(value)
        except (ValueError, TypeError, ConfigError) as exc:
            line = lines.get(name)
            raise ConfigError(f"run file {p}{f':{line}' if line else ''}: {name}: {exc}") from None
    return RunFile(str(p), values, lines)


def pyproject_run_file(rootdir: Path) -> RunFile | None:
    """The ``[tool.llmslo]`` table of ``rootdir/pyproject.toml`` as a run file (its
    ``engines`` tables are the engine configs, as before), or None without one."""
    path = rootdir / "pyproject.toml"
    if not path.is_file():
        return None
    doc, _text = _load(path)
    table = doc.get("tool", {}).get("llmslo") if isinstance(doc.get("tool"), Mapping) else None
    if not isinstance(table, Mapping) or not (set(table) - {"engines"}):
        return None
    settings = {k: v for k, v in table.items() if k != "engines"}
    return read_run_file(path, settings)

"""The help of the options, generated from ``SPECS``: the sections ``--help`` shows (the
options most runs need in full, then one section per topic), the full reference that
``pytest --slo-help-all`` and ``llmslo run --help-all`` print, and ``docs/options.md``
(``reference_markdown``; the suite fails when the file is stale)."""

from __future__ import annotations

import textwrap
from collections.abc import Iterator
from typing import Literal

from .options import default_text, spelled
from .specs import (
    COMMON,
    MARKER_ALIASES,
    MARKER_ONLY,
    RUN_DEFAULTS,
    SPEC_BY_NAME,
    SPECS,
    TOPICS,
    Spec,
)

Surface = Literal["pytest", "run"]

#: How each surface asks for every option in full.
HELP_ALL: dict[Surface, str] = {"pytest": "pytest --slo-help-all", "run": "llmslo run --help-all"}


def help_sections(surface: Surface = "pytest") -> Iterator[tuple[str, str, list[Spec]]]:
    """(key, title, specs) of each ``--help`` section: ``common`` first (``COMMON``, in
    its order), then each topic of ``TOPICS`` with its other options, then ``other``."""
    yield (
        "common",
        f"the options most runs need (every option in full: {HELP_ALL[surface]})",
        [SPEC_BY_NAME[name] for name in COMMON],
    )
    for topic, title, specs in topic_sections():
        rest = [spec for spec in specs if spec.name not in COMMON]
        if rest:
            yield topic, title, rest


def topic_sections() -> Iterator[tuple[str, str, list[Spec]]]:
    """(topic, title, specs) of every option by topic, ``COMMON`` ones included."""
    for topic, title in {**TOPICS, "other": "other"}.items():
        specs = [
            spec
            for spec in SPECS
            if spec.cli and (spec.topic if spec.topic in TOPICS else "other") == topic
        ]
        if specs:
            yield topic, title, specs


def ini_help(spec: Spec) -> str:
    """The help of ``spec``'s ini key (``pytest --help`` lists those of ``COMMON``): the
    option it stands for, whose help says the rest."""
    return f"the value of {spec.option}"


def _metavar(spec: Spec) -> str:
    if spec.flag:
        return ""
    return " " + (spec.metavar or "{" + ",".join(spec.choices) + "}")


def _where(spec: Spec, surface: Surface) -> str:
    parts = [f"env {spec.env}"]
    if surface == "pytest":
        parts.insert(0, f"ini {spec.ini}")
        if spec.marker:
            parts.append(f"marker {spec.marker}=")
        if spec.old_option:
            parts.append(f"old spelling {spec.old_option} (deprecated)")
    elif spec.old_option:
        parts.append(f"also {spec.option}")
    defaults = RUN_DEFAULTS if surface == "run" else None
    parts.append(f"default {default_text(spec, defaults)}")
    return "; ".join(parts) + "."


def reference_text(surface: Surface = "pytest", width: int = 88) -> str:
    """Every option in full, by topic: what ``--slo-help-all``/``--help-all`` print."""
    lines = [
        f"Every {'pytest-llmslo option' if surface == 'pytest' else 'llmslo run option'}, "
        "by topic (docs/options.md has the same):"
    ]
    for _topic, title, specs in topic_sections():
        lines += ["", f"{title}:"]
        for spec in specs:
            flag = spec.option if surface == "pytest" else spec.cli
            lines.append(f"  {flag}{_metavar(spec)}")
            text = f"{spelled(spec.help, surface == 'pytest')} {_where(spec, surface)}"
            lines += textwrap.wrap(text, width, initial_indent=" " * 6, subsequent_indent=" " * 6)
    return "\n".join(lines)


def run_epilog(width: int = 88) -> str:
    """The end of ``llmslo run --help``: the options of each topic by name."""
    lines = []
    for _topic, title, specs in help_sections("run"):
        if _topic == "common":
            continue
        names = " ".join(str(spec.cli) for spec in specs)
        lines += textwrap.wrap(
            f"{title}: {names}", width, subsequent_indent="    ", break_on_hyphens=False
        )
    lines.append("")
    lines += textwrap.wrap(
        "Every option in full: llmslo run --help-all (or docs/options.md). Each also reads "
        "LLMSLO_<NAME> from the environment and takes the plugin's --slo- spelling.",
        width,
    )
    return "\n".join(lines)


def _md_default(spec: Spec) -> str:
    plugin = default_text(spec)
    run = default_text(spec, RUN_DEFAULTS)
    return f"`{plugin}`" + (f" (`llmslo run`: `{run}`)" if run != plugin else "")


def _md_option(spec: Spec) -> list[str]:
    rows = [f"- `llmslo run`: `{spec.cli}`" + (f" (or `{spec.option}`)" if spec.old_option else "")]
    if spec.old_option:
        rows.append(f"- old spelling: `{spec.old_option}` (deprecated, still taken by pytest)")
    rows.append(f"- ini key: `{spec.ini}`; environment: `{spec.env}`; run-file key: `{spec.name}`")
    if spec.marker:
        rows.append(f"- marker: `@pytest.mark.slo({spec.marker}=...)`")
    rows.append(f"- default: {_md_default(spec)}")
    if spec.choices:
        rows.append(f"- choices: {', '.join(f'`{c}`' for c in spec.choices)}")
    return [f"### `{spec.option}{_metavar(spec)}`", "", spelled(spec.help, True), "", *rows, ""]


_MD_HEAD = """\
# Options

What this page is for: every setting of pytest-llmslo in one place, with the names it has on
each surface: the pytest option (every one under `--slo-`), the `llmslo run` option, the
ini key, the environment variable, the marker keyword, and its default. It is generated
from the settings table (`pytest_llmslo/settings/specs.py`) by `python -m
pytest_llmslo.settings > docs/options.md`; the test suite fails when it is stale.

```console
$ pytest -m slo --slo-engine sim --slo-concurrency 1,4 --slo-duration 30s --slo 'ttft_p99<500'
$ llmslo run --engine sim --concurrency 1,4 --duration 30s --slo 'ttft_p99<500'
```

A value is taken from, in this order: the command line, the environment, the run file,
the ini file, the test's marker, the default. Durations take units (`90s`, `5m`, `1h30m`, `250ms`; a
bare number is seconds), rates `2.5/s` or `150/m`, token counts `4Ki` or `2k`.
`pytest --slo-help-all` and `llmslo run --help-all` print the same reference.
The old spellings without the prefix (`--duration`, `--engine`) are still taken by
pytest, with a deprecation warning that names the new one; `llmslo run` takes both.

## Run files

A sweep's settings can be written down once and reviewed: `llmslo run -f slo.toml`,
`pytest --slo-config slo.toml`, or the `[tool.llmslo]` table of `pyproject.toml` (read by
the plugin when no `--slo-config` is given). The keys are the run-file keys below, at the
top or in a table named for a topic; values are typed as a marker's are. YAML (`.yaml`,
`.yml`) takes the same keys. A TOML file's `[engines.NAME]` tables are its engine configs.
`llmslo config -f slo.toml [options]` prints every setting with where it came from
(`run file slo.toml:7 duration`). A misspelt key is an error naming the file, the line
and the closest key.

```toml
engine = "sim"
slo = ["ttft_p99 < 500", "itl_p50 < 30"]

[load]
concurrency = [1, 4, 16]
duration = "1m"

[workload]
isl = "1Ki"
osl = 256
```
"""


def reference_markdown() -> str:
    """``docs/options.md``: every option by topic, then the marker-only keywords."""
    out = [_MD_HEAD]
    for _topic, title, specs in topic_sections():
        out += [f"## {title[0].upper()}{title[1:]}", ""]
        for spec in specs:
            out += _md_option(spec)
    out += ["## Marker-only keywords", ""]
    for name in MARKER_ONLY:
        out.append(f"- `{name}=`: the engines this test runs on, replacing the session's.")
    for alias, name in MARKER_ALIASES.items():
        out.append(f"- `{alias}=`: the same as `{name}=`.")
    return "\n".join(out).rstrip("\n") + "\n"

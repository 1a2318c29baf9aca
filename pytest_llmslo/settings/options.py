"""The command-line options of the settings, generated from ``SPECS``: the same flags, types,
help texts and defaults for the pytest plugin (``parser.addoption``) and ``llmslo run``
(argparse), so that an option has one name and one meaning everywhere."""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from .specs import DEFAULT_CONCURRENCY, SPECS, Spec


class _Unset:
    """The default of every command-line option: "not given", told apart from a value that
    parses to None (``--duration=0``, ``--requests=none``), which overrides an ini value."""

    def __repr__(self) -> str:
        return "<not given>"


UNSET: Any = _Unset()


def cli_given(spec: Spec, value: Any) -> bool:
    """Whether the command line gave ``spec`` (argparse's value for its option)."""
    if value is UNSET:
        return False
    if spec.repeatable:
        return value not in (None, [])
    return True


def cli_type(spec: Spec) -> Callable[[str], Any]:
    """The argparse ``type=`` of a spec: format errors become argparse's own messages."""

    def parse(text: str) -> Any:
        try:
            return spec.parse(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    parse.__name__ = spec.name
    return parse


def given_cli(getoption: Callable[[str], Any]) -> dict[str, Any]:
    """The options given on a command line parsed with ``argparse_option``'s keywords:
    ``getoption(dest)`` reads one (``config.getoption``, ``getattr(namespace, ...)``; a
    dest the parser lacks reads ``UNSET``). An option's two spellings share its dest, so
    the last one given wins, as with one spelling."""
    given = ((s, getoption(f"llmslo_{s.name}")) for s in SPECS if s.cli)
    return {s.name: v for s, v in given if cli_given(s, v)}


def deprecated_used(args: Sequence[str]) -> list[str]:
    """One warning per deprecated spelling among ``args`` (a pytest command line, its
    addopts included), naming the new one."""
    old = {spec.old_option: spec.option for spec in SPECS if spec.old_option}
    out: list[str] = []
    for arg in args:
        if arg == "--":
            break
        flag = arg.split("=", 1)[0]
        if flag in old:
            text = (
                f"{flag} is deprecated: use {old[flag]} (every pytest-llmslo option now "
                "starts with --slo-; the old spelling is accepted for one more release)"
            )
            if text not in out:
                out.append(text)
    return out


def default_text(spec: Spec, defaults: Mapping[str, Any] | None = None) -> str:
    """The default of ``spec`` as ``--help`` shows it: the value that applies when nothing
    sets it (``defaults``: ``llmslo run``'s own, ``RUN_DEFAULTS``), never a bare None."""
    if defaults and spec.name in defaults:
        value = defaults[spec.name]
    elif spec.shown_default is not None:
        return spec.shown_default
    elif spec.name == "concurrency":
        value = DEFAULT_CONCURRENCY
    else:
        value = spec.default
    if isinstance(value, tuple):
        return ",".join(str(v) for v in value) or "none"
    if isinstance(value, bool):
        return ("on" if value else "off") if spec.flag else str(value).lower()
    if value is None:
        return "none"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def argparse_option(
    spec: Spec,
    *,
    ini: bool = True,
    defaults: Mapping[str, Any] | None = None,
    brief: bool = False,
) -> tuple[str, dict[str, Any]]:
    """The command-line flag of ``spec`` and its ``add_argument`` keywords: the same for the
    pytest plugin (``parser.addoption``) and ``llmslo run``, so an option has one meaning
    everywhere. ``ini``: the plugin's option (``Spec.option``, under ``--slo-``; its help
    names the ini key), else ``llmslo run``'s (``Spec.cli``: it reads no ini file, and its
    options need no prefix). The value lands in ``llmslo_<name>``; an option not given is
    ``UNSET`` (``None`` for a repeatable one), which ``cli_given`` tells apart.
    ``defaults``: the defaults that apply instead of the spec's (``RUN_DEFAULTS``);
    ``brief``: the help says the default alone, nothing when there is none (the full
    text is in ``--help-all``)."""
    flag = spec.option if ini else spec.cli
    if not flag:
        raise ValueError(f"setting {spec.name!r} has no command-line flag")
    where = "" if ini else f" Env: {spec.env}."
    helptext = f"{spelled(spec.help, ini)}{where} Default: {default_text(spec, defaults)}."
    if brief:
        # The grouped help lists an option without a default on one line of its own.
        shown = default_text(spec, defaults)
        helptext = "" if shown == "none" else f"Default: {shown}."
    kw: dict[str, Any] = {
        "dest": f"llmslo_{spec.name}",
        "default": None if spec.repeatable else UNSET,
        # argparse %-formats help texts.
        "help": helptext.replace("%", "%%"),
    }
    if spec.flag:
        kw.update(action="store_const", const=True)
    else:
        kw.update(
            action="append" if spec.repeatable else "store",
            type=cli_type(spec),
            metavar=spec.metavar or (("{" + ",".join(spec.choices) + "}") or None),
        )
    return flag, kw


def spelled(text: str, plugin: bool) -> str:
    """``text`` (a help text naming other options by their ``cli`` spelling) with each
    option as the surface spells it: the plugin's ``--slo-`` one, or ``llmslo run``'s."""
    if not plugin:
        return text
    return _OLD_FLAG.sub(lambda m: _NEW_FLAG.get(m.group(0), m.group(0)), text)


_NEW_FLAG: dict[str, str] = {s.cli: s.option for s in SPECS if s.cli and s.option and s.old_option}
_OLD_FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*(?![\w-])")


def alias_option(spec: Spec, *, ini: bool = True) -> tuple[str, dict[str, Any]] | None:
    """The other spelling of ``spec``'s option, taken but not shown in ``--help``, with the
    same dest: for the plugin the old one (deprecated, ``deprecated_used`` warns of it),
    for ``llmslo run`` the plugin's ``--slo-`` one (so a command line moves between the
    two). None when there is no other spelling."""
    if not spec.old_option:
        return None
    flag, kw = argparse_option(spec, ini=not ini)
    kw["help"] = argparse.SUPPRESS
    return flag, kw


def misspelt_option(args: list[str]) -> str | None:
    """The error for the first ``--slo...`` word of ``args`` (a pytest command line) that
    is no option of the plugin, naming the closest one; None when there is none."""
    from pytest_llmslo.suggest import did_you_mean

    known = {"--slo-help-all", "--slo-config"}
    for spec in SPECS:
        known.update(f for f in (spec.option, spec.old_option) if f)
    for arg in args:
        if arg == "--":
            break
        flag = arg.split("=", 1)[0]
        if flag.startswith("--slo") and flag not in known:
            hint = did_you_mean(flag, known)
            return f"unknown option {flag}{hint}; pytest --slo-help-all lists every option"
    return None

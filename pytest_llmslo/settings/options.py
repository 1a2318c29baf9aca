"""The command-line options of the settings, generated from ``SPECS``: the same flags, types,
help texts and defaults for the pytest plugin (``parser.addoption``) and ``llmslo run``
(argparse), so that an option has one name and one meaning everywhere."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping
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
    if spec.repeatable:
        return value not in (None, [])
    return value is not UNSET


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
    ``getoption(dest)`` reads one (``config.getoption``, ``getattr(namespace, ...)``)."""
    given = ((s, getoption(f"llmslo_{s.name}")) for s in SPECS if s.cli)
    return {s.name: v for s, v in given if cli_given(s, v)}


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
    spec: Spec, *, ini: bool = True, defaults: Mapping[str, Any] | None = None
) -> tuple[str, dict[str, Any]]:
    """The command-line flag of ``spec`` and its ``add_argument`` keywords: the same for the
    pytest plugin (``parser.addoption``) and ``llmslo run``, so an option has one name and
    one meaning everywhere. The value lands in ``llmslo_<name>``; an option not given is
    ``UNSET`` (``None`` for a repeatable one), which ``cli_given`` tells apart. ``ini``:
    the help names the ini key (``llmslo run`` reads no ini file); ``defaults``: the
    defaults that apply instead of the spec's (``RUN_DEFAULTS``)."""
    if not spec.cli:
        raise ValueError(f"setting {spec.name!r} has no command-line flag")
    where = f"Ini: {spec.ini}, env: {spec.env}" if ini else f"Env: {spec.env}"
    helptext = f"{spec.help} {where}. Default: {default_text(spec, defaults)}."
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
    return spec.cli, kw

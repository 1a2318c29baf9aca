"""``Spec``: one setting on every source (the flag, the marker keyword, the ini key, the
environment variable), a row of the table ``specs.SPECS``."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from .parsers import coerce_with

__all__ = ["ENV_PREFIX", "INI_PREFIX", "OPTION_PREFIX", "Scope", "Spec"]

ENV_PREFIX = "LLMSLO_"
#: The prefix of every option the pytest plugin adds (``Spec.option``).
OPTION_PREFIX = "--slo-"
INI_PREFIX = "llmslo_"

Scope = Literal["session", "test"]


@dataclass(frozen=True, slots=True)
class Spec:
    """One setting on every source. ``cli`` is the flag (``None``: not on the command line),
    ``marker`` the marker keyword (``None``: session-wide only)."""

    name: str
    parse: Callable[[str], Any]
    default: Any
    help: str
    #: The attribute of the resolved settings it fills: a ``TestSettings`` field for a
    #: per-test setting, a ``SessionSettings`` one for a session-wide setting; ``None`` for
    #: the settings that only shape the load levels (``levels.LEVEL_SPECS``).
    field: str | None = None
    cli: str | None = None
    marker: str | None = None
    coerce: Callable[[Any], Any] | None = None
    metavar: str | None = None
    flag: bool = False  # a CLI switch without a value
    repeatable: bool = False  # the CLI flag may be given several times
    choices: tuple[str, ...] = ()
    #: The ``TOPICS`` key its option is listed under in ``--help``.
    topic: str = ""
    #: What the default means where the value does not say it (``None`` that stands for
    #: 0.9, 10 ms, ``auto`` or a sim profile): ``--help`` shows this.
    shown_default: str | None = None

    @property
    def option(self) -> str | None:
        """The flag the pytest plugin shows: every one under the ``--slo-`` prefix (``--slo``
        itself, the objectives, included), derived from ``cli``."""
        if not self.cli or self.cli == "--slo" or self.cli.startswith(OPTION_PREFIX):
            return self.cli
        return OPTION_PREFIX + self.cli.removeprefix("--")

    @property
    def old_option(self) -> str | None:
        """The spelling ``option`` replaced (``--duration`` for ``--slo-duration``): still
        taken by the plugin for one release, with a deprecation warning naming the new one;
        ``llmslo run`` shows it (its options need no prefix) and takes ``option`` too."""
        return self.cli if self.cli != self.option else None

    @property
    def ini(self) -> str:
        return INI_PREFIX + self.name

    @property
    def env(self) -> str:
        return ENV_PREFIX + self.name.upper()

    @property
    def scope(self) -> Scope:
        return "test" if self.marker else "session"

    def coerce_marker(self, value: Any) -> Any:
        return (self.coerce or coerce_with(self.parse))(value)

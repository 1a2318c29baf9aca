"""What a test asks to break, and when: the ``fault`` setting.

Text (marker keyword ``fault=``, ``--slo-fault``, ini ``llmslo_fault``,
``LLMSLO_FAULT``): the kind, then comma-separated ``key=value``; several faults
separated by ``;``::

    kill at=40%
    restart at=5s,replica=replica1,startup_s=1
    drop at=30%,for=2s,rate=50%
    delay at=3s,for=2s,by=200ms
    stall at=3s,for=2s
    kill at=3s; restart at=8s

or a dict of the same keys with ``kind`` (``{"kind": "kill", "at": "40%"}``), or a list
of them. The kinds:

- ``kill``: a replica or worker dies (the sim's replica, the process's process group, the
  container); what it held is lost;
- ``restart``: killed, then started again (the sim's replica serves ``startup_s`` later);
- ``drop``: connections through the harness's proxy in front of the engine are cut:
  ``rate`` of them (1 = all) for ``for`` seconds, new ones included;
- ``delay``: the proxy adds ``by`` to every byte's way, both directions, for ``for``;
- ``stall``: the engine produces nothing for ``for`` seconds, then carries on.

``at`` is a point of the level (``levelpoint``); ``replica`` which one (the sim's name or
number; the first by default); ``window`` and ``share`` define recovery
(``faults.faultcost``): ``window`` seconds in a row with goodput at ``share`` of its
level before the fault or more, no error, and the test's objectives met.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, cast

from pytest_llmslo.levelpoint import LevelPoint, parse_level_point

__all__ = ["FAULT_KINDS", "Fault", "FaultKind", "parse_faults"]

FaultKind = Literal["kill", "restart", "drop", "delay", "stall"]
FAULT_KINDS: tuple[str, ...] = ("kill", "restart", "drop", "delay", "stall")

#: The keys each kind takes (besides ``at``, ``window``, ``share``).
_KEYS: dict[str, tuple[str, ...]] = {
    "kill": ("replica",),
    "restart": ("replica", "startup_s"),
    "drop": ("for", "rate"),
    "delay": ("for", "by"),
    "stall": ("replica", "for"),
}
_COMMON = ("kind", "at", "window", "share")
_EXAMPLE = "e.g. 'kill at=40%', 'stall at=5s,for=2s', 'delay at=3s,for=2s,by=200ms'"


@dataclass(frozen=True, slots=True)
class Fault:
    """One fault ``at`` a point of the level (see the module docstring)."""

    kind: FaultKind
    at: LevelPoint
    replica: str | None = None
    for_s: float | None = None
    rate: float = 1.0
    by_s: float = 0.0
    startup_s: float = 0.0
    window_s: float = 3.0
    share: float = 0.9

    def __post_init__(self) -> None:
        if self.kind not in FAULT_KINDS:
            raise ValueError(f"unknown fault kind {self.kind!r}: one of {', '.join(FAULT_KINDS)}")
        if self.kind in ("drop", "delay", "stall") and not (
            self.for_s is not None and math.isfinite(self.for_s) and self.for_s > 0
        ):
            raise ValueError(f"a {self.kind} lasts a while: give for=<seconds> > 0")
        if not 0 < self.rate <= 1:
            raise ValueError(f"rate is the share of connections dropped, in (0, 100%]: {self.rate}")
        if self.kind == "delay" and not (math.isfinite(self.by_s) and self.by_s > 0):
            raise ValueError("a delay adds some latency: give by=<time> > 0, e.g. by=200ms")
        if not (math.isfinite(self.startup_s) and self.startup_s >= 0):
            raise ValueError(f"startup_s must be >= 0, got {self.startup_s}")
        if not self.window_s >= 1:
            raise ValueError(
                f"window must be at least 1 s (the series is per second): {self.window_s}"
            )
        if not 0 < self.share <= 1:
            raise ValueError(f"share must be in (0 %, 100 %], got {self.share}")

    @property
    def label(self) -> str:
        """``kill at 40% (replica1)``, ``delay at 3s: 200 ms for 2 s``."""
        text = f"{self.kind} at {self.at.label}"
        if self.kind == "drop":
            what = "all" if self.rate >= 1 else f"{self.rate:.0%} of the"
            text += f": {what} connections for {self.for_s:g} s"
        elif self.kind == "delay":
            text += f": +{self.by_s * 1e3:g} ms for {self.for_s:g} s"
        elif self.kind == "stall":
            text += f" for {self.for_s:g} s"
        if self.replica is not None:
            text += f" ({self.replica})"
        return text

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "at": self.at.label,
            "replica": self.replica,
            "for_s": self.for_s,
            "rate": self.rate,
            "by_s": self.by_s,
            "startup_s": self.startup_s,
            "window_s": self.window_s,
            "share": self.share,
        }


def _seconds(text: Any, key: str) -> float:
    s = str(text).strip().lower()
    try:
        if s.endswith("ms"):
            return float(s[:-2]) / 1e3
        if s.endswith("m"):
            return float(s[:-1]) * 60
        return float(s[:-1]) if s.endswith("s") else float(s)
    except ValueError:
        raise ValueError(
            f"{key}={text!r} is not a time: give seconds ('2s', '2') or '200ms'"
        ) from None


def _share(text: Any, key: str) -> float:
    s = str(text).strip()
    try:
        return float(s[:-1]) / 100 if s.endswith("%") else float(s)
    except ValueError:
        raise ValueError(f"{key}={text!r} is not a share: give '50%' or 0.5") from None


def _items(text: str) -> dict[str, Any]:
    head, _, rest = text.strip().partition(" ")
    items: dict[str, Any] = {}
    if "=" in head:  # no kind first: every part is key=value
        rest = text
    else:
        items["kind"] = head.strip().rstrip(",")
    for part in rest.replace(" ", ",").split(","):
        if not part.strip():
            continue
        key, sep, val = part.partition("=")
        if not sep:
            raise ValueError(f"{part!r} is not key=value")
        items[key.strip()] = val.strip()
    return items


def _one(items: Mapping[str, Any]) -> Fault:
    kind = str(items.get("kind", "")).strip().lower()
    if kind not in FAULT_KINDS:
        raise ValueError(f"the kind is one of {', '.join(FAULT_KINDS)}, got {kind or None!r}")
    allowed = (*_COMMON, *_KEYS[kind])
    unknown = sorted(set(items) - set(allowed))
    if unknown:
        raise ValueError(f"{kind} takes no {', '.join(unknown)}; it takes {', '.join(allowed[1:])}")
    if "at" not in items:
        raise ValueError(f"{kind}: at= missing (a time '5s' or a share '40%' of the level)")
    replica = items.get("replica")
    return Fault(
        kind=cast(FaultKind, kind),  # one of FAULT_KINDS, checked above
        at=parse_level_point(items["at"], f"{kind} at"),
        replica=None if replica in (None, "") else str(replica),
        for_s=None if items.get("for") in (None, "") else _seconds(items["for"], "for"),
        rate=_share(items.get("rate", 1.0), "rate"),
        by_s=_seconds(items.get("by", 0), "by"),
        startup_s=_seconds(items.get("startup_s", 0), "startup_s"),
        window_s=_seconds(items.get("window", 3), "window"),
        share=_share(items.get("share", 0.9), "share"),
    )


def parse_faults(value: Any) -> tuple[Fault, ...]:
    """The faults of the setting's text, dict or list (module docstring); ``()`` for
    ``None``, ``""``, ``"off"``. ``ValueError`` says what is wrong and what is accepted."""
    if value is None or isinstance(value, Fault):
        return () if value is None else (value,)
    if isinstance(value, str):
        if value.strip().lower() in ("", "off", "none", "false"):
            return ()
        parts: Sequence[Any] = [p for p in value.split(";") if p.strip()]
    elif isinstance(value, Mapping):
        parts = [value]
    elif isinstance(value, Sequence):
        parts = list(value)
    else:
        raise ValueError(f"fault: {value!r} is not a fault; {_EXAMPLE}")
    out: list[Fault] = []
    for part in parts:
        try:
            if isinstance(part, Fault):
                out.append(part)
                continue
            items = dict(part) if isinstance(part, Mapping) else _items(str(part))
            out.append(_one({str(k): v for k, v in items.items()}))
        except (TypeError, ValueError) as exc:
            raise ValueError(f"fault {str(part).strip()!r}: {exc}; {_EXAMPLE}") from None
    return tuple(out)

"""The SLO DSL: metric symbols, objectives and their text form.

Every catalogue metric (``catalog.CATALOGUE``) is a :class:`MetricSymbol` (``ttft``) with a
:class:`StatSymbol` per statistic of the DSL (``ttft.p99``, flat ``ttft_p99``, ...;
:func:`symbols`). Comparing a statistic with a number of milliseconds builds an
:class:`Objective`; nothing is evaluated until a run is given (``evaluate``,
``assert_goodput``). An objective refuses to be truth-tested, so a bare
``assert ttft_p99 < 500`` raises a TypeError instead of passing by accident.
:func:`parse_objectives` reads the same objectives from text (``--slo``, ini, markers).
"""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, cast

from pytest_llmslo.catalog import CATALOGUE, DSL_STATS, Stat, parse_stat, stat_name
from pytest_llmslo.errors import ConfigError
from pytest_llmslo.suggest import did_you_mean

__all__ = [
    "OPS",
    "STATS",
    "MetricSymbol",
    "Objective",
    "Op",
    "StatSymbol",
    "coerce_objectives",
    "parse_objectives",
    "symbol",
    "symbols",
]

Op = Literal["<", "<=", ">", ">="]
OPS: tuple[Op, ...] = ("<", "<=", ">", ">=")
_COMPARE: dict[str, Callable[[Any, Any], Any]] = {
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
}
STATS: tuple[str, ...] = DSL_STATS

_HELP = "use assert_goodput(...) or assert_slo(...) to check objectives against a run"


# --------------------------------------------------------------------------- objectives


@dataclass(frozen=True, slots=True)
class Objective:
    """``metric`` ``stat`` ``op`` ``threshold`` (ms), e.g. ttft P99 < 500 ms."""

    metric: str
    stat: Stat
    op: Op
    threshold: float

    def __post_init__(self) -> None:
        if self.metric not in CATALOGUE:
            raise ValueError(f"unknown metric {self.metric!r}; valid: {', '.join(CATALOGUE)}")
        if self.op not in OPS:
            raise ValueError(f"unknown comparison {self.op!r}; valid: {' '.join(OPS)}")
        object.__setattr__(self, "stat", parse_stat(self.stat))
        t = float(self.threshold)
        if math.isnan(t):
            raise ValueError("an objective's threshold cannot be NaN")
        object.__setattr__(self, "threshold", t)

    @property
    def name(self) -> str:
        """Flat name of the statistic: ``ttft_p99``."""
        return f"{self.metric}_{stat_name(self.stat)}"

    @property
    def label(self) -> str:
        """``ttft_p99 < 500 ms``."""
        return f"{self.name} {self.op} {self.threshold:g} ms"

    @property
    def upper(self) -> bool:
        """True for ``<``/``<=``: the objective bounds the metric from above."""
        return self.op in ("<", "<=")

    def holds(self, value: float | None) -> bool:
        """Whether ``value`` satisfies the comparison (False for None/NaN)."""
        if value is None or math.isnan(value):
            return False
        return bool(_COMPARE[self.op](value, self.threshold))

    def __bool__(self) -> bool:
        raise TypeError(
            f"the objective `{self.label}` has no truth value: a bare "
            f"`assert {self.name} {self.op} {self.threshold:g}` cannot be evaluated without "
            f"a run; {_HELP}, e.g. assert_goodput({self.name} {self.op} {self.threshold:g})"
        )

    def __str__(self) -> str:
        return self.label

    def to_dict(self) -> dict[str, Any]:
        return {
            "metric": self.metric,
            "stat": self.stat,
            "op": self.op,
            "threshold": self.threshold,
            "label": self.label,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Objective:
        return cls(d["metric"], d["stat"], d["op"], float(d["threshold"]))


def _threshold(value: object, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{what} can only be compared with a number of milliseconds, got {value!r}")
    return float(value)


@dataclass(frozen=True, slots=True)
class StatSymbol:
    """A statistic of a metric, such as ``ttft.p99`` (alias ``ttft_p99``); comparing it
    with a number of milliseconds builds an :class:`Objective`."""

    metric: str
    stat: Stat

    @property
    def name(self) -> str:
        return f"{self.metric}_{stat_name(self.stat)}"

    def _objective(self, op: Op, other: object) -> Objective:
        return Objective(self.metric, self.stat, op, _threshold(other, self.name))

    def __lt__(self, other: object) -> Objective:
        return self._objective("<", other)

    def __le__(self, other: object) -> Objective:
        return self._objective("<=", other)

    def __gt__(self, other: object) -> Objective:
        return self._objective(">", other)

    def __ge__(self, other: object) -> Objective:
        return self._objective(">=", other)

    def __repr__(self) -> str:
        return self.name


@dataclass(frozen=True, slots=True)
class MetricSymbol:
    """A metric of the catalogue (``ttft``, ``ttfot``, ``itl``, ``tpot``, ``e2e``, ...);
    pick a statistic with one of :data:`STATS` (``.p50 .p90 .p95 .p99 .p999 .mean``) or
    ``.p(99.5)``."""

    metric: str

    def p(self, q: float) -> StatSymbol:
        """Any percentile in (0, 100)."""
        return StatSymbol(self.metric, parse_stat(q))

    def __getattr__(self, name: str) -> StatSymbol:
        # The statistics of the DSL, from the catalogue: .p50 ... .p999, .mean.
        if name in DSL_STATS:
            return StatSymbol(self.metric, parse_stat(name))
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def __dir__(self) -> list[str]:
        return sorted({*object.__dir__(self), *DSL_STATS})

    def _no_stat(self, op: str, other: object) -> Objective:
        raise TypeError(
            f"`{self.metric} {op} {other!r}` needs a statistic: write "
            f"`{self.metric}.p99 {op} {other!r}` (or {self.metric}_p99); "
            f"statistics: {', '.join(STATS)}"
        )

    def __lt__(self, other: object) -> Objective:
        return self._no_stat("<", other)

    def __le__(self, other: object) -> Objective:
        return self._no_stat("<=", other)

    def __gt__(self, other: object) -> Objective:
        return self._no_stat(">", other)

    def __ge__(self, other: object) -> Objective:
        return self._no_stat(">=", other)

    def __repr__(self) -> str:
        return self.metric


def symbol(name: str) -> MetricSymbol | StatSymbol | None:
    """The DSL symbol of a flat name (``ttft``, ``ttft_p99``), or None for a name that is not
    one (of a metric in the catalogue, with a statistic of :data:`STATS`)."""
    metric, sep, st = name.partition("_")
    if metric not in CATALOGUE:
        return None
    if not sep:
        return MetricSymbol(metric)
    if st not in DSL_STATS:
        return None
    return StatSymbol(metric, parse_stat(st))


def symbols() -> dict[str, MetricSymbol | StatSymbol]:
    """Every flat name of the DSL and its symbol, generated from the catalogue: each
    metric (``ttft``) and each of its statistics (``ttft_p99``); ``catalog.SYMBOLS`` names
    them."""
    out: dict[str, MetricSymbol | StatSymbol] = {}
    for name in CATALOGUE:
        out[name] = MetricSymbol(name)
        for st in DSL_STATS:
            out[f"{name}_{st}"] = StatSymbol(name, parse_stat(st))
    return out


# --------------------------------------------------------------------------- parsing

_UNITS = {"": 1.0, "ms": 1.0, "s": 1000.0, "us": 1e-3, "µs": 1e-3}
_OBJ_RE = re.compile(
    r"""^\s*(?P<metric>[a-z0-9]+)\s*(?:[._]\s*(?P<stat>[a-z]+[0-9.]*|[0-9.]+))?\s*
        (?P<op><=|>=|<|>)\s*
        (?P<num>[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:e[+-]?[0-9]+)?)\s*
        (?P<unit>ms|s|us|µs)?\s*$""",
    re.IGNORECASE | re.VERBOSE,
)


def _valid_names() -> str:
    return (
        f"valid metrics: {', '.join(CATALOGUE)}; valid statistics: {', '.join(STATS)} "
        "(or pNN such as p99.5); units: ms (default), s, us; "
        "e.g. 'ttft_p99<500,itl_p50<30' or 'ttft.p99 < 0.5s'"
    )


def parse_objectives(text: str | Iterable[str], *, source: str = "") -> tuple[Objective, ...]:
    """Objectives from text such as ``"ttft_p99<500,itl_p50<30"`` or
    ``"ttft.p99 < 500ms; itl.p50 < 30"`` (separators: comma, semicolon, newline; units ms,
    s, us). An iterable of such strings is joined. ConfigError names the bad part, the
    ``source`` (e.g. ``"--slo"``, ``"ini llmslo_slo"``) and the valid names."""
    parts_in = [text] if isinstance(text, str) else list(text)
    where = f" (from {source})" if source else ""
    out: list[Objective] = []
    for chunk in parts_in:
        if not isinstance(chunk, str):
            raise ConfigError(f"SLO objectives{where} must be text, got {chunk!r}")
        for part in re.split(r"[,;\n]", chunk):
            if not part.strip():
                continue
            m = _OBJ_RE.match(part)
            if m is None:
                raise ConfigError(
                    f"cannot parse SLO objective {part.strip()!r}{where}: expected "
                    f"METRIC_STAT OP NUMBER[UNIT]; {_valid_names()}"
                )
            metric = m["metric"].lower()
            if metric not in CATALOGUE:
                hint = did_you_mean(metric, CATALOGUE)
                raise ConfigError(
                    f"unknown metric {m['metric']!r} in SLO objective {part.strip()!r}"
                    f"{where}{hint}; {_valid_names()}"
                )
            stat_text = m["stat"]
            if stat_text is None:
                raise ConfigError(
                    f"SLO objective {part.strip()!r}{where} needs a statistic "
                    f"(e.g. {metric}_p99); {_valid_names()}"
                )
            try:
                stat = parse_stat(stat_text)
            except ValueError:
                raise ConfigError(
                    f"unknown statistic {stat_text!r} in SLO objective {part.strip()!r}"
                    f"{where}; {_valid_names()}"
                ) from None
            value = float(m["num"]) * _UNITS[(m["unit"] or "").lower()]
            out.append(Objective(metric, stat, cast(Op, m["op"]), value))  # the pattern's ops
    return tuple(out)


def coerce_objectives(items: Iterable[Any]) -> tuple[Objective, ...]:
    """Objectives from what the helpers accept: Objective objects, text for
    :func:`parse_objectives`, and iterables of either (nested); TypeError for a bare
    statistic or anything else."""
    out: list[Objective] = []
    for item in items:
        if isinstance(item, Objective):
            out.append(item)
        elif isinstance(item, str):
            out.extend(parse_objectives(item))
        elif isinstance(item, StatSymbol | MetricSymbol):
            raise TypeError(
                f"{item!r} is a metric statistic, not an objective: compare it with a "
                f"threshold, e.g. {item!r} < 500"
            )
        elif isinstance(item, Iterable):
            out.extend(coerce_objectives(item))
        else:
            raise TypeError(f"expected an objective such as ttft_p99 < 500, got {item!r}")
    return tuple(out)

"""The arrival processes of open-loop levels, one registry entry each.

An entry gives all that the rest of the package asks of a process:

- ``gaps(rng, n, rate, params)``: n gaps of mean ``1 / rate`` drawn from the numpy
  ``Generator`` the schedule seeds with the level's seed (None: evenly spaced, no
  randomness). ``load/schedule.py`` asks for them at the level's rate, or at rate 1 (a
  unit-rate process) to run them on a profile's clock;
- ``params``: its parameters, each with a name, a default and a check
  (``LoadLevel`` validates them);
- ``spread(mean, params)``: the margin over ``mean`` expected arrivals that a run bounded
  by time alone draws its schedule with (``schedule.expected_arrivals``);
- ``suffix(params)``: what the level's label gets after its rate (``r4g0.5``).

Adding a process (a Weibull with shape ``k``, say) is one entry and its gap function::

    def _weibull_gaps(rng, n, rate, params):
        k = params["shape"]
        return rng.weibull(k, n) / (rate * math.gamma(1 + 1 / k))   # mean 1 / rate

    register(Arrival(
        "weibull", _weibull_gaps,
        params=(Param("shape", 1.0, _positive, "> 0"),),
        spread=lambda mean, p: 6.0 * math.sqrt(mean + 1.0),
        suffix=lambda p: f"w{num(p['shape'])}",
    ))

Built-in entries are registered below, before anything reads the names, so the settings'
``--arrival`` choices and the records' ``ARRIVALS`` hold them. A trace replay is not a
process (its times come from the trace) and is not here; see ``LoadLevel.trace``.

Only the gamma's shape has a field of its own on ``LoadLevel`` (``burstiness``, as its
option, its JSON key and vLLM bench name it); any other process's parameters travel in
``LoadLevel.arrival_params``. This module imports nothing of numpy at import time.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np

__all__ = [
    "Arrival",
    "Param",
    "check_params",
    "get",
    "names",
    "num",
    "register",
    "unregister",
]

#: An arrival's parameter values, by name.
Params = Mapping[str, float]
#: n gaps of mean 1 / rate from a seeded numpy Generator: ``gaps(rng, n, rate, params)``.
Gaps = Callable[["np.random.Generator", int, float, Params], "np.ndarray"]


def num(v: float) -> str:
    """A number as a label writes it: ``2`` not ``2.0``, ``0.5``."""
    return f"{int(v)}" if float(v).is_integer() else f"{v:g}"


def _positive(v: float) -> bool:
    return v > 0 and math.isfinite(v)


@dataclass(frozen=True, slots=True)
class Param:
    """One parameter of an arrival process: its name, default, and the check of a value
    (``meaning`` says what the check wants, for the error)."""

    name: str
    default: float
    check: Callable[[float], bool] = _positive
    meaning: str = "> 0"


@dataclass(frozen=True, slots=True)
class Arrival:
    """One arrival process (see the module docstring)."""

    name: str
    gaps: Gaps | None
    params: tuple[Param, ...] = ()
    spread: Callable[[float, Params], float] = lambda mean, p: 6.0 * math.sqrt(mean + 1.0)
    suffix: Callable[[Params], str] = lambda p: ""
    doc: str = ""

    def values(self, given: Mapping[str, float]) -> dict[str, float]:
        """Every parameter's value: ``given`` over the defaults, checked. A name that is
        not a parameter of this process is an error."""
        known = {p.name for p in self.params}
        for name in given:
            if name not in known:
                raise ValueError(_not_a_param(name, self.name))
        out: dict[str, float] = {}
        for p in self.params:
            v = float(given.get(p.name, p.default))
            if not p.check(v):
                raise ValueError(f"{p.name} must be {p.meaning}, got {v!r}")
            out[p.name] = v
        return out


_REGISTRY: dict[str, Arrival] = {}


def _not_a_param(param: str, arrival: str) -> str:
    owners = [a.name for a in _REGISTRY.values() if any(p.name == param for p in a.params)]
    if not owners:
        return f"arrival {arrival!r} has no parameter {param!r}"
    return (
        f"{param} applies to {' or '.join(owners)} arrivals only "
        f"(arrival={' or '.join(map(repr, owners))})"
    )


def check_params(arrival: str, given: Mapping[str, float]) -> dict[str, float]:
    """The values of ``arrival``'s parameters, ``given`` over its defaults, checked; a
    closed loop or a trace takes none."""
    if arrival in ("closed", "trace"):
        if given:
            raise ValueError(_not_a_param(next(iter(given)), arrival))
        return {}
    return get(arrival).values(given)


def register(arrival: Arrival) -> Arrival:
    """Add ``arrival`` to the registry (a name taken already is an error)."""
    if arrival.name in _REGISTRY or arrival.name in ("closed", "trace"):
        raise ValueError(f"arrival {arrival.name!r} is registered already")
    _REGISTRY[arrival.name] = arrival
    return arrival


def unregister(name: str) -> None:
    """Remove a process (tests that register a throwaway one)."""
    _REGISTRY.pop(name, None)


def get(name: str) -> Arrival:
    try:
        return _REGISTRY[name]
    except KeyError:
        raise ValueError(f"unknown arrival {name!r}") from None


def names() -> tuple[str, ...]:
    """The registered processes, in the order they were registered."""
    return tuple(_REGISTRY)


def _exponential(rng: np.random.Generator, n: int, rate: float, params: Params) -> np.ndarray:
    return rng.exponential(1.0 / rate, n)


def _gamma(rng: np.random.Generator, n: int, rate: float, params: Params) -> np.ndarray:
    # As vLLM bench draws them (vllm/benchmarks/serve.py, v0.10: theta = 1 / (rate *
    # burstiness), np.random.gamma(shape=burstiness, scale=theta)).
    k = params["burstiness"]
    return rng.gamma(k, 1.0 / (rate * k), n)


def _gamma_spread(mean: float, params: Params) -> float:
    return 6.0 * math.sqrt(mean + 1.0) / math.sqrt(params["burstiness"])


def _gamma_suffix(params: Params) -> str:
    return f"g{num(params['burstiness'])}"


# The built-in processes; ``--arrival``'s choices list them in this order.
register(Arrival("poisson", _exponential, doc="exponential gaps of mean 1 / rate"))
register(
    Arrival(
        "constant",
        None,
        spread=lambda mean, p: 0.0,
        doc="gaps of exactly 1 / rate",
    )
)
register(
    Arrival(
        "gamma",
        _gamma,
        params=(Param("burstiness", 1.0),),
        spread=_gamma_spread,
        suffix=_gamma_suffix,
        doc=(
            "gamma gaps of shape burstiness and mean 1 / rate, as vLLM bench draws them: "
            "the gaps' coefficient of variation is 1 / sqrt(burstiness)"
        ),
    )
)

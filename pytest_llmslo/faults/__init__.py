"""Faults in the middle of a level, and what they cost.

- ``spec``: what a test asks (the ``fault`` setting: ``"kill at=40%"``, ...);
- ``proxy``: the TCP proxy in front of the engine that drops and delays connections;
- ``injector``: doing a fault to a running engine (the sim's admin endpoint, the runtime,
  the proxy);
- ``recovery``: the level's per-second series and each fault's cost: requests failed,
  the dip in goodput and attainment, the recovery time;
- ``steady``: a fault level split into its steady part (judged by the latency objectives)
  and the fault's impact window (judged by the recovery).
"""

from .faultcost import fault_cost, level_series, objectives_hold
from .faultspec import FAULT_KINDS, Fault, FaultKind, parse_faults
from .injector import inject, pick_unit
from .proxy import FaultProxy

__all__ = [
    "FAULT_KINDS",
    "Fault",
    "FaultKind",
    "FaultProxy",
    "fault_cost",
    "inject",
    "level_series",
    "objectives_hold",
    "parse_faults",
    "pick_unit",
]

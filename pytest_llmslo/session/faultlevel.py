"""A level with faults in it (the ``fault`` setting): the proxy in front of the engine for
a ``drop`` or ``delay`` (the load generator pointed at it for the level), each fault done
at its point (``faults.inject`` on a thread, ``levelpoint.AtPoint``), then what it cost
(``faults.faultcost``). The records go into the run's meta (``faults``, with the level's
per-second ``series``) and from there onto the level's point."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
from collections.abc import Callable, Iterator, Sequence
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from pytest_llmslo.faults import Fault, FaultProxy, fault_cost, inject, level_series
from pytest_llmslo.levelpoint import AtPoint
from pytest_llmslo.records import Run

__all__ = ["FAULT_WAIT_S", "fault_proxy", "fault_triggers", "with_faults"]

#: How long the end of a level waits for a fault that has not returned yet.
FAULT_WAIT_S = 60.0


@contextlib.contextmanager
def fault_proxy(faults: Sequence[Fault], client: Any) -> Iterator[tuple[Any, FaultProxy | None]]:
    """``(client settings, proxy)`` for the level: with a ``drop`` or ``delay`` fault, a
    proxy started in front of the engine and the client pointed at it (stopped when the
    block ends); else the client as it is and None."""
    if not any(f.kind in ("drop", "delay") for f in faults):
        yield client, None
        return
    url = urlsplit(client.base_url)
    port = url.port or (443 if url.scheme == "https" else 80)
    proxy = FaultProxy(url.hostname or "127.0.0.1", port)
    listen = proxy.start()
    try:
        netloc = f"127.0.0.1:{listen}"
        proxied = urlunsplit((url.scheme, netloc, url.path, url.query, url.fragment))
        yield dataclasses.replace(client, base_url=proxied), proxy
    finally:
        proxy.stop()


def fault_triggers(
    faults: Sequence[Fault],
    handle: Any,
    proxy: FaultProxy | None,
    progress: Callable[[Any], None] | None,
    duration_s: float | None,
) -> tuple[list[AtPoint], Callable[[Any], None] | None]:
    """One ``AtPoint`` per fault, chained (each passes every report on), and the
    callback the load generator gets."""
    triggers: list[AtPoint] = []
    callback = progress
    for i, fault in enumerate(faults):
        trigger = AtPoint(
            fault.at,
            functools.partial(inject, handle, fault, proxy),
            inner=callback,
            duration_s=duration_s,
            name=f"llmslo-fault-{i}-{fault.kind}",
        )
        triggers.append(trigger)
        callback = trigger
    return triggers, callback


def _record(
    run: Run, fault: Fault, trigger: AtPoint, objectives: tuple[Any, ...]
) -> dict[str, Any]:
    record: dict[str, Any] = {"asked": fault.to_dict(), "label": fault.label}
    record.update(trigger.outcome(run.start_ns, FAULT_WAIT_S, "fault"))
    if "done" not in record:
        return record
    asked_s = float(record["asked_s"])
    record.update(fault_cost(run, asked_s, objectives, window_s=fault.window_s, share=fault.share))
    return record


def with_faults(
    run: Run,
    faults: Sequence[Fault],
    triggers: Sequence[AtPoint],
    objectives: tuple[Any, ...] = (),
) -> Run:
    """``run`` with ``meta["faults"]`` (one record per fault: what was asked and done,
    when, in seconds from the start of the measured window and on the wall clock, and
    what it cost) and ``meta["series"]`` (the level's per-second series)."""
    records = [
        _record(run, fault, trigger, objectives)
        for fault, trigger in zip(faults, triggers, strict=True)
    ]
    meta = run.meta.with_(faults=tuple(records), series=level_series(run, objectives))
    return dataclasses.replace(run, meta=meta)

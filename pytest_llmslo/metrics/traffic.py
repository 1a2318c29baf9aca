"""What the traffic of a run was: offered against achieved rate, the cap's waits, and, for
multi-turn conversations, the figures by turn and by conversation.

- **rates**: an open loop (a rate, a profile, a trace) offered ``offered_req_s`` (its
  schedule's measured arrivals over their span, on the run's clock: a trace at speed-up 2
  offers twice its own rate); the client sent ``sent_req_s`` (measured sends over their
  span). A client that could not keep up shows as late sends (schedule lag, which makes
  the run invalid through ``ClientHealth``); a capped loop shows its waits under ``cap``
  (``LoadLevel.max_concurrency``: they are the cap's, not the client's);
- **turns**: per turn index (0 = the first), the requests, completed ones, mean prompt
  tokens and TTFT P50/P99 and ITL P50 (ms). The TTFT of turn k against turn 0 is where a
  prefix cache shows: turn k's prompt starts with turn k-1's whole conversation;
- **sessions**: conversations started, those whose every turn completed, turns per
  conversation, and duration P50/P99 (s: first send to last byte, think times included);
- **workers**: with remote load workers, one line a worker (its clock offset and its
  uncertainty, CPU, lag, load share, whether it was valid or lost; ``load.fleet``).

Nothing here imports the rest of the metrics package: these are plain numpy over the
records, and ``metrics.summarize`` keeps them in ``RunSummary.traffic``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from pytest_llmslo.records import RequestRecord, Run
from pytest_llmslo.recordstore import RecordStore

__all__ = ["by_session", "by_turn", "sent_rate", "summarize"]


def _pct(values: list[float], q: float) -> float | None:
    return float(np.percentile(values, q)) if values else None


def _ttft_ms(r: RequestRecord) -> float | None:
    return (r.chunk_ns[0] - r.sent_ns) / 1e6 if r.ok and r.chunk_ns else None


def _itl_ms(r: RequestRecord) -> float | None:
    if not r.ok or len(r.chunk_ns) < 2:
        return None
    return (r.chunk_ns[-1] - r.chunk_ns[0]) / 1e6 / (len(r.chunk_ns) - 1)


def sent_rate(records: Sequence[RequestRecord]) -> float | None:
    """Measured sends per second over their span."""
    if isinstance(records, RecordStore):
        column = records.column("sent_ns")
        sent = np.sort(column[column != 0]).tolist()
    else:
        sent = sorted(r.sent_ns for r in records if r.sent_ns)
    if len(sent) < 2 or sent[-1] <= sent[0]:
        return None
    return float((len(sent) - 1) / ((sent[-1] - sent[0]) / 1e9))


def _turns(run: Run, first: bool = False) -> Sequence[RequestRecord]:
    """The records of a multi-turn run's conversations (``first``: the records of turn 0
    instead); from a store only those are built."""
    recs = run.records
    if isinstance(recs, RecordStore):
        rows = recs.column("turn") == 0 if first else recs.column("session") >= 0
        return [recs[i] for i in np.flatnonzero(rows).tolist()]
    return tuple(r for r in recs if r.turn == 0) if first else recs


def by_turn(run: Run) -> list[dict[str, Any]]:
    """Figures per turn index (empty for a single-turn run)."""
    groups: dict[int, list[RequestRecord]] = {}
    for r in _turns(run):
        if r.session >= 0:
            groups.setdefault(r.turn, []).append(r)
    out = []
    for turn in sorted(groups):
        recs = groups[turn]
        ttft = [v for r in recs if (v := _ttft_ms(r)) is not None]
        itl = [v for r in recs if (v := _itl_ms(r)) is not None]
        prompts = [r.prompt_tokens for r in recs if r.ok and r.prompt_tokens is not None]
        out.append(
            {
                "turn": turn,
                "requests": len(recs),
                "completed": sum(r.ok for r in recs),
                "prompt_tokens_mean": float(np.mean(prompts)) if prompts else None,
                "ttft_p50_ms": _pct(ttft, 50),
                "ttft_p99_ms": _pct(ttft, 99),
                "itl_p50_ms": _pct(itl, 50),
            }
        )
    return out


def by_session(run: Run) -> dict[str, Any] | None:
    """Figures per conversation (None for a single-turn run)."""
    groups: dict[int, list[RequestRecord]] = {}
    for r in _turns(run):
        if r.session >= 0:
            groups.setdefault(r.session, []).append(r)
    if not groups:
        return None
    durations = []
    complete = 0
    turns = []
    for recs in groups.values():
        turns.append(len(recs))
        if all(r.ok for r in recs):
            complete += 1
            durations.append((max(r.end_ns for r in recs) - min(r.sent_ns for r in recs)) / 1e9)
    meta = run.meta.traffic
    planned = None
    if isinstance(meta, Mapping):
        planned = meta.get("sessions_started")
    return {
        "sessions": len(groups),
        "started": planned if planned is not None else len(groups),
        "completed": complete,
        "turns_mean": float(np.mean(turns)),
        "duration_p50_s": _pct(durations, 50),
        "duration_p99_s": _pct(durations, 99),
    }


def summarize(run: Run) -> dict[str, Any] | None:
    """The run's traffic figures (module docstring); None for a plain closed loop."""
    meta = dict(run.meta.traffic or {})
    turns = by_turn(run)
    sessions = by_session(run)
    if not meta and not turns:
        return None
    out: dict[str, Any] = {}
    if "offered_req_s" in meta:
        out["unit"] = meta.get("unit", "request")
        out["offered_req_s"] = meta.get("offered_req_s")
        if out["unit"] == "conversation":
            firsts = _turns(run, first=True)
            out["sent_req_s"] = sent_rate(firsts)
        else:
            out["sent_req_s"] = sent_rate(run.records)
    for key in ("cap", "trace", "workers"):
        if key in meta:
            out[key] = meta[key]
    if turns:
        out["turns"] = turns
    if sessions is not None:
        out["sessions"] = sessions
    return out or None

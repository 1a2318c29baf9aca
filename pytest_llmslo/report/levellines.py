"""The lines under a level's row in the terminal and the Markdown report: its traffic
(offered against sent, a cap's waits, TTFT by turn), its engine's signals, its faults, why
its requests failed, its notes and the weight of its tail percentiles (``judged``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pytest_llmslo.judged import weight_notes
from pytest_llmslo.report.faulttext import fault_lines
from pytest_llmslo.report.scaleuptext import scale_up_text
from pytest_llmslo.report.signaltext import signal_lines
from pytest_llmslo.sweep import SweepPoint

__all__ = ["failure_lines", "level_lines", "request_failure_lines", "traffic_lines"]


def fmt_ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def level_lines(p: SweepPoint) -> list[str]:
    """The lines under a level's row: its traffic, its engine's signals, its failures and
    notes (the terminal shows all of them with ``-v``, the failed requests without)."""
    scale = scale_up_text(p.scale_up)
    return traffic_lines(p) + signal_lines(p) + failure_lines(p) + ([scale] if scale else [])


def _rate(v: Any) -> str:
    return "-" if v is None else f"{float(v):.3g}"


def traffic_lines(p: SweepPoint) -> list[str]:
    """What a level's traffic was, under its row: the offered against the sent rate (an
    open loop, a trace), the waits of a cap on requests in flight, and, for multi-turn
    conversations, TTFT by turn (where a prefix cache shows) and the conversations'
    durations. None for a plain closed loop."""
    t = p.summary.traffic
    if not t:
        return []
    label = p.level.label
    out: list[str] = []
    unit = "conv" if t.get("unit") == "conversation" else "req"
    if "offered_req_s" in t:
        text = f"  {label}: offered {_rate(t.get('offered_req_s'))} {unit}/s, "
        text += f"sent {_rate(t.get('sent_req_s'))} {unit}/s"
        trace = t.get("trace")
        if isinstance(trace, Mapping):
            name = str(trace.get("path", "")).rsplit("/", 1)[-1]
            text += (
                f" (trace {trace.get('format')} {name}: {trace.get('requests')} requests "
                f"over {float(trace.get('span_s') or 0):.1f} s"
            )
            if trace.get("skipped"):
                text += f", {trace['skipped']} failed rows skipped"
            text += ")"
        cap = t.get("cap")
        if isinstance(cap, Mapping) and cap.get("delayed"):
            text += (
                f"; the cap of {cap.get('max_concurrency')} in flight held back "
                f"{cap['delayed']} requests (mean {float(cap.get('wait_mean_ms', 0)):.0f} ms, "
                f"max {float(cap.get('wait_max_ms', 0)):.0f} ms)"
            )
        out.append(text)
    turns = t.get("turns")
    if turns:
        shown = turns if len(turns) <= 6 else [*turns[:3], *turns[-2:]]
        parts = [f"t{d['turn'] + 1} {fmt_ms(d.get('ttft_p50_ms'))}" for d in shown]
        if len(turns) > 6:
            parts.insert(3, "…")
        text = f"  {label}: TTFT p50 by turn " + " → ".join(parts) + " ms"
        ses = t.get("sessions")
        if isinstance(ses, Mapping):
            text += (
                f"; {ses.get('completed')} of {ses.get('started')} conversations completed, "
                f"duration p50 {_secs(ses.get('duration_p50_s'))}, "
                f"p99 {_secs(ses.get('duration_p99_s'))}"
            )
        out.append(text)
    return out


def _secs(v: Any) -> str:
    return "-" if v is None else f"{float(v):.2f} s"


def failure_lines(p: SweepPoint) -> list[str]:
    """Why a level's requests failed (``request_failure_lines``) and its notes, one line
    each; none for a clean level."""
    out = request_failure_lines(p)
    out.extend(f"  {p.level.label}: {note}" for note in weight_notes(p))
    out.extend(f"  {p.level.label}: {note}" for note in p.notes)
    if p.verdict is not None:
        out.extend(f"  {p.level.label}: why: {why}" for why in p.verdict.attribution)
    return out


def request_failure_lines(p: SweepPoint) -> list[str]:
    """The level's faults and what they cost (``report.faulttext``), then why its requests
    failed: its most frequent error message, with the count of the others; none when
    there was no fault and none failed."""
    s = p.summary
    out: list[str] = [f"  {p.level.label}: {line}" for line in fault_lines(p.faults)]
    if s.failed:
        text = f"  {p.level.label}: {s.failed} of {s.requests} requests failed"
        if s.errors:
            text += f": {s.errors[0]}"
            others = s.failed - s.errors[0].count
            if others > 0:
                text += (
                    f" (and {others} more: "
                    + ", ".join(f"{k} {v}" for k, v in sorted(s.failures.items()))
                    + ")"
                )
        out.append(text)
    return out

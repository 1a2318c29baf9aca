"""A level's scale-up as the reports say it: what was added and when, and when the new
capacity showed in goodput (``metrics.timetocapacity``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["scale_up_text"]


def _s(value: Any) -> str:
    return "n/a" if not isinstance(value, (int, float)) else f"{float(value):.1f} s"


def scale_up_text(record: Mapping[str, Any] | None) -> str | None:
    """``scale-up at 50% (to 2 replicas): asked at 4.2 s; goodput 812 -> 1630 tok/s
    (x2.01); the new capacity showed 1.8 s after the ask (from second 6, 3 s at >= 90 %)``;
    None without one."""
    if not isinstance(record, Mapping):
        return None
    asked = record.get("asked") or {}
    to = f"to {asked['replicas']} replicas" if asked.get("replicas") else "one replica more"
    head = f"scale-up at {asked.get('at', '?')} ({to})"
    if record.get("asked_s") is None:
        return f"{head}: {record.get('why') or 'not done'}"
    text = f"{head}: asked at {_s(record['asked_s'])}"
    if record.get("error"):
        return f"{text}; it failed: {record['error']}"
    before, after = record.get("before_tok_s"), record.get("after_tok_s")
    if before is not None and after is not None:
        gain = f" (x{record['gain']:.2f})" if isinstance(record.get("gain"), (int, float)) else ""
        text += f"; goodput {before:.0f} -> {after:.0f} tok/s{gain}"
    if record.get("capacity_s") is not None:
        share = float(record.get("share") or 0.9)
        text += (
            f"; the new capacity showed {_s(record['capacity_s'])} after the ask (from second "
            f"{record.get('shows_at_s')}, {record.get('window_s')} s at >= {share:.0%})"
        )
    elif record.get("why"):
        text += f"; {record['why']}"
    return text

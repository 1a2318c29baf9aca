"""A level's faults as the reports say them: what was done and when, and what it cost
(``faults.faultcost``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["fault_lines", "fault_text"]


def _num(value: Any, fmt: str, unit: str = "") -> str:
    return "n/a" if not isinstance(value, (int, float)) else f"{float(value):{fmt}}{unit}"


def fault_text(record: Mapping[str, Any]) -> str:
    """``kill at 40%: done at 4.2 s; 6 requests failed; goodput 812 -> 0 tok/s at worst
    (-100%), attainment down to 40%; recovered 2.8 s after it (from second 7, 3 s with
    goodput >= 90%, no error, objectives met)``."""
    head = str(record.get("label") or (record.get("asked") or {}).get("kind", "fault"))
    if record.get("asked_s") is None:
        return f"{head}: {record.get('why') or 'not done'}"
    text = f"{head}: done at {_num(record['asked_s'], '.1f', ' s')}"
    if record.get("error"):
        return f"{text}; it failed: {record['error']}"
    text += f"; {record.get('failed', 0)} request(s) failed"
    before = record.get("before_tok_s")
    if isinstance(before, (int, float)) and record.get("goodput_min_tok_s") is not None:
        dip = record.get("goodput_dip")
        text += f"; goodput {before:.0f} -> {record['goodput_min_tok_s']:.0f} tok/s at worst" + (
            f" (-{dip:.0%})" if isinstance(dip, (int, float)) else ""
        )
    if isinstance(record.get("attainment_min"), (int, float)):
        text += f", attainment down to {record['attainment_min']:.0%}"
    if record.get("recovery_s") is not None:
        share = float(record.get("share") or 0.9)
        text += (
            f"; recovered {_num(record['recovery_s'], '.1f', ' s')} after it (from second "
            f"{record.get('recovered_at_s')}, {record.get('window_s')} s with goodput >= "
            f"{share:.0%}, no error, objectives met)"
        )
    else:
        text += f"; not recovered: {record.get('why') or 'n/a'}"
    return text


def fault_lines(records: Sequence[Mapping[str, Any]] | None) -> list[str]:
    """One line per fault of a level (``fault_text``); none without faults."""
    if not records:
        return []
    return [fault_text(r) for r in records if isinstance(r, Mapping)]

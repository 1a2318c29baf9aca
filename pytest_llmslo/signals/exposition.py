"""One scrape of a Prometheus text exposition, reduced to what the signals need.

Parsed with ``prometheus_client``'s text parser (the reference implementation of the
format, not a hand-written one). Every sample is summed over its label sets (the
replicas, ranks and models of one engine): ``values`` by sample name (``..._total`` and
histogram ``_sum``/``_count`` included), ``buckets`` by histogram name as cumulative counts
per upper bound. A ratio gauge (KV-cache usage) is averaged over its label sets instead.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable
from dataclasses import dataclass, field

from ..errors import LlmSloError
from .names import base_name


class ExpositionError(LlmSloError):
    """The text is not the Prometheus exposition format."""


@dataclass(slots=True)
class Snapshot:
    t: float = field(default_factory=time.monotonic)
    values: dict[str, float] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)  # label sets per sample name
    buckets: dict[str, dict[float, float]] = field(default_factory=dict)

    def names(self) -> set[str]:
        return set(self.values) | set(self.buckets)

    def get(self, names: Iterable[str], ratio: bool = False) -> float | None:
        """The first of ``names`` present (a ratio averaged over its label sets)."""
        for n in names:
            if n in self.values:
                v = self.values[n]
                return v / max(self.counts.get(n, 1), 1) if ratio else v
        return None

    def histogram(self, names: Iterable[str]) -> tuple[str, dict[float, float]] | None:
        for n in names:
            if n in self.buckets:
                return n, self.buckets[n]
        return None

    def merge(self, other: Snapshot) -> None:
        """Add another endpoint's scrape (a Dynamo frontend and its workers)."""
        for k, v in other.values.items():
            self.values[k] = self.values.get(k, 0.0) + v
            self.counts[k] = self.counts.get(k, 0) + other.counts.get(k, 1)
        for k, b in other.buckets.items():
            mine = self.buckets.setdefault(k, {})
            for le, c in b.items():
                mine[le] = mine.get(le, 0.0) + c


def _only(text: str, families: frozenset[str]) -> str:
    """The lines of ``text`` that belong to ``families`` (their samples, HELP and TYPE),
    plus one sample line of each other known engine prefix (so that ``names.detect``
    still sees which engine this is). An engine's /metrics holds many families no signal
    reads (vLLM's is ~40 KB): not parsing them is most of a scrape's cost saved."""
    keep: list[str] = []
    seen: set[str] = set()
    for line in text.splitlines():
        if line.startswith("#"):
            parts = line.split(None, 3)
            if len(parts) >= 3 and base_name(parts[2]) in families:
                keep.append(line)
            continue
        end = len(line)
        for stop in ("{", " "):
            i = line.find(stop)
            if 0 <= i < end:
                end = i
        name = line[:end]
        if base_name(name) in families:
            keep.append(line)
        else:
            prefix = name.split(":", 1)[0] if ":" in name else name.split("_", 2)[0]
            if prefix not in seen:
                seen.add(prefix)
                keep.append(f"# TYPE {name} untyped")
                keep.append(line)
    return "\n".join(keep) + "\n"


def parse(text: str, families: frozenset[str] | None = None) -> Snapshot:
    """A snapshot of ``text`` (only the lines of ``families`` when given);
    ``ExpositionError`` when it is not the format."""
    from prometheus_client.parser import text_string_to_metric_families

    if families is not None:
        text = _only(text, families)
    snap = Snapshot()
    try:
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                name, labels, value = s.name, s.labels, s.value
                if name.endswith("_created") or (isinstance(value, float) and math.isnan(value)):
                    continue
                if name.endswith("_bucket") and "le" in labels:
                    base = name[: -len("_bucket")]
                    le = float(labels["le"])
                    b = snap.buckets.setdefault(base, {})
                    b[le] = b.get(le, 0.0) + float(value)
                    continue
                snap.values[name] = snap.values.get(name, 0.0) + float(value)
                snap.counts[name] = snap.counts.get(name, 0) + 1
    except (ValueError, TypeError, KeyError, IndexError) as exc:
        raise ExpositionError(f"not the Prometheus text format: {exc}") from None
    return snap


def quantile(
    before: dict[float, float] | None, after: dict[float, float], q: float
) -> float | None:
    """The q-quantile (0-1) of what a histogram observed between two scrapes, linear within
    its bucket (as PromQL's ``histogram_quantile``); None without observations. A quantile
    in the ``+Inf`` bucket is the highest finite bound (a lower bound of the truth)."""
    bounds = sorted(after)
    delta = [after[b] - (before or {}).get(b, 0.0) for b in bounds]
    total = delta[-1] if delta else 0.0
    if total <= 0:
        return None
    rank = q * total
    prev_b, prev_c = 0.0, 0.0
    for b, c in zip(bounds, delta, strict=True):
        if c >= rank:
            if math.isinf(b):
                return prev_b
            if c == prev_c:
                return b
            return prev_b + (b - prev_b) * (rank - prev_c) / (c - prev_c)
        prev_b, prev_c = b, c
    return prev_b

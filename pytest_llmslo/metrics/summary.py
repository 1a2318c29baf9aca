"""Stage 4 of a level (summary): ``summarize(run)`` makes the ``RunSummary`` of a ``Run``.

A run's numbers in one record (``RunSummary``, ``summarize``): the distribution of every
catalogue metric, throughput over its window, failures and, given objectives, goodput.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from pytest_llmslo.catalog import CATALOGUE, PERCENTILES, Stat, parse_stat, qkey, stat_name
from pytest_llmslo.records import ClientHealth, LoadLevel, Run
from pytest_llmslo.stats import DEFAULT_CONFIDENCE, _check_confidence

from . import traffic
from .columns import columns
from .distribution import Distribution
from .failures import ErrorMessage, failure_counts, failure_messages
from .gates import Threshold, gate_statistic, gate_values
from .goodput import goodput
from .outputs import output_pinned, short_outputs, usage_mismatches
from .throughput import in_window, rate, throughput_window, window_s
from .values import aggregate_values

__all__ = ["RunSummary", "summarize"]


@dataclass(frozen=True, slots=True)
class RunSummary:
    """The numbers of one run. ``distributions`` maps each catalogue metric
    (``catalog.METRICS``) to its :class:`Distribution` (completed requests; ``itl`` over
    token gaps). Goodput fields
    are None unless :func:`summarize` was given objectives (``objectives`` holds their
    labels). ``valid``/``invalid_reasons`` come from the client's self-check: an invalid
    run measured the load generator, not the engine; ``health`` holds its numbers (lags,
    CPU, processes). ``errors`` are the most frequent error messages of the failed
    requests; ``short_outputs`` the completed requests shorter than their pinned length
    (``output_pinned``); ``level_timeout`` the phase in which the level's time bound cut
    the run, if it did. ``usage_mismatches`` are the completed requests whose usage
    disagreed with their stream (``usage_claimed_tokens`` it claimed for them,
    ``usage_streamed_tokens`` streamed, and credited)."""

    level: LoadLevel
    requests: int
    completed: int
    failed: int
    failures: Mapping[str, int]
    error_rate: float
    duration_s: float
    distributions: Mapping[str, Distribution]
    output_tok_s: float
    total_tok_s: float
    req_s: float
    goodput_tok_s: float | None = None
    goodput_req_s: float | None = None
    attainment: float | None = None
    valid: bool = True
    invalid_reasons: tuple[str, ...] = ()
    good: int | None = None
    objectives: tuple[str, ...] = ()
    output_tokens: int = 0
    prompt_tokens: int = 0
    confidence: float = DEFAULT_CONFIDENCE
    errors: tuple[ErrorMessage, ...] = ()
    short_outputs: int = 0
    output_pinned: bool = False
    health: ClientHealth | None = None
    usage_mismatches: int = 0
    usage_claimed_tokens: int = 0
    usage_streamed_tokens: int = 0
    #: With failed requests: each metric's percentiles over *every* request, a failed one
    #: as +∞ (``gate_values``, what an upper-bound gate compares), so that a table does not
    #: show the survivors' P99 next to a gate that failed on ∞; None without failures
    #: (then they equal ``distributions``). In JSON a null here is +∞.
    with_failures: Mapping[str, Mapping[float, float]] | None = None
    level_timeout: str | None = None
    throughput_window: str = "measured"
    throughput_window_s: float = 0.0
    early_stop: str | None = None
    #: Offered against sent rate, a cap's waits, figures by turn and by conversation
    #: (``traffic.summarize``); None for a plain closed loop.
    traffic: Mapping[str, Any] | None = None
    #: The engine's own signals over the level (``signals.LevelSignals.to_dict``) with
    #: ``client_minus_engine_ttft_p50_ms`` / ``_p99_ms`` (network + client + API server)
    #: and ``energy_j_per_token``; None when signals were off.
    signals: Mapping[str, Any] | None = None
    #: Warm-up requests sent (and discarded) before the measured ones: the setting, raised
    #: to one wave of a closed loop; None in a document written before it was recorded.
    warmup_requests: int | None = None

    _RUN_FIELDS = (
        "output_tok_s",
        "total_tok_s",
        "req_s",
        "goodput_tok_s",
        "goodput_req_s",
        "attainment",
        "error_rate",
        "duration_s",
    )

    def metric(self, name: str, stat: Stat | str | None = None) -> float:
        """A number by name: ``metric("ttft", 99)``, ``metric("ttft", "p99")``,
        ``metric("ttft_p99")``, ``metric("itl", "mean")``, or a run figure such as
        ``metric("output_tok_s")``. NaN when undefined; KeyError for an unknown name or a
        percentile that was not summarised."""
        if stat is None and name in self._RUN_FIELDS:
            v = getattr(self, name)
            return math.nan if v is None else float(v)
        if stat is None:
            base, sep, st = name.partition("_")
            if not sep:
                raise KeyError(f"{name!r}: give a statistic, e.g. metric({name!r}, 'p99')")
            name, stat = base, st
        if name not in self.distributions:
            raise KeyError(f"unknown metric {name!r}; valid: {', '.join(self.distributions)}")
        dist = self.distributions[name]
        try:
            s = parse_stat(stat)
        except ValueError as exc:
            raise KeyError(str(exc)) from None
        if s == "mean":
            return dist.mean
        return dist.p(s)

    def to_dict(self) -> dict[str, Any]:
        return {
            "level": self.level.to_dict(),
            "requests": self.requests,
            "completed": self.completed,
            "failed": self.failed,
            "failures": dict(self.failures),
            "error_rate": self.error_rate,
            "duration_s": self.duration_s,
            "distributions": {k: d.to_dict() for k, d in self.distributions.items()},
            "output_tok_s": self.output_tok_s,
            "total_tok_s": self.total_tok_s,
            "req_s": self.req_s,
            "goodput_tok_s": self.goodput_tok_s,
            "goodput_req_s": self.goodput_req_s,
            "attainment": self.attainment,
            "valid": self.valid,
            "invalid_reasons": list(self.invalid_reasons),
            "good": self.good,
            "objectives": list(self.objectives),
            "output_tokens": self.output_tokens,
            "prompt_tokens": self.prompt_tokens,
            "confidence": self.confidence,
            "errors": [e.to_dict() for e in self.errors],
            "short_outputs": self.short_outputs,
            "output_pinned": self.output_pinned,
            "usage_mismatches": self.usage_mismatches,
            "usage_claimed_tokens": self.usage_claimed_tokens,
            "usage_streamed_tokens": self.usage_streamed_tokens,
            "with_failures": None
            if self.with_failures is None
            else {
                m: {qkey(q): (None if math.isinf(v) else v) for q, v in qs.items()}
                for m, qs in self.with_failures.items()
            },
            "client_health": None if self.health is None else self.health.to_dict(),
            "level_timeout": self.level_timeout,
            "throughput_window": self.throughput_window,
            "throughput_window_s": self.throughput_window_s,
            "early_stop": self.early_stop,
            "traffic": None if self.traffic is None else dict(self.traffic),
            "signals": None if self.signals is None else dict(self.signals),
            "warmup_requests": self.warmup_requests,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> RunSummary:
        def opt(key: str) -> float | None:
            v = d.get(key)
            return None if v is None else float(v)

        return cls(
            level=LoadLevel.from_dict(d["level"]),
            requests=int(d["requests"]),
            completed=int(d["completed"]),
            failed=int(d["failed"]),
            failures={str(k): int(v) for k, v in d.get("failures", {}).items()},
            error_rate=float(d.get("error_rate", 0.0)),
            duration_s=float(d.get("duration_s", 0.0)),
            distributions={
                k: Distribution.from_dict(v) for k, v in d.get("distributions", {}).items()
            },
            output_tok_s=float(d.get("output_tok_s", 0.0)),
            total_tok_s=float(d.get("total_tok_s", 0.0)),
            req_s=float(d.get("req_s", 0.0)),
            goodput_tok_s=opt("goodput_tok_s"),
            goodput_req_s=opt("goodput_req_s"),
            attainment=opt("attainment"),
            valid=bool(d.get("valid", True)),
            invalid_reasons=tuple(d.get("invalid_reasons", ())),
            good=None if d.get("good") is None else int(d["good"]),
            objectives=tuple(d.get("objectives", ())),
            output_tokens=int(d.get("output_tokens", 0)),
            prompt_tokens=int(d.get("prompt_tokens", 0)),
            confidence=float(d.get("confidence", DEFAULT_CONFIDENCE)),
            errors=tuple(ErrorMessage.from_dict(e) for e in d.get("errors") or ()),
            short_outputs=int(d.get("short_outputs", 0)),
            output_pinned=bool(d.get("output_pinned", False)),
            usage_mismatches=int(d.get("usage_mismatches", 0)),
            usage_claimed_tokens=int(d.get("usage_claimed_tokens", 0)),
            usage_streamed_tokens=int(d.get("usage_streamed_tokens", 0)),
            with_failures=None
            if not d.get("with_failures")
            else {
                m: {float(q): (math.inf if v is None else float(v)) for q, v in qs.items()}
                for m, qs in d["with_failures"].items()
            },
            health=None
            if not d.get("client_health")
            else ClientHealth.from_dict(d["client_health"]),
            level_timeout=d.get("level_timeout"),
            throughput_window=str(d.get("throughput_window", "measured")),
            throughput_window_s=float(d.get("throughput_window_s", 0.0)),
            early_stop=d.get("early_stop"),
            traffic=d.get("traffic"),
            signals=d.get("signals"),
            warmup_requests=None if d.get("warmup_requests") is None else int(d["warmup_requests"]),
        )


def _label(o: Threshold) -> str:
    label = getattr(o, "label", None)
    if isinstance(label, str):
        return label
    return f"{o.metric}_{stat_name(o.stat)} {o.op} {o.threshold:g} ms"


def summarize(
    run: Run, objectives: Iterable[Threshold] = (), confidence: float = DEFAULT_CONFIDENCE
) -> RunSummary:
    """Summarise a run: distributions of every metric with percentiles and bounds,
    throughput, failures, and, when ``objectives`` are given, goodput and attainment."""
    _check_confidence(confidence)
    objs = tuple(objectives)
    arr = columns(run)
    ok = arr.ok
    completed = int(ok.sum())
    dists = {
        name: Distribution.of(
            name, aggregate_values(run, name, copy=False), confidence=confidence, unit=m.unit
        )
        for name, m in CATALOGUE.items()
    }
    secs = window_s(run, arr)
    out_tokens = int(arr.output_tokens[ok].sum())
    prompt_tokens = int(arr.prompt_tokens[ok].sum())
    window = throughput_window(run)
    win_out, win_done = in_window(run, window, ok)
    win_prompt = prompt_tokens
    if window.kind == "steady":
        sent_in = ok & (arr.sent_ns >= window.start_ns) & (arr.sent_ns < window.end_ns)
        win_prompt = int(arr.prompt_tokens[sent_in].sum())
    win_s = window.seconds
    gp = goodput(run, objs) if objs else None
    mismatched, claimed, streamed = usage_mismatches(run)
    with_failures = None
    if completed < arr.n:
        with_failures = {
            m: {q: gate_statistic(gate_values(run, m)[0], q)[0] for q in PERCENTILES}
            for m in CATALOGUE
        }
    return RunSummary(
        level=run.level,
        requests=arr.n,
        completed=completed,
        failed=arr.n - completed,
        failures=failure_counts(run),
        error_rate=((arr.n - completed) / arr.n) if arr.n else 0.0,
        duration_s=secs,
        distributions=dists,
        output_tok_s=rate(win_out, win_s),
        total_tok_s=rate(win_out + win_prompt, win_s),
        req_s=rate(win_done, win_s),
        goodput_tok_s=None if gp is None else gp.tok_s,
        goodput_req_s=None if gp is None else gp.req_s,
        attainment=None if gp is None else gp.attainment,
        valid=run.health.valid,
        invalid_reasons=tuple(run.health.reasons),
        good=None if gp is None else gp.good,
        objectives=tuple(_label(o) for o in objs),
        output_tokens=out_tokens,
        prompt_tokens=prompt_tokens,
        confidence=confidence,
        errors=failure_messages(run),
        short_outputs=short_outputs(run),
        output_pinned=output_pinned(run),
        usage_mismatches=mismatched,
        usage_claimed_tokens=claimed,
        usage_streamed_tokens=streamed,
        with_failures=with_failures,
        health=run.health,
        level_timeout=_timeout_phase(run),
        throughput_window=window.kind,
        throughput_window_s=win_s,
        early_stop=_early_reason(run),
        traffic=traffic.summarize(run),
        signals=_signals(run, dists, out_tokens),
        warmup_requests=run.warmup_requests,
    )


def _signals(run: Run, dists: Mapping[str, Distribution], out_tokens: int) -> dict[str, Any] | None:
    """The run's engine signals with what needs the client's figures: the client-minus-
    engine TTFT (the network, the client and the API server in between) and the energy per
    output token."""
    raw = run.meta.signals
    if raw is None:
        return None
    out = dict(raw)
    ttft = dists.get("ttft")
    for q, key in ((50, "p50"), (99, "p99")):
        eng = raw.get(f"ttft_{key}_ms")
        cli = ttft.p(q) if ttft is not None and ttft.count else None
        if eng is not None and cli is not None and math.isfinite(cli):
            out[f"client_minus_engine_ttft_{key}_ms"] = cli - float(eng)
    gpu = raw.get("gpu")
    if isinstance(gpu, Mapping) and gpu.get("energy_j") is not None and out_tokens > 0:
        out["energy_j_per_token"] = float(gpu["energy_j"]) / out_tokens
    return out


def _early_reason(run: Run) -> str | None:
    info = run.meta.early_stop
    return str(info.get("reason")) if info is not None else None


def _timeout_phase(run: Run) -> str | None:
    info = run.meta.level_timeout
    if info is not None:
        return str(info.get("phase") or "measuring")
    return None

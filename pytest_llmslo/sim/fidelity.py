"""How close the sim comes to the reference comparison it is calibrated against, reported
the way Vidur reports its own fidelity: per row and per sweep point, the sim's value next
to the reference's and the relative error of each.

The reference is the comparison this project starts from: six setups on 4x H100 SXM,
Llama-3.1-70B-Instruct FP8, ShareGPT (ISL ~512, OSL ~256), SLO TTFT P99 < 500 ms
(``REFERENCE_ROWS``, at each setup's knee), and a vLLM concurrency sweep
(``REFERENCE_VLLM_SWEEP``) whose knee lies between c32 and c48.

Its figures are illustrative and not all consistent with each other, so not all can be
matched, and the sim is not bent to them:

- **throughput**: 32 streams at an ITL of 18 ms emit at most ~1,800 output tok/s, not the
  12,500 of the vLLM row (counting prompt tokens does not close the gap). Throughput is
  compared as ratios between rows, never as absolute tok/s;
- **TTFT under load**: at c48 the reference's own ITL (26 ms) and OSL (256) mean about 7
  new requests per second, ~3,700 prompt tokens/s, under 10 % of what 4 H100s prefill at
  FP8, so a roofline alone keeps TTFT flat. The vLLM-like preset follows the reference's
  TTFT curve (within ``TTFT_BAND`` at each sweep point) through calibrated prefill
  limits (``profiles``): each prefill's chunk per step is capped
  (``long_prefill_token_threshold``), at most a few requests prefill at once
  (``max_num_partial_prefills``), a chunk batched with decodes lengthens their step
  (``prefill_interference``), and past ``max_num_seqs`` running requests new ones queue
  for a slot. The other engines keep the roofline's flat TTFT;
- **ITL at the knee**: the rows' ITLs (10 to 22 ms) are far below the 30 ms the knees of
  their own sweep reach; in the sim the knees of five rows are bound by the ITL objective
  (ITL at the knee close to 30 ms), the vLLM-like one by TTFT and ITL together.

What is matched: the vLLM sweep's ITL and TTFT P99, the knee position, the throughput
ratios between rows (SGLang / vLLM 1.30, TRT-LLM / vLLM 1.18, Dynamo's disaggregated
gains) and the order of the six rows. The SGLang- and TRT-LLM-like per-sequence costs, the
Dynamo worker share and the vLLM-like prefill limits were calibrated on these
(``profiles``); everything else is a prediction. ``benchmarks/sim_fidelity.py`` prints
the tables and checks the TTFT band; ``docs/sim.md`` keeps them.

The workload is ShareGPT-like: lognormal lengths with means 512 / 256 and standard
deviations of half the mean (``SHAREGPT_LIKE``), closed loop, on the simulated clock
(``offline.py``). The knee SLO is TTFT P99 < 500 ms and ITL P50 < 30 ms, the example
suite's: with TTFT alone only the vLLM-like profile has a knee below c128.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from .cluster import RouterPolicy, Topology
from .offline import KneeSearch, LevelResult, Slo, Workload, closed_loop, find_knee
from .profiles import PROFILES, Profile

__all__ = [
    "KNEE_SLO",
    "REFERENCE_KNEE",
    "REFERENCE_ROWS",
    "REFERENCE_VLLM_SWEEP",
    "SHAREGPT_LIKE",
    "TTFT_BAND",
    "ReferencePoint",
    "ReferenceRow",
    "RowResult",
    "SweepResult",
    "dynamo_gains",
    "error",
    "isl_regimes",
    "order_matches",
    "router_gain",
    "row_results",
    "ttft_outside_band",
    "vllm_sweep",
]

#: ShareGPT-like request lengths (lognormal, means 512 / 256, standard deviation half of each).
SHAREGPT_LIKE = Workload(
    isl=512, osl=256, isl_stddev=256, osl_stddev=128, distribution="lognormal", seed=1
)
#: The SLO whose knee is compared (the example suite's).
KNEE_SLO = Slo(ttft_p99_ms=500.0, itl_p50_ms=30.0)
#: The reference's vLLM knee: c32 meets the SLO, c48 does not.
REFERENCE_KNEE = (32, 48)
#: How far (relative) the vLLM-like TTFT P99 may be from the reference sweep's at each point.
TTFT_BAND = 0.3


@dataclass(frozen=True, slots=True)
class ReferenceRow:
    """One row of the reference table, at its setup's knee."""

    label: str
    profile: str
    tok_s: float
    ttft_p50_ms: float
    ttft_p99_ms: float
    itl_p50_ms: float
    goodput_pct: float


_P = "llama3-70b-fp8-4xh100-"
REFERENCE_ROWS: tuple[ReferenceRow, ...] = (
    ReferenceRow("vLLM", _P + "vllm", 12_500, 160, 420, 18, 96),
    ReferenceRow("SGLang", _P + "sglang", 16_200, 140, 390, 21, 97),
    ReferenceRow("TRT-LLM", _P + "trtllm", 14_800, 190, 480, 10, 93),
    ReferenceRow("vLLM + Dynamo", _P + "dynamo-vllm", 18_500, 120, 310, 19, 98),
    ReferenceRow("SGLang + Dynamo", _P + "dynamo-sglang", 21_000, 110, 280, 22, 99),
    ReferenceRow("TRT-LLM + Dynamo", _P + "dynamo-trtllm", 22_500, 130, 350, 11, 97),
)


@dataclass(frozen=True, slots=True)
class ReferencePoint:
    """One point of the reference's vLLM sweep."""

    concurrency: int
    ttft_p99_ms: float
    itl_p50_ms: float
    tok_s: float


REFERENCE_VLLM_SWEEP: tuple[ReferencePoint, ...] = (
    ReferencePoint(8, 210, 14, 5_200),
    ReferencePoint(16, 370, 18, 9_800),
    ReferencePoint(32, 420, 18, 12_500),
    ReferencePoint(48, 680, 26, 13_800),
    ReferencePoint(64, 1_200, 41, 14_100),
)


def error(sim: float | None, ref: float) -> float:
    """Relative error of ``sim`` against ``ref`` (NaN when there is no sim value)."""
    if sim is None or not math.isfinite(sim) or ref == 0:
        return math.nan
    return (sim - ref) / ref


@dataclass(slots=True)
class RowResult:
    """A reference row and the sim profile's knee under ``KNEE_SLO``."""

    row: ReferenceRow
    search: KneeSearch

    @property
    def knee(self) -> LevelResult | None:
        return self.search.knee

    def value(self, name: str) -> float | None:
        """The sim's ``tok_s``, ``ttft_p50_ms``, ``ttft_p99_ms``, ``itl_p50_ms`` or
        ``goodput_pct`` at the knee."""
        k = self.knee
        if k is None:
            return None
        if name == "goodput_pct":
            return 100.0 * k.attainment(KNEE_SLO)
        return {
            "tok_s": k.tok_s,
            "ttft_p50_ms": k.ttft_p50,
            "ttft_p99_ms": k.ttft_p99,
            "itl_p50_ms": k.itl_p50,
        }[name]

    def error(self, name: str) -> float:
        return error(self.value(name), getattr(self.row, name))


def row_results(
    rows: Sequence[ReferenceRow] = REFERENCE_ROWS,
    workload: Workload = SHAREGPT_LIKE,
    *,
    step: int = 4,
    measured: int = 400,
    profiles: dict[str, Profile] | None = None,
) -> list[RowResult]:
    """Each row's profile's knee (``offline.find_knee``)."""
    table = PROFILES if profiles is None else profiles
    return [
        RowResult(r, find_knee(table[r.profile], workload, KNEE_SLO, step=step, measured=measured))
        for r in rows
    ]


def ratio(results: Sequence[RowResult], label: str, base: str = "vLLM") -> tuple[float, float]:
    """(sim, reference) knee throughput of row ``label`` over row ``base``."""
    by = {r.row.label: r for r in results}
    a, b = by[label], by[base]
    sim_a, sim_b = a.value("tok_s"), b.value("tok_s")
    sim = sim_a / sim_b if sim_a and sim_b else math.nan
    return sim, a.row.tok_s / b.row.tok_s


def order_matches(results: Sequence[RowResult], tolerance: float = 0.2) -> list[str]:
    """Pairs of rows that the sim orders the other way round from the reference, beyond
    ``tolerance`` (relative, on the sim's knee throughput); empty when the order holds."""
    out: list[str] = []
    for i, a in enumerate(results):
        for b in results[i + 1 :]:
            sa, sb = a.value("tok_s"), b.value("tok_s")
            if sa is None or sb is None:
                out.append(f"{a.row.label} / {b.row.label}: no knee")
                continue
            ref_up = b.row.tok_s > a.row.tok_s
            sim_up = sb > sa
            if ref_up != sim_up and abs(sb - sa) > tolerance * min(sa, sb):
                out.append(f"{a.row.label} / {b.row.label}")
    return out


@dataclass(slots=True)
class SweepResult:
    """The sim's level at a reference sweep point."""

    ref: ReferencePoint
    sim: LevelResult

    def error(self, name: str) -> float:
        value = {"ttft_p99_ms": self.sim.ttft_p99, "itl_p50_ms": self.sim.itl_p50}[name]
        return error(value, getattr(self.ref, name))

    @property
    def meets(self) -> bool:
        return self.sim.meets(KNEE_SLO)


def vllm_sweep(
    workload: Workload = SHAREGPT_LIKE,
    *,
    measured: int = 400,
    profile: str = _P + "vllm",
) -> list[SweepResult]:
    """The vLLM-like profile at the reference sweep's levels."""
    prof = PROFILES[profile]
    return [
        SweepResult(p, closed_loop(prof, p.concurrency, workload, measured=measured))
        for p in REFERENCE_VLLM_SWEEP
    ]


def ttft_outside_band(results: Sequence[SweepResult], band: float = TTFT_BAND) -> list[str]:
    """The sweep points whose TTFT P99 is more than ``band`` (relative) from the
    reference's, each as ``c<N>: <sim> ms vs <ref> ms (<err>)``; empty when all are within."""
    out: list[str] = []
    for r in results:
        err = r.error("ttft_p99_ms")
        if not abs(err) <= band:  # NaN (no TTFT) is outside too
            out.append(
                f"c{r.ref.concurrency}: {fmt(r.sim.ttft_p99)} ms vs {r.ref.ttft_p99_ms:g} ms "
                f"({pct(err)})"
            )
    return out


def knee_between(results: Sequence[SweepResult]) -> tuple[int | None, int | None]:
    """(highest level meeting ``KNEE_SLO`` before the first miss, the first miss)."""
    last_ok = None
    for r in results:
        if not r.meets:
            return last_ok, r.ref.concurrency
        last_ok = r.ref.concurrency
    return last_ok, None


def _knee_tok_s(profile: Profile, workload: Workload, step: int, measured: int) -> float:
    k = find_knee(profile, workload, KNEE_SLO, step=step, measured=measured).knee
    return math.nan if k is None else k.tok_s


def dynamo_gains(
    workloads: dict[str, Workload],
    *,
    engines: Iterable[str] = ("vllm", "sglang", "trtllm"),
    step: int = 4,
    measured: int = 400,
) -> dict[str, dict[str, float]]:
    """Per workload and engine: knee throughput of the Dynamo-like profile over the
    aggregated one."""
    out: dict[str, dict[str, float]] = {}
    for wname, wl in workloads.items():
        out[wname] = {}
        for e in engines:
            agg = _knee_tok_s(PROFILES[_P + e], wl, step, measured)
            dis = _knee_tok_s(PROFILES[_P + "dynamo-" + e], wl, step, measured)
            out[wname][e] = dis / agg
    return out


_POLICIES: tuple[RouterPolicy, ...] = ("round_robin", "kv")


def replicas(profile: Profile, n: int, tp: int, router: RouterPolicy) -> Profile:
    """``profile``'s engine as ``n`` data-parallel replicas of ``tp`` GPUs behind a
    ``router`` (``round_robin`` or ``kv``)."""
    topo = Topology(mode="aggregated", replicas=n, router=router)
    return dataclasses.replace(profile, name=f"{profile.name}-dp{n}-{router}", tp=tp, topology=topo)


#: Shared prefixes that outgrow one TP2 replica's KV cache (~200k tokens) but not two:
#: 96 documents of 3,072 tokens, a 512-token question each, short answers.
ROUTER_WORKLOAD = Workload(isl=3584, osl=128, prefixes=96, prefix_len=3072, seed=3)


@dataclass(slots=True)
class RouterResult:
    policy: str
    level: LevelResult


def router_gain(
    *,
    concurrency: int = 32,
    workload: Workload = ROUTER_WORKLOAD,
    measured: int = 400,
    profile: str = _P + "vllm",
) -> list[RouterResult]:
    """Two TP2 replicas of ``profile``'s engine behind a round-robin and a KV-aware
    router, at one concurrency, on shared prefixes."""
    base = PROFILES[profile]
    return [
        RouterResult(
            policy,
            closed_loop(replicas(base, 2, 2, policy), concurrency, workload, measured=measured),
        )
        for policy in _POLICIES
    ]


def isl_regimes(
    isls: Sequence[int] = (512, 1024, 2048, 4096),
    *,
    osl: int = 256,
    engine: str = "vllm",
    step: int = 4,
    measured: int = 300,
) -> list[tuple[int, float, float]]:
    """Per ISL (fixed lengths, unique prompts): the aggregated and the Dynamo-like knee
    throughput of ``engine``, to show where disaggregation pays."""
    out: list[tuple[int, float, float]] = []
    for isl in isls:
        wl = Workload(isl=isl, osl=osl, seed=1)
        agg = _knee_tok_s(PROFILES[_P + engine], wl, step, measured)
        dis = _knee_tok_s(PROFILES[_P + "dynamo-" + engine], wl, step, measured)
        out.append((isl, agg, dis))
    return out


def pct(value: float) -> str:
    """A relative error as a signed percentage."""
    return "n/a" if not math.isfinite(value) else f"{value * 100:+.0f} %"


def table(head: Sequence[str], rows: Iterable[Sequence[object]]) -> list[str]:
    """A Markdown table."""
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return out


def fmt(value: float | None, digits: int = 0) -> str:
    if value is None or not math.isfinite(value):
        return "n/a"
    return f"{value:,.{digits}f}"


def rows_table(results: Sequence[RowResult]) -> list[str]:
    """The six rows: sim value, reference value and error per column."""
    head = [
        "setup",
        "sim knee",
        "tok/s ratio (ref)",
        "TTFT P50 (ref, err)",
        "TTFT P99 (ref, err)",
        "ITL P50 (ref, err)",
        "goodput (ref, err)",
    ]
    body = []
    for r in results:
        sim_ratio, ref_ratio = ratio(results, r.row.label)
        cells: list[object] = [
            r.row.label,
            "none" if r.knee is None else f"c{r.knee.concurrency}",
            f"{fmt(sim_ratio, 2)} ({ref_ratio:.2f}, {pct(error(sim_ratio, ref_ratio))})",
        ]
        for name, digits in (("ttft_p50_ms", 0), ("ttft_p99_ms", 0), ("itl_p50_ms", 1)):
            cells.append(
                f"{fmt(r.value(name), digits)} ({getattr(r.row, name):g}, {pct(r.error(name))})"
            )
        cells.append(
            f"{fmt(r.value('goodput_pct'))} % ({r.row.goodput_pct:g} %, "
            f"{pct(r.error('goodput_pct'))})"
        )
        body.append(cells)
    return table(head, body)


def sweep_table(results: Sequence[SweepResult]) -> list[str]:
    head = [
        "c",
        "TTFT P99 sim (ref, err)",
        f"TTFT within ±{TTFT_BAND * 100:.0f} %",
        "ITL P50 sim (ref, err)",
        "tok/s sim",
        "tok/s ratio to c32 sim (ref)",
        "SLO",
    ]
    at32 = next((r for r in results if r.ref.concurrency == 32), results[0])
    body = []
    for r in results:
        sim_ratio = r.sim.tok_s / at32.sim.tok_s
        ref_ratio = r.ref.tok_s / at32.ref.tok_s
        body.append(
            [
                r.ref.concurrency,
                f"{fmt(r.sim.ttft_p99)} ({r.ref.ttft_p99_ms:g}, {pct(r.error('ttft_p99_ms'))})",
                "yes" if abs(r.error("ttft_p99_ms")) <= TTFT_BAND else "no",
                f"{fmt(r.sim.itl_p50, 1)} ({r.ref.itl_p50_ms:g}, {pct(r.error('itl_p50_ms'))})",
                fmt(r.sim.tok_s),
                f"{sim_ratio:.2f} ({ref_ratio:.2f})",
                "met" if r.meets else "missed",
            ]
        )
    return table(head, body)


def report(
    *,
    step: int = 4,
    measured: int = 400,
    progress: Callable[[str], None] | None = None,
    sweep: Sequence[SweepResult] | None = None,
) -> str:
    """The whole fidelity report as Markdown (what ``benchmarks/sim_fidelity.py`` prints);
    ``sweep``: the vLLM-like sweep when already run (``vllm_sweep``)."""

    def say(msg: str) -> None:
        if progress is not None:
            progress(msg)

    say("rows")
    out = _rows_section(step, measured)
    say("vLLM sweep")
    out += _sweep_section(vllm_sweep(measured=measured) if sweep is None else sweep)
    say("Dynamo gains")
    out += _dynamo_section(step, measured)
    say("router")
    out += _router_section(measured)
    say("ISL regimes")
    out += _regimes_section(step, measured)
    return "\n".join(out) + "\n"


def _rows_section(step: int, measured: int) -> list[str]:
    """The six rows' knees and whether they order as the reference's."""
    rows = row_results(step=step, measured=measured)
    out = [f"Knees under {KNEE_SLO.describe()}, {SHAREGPT_LIKE.describe()}, closed loop:", ""]
    out += rows_table(rows)
    wrong = order_matches(rows)
    out += [
        "",
        "Order of the six rows by knee throughput: "
        + ("as the reference's (within 20 %)." if not wrong else "differs: " + "; ".join(wrong)),
    ]
    return out


def _sweep_section(sweep: Sequence[SweepResult]) -> list[str]:
    """The vLLM-like sweep against the reference's: its knee and TTFT P99 at each point."""
    ok, miss = knee_between(sweep)
    out = [
        "",
        f"vLLM-like sweep against the reference's (knee: sim between c{ok} and c{miss}, "
        f"reference between c{REFERENCE_KNEE[0]} and c{REFERENCE_KNEE[1]}):",
        "",
    ]
    out += sweep_table(sweep)
    outside = ttft_outside_band(sweep)
    out += [
        "",
        f"TTFT P99 against the reference's, ±{TTFT_BAND * 100:.0f} % at each point: "
        + ("every point within." if not outside else "outside at " + "; ".join(outside) + "."),
    ]
    return out


def _dynamo_section(step: int, measured: int) -> list[str]:
    """Dynamo-like over aggregated knee throughput, with and without shared prefixes."""
    shared = dataclasses.replace(SHAREGPT_LIKE, prefixes=16, prefix_len=256)
    gains = dynamo_gains(
        {"unique prompts": SHAREGPT_LIKE, "shared prefixes": shared}, step=step, measured=measured
    )
    out = [
        "",
        "Dynamo-like over aggregated knee throughput (reference: +30-40 % with "
        "reusable prefixes, +10-15 % without; its table +48 %, +30 %, +52 %):",
        "",
    ]
    out += table(
        ["workload", "vLLM", "SGLang", "TRT-LLM"],
        [[w, *(pct(g[e] - 1) for e in ("vllm", "sglang", "trtllm"))] for w, g in gains.items()],
    )
    return out


def _router_section(measured: int) -> list[str]:
    """Two replicas behind each router policy: prefix hits and latency."""
    routed = router_gain(measured=measured)
    out = ["", f"Router, two TP2 vLLM-like replicas at c32, {ROUTER_WORKLOAD.describe()}:", ""]
    out += table(
        ["router", "prefix hit rate", "TTFT P50", "TTFT P99", "output tok/s"],
        [
            [
                r.policy,
                fmt(100 * (r.level.prefix_hit_rate or 0.0)) + " %",
                fmt(r.level.ttft_p50),
                fmt(r.level.ttft_p99),
                fmt(r.level.tok_s),
            ]
            for r in routed
        ],
    )
    return out


def _regimes_section(step: int, measured: int) -> list[str]:
    """Where disaggregation pays, by ISL."""
    regimes = isl_regimes(step=step, measured=min(measured, 300))
    out = [
        "",
        "Where disaggregation pays (vLLM-like, fixed lengths, unique prompts, OSL 256; "
        "reference: when ISL > 1,024):",
        "",
    ]
    out += table(
        ["ISL", "aggregated knee tok/s", "Dynamo-like knee tok/s", "gain"],
        [[isl, fmt(a), fmt(d), pct(d / a - 1)] for isl, a, d in regimes],
    )
    return out

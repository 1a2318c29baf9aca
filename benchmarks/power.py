"""The regression check's false alarms and power on the noisy sim (A/A and A/B).

    .venv/bin/python benchmarks/power.py [--runs 3] [--duration 30] [--concurrency 32]
        [--isl 256] [--osl 128] [--run-noise 0.015] [--step-jitter 0.03]
        [--itl-rise 0.10 | --slower FACTOR] [--fail TOLERANCES]

Runs ``--runs`` sessions of one configuration (A: the sim with its run-to-run noise on,
each run another seed, ``pytest_llmslo/sim/speednoise.py``) and as many of a slower one (B:
every step longer by a factor, same noise), each an ``llmslo run`` with the default
run length (30 s measured after 20 warm-up requests) unless ``--duration`` says otherwise,
one closed-loop level.

B is a regression of ``--itl-rise`` (10 %) as the client sees it: not all of a token's
time at the client is step time, so a step 10 % longer shows as less. Two pairs of
calibration runs with the noise off (``--calibrate-duration`` seconds each: A, then steps
25 % longer) give the share of the client's ITL P50 that scales with the step, and B's
step factor is the one that raises the client's ITL P50 by ``--itl-rise`` (ITL = share x
step + the rest, linear in the factor). ``--slower FACTOR`` sets the factor instead.

B's runs draw the same per-run speed factors as A's (run i of each is seeded i: common
random numbers), so an A/B pair differs by the regression plus what an A/A pair differs
by. With seeds of their own, three draws a side differ on average by chance: seeds 0-2
draw factors 1.014, 1.020, 1.036 and seeds 1000-1002 1.004, 1.002, 0.985, which made a
10 % slower step show as +6 to +9 % at the client.

Then compares, with the default tolerances (or ``--fail``):

- every A/A pair (i < j): a pair called a regression is a false alarm;
- every A/B pair (A_i, B_j): a pair called a regression is a detection;

and prints per metric the false alarms, the detections, the observed change and the
smallest detectable change (``regression/detectable.py``) as the comparison reports it,
and per pair whether any metric regressed. Runs whose client was the bottleneck are
counted as not comparable; on a shared machine the client's stall bounds are relaxed
(``RELAXED_CLIENT``; ``--strict-client`` keeps the defaults). Nothing is asserted: the
figures depend on the machine.

Each run is bounded by its duration and a timeout (``--duration`` x 4 + 120 s); its sim
is started and stopped by ``llmslo run`` itself. The run documents are written to a
temporary directory, removed at the end (``--keep DIR`` keeps them).
"""

from __future__ import annotations

import argparse
import itertools
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from pytest_llmslo.document import Results, read_document
from pytest_llmslo.document.lookup import metric_value
from pytest_llmslo.regression import compare_documents
from pytest_llmslo.regression.tolerances import DEFAULT_TOLERANCES

#: On a shared machine a client stall of 20-50 ms marks a run invalid (0.1 % of tokens
#: late); these bounds keep such runs (``--strict-client``: the defaults).
RELAXED_CLIENT = ["--client-max-stalled", "0.02", "--client-max-lag", "200"]


#: The step factor of the calibration's slower runs: large, so that the machine's own
#: drift between two runs (a few percent on a shared machine) is small beside the rise.
PROBE = 1.25
#: Calibration pairs (A then slower, alternated); the median of their rises is taken.
CALIBRATION_PAIRS = 2


def _run(
    out: Path, *, seed: int, speed: float, args: argparse.Namespace, quiet: bool = False
) -> Path | None:
    """One ``llmslo run`` of the sim with noise seeded ``seed`` (``quiet``: the noise off,
    for ``--calibrate-duration`` seconds); its document, or None."""
    run_noise, jitter = (0.0, 0.0) if quiet else (args.run_noise, args.step_jitter)
    noise = (
        f"--run-noise {run_noise} --step-jitter {jitter} --noise-seed {seed} --speed-factor {speed}"
    )
    duration = args.calibrate_duration if quiet else args.duration
    cmd = [
        sys.executable, "-m", "pytest_llmslo.cli", "run",
        "--engine", "sim", "--engine-opt", f"sim.extra_args='{noise}'",
        "--concurrency", str(args.concurrency), "--isl", str(args.isl), "--osl", str(args.osl),
        "--duration", str(duration),
        "--slo-json", str(out), "--slo-history", "none", "--name", "power",
        *([] if args.strict_client else RELAXED_CLIENT),
    ]  # fmt: skip
    try:
        done = subprocess.run(
            cmd, capture_output=True, text=True, timeout=duration * 4 + 120, check=False
        )
    except subprocess.TimeoutExpired:
        print(f"  {out.name}: timed out", flush=True)
        return None
    if not out.is_file():
        print(f"  {out.name}: no document (exit {done.returncode}): {done.stderr[-300:]}")
        return None
    return out


def _results(path: Path) -> Results:
    return Results.from_document(read_document(path), source=str(path))


def _itl_p50(path: Path) -> float | None:
    points = [p for p in _results(path).points if not p.interrupted]
    return metric_value(points[0], "itl_p50") if points else None


def _calibrate(work: Path, args: argparse.Namespace) -> float | None:
    """B's step factor: the one that raises the client's ITL P50 by ``--itl-rise``, from
    ``CALIBRATION_PAIRS`` pairs of runs with the noise off (A, then steps ``PROBE`` times
    longer), the median of their rises; None when a calibration run failed or the steps
    showed no rise."""
    rises = []
    for k in range(CALIBRATION_PAIRS):
        itl = []
        for name, speed in ((f"calA{k}", 1.0), (f"calB{k}", PROBE)):
            path = _run(work / f"{name}.json", seed=0, speed=speed, args=args, quiet=True)
            value = _itl_p50(path) if path is not None else None
            if value is None:
                return None
            itl.append(value)
        rises.append(itl[1] / itl[0] - 1.0)
        print(f"calibration {k}: ITL P50 {itl[0]:.2f} -> {itl[1]:.2f} ms", flush=True)
    rise = statistics.median(rises)
    if rise <= 0:
        print(f"calibration: steps {PROBE:g}x gave no ITL rise")
        return None
    factor = 1.0 + (PROBE - 1.0) * float(args.itl_rise) / rise
    print(
        f"calibration (noise off, {args.calibrate_duration:g} s a run): steps {PROBE:g}x "
        f"raised ITL P50 {100 * rise:+.1f}% (median of "
        f"{', '.join(f'{100 * r:+.1f}%' for r in rises)}): {100 * rise / (PROBE - 1):.0f}% of "
        f"the client's ITL is step time; B's steps {factor:.3f}x for "
        f"{100 * args.itl_rise:+.0f}% at the client",
        flush=True,
    )
    return factor


def _pairs(
    olds: list[Results], news: list[Results], same: bool, tolerances: str
) -> list[dict[str, Any]]:
    out = []
    pairs = (
        itertools.combinations(range(len(olds)), 2)
        if same
        else itertools.product(range(len(olds)), range(len(news)))
    )
    for i, j in pairs:
        result = compare_documents(olds[i], news[j], tolerances)
        rows: dict[str, Any] = {}
        comparable = True
        for c in result.comparisons:
            if not c.comparable:
                comparable = False
            for r in c.rows:
                rows[r.metric] = r
        out.append({"pair": (i, j), "comparable": comparable, "rows": rows})
    return out


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:+.1f}%"


def _report(label: str, pairs: list[dict[str, Any]], metrics: list[str]) -> None:
    usable = [p for p in pairs if p["comparable"] and p["rows"]]
    called = sum(any(r.status == "regressed" for r in p["rows"].values()) for p in usable)
    print(
        f"\n{label}: {len(pairs)} pairs, {len(usable)} comparable; "
        f"called a regression: {called} of {len(usable)}"
    )
    print(
        f"  {'metric':<12} {'regressed':>9} {'noise':>6} {'change (median, range)':>28} "
        f"{'detectable (median)':>20}"
    )
    for metric in metrics:
        rows = [p["rows"][metric] for p in usable if metric in p["rows"]]
        if not rows:
            continue
        changes = [r.delta_pct for r in rows if r.delta_pct is not None]
        mdes = [
            100.0 * r.mde / abs(r.old) for r in rows if r.mde is not None and r.old not in (0, None)
        ]
        regressed = sum(r.status == "regressed" for r in rows)
        noise = sum(r.status == "noise" for r in rows)
        span = (
            f"{_pct(statistics.median(changes))} ({_pct(min(changes))}..{_pct(max(changes))})"
            if changes
            else "-"
        )
        mde = f"{statistics.median(mdes):.1f}%" if mdes else "-"
        print(f"  {metric:<12} {regressed:>5}/{len(rows):<3} {noise:>6} {span:>28} {mde:>20}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=3, help="runs of each configuration")
    p.add_argument("--duration", type=float, default=30.0, help="measured seconds per run")
    p.add_argument("--concurrency", type=int, default=32)
    p.add_argument("--isl", type=int, default=256, help="prompt tokens")
    p.add_argument("--osl", type=int, default=128, help="output tokens")
    p.add_argument("--run-noise", type=float, default=0.015)
    p.add_argument("--step-jitter", type=float, default=0.03)
    p.add_argument(
        "--itl-rise", type=float, default=0.10, help="B's ITL P50 rise at the client (0.10: 10 %%)"
    )
    p.add_argument(
        "--calibrate-duration", type=float, default=10.0, help="seconds of each calibration run"
    )
    p.add_argument("--slower", type=float, default=None, help="B's step factor (no calibration)")
    p.add_argument("--fail", default=None, help="tolerances (default: the built-in set)")
    p.add_argument("--strict-client", action="store_true", help="the default client-health bounds")
    p.add_argument("--keep", default=None, metavar="DIR", help="keep the run documents here")
    args = p.parse_args(argv)
    if not 2 <= args.runs <= 20 or args.duration <= 0 or args.calibrate_duration <= 0:
        p.error("--runs must be 2 to 20, --duration and --calibrate-duration positive")
    if not 0 < args.itl_rise < 1 or (args.slower is not None and args.slower <= 0):
        p.error("--itl-rise must be between 0 and 1 and --slower positive")
    work = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="llmslo-power-"))
    work.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    try:
        slower = args.slower or _calibrate(work, args)
        if slower is None:
            print("calibration failed: give B's step factor with --slower")
            return 1
        docs: dict[str, list[Results]] = {"A": [], "B": []}
        for name, speed in (("A", 1.0), ("B", slower)):
            for i in range(args.runs):
                # B draws A's run factors (common random numbers): see the docstring.
                path = _run(work / f"{name}{i}.json", seed=i, speed=speed, args=args)
                if path is not None:
                    docs[name].append(_results(path))
                print(f"  run {name}{i} done ({time.monotonic() - t0:.0f} s)", flush=True)
        tolerances = args.fail or DEFAULT_TOLERANCES
        metrics = [part.split(":")[0] for part in tolerances.split(",")]
        print(
            f"\nsim c{args.concurrency}, ISL {args.isl}, OSL {args.osl}, {args.duration:g} s "
            f"measured per run; noise: run "
            f"{100 * args.run_noise:g} %, step {100 * args.step_jitter:g} %; B {slower:.3f}x "
            f"slower steps; tolerances {tolerances}"
        )
        _report("A/A (false alarms)", _pairs(docs["A"], docs["A"], True, tolerances), metrics)
        _report("A/B (detections)", _pairs(docs["A"], docs["B"], False, tolerances), metrics)
        print(f"\ntook {time.monotonic() - t0:.0f} s")
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

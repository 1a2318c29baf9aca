"""``llmslo export RUN``: a run's levels and requests to where teams look. RUN is a run
document, a baseline name, or a run of the history (``latest``, ``latest~N``, an id)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from pytest_llmslo.cliargs import add_baseline_root, add_history_root
from pytest_llmslo.document import Results, write_atomic_text
from pytest_llmslo.errors import ConfigError

from . import benchjson, push, requests

__all__ = ["add_export", "export"]


def add_export(sub: Any) -> argparse.ArgumentParser:
    """The ``export`` subcommand's arguments."""
    ex: argparse.ArgumentParser = sub.add_parser(
        "export",
        help="export a run's levels and requests (benchmark JSON, metrics, JSONL, Parquet)",
        description="Write a run's levels as github-action-benchmark or Bencher JSON, push "
        "them to a Prometheus Pushgateway or an OTLP/HTTP collector, and write its "
        "per-request records as JSONL or Parquet (docs/exports.md). RUN is a run document, "
        "a baseline name, or latest, latest~N or a run id of the run history.",
    )
    ex.add_argument("run", metavar="RUN", help="the run to export")
    add_history_root(ex)
    add_baseline_root(ex)
    ex.add_argument(
        "--github-smaller",
        metavar="PATH",
        help="github-action-benchmark customSmallerIsBetter JSON (latencies, error rate)",
    )
    ex.add_argument(
        "--github-bigger",
        metavar="PATH",
        help="github-action-benchmark customBiggerIsBetter JSON (throughput, goodput, attainment)",
    )
    ex.add_argument("--bencher", metavar="PATH", help="Bencher Metric Format (BMF) JSON")
    ex.add_argument("--requests-jsonl", metavar="PATH", help="per-request records, JSON lines")
    ex.add_argument(
        "--requests-parquet", metavar="PATH", help="per-request records, Parquet (pyarrow)"
    )
    ex.add_argument("--pushgateway", metavar="URL", help="push the levels' gauges (Prometheus)")
    ex.add_argument("--push-job", default="llmslo", metavar="NAME", help="the Pushgateway job")
    ex.add_argument(
        "--otlp", metavar="URL", help="push the GenAI histograms and gauges (OTLP/HTTP)"
    )
    return ex


def _json(path: str, value: Any) -> None:
    write_atomic_text(path, json.dumps(value, indent=2, allow_nan=False, ensure_ascii=False) + "\n")


def export(args: argparse.Namespace, results: Results) -> list[str]:
    """Do every export asked for; one line each saying what was done. ``ConfigError``
    when none was asked for or one failed (those before it are done)."""
    done: list[str] = []
    asked = (
        args.github_smaller, args.github_bigger, args.bencher, args.requests_jsonl,
        args.requests_parquet, args.pushgateway, args.otlp,
    )  # fmt: skip
    if not any(asked):
        raise ConfigError(
            "nothing to export: give --github-smaller, --github-bigger, --bencher, "
            "--requests-jsonl, --requests-parquet, --pushgateway or --otlp"
        )
    for path, bigger in ((args.github_smaller, False), (args.github_bigger, True)):
        if path:
            entries = benchjson.github_benchmark(results, bigger=bigger)
            _json(path, entries)
            done.append(f"{len(entries)} benchmarks written to {path}")
    if args.bencher:
        bmf = benchjson.bencher_metrics(results)
        _json(args.bencher, bmf)
        done.append(f"{len(bmf)} Bencher benchmarks written to {args.bencher}")
    for path, write in (
        (args.requests_jsonl, requests.write_jsonl),
        (args.requests_parquet, requests.write_parquet),
    ):
        if path:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            done.append(f"{write(results, path)} requests written to {path}")
    if args.pushgateway:
        push.push_gateway(results, args.pushgateway, job=args.push_job)
        done.append(f"levels pushed to the Pushgateway {args.pushgateway} (job {args.push_job})")
    if args.otlp:
        push.push_otlp(results, args.otlp)
        done.append(f"levels pushed over OTLP to {args.otlp}")
    return done

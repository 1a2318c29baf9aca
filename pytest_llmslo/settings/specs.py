"""The specs of every setting: one declarative table, ``SPECS``, that names each setting on
every source and says which field of the resolved settings it fills.

A spec gives the command-line flag (``cli``), the marker keyword (``marker``: a per-test
setting; ``None``: session-wide only), the environment variable (``LLMSLO_<NAME>``) and the ini
key (``llmslo_<name>``), its parser and default, its ``--help`` text and topic, and ``field``:
the ``TestSettings``/``SessionSettings`` attribute it fills (``None``: it only shapes the load
levels, ``levels.resolve_levels``). Options, ini keys, environment checks, marker keywords and
resolution are all generated from this table: a new setting is one row here and its field.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pytest_llmslo.choices import (
    CAPACITY_MODES,
    DISTRIBUTIONS,
    EARLY_STOP_MODES,
    ENDPOINTS,
    RECEIVE_STAMPS,
    RESET_CACHE_MODES,
    THINK_DISTRIBUTIONS,
    TRACE_FORMATS,
    TRANSPORTS,
)
from pytest_llmslo.engines.base import ENGINE_KINDS
from pytest_llmslo.engines.scaling import parse_scale_up
from pytest_llmslo.engines.sim import DEFAULT_PROFILE as SIM_DEFAULT_PROFILE
from pytest_llmslo.evals import parse_eval, parse_hf_reading
from pytest_llmslo.evals.custom import parse_scorer_ref
from pytest_llmslo.faults.faultspec import parse_faults
from pytest_llmslo.slo.quality import parse_quality

from .levelspecs import ARRIVALS, LEVEL_SPECS, MAX_EXTEND_LEVELS, WORKLOADS
from .parsers import (
    choice_parser,
    coerce_with,
    parse_engine_opts,
    parse_float,
    parse_int,
    parse_name_list,
    parse_optional_str,
    parse_optional_url,
    parse_positive_int,
    parse_seconds,
)
from .spec import ENV_PREFIX, INI_PREFIX, OPTION_PREFIX, Scope, Spec

__all__ = [
    "ARRIVALS",
    "CAPACITY_MODES",
    "COMMON",
    "DEFAULT_CONCURRENCY",
    "DISTRIBUTIONS",
    "EARLY_STOP_MODES",
    "ENDPOINTS",
    "ENV_PREFIX",
    "INI_PREFIX",
    "MARKER_ALIASES",
    "MARKER_KWARGS",
    "MARKER_ONLY",
    "MAX_EXTEND_LEVELS",
    "OPTION_PREFIX",
    "RECEIVE_STAMPS",
    "RESET_CACHE_MODES",
    "RUN_DEFAULTS",
    "SPECS",
    "SPEC_BY_NAME",
    "THINK_DISTRIBUTIONS",
    "TOPICS",
    "TRACE_FORMATS",
    "TRANSPORTS",
    "WORKLOADS",
    "Scope",
    "Spec",
]

DEFAULT_CONCURRENCY: tuple[int, ...] = (1, 4, 8, 16, 32, 48, 64)


#: The topics the options are grouped by in ``--help`` (``Spec.topic``), in their order.
TOPICS: dict[str, str] = {
    "engines": "engines (what is measured)",
    "load": "load (levels, arrivals, request counts)",
    "workload": "workload (prompts, lengths, datasets, traces, conversations)",
    "requests": "requests (endpoint, shaping, deadlines, TLS)",
    "slo": "SLO (objectives, gates, extension, capacity)",
    "client": "client health (when the load generator was the bottleneck)",
    "workers": "remote workers (the load sent from other hosts)",
    "kubernetes": "Kubernetes (worker pods)",
    "signals": "engine signals",
    "outputs": "reports (results document, HTML, Markdown, CSV, SVG)",
    "regression": "regression (baselines)",
}

#: The options most runs need: ``--help`` shows them first and in full, the others by topic
#: (``--help-all`` in full). Names of ``SPECS`` rows.
COMMON: tuple[str, ...] = (
    "engine",
    "engine_url",
    "model",
    "concurrency",
    "rate",
    "duration",
    "requests",
    "isl",
    "osl",
    "slo",
    "slo_html",
)

#: ``llmslo run``'s own defaults, where an interactive run wants another than a suite of SLO
#: tests: each level ends after 30 s of measurement (or its --requests, whichever comes
#: first), after a warm-up of 20 requests (at least one wave of a closed loop). With the
#: plugin's 200 + 500 requests per level, the default sweep took over 40 minutes.
RUN_DEFAULTS: dict[str, Any] = {"duration": 30.0, "warmup": 20}

# One row a setting: what it is (name, parser, default, the field it fills), where it is
# given (flag, marker keyword, --help topic and form), then its --help text. Laid out by hand
# as a table, so each row reads on its own.
# fmt: off
_SESSION_ROWS: tuple[Spec, ...] = (
    # session-wide
    Spec("engine", parse_name_list, ("sim",), field="engines",
         cli="--engine", topic="engines", metavar="NAME[,NAME]", repeatable=True,
         help="Engines to test: configured engine names or bare kinds "
              f"({', '.join(ENGINE_KINDS)}); comma list or repeated."),
    Spec("engine_url", parse_optional_url, None, field="engine_url",
         cli="--engine-url", topic="engines", metavar="URL",
         help="Base URL of a running OpenAI-compatible server (engine kind 'external', the "
              "default with it)."),
    Spec("engine_config", parse_optional_str, None, field="engine_config",
         cli="--engine-config", topic="engines", metavar="PATH",
         shown_default="pyproject.toml [tool.llmslo.engines]",
         help="TOML file with [engines.NAME] tables (or [tool.llmslo.engines.NAME])."),
    Spec("engine_opt", parse_engine_opts, (), field="engine_opts",
         cli="--engine-opt", topic="engines", metavar="NAME.KEY=VALUE", repeatable=True,
         help="Override one engine config key: NAME.key=value (repeatable)."),
    Spec("engine_restarts", parse_int, 1, field="engine_restarts",
         cli="--engine-restarts", topic="engines", metavar="N",
         help="Restarts of an engine that died during the session: it is started again for the "
              "next test, at most this many times (0: never; its later tests then error)."),
    Spec("sim_profile", parse_optional_str, None, field="sim_profile",
         cli="--sim-profile", topic="engines", metavar="NAME", shown_default=SIM_DEFAULT_PROFILE,
         help="Profile of the sim engine (python -m pytest_llmslo.sim --list-profiles)."),
    Spec("slo_json", parse_optional_str, None, field="json_path",
         cli="--slo-json", topic="outputs", metavar="PATH",
         help="Write the session's results document (versioned JSON) to PATH, atomically."),
    Spec("slo_markdown", parse_optional_str, None, field="markdown_path",
         cli="--slo-markdown", topic="outputs", metavar="PATH",
         help="Write the session's sweeps, knees and Pareto summary as Markdown to PATH."),
    Spec("slo_svg", parse_optional_str, None, field="svg_path",
         cli="--slo-svg", topic="outputs", metavar="PATH",
         help="Write the chart of the session's sweeps (throughput vs TTFT P99 with the Pareto "
              "frontier, goodput per level) as SVG to PATH."),
    Spec("slo_csv", parse_optional_str, None, field="csv_path",
         cli="--slo-csv", topic="outputs", metavar="PATH",
         help="Write one CSV row per engine x test x load level (latencies, throughput, "
              "goodput, outcome, knee) to PATH."),
    Spec("slo_html", parse_optional_str, None, field="html_path",
         cli="--slo-html", topic="outputs", metavar="PATH",
         help="Write the self-contained HTML report (charts, tables, each level's "
              "distributions and signals, a --slo-compare baseline beside) to PATH."),
    Spec("slo_save", parse_optional_str, None, field="save",
         cli="--slo-save", topic="regression", metavar="NAME",
         help="Save the session's results as the named baseline (under .llmslo/baselines)."),
    Spec("slo_compare", parse_optional_str, None, field="compare",
         cli="--slo-compare", topic="regression", metavar="NAME|PATH",
         help="Compare each test against a saved baseline (a name or a JSON path), a run of "
              "the history (latest, latest~N, a run id), or 'history': the last stable "
              "segment of the run history."),
    Spec("slo_compare_fail", parse_optional_str, None, field="compare_fail",
         cli="--slo-compare-fail", topic="regression", metavar="SPEC",
         shown_default="goodput:5%,throughput:5%,attainment:2pp, latencies 10%",
         help="Regression tolerances per metric, e.g. goodput:5%,ttft_p99:10%."),
    # Run history: every session's document kept under .llmslo/runs (history/)
    Spec("slo_history", parse_optional_str, None, field="history",
         cli="--slo-history", topic="regression", metavar="DIR|none",
         shown_default=".llmslo/runs",
         help="Keep every session's results document in DIR (llmslo history lists them; "
              "--slo-compare=latest compares with the last); 'none': keep nothing."),
    Spec("slo_history_keep", parse_int, 100, field="history_keep",
         cli="--slo-history-keep", topic="regression", metavar="N",
         help="Keep the newest N runs in the history (0: no limit)."),
    Spec("slo_history_days", parse_float, 0.0, field="history_days",
         cli="--slo-history-days", topic="regression", metavar="DAYS",
         help="Remove runs older than DAYS from the history (0: no limit)."),
)
# fmt: on

# The session-wide rows of remote workers, then the per-test rows of what runs beside a
# level (engine resets and scale-ups, faults, evals, quality, the tokenizer).
# fmt: off
_BESIDE_ROWS: tuple[Spec, ...] = (
    Spec("worker_listen", parse_optional_str, None, field="worker_listen",
         cli="--worker-listen", marker=None, topic="workers", metavar="HOST:PORT",
         help="Run each level on remote load workers: listen here for the --remote-workers "
              "started anywhere with `llmslo worker --connect HOST:PORT` (port 0: any free "
              "port, printed). Without it the load runs in local worker processes."),
    Spec("remote_workers", parse_positive_int, 1, field="remote_workers",
         cli="--remote-workers", marker=None, topic="workers", metavar="N",
         help="How many remote load workers the session waits for (with --worker-listen); "
              "every level is split over them."),
    Spec("worker_wait", parse_seconds, 120.0, field="worker_wait_s",
         cli="--worker-wait", marker=None, topic="workers", metavar="S",
         help="How long the session waits for its remote load workers to connect before it "
              "fails, naming how many came."),
    Spec("worker_image", parse_optional_str, None, field="worker_image",
         cli="--worker-image", marker=None, topic="kubernetes", metavar="IMAGE",
         help="Start the --remote-workers in Kubernetes: an Indexed Job of that many pods of "
              "this image (holding this version of pytest-llmslo) in the current context's "
              "namespace (in a pod: its own), created for the session and deleted with it."),
    Spec("worker_advertise", parse_optional_str, None, field="worker_advertise",
         cli="--worker-advertise", marker=None, topic="kubernetes", metavar="HOST:PORT",
         shown_default="the --worker-listen address (this host's address for 0.0.0.0)",
         help="The address the worker pods of --worker-image connect to (a Service's, or "
              "this pod's)."),
    # Remote workers on a shared network: the key every worker must prove it holds.
    Spec("worker_key_file", parse_optional_str, None, field="worker_key_file",
         cli="--slo-worker-key-file", marker=None, topic="workers", metavar="PATH",
         shown_default="~/.config/llmslo/worker.key (made, 0600)",
         help="The file of the key remote load workers must prove they hold before the "
              "session reads a message of theirs (with --worker-listen; readable by its "
              "owner alone; LLMSLO_WORKER_KEY or LLMSLO_WORKER_KEY_FILE first). Hand the "
              "same file to each worker (`llmslo worker --key-file`)."),
    Spec("worker_tls_cert", parse_optional_str, None, field="worker_tls_cert",
         cli="--slo-worker-tls-cert", marker=None, topic="workers", metavar="PATH",
         help="TLS on the remote workers' link (with --worker-listen): the session's "
              "certificate (PEM); workers check it with `llmslo worker --tls-ca`."),
    Spec("worker_tls_key", parse_optional_str, None, field="worker_tls_key",
         cli="--slo-worker-tls-key", marker=None, topic="workers", metavar="PATH",
         help="The key of --slo-worker-tls-cert (PEM)."),
    Spec("worker_tls_ca", parse_optional_str, None, field="worker_tls_ca",
         cli="--slo-worker-tls-ca", marker=None, topic="workers", metavar="PATH",
         help="Mutual TLS: the CA (PEM) the workers' certificates must be signed by "
              "(`llmslo worker --tls-cert/--tls-key`); without it any worker may connect "
              "and must still prove the key."),
    Spec("external_ready_timeout", parse_seconds, 60.0, field="external_ready_timeout_s",
         cli="--external-ready-timeout", topic="engines", metavar="SECONDS",
         help="How long an external engine (already running) may take to answer ready "
              "(/v1/models listing the model) before the session says what it saw and stops."),
    Spec("reset_cache", choice_parser("reset_cache", RESET_CACHE_MODES), "auto",
         field="reset_cache", cli="--reset-cache", marker="reset_cache", topic="engines",
         choices=RESET_CACHE_MODES,
         help="Empty the engine's prefix cache before each level (vLLM /reset_prefix_cache, "
              "SGLang /flush_cache, Dynamo /clear_kv_blocks, the sim): 'auto' where the "
              "harness started the engine, 'on' also for an external engine, 'off' never."),
    Spec("scale_up", parse_scale_up, None, field="scale_up", cli="--slo-scale-up",
         marker="scale_up", coerce=parse_scale_up, topic="engines", metavar="SPEC",
         help="Add capacity in the middle of each level and measure when it shows in "
              "goodput: 'at=50%' (or at=20s), optional replicas=N (the total), startup_s=S "
              "(a sim replica's cold start), window=3s, share=90%. The sim, Dynamo as "
              "processes and kubernetes engines can grow."),
    Spec("fault", parse_faults, (), field="faults", cli="--slo-fault", marker="fault",
         coerce=parse_faults, topic="engines", metavar="SPEC",
         help="Faults in the middle of each level, and what they cost: 'kill at=40%', "
              "'restart at=5s,startup_s=1', 'stall at=3s,for=2s', 'drop at=30%,for=2s,"
              "rate=50%', 'delay at=3s,for=2s,by=200ms' (several separated by ';'); "
              "replica=, window=3s and share=90% (recovery). See docs/faults.md."),
    Spec("eval", parse_eval, None, field="evals", cli="--slo-eval", marker="eval",  # quality
         topic="workload", metavar="TASK[:SHARE]", help="Eval items in the traffic (quality): "
         "arithmetic, retrieval, ordering, schema, an eval file PATH.jsonl or a Hugging Face "
         "dataset hf:NAME, on a share of the requests (retrieval:20%; default all). "
         "docs/quality.md"),
    # Quality: how the Hugging Face dataset of --slo-eval=hf:NAME is read.
    Spec("eval_hf", parse_hf_reading, None, field="eval_hf", cli="--slo-eval-hf",
         marker="eval_hf", coerce=parse_hf_reading, topic="workload", metavar="KEY=VALUE,...",
         help="How --slo-eval=hf:NAME is read (offline, from the datasets cache or a local "
         "folder): config=, split=, prompt= (or messages=) and reference= columns, "
         "reference_after=, scorer=, tolerance=, max_tokens=, max_items=, cache_dir=. "
         "docs/quality.md"),
    # Quality: the user's function scoring an eval file's "custom" rows.
    Spec("eval_scorer", parse_scorer_ref, None, field="eval_scorer", cli="--slo-eval-scorer",
         marker="eval_scorer", topic="workload", metavar="MODULE:FUNCTION",
         help="A Python function scoring the eval file's rows whose scorer is 'custom': "
         "judge(reply, reference) -> bool. Named here, never in the data. docs/quality.md"),
    Spec("quality", parse_quality, (), field="quality", cli="--slo-quality", marker="quality",
         topic="slo", metavar="SPEC", help="Objectives on the eval answers, with a Wilson "
         "bound: accuracy>=0.95 (inconclusive when too few items show it). docs/quality.md"),
    # The tokenizer of the prompts, on every surface (--slo-tokenizer, marker, run file).
    Spec("tokenizer", parse_optional_str, None, field="tokenizer",
         cli="--tokenizer", marker="tokenizer", topic="workload", metavar="PATH",
         help="The model's tokenizer: a local tokenizer.json or a model folder holding one "
              "(needs the 'tokenizers' package); built prompts are then exactly --isl tokens "
              "of it, the server's own additions measured once (none: prompt lengths are "
              "calibrated against the server)."),
)
# fmt: on

#: Every setting, in the order of ``--help`` and docs/options.md: the session's engines,
#: outputs and history, the per-test rows of a level (``levelspecs.py``), then the rest.
SPECS: tuple[Spec, ...] = (*_SESSION_ROWS, *LEVEL_SPECS, *_BESIDE_ROWS)

SPEC_BY_NAME: dict[str, Spec] = {s.name: s for s in SPECS}
MARKER_KWARGS: dict[str, Spec] = {s.marker: s for s in SPECS if s.marker}
# ``slo=`` is accepted as an alias of ``objectives=`` on the marker.
MARKER_ALIASES = {"slo": "objectives", "min_goodput": "min_goodput_tok_s"}
#: Marker keywords that only a test can set (no CLI, ini or environment form): the engines
#: a test runs on, replacing the session's (``--engine`` still narrows them).
MARKER_ONLY: dict[str, Callable[[Any], Any]] = {"engines": coerce_with(parse_name_list)}

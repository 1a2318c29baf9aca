"""The per-test rows of the settings table (``specs.SPECS``): what a level sends and how
it is judged, each with its marker keyword: the load levels, the workload, the requests and
their deadlines, the SLO and its gates, the client's health and the engine's signals."""

from __future__ import annotations

from pytest_llmslo import arrivals
from pytest_llmslo.choices import (
    DISTRIBUTIONS,
    EARLY_STOP_MODES,
    ENDPOINTS,
    RECEIVE_STAMPS,
    THINK_DISTRIBUTIONS,
    TRACE_FORMATS,
    TRANSPORTS,
    WORKLOAD_KINDS,
)
from pytest_llmslo.stats import DEFAULT_CONFIDENCE

from .parsers import (
    choice_parser,
    coerce_bool,
    coerce_headers,
    coerce_json_object,
    coerce_models,
    coerce_objectives,
    parse_bool,
    parse_confidence,
    parse_float,
    parse_float_list,
    parse_fraction,
    parse_headers,
    parse_int,
    parse_int_list,
    parse_json_object,
    parse_level_timeout,
    parse_models,
    parse_objectives,
    parse_optional_duration,
    parse_optional_load,
    parse_optional_request_cap,
    parse_optional_str,
    parse_optional_url,
    parse_positive_float,
    parse_positive_int,
    parse_prompt_salt,
    parse_ramp,
    parse_rate_list,
    parse_records_memory,
    parse_request_count,
    parse_seconds,
    parse_seconds_or_zero,
    parse_steps,
    parse_str,
)
from .spec import Spec

__all__ = ["ARRIVALS", "LEVEL_SPECS", "MAX_EXTEND_LEVELS", "WORKLOADS"]

#: The ``--arrival`` choices: the processes of the arrivals registry (``arrivals.py``).
ARRIVALS: tuple[str, ...] = arrivals.names()
#: The ``--workload`` choices (``choices.WORKLOAD_KINDS``, under the name settings gave them).
WORKLOADS = WORKLOAD_KINDS
# Past the last planned level, at most this many extra levels are run by --slo-extend, so a
# curve that never drops (an engine far from saturation) cannot extend a session forever.
MAX_EXTEND_LEVELS = 6

# One row a setting, laid out as in ``specs.py``.
# fmt: off
LEVEL_SPECS: tuple[Spec, ...] = (
    # per test (marker keywords too)
    Spec("concurrency", parse_int_list, None, cli="--concurrency",
         marker="concurrency", topic="load", metavar="N[,N]",
         help="Closed-loop sweep: concurrent requests per level."),
    Spec("rate", parse_rate_list, None, cli="--rate",
         marker="rate", topic="load", metavar="R[,R]",
         help="Open-loop sweep: requests/s per level (2,4 or 2.5/s,150/m), not --concurrency."),
    Spec("arrival", choice_parser("arrival", ARRIVALS), "poisson", cli="--arrival",
         marker="arrival", topic="load", choices=ARRIVALS,
         help="Arrivals of an open-loop (--rate) level."),
    Spec("model", parse_str, "", field="model",
         cli="--model", marker="model", topic="engines", metavar="NAME",
         shown_default="the engine's",
         help="Model to serve and request."),
    Spec("isl", parse_positive_int, 512, field="isl",
         cli="--isl", marker="isl", topic="workload", metavar="N",
         help="Input sequence length (prompt tokens) of synthetic requests."),
    Spec("osl", parse_positive_int, 256, field="osl",
         cli="--osl", marker="osl", topic="workload", metavar="N",
         help="Output sequence length (max tokens, ignore_eos) of every request."),
    Spec("isl_stddev", parse_float, 0.0, field="isl_stddev",
         cli="--isl-stddev", marker="isl_stddev", topic="workload", metavar="X",
         help="Standard deviation of the input length (0: fixed)."),
    Spec("osl_stddev", parse_float, 0.0, field="osl_stddev",
         cli="--osl-stddev", marker="osl_stddev", topic="workload", metavar="X",
         help="Standard deviation of the output length (0: fixed)."),
    Spec("distribution", choice_parser("distribution", DISTRIBUTIONS), None, field="distribution",
         cli="--length-distribution", marker="distribution", topic="workload",
         choices=DISTRIBUTIONS, shown_default="normal with a stddev, else fixed",
         help="Length distribution when a stddev is set."),
    Spec("dataset", parse_optional_str, None, field="dataset",
         cli="--dataset", marker="dataset", topic="workload", metavar="PATH",
         help="Dataset instead of synthetic prompts: a ShareGPT .json or a .jsonl path (prefix "
              "sharegpt: or jsonl: to force the format)."),
    Spec("workload", choice_parser("workload", WORKLOADS), None, field="workload_kind",
         cli="--workload", marker="workload", topic="workload", choices=WORKLOADS,
         shown_default="synthetic, or the dataset's kind",
         help="Workload kind."),
    Spec("num_prefixes", parse_int, 0, field="num_prefixes",
         cli="--num-prefixes", marker="num_prefixes", topic="workload", metavar="N",
         help="shared_prefix workload: number of distinct shared prefixes."),
    Spec("prefix_len", parse_int, 0, field="prefix_len",
         cli="--prefix-len", marker="prefix_len", topic="workload", metavar="N",
         help="shared_prefix workload: tokens in each shared prefix."),
    Spec("seed", parse_int, 0, field="seed",
         cli="--seed", marker="seed", topic="workload", metavar="N",
         help="Seed of prompts, lengths and Poisson arrivals."),
    Spec("prompt_salt", parse_prompt_salt, "auto", field="prompt_salt",
         cli="--prompt-salt", marker="prompt_salt", topic="workload", metavar="auto|none|TEXT",
         help="Salt of the words of built prompts (synthetic, shared-prefix, trace blocks): "
              "'auto' draws one per session, so a second run against an engine that stayed up "
              "does not hit the prefix cache the first one filled (prompt lengths and shared "
              "prefixes within the session stay as they are); 'none' for the seed's prompts "
              "alone; any other text repeats a session's prompts exactly (the results document "
              "records it)."),
    Spec("warmup", parse_int, 200, field="warmup",
         cli="--warmup", marker="warmup", topic="load", metavar="N",
         help="Warm-up requests per level, sent first and discarded (at least one wave, the "
              "concurrency, of a closed loop; 0 for none)."),
    Spec("requests", parse_request_count, 500, field="requests",
         cli="--requests", marker="requests", topic="load", metavar="N",
         help="Measured requests per level; 'none' with --duration for a level bounded by time "
              "alone (its prompts are built as they are needed)."),
    Spec("duration", parse_optional_duration, None, field="duration_s",
         cli="--duration", marker="duration", topic="load", metavar="DURATION",
         help="The window in which each level's requests are sent (90s, 5m, 1h30m; 0: "
              "none); those sent in it run to their end and are measured."),
    Spec("endpoint", choice_parser("endpoint", ENDPOINTS), "chat", field="endpoint",
         cli="--endpoint", marker="endpoint", topic="requests", choices=ENDPOINTS,
         help="OpenAI endpoint: chat (/v1/chat/completions) or completions (/v1/completions)."),
    Spec("slo", parse_objectives, (), field="objectives",
         cli="--slo", marker="objectives", topic="slo", coerce=coerce_objectives, metavar="SPEC",
         help='SLO of every SLO test, e.g. "ttft_p99<500,itl_p50<30" (ms); a quality '
         "objective (accuracy>=0.95) may ride along, as --slo-quality."),
    Spec("slo_strict", parse_bool, False, field="strict",
         cli="--slo-strict", marker="strict", topic="slo", coerce=coerce_bool, flag=True,
         help="Gate on the upper confidence bound of each percentile, not the point estimate."),
    Spec("slo_confidence", parse_confidence, DEFAULT_CONFIDENCE, field="confidence",
         cli="--slo-confidence", marker="confidence", topic="slo", metavar="C",
         help="Confidence of the percentile upper bounds."),
    Spec("slo_extend", parse_bool, False, field="extend",
         cli="--slo-extend", marker="extend", topic="slo", coerce=coerce_bool, flag=True,
         help="Extend each sweep past its last level until goodput < 50% of its best "
              f"(at most {MAX_EXTEND_LEVELS} extra levels)."),
    Spec("slo_capacity", parse_bool, False, field="capacity",
         cli="--slo-capacity", marker="capacity", topic="slo", coerce=coerce_bool, flag=True,
         help="Instead of the sweep, search each SLO test's capacity: the highest load meeting "
              "its objectives (exponential probe from the first level, then bisection; one "
              "test per engine, id ENGINE-capacity)."),
    Spec("capacity_max", parse_optional_load, None, field="capacity_max",
         cli="--slo-capacity-max", marker="capacity_max", topic="slo", metavar="N",
         shown_default="none (12 levels at most)",
         help="Highest load a capacity search probes (concurrency or rate)."),
    Spec("slo_retries", parse_int, 2, field="retries",
         cli="--slo-retries", marker="retries", topic="slo", metavar="N",
         help="Retries of a level whose run was invalid (the client, not the engine, was the "
              "bottleneck); still invalid after them, the test ends as inconclusive, an error "
              "of its own kind, never an SLO failure."),
    Spec("slo_early_stop", choice_parser("early_stop", EARLY_STOP_MODES), "auto",
         field="early_stop", cli="--slo-early-stop", marker="early_stop", topic="slo",
         choices=EARLY_STOP_MODES,
         help="End a level as soon as its verdict is settled at the confidence: a violation "
              "shown by a confidence bound, or (strict) a pass; 'auto' is on for capacity "
              "searches and sweep extensions and off for the levels a comparison reads."),
    Spec("early_stop_min", parse_positive_int, 100, field="early_stop_min",
         cli="--slo-early-stop-min", marker="early_stop_min", topic="slo", metavar="N",
         help="Completed requests a level needs before an early stop may end it."),
    Spec("min_attainment", parse_fraction, None, field="min_attainment",
         cli="--slo-min-attainment", marker="min_attainment", topic="slo", metavar="F",
         shown_default="0.9",
         help="Minimum share of good requests (0..1 or NN%) of the configured SLO."),
    Spec("min_goodput", parse_float, None, field="min_goodput_tok_s",
         cli="--slo-min-goodput", marker="min_goodput_tok_s", topic="slo", metavar="TOK_S",
         shown_default="none",
         help="Minimum goodput in output tok/s of the configured SLO."),
    Spec("client_max_lag", parse_float, None, field="client_max_lag_ms",
         cli="--client-max-lag", marker="client_max_lag", topic="client", metavar="MS",
         shown_default="10 ms",
         help="Client health: schedule and event-loop lag P99 (ms) above which a run is marked "
              "invalid (the load generator was the bottleneck)."),
    Spec("client_max_stalled", parse_fraction, 0.001, field="client_max_stalled",
         cli="--client-max-stalled", marker="client_max_stalled", topic="client", metavar="F",
         help="Client health: share of streamed tokens (0..1 or NN%) timestamped inside an "
              "event-loop stall (a wake later than --client-max-lag) above which a run is "
              "invalid."),
    Spec("client_max_cpu", parse_float, None, field="client_max_cpu",
         cli="--client-max-cpu", marker="client_max_cpu", topic="client", metavar="F",
         shown_default="0.9",
         help="Client health: CPU share of a core (e.g. 0.9) above which a run is marked "
              "invalid."),
    Spec("request_timeout", parse_seconds, 600.0, field="request_timeout_s",
         cli="--request-timeout", marker="request_timeout", topic="requests", metavar="S",
         help="Total deadline of one request in seconds, from send to its last byte."),
    Spec("connect_timeout", parse_seconds, 10.0, field="connect_timeout_s",
         cli="--connect-timeout", marker="connect_timeout", topic="requests", metavar="S",
         help="Deadline of a connection (TCP and TLS) in seconds."),
    Spec("first_byte_timeout", parse_seconds, 300.0, field="first_byte_timeout_s",
         cli="--first-byte-timeout", marker="first_byte_timeout", topic="requests", metavar="S",
         help="Deadline of a request's first response data in seconds (a loaded engine may "
              "queue a request for minutes before its prefill)."),
    Spec("idle_timeout", parse_seconds, 60.0, field="idle_timeout_s",
         cli="--idle-timeout", marker="idle_timeout", topic="requests", metavar="S",
         help="A stream that sends no data for this many seconds has stalled and fails as a "
              "timeout; SSE comments and keep-alives do not count as data."),
    Spec("level_timeout", parse_level_timeout, None, field="level_timeout_s",
         cli="--level-timeout", marker="level_timeout", topic="load", metavar="S",
         shown_default="auto",
         help="Wall-clock bound of one load level in seconds: calibration, warm-up, "
              "measurement and drain together ('none' for no bound; 'auto': with --duration, "
              "what the level can need (each warm-up wave, the window and the drain, every "
              "request as long as its deadlines allow), else no bound). A level this bound cuts "
              "is inconclusive, never an SLO failure."),
    Spec("records_memory", parse_records_memory, 64.0, field="records_memory_mb",
         cli="--records-memory", marker="records_memory", topic="load", metavar="MB",
         help="Megabytes of a level's records kept in memory as columns; beyond it they are "
              "written to files in the temporary directory, removed at the end ('none' for no "
              "bound, 0 for every record in files)."),
    Spec("max_error_rate", parse_fraction, 0.01, field="max_error_rate",
         cli="--slo-max-error-rate", marker="max_error_rate", topic="slo", metavar="F",
         help="Highest share of failed requests (0..1 or NN%) with which a level can pass; a "
              "level where every request failed always fails, with or without objectives."),
    Spec("max_short_outputs", parse_fraction, 0.05, field="max_short_outputs",
         cli="--max-short-outputs", marker="max_short_outputs", topic="slo", metavar="F",
         help="Share of completed requests (0..1 or NN%) allowed to return fewer tokens than "
              "the pinned output length; above it the level is flagged as not comparable (the "
              "server ignores ignore_eos/min_tokens, so it ran another workload)."),
    # What a verdict may rest on: a usage count the stream did not show, a load the
    # client did not apply (docs/metrics.md, docs/load.md).
    Spec("max_usage_mismatch", parse_fraction, 0.05, field="max_usage_mismatch",
         cli="--max-usage-mismatch", marker="max_usage_mismatch", topic="slo", metavar="F",
         help="Share of completed requests (0..1 or NN%) allowed a usage.completion_tokens "
              "that disagrees with the stream (by more than 2 tokens or 5 %, or above "
              "max_tokens); such a count is never credited, and above this share the level is "
              "flagged as not comparable."),
    Spec("client_min_load", parse_fraction, 0.9, field="client_min_load",
         cli="--client-min-load", marker="client_min_load", topic="client", metavar="F",
         help="Client health: the share of the load asked (0..1 or NN%) the client must have "
              "applied over the measured window, the time-averaged requests in flight of a "
              "closed loop or the arrival rate of an open loop; below it the run is invalid, "
              "whatever the cause (0: no check)."),
    Spec("client_max_clock", parse_positive_float, 1.0, field="client_max_clock_ms",
         cli="--client-max-clock", marker="client_max_clock", topic="client", metavar="MS",
         help="Client health with remote workers (--worker-listen): the largest uncertainty "
              "of a worker's clock offset to the session's, in milliseconds; above it the "
              "level is invalid (its workers' requests cannot be placed against each other "
              "that precisely)."),
    Spec("ca_bundle", parse_optional_str, None, field="ca_bundle",
         cli="--ca-bundle", marker="ca_bundle", topic="requests", metavar="PATH",
         shown_default="the system store (SSL_CERT_FILE and SSL_CERT_DIR honoured)",
         help="PEM file of the CAs to trust for https engines (load generator and readiness "
              "probes)."),
    Spec("insecure", parse_bool, False, field="insecure",
         cli="--insecure", marker="insecure", topic="requests", coerce=coerce_bool, flag=True,
         help="Accept any TLS certificate (self-signed test servers)."),
    Spec("pin_output", parse_bool, True, field="pin_output",
         cli="--pin-output", marker="pin_output", topic="requests", coerce=coerce_bool,
         metavar="BOOL",
         help="Send ignore_eos and min_tokens so that every output is --osl tokens long (false "
              "for a server that rejects unknown request fields)."),
    Spec("transport", choice_parser("transport", TRANSPORTS), "auto", field="transport",
         cli="--transport", marker="transport", topic="requests", choices=TRANSPORTS,
         help="HTTP client of the load generator: auto (the fast HTTP/1.1 client), fast, or "
              "httpx."),
    Spec("receive_stamps", choice_parser("receive_stamps", RECEIVE_STAMPS), "auto",
         field="receive_stamps", cli="--receive-stamps", marker="receive_stamps", topic="requests",
         choices=RECEIVE_STAMPS,
         help="When a chunk arrived: auto (the kernel's arrival stamp where the fast client "
              "can read it, plain http on Linux; see docs/load.md) or read (when the client "
              "read it)."),
    Spec("api_key_env", parse_str, "OPENAI_API_KEY", field="api_key_env",
         cli="--api-key-env", marker="api_key_env", topic="requests", metavar="VAR",
         shown_default="OPENAI_API_KEY",
         help="Environment variable whose value is sent as the bearer API key (never logged); "
              "empty for none."),
    Spec("burstiness", parse_positive_float, 1.0, field="burstiness",
         cli="--burstiness", marker="burstiness", topic="load", metavar="K",
         help="Gamma arrivals' shape (--arrival=gamma): 1 is Poisson, below 1 burstier, above "
              "1 more regular (vLLM bench's --burstiness)."),
    Spec("ramp", parse_ramp, None, cli="--ramp",
         marker="ramp", topic="load", metavar="START:END:SECONDS",
         help="One open-loop level whose rate goes linearly from START to END requests/s over "
              "SECONDS (instead of --rate or --concurrency)."),
    Spec("steps", parse_steps, None, cli="--steps",
         marker="steps", topic="load", metavar="R,R,...:SECONDS",
         help="One open-loop level that holds each rate for SECONDS in turn (instead of --rate "
              "or --concurrency)."),
    Spec("max_concurrency", parse_optional_request_cap, None, field="max_concurrency",
         cli="--max-concurrency", marker="max_concurrency", topic="load", metavar="N",
         shown_default="none",
         help="Cap on the requests in flight of an open loop (rate, ramp, steps, trace): an "
              "arrival that finds it reached waits for a slot (vLLM bench's "
              "--max-concurrency)."),
    Spec("trace", parse_optional_str, None, field="trace",
         cli="--trace-file", marker="trace", topic="workload", metavar="PATH",
         help="Replay a timestamped trace (Mooncake JSONL, Azure or BurstGPT CSV, JSONL with "
              "'timestamp'): its rows are the requests, sent at their times (see "
              "--trace-speed)."),
    Spec("trace_format", choice_parser("trace_format", TRACE_FORMATS), "auto",
         field="trace_format", cli="--trace-format", marker="trace_format", topic="workload",
         choices=TRACE_FORMATS,
         help="The trace's format (auto: by its header or first line)."),
    Spec("trace_speed", parse_float_list, None, cli="--trace-speed",
         marker="trace_speed", topic="workload", metavar="X[,X]",
         shown_default="1 with --trace-file",
         help="Replay speed-ups, one level each: 2 sends the trace twice as fast (a "
              "concurrency or rate instead sends its rows as a dataset)."),
    Spec("trace_start", parse_seconds_or_zero, 0.0, field="trace_start_s",
         cli="--trace-start", marker="trace_start", topic="workload", metavar="SECONDS",
         help="Start of the trace window, in seconds from its first request."),
    Spec("trace_window", parse_optional_duration, None, field="trace_window_s",
         cli="--trace-window", marker="trace_window", topic="workload", metavar="SECONDS",
         shown_default="to the end of the trace",
         help="Length of the trace window in seconds."),
    Spec("block_tokens", parse_positive_int, 512, field="block_tokens",
         cli="--block-tokens", marker="block_tokens", topic="workload", metavar="N",
         help="Tokens per hash id of a Mooncake trace (its release uses 512)."),
    Spec("turns", parse_positive_int, 1, field="turns",
         cli="--turns", marker="turns", topic="workload", metavar="N",
         help="Turns per conversation: above 1 each request is a conversation's turn, its "
              "prompt the history (earlier messages and the replies streamed) plus --isl new "
              "tokens; with ShareGPT, up to this many of each conversation's human turns."),
    Spec("think_time", parse_seconds_or_zero, 0.0, field="think_time_s",
         cli="--think-time", marker="think_time", topic="workload", metavar="SECONDS",
         help="Seconds a user thinks between a reply and the next turn (mean, see "
              "--think-distribution)."),
    Spec("think_distribution", choice_parser("think_distribution", THINK_DISTRIBUTIONS), "fixed",
         field="think_distribution", cli="--think-distribution", marker="think_distribution",
         topic="workload", choices=THINK_DISTRIBUTIONS,
         help="Think times: fixed, exponential or uniform over [0, 2 x mean], seeded."),
    Spec("history_turns", parse_int, 0, field="history_turns",
         cli="--history-turns", marker="history_turns", topic="workload", metavar="N",
         help="Turns of history each prompt carries (0: all of them)."),
    Spec("session_header", parse_optional_str, None, field="session_header",
         cli="--session-header", marker="session_header", topic="workload", metavar="NAME",
         help="Header that carries each conversation's id on its turns (sticky routing), e.g. "
              "X-Session-ID."),
    Spec("header", parse_headers, (), field="headers",
         cli="--header", marker="headers", topic="requests", coerce=coerce_headers,
         metavar="'NAME: VALUE'", repeatable=True,
         help="Extra HTTP header on every request: 'NAME: VALUE' (repeatable; ';' between "
              "several in env and ini)."),
    Spec("extra_body", parse_json_object, None, field="extra_body",
         cli="--extra-body", marker="extra_body", topic="requests", coerce=coerce_json_object,
         metavar="JSON",
         help="JSON object merged into every request body, e.g. '{\"top_k\": 20}'."),
    Spec("models", parse_models, None, field="models",
         cli="--models", marker="models", topic="workload", coerce=coerce_models,
         metavar="NAME[:W],...",
         help="Each request asks for one of these models, drawn by weight: NAME[:WEIGHT],... "
              "(LoRA adapters an engine serves beside its base model)."),
    Spec("slo_signals", parse_bool, True, field="signals",
         cli="--slo-signals", marker="signals", topic="signals", coerce=coerce_bool,
         metavar="BOOL",
         help="Scrape each engine's /metrics (and NVML or --dcgm-url) before, during and after "
              "each level: queue, KV cache, preemptions, engine-side latencies, GPU; a failed "
              "objective names the signal that explains it."),
    Spec("signals_interval", parse_seconds, 1.0, field="signals_interval_s",
         cli="--signals-interval", marker="signals_interval", topic="signals", metavar="SECONDS",
         help="Seconds between /metrics scrapes during a level."),
    Spec("dcgm_url", parse_optional_url, None, field="dcgm_url",
         cli="--dcgm-url", marker="dcgm_url", topic="signals", metavar="URL",
         help="A DCGM exporter's /metrics URL: GPU utilisation, memory, power and energy "
              "(J/token) per level instead of NVML."),
    # Bounded auxiliaries and honest caches.
    Spec("signals_timeout", parse_seconds, 5.0, field="signals_timeout_s",
         cli="--signals-timeout", marker="signals_timeout", topic="signals", metavar="SECONDS",
         help="Total deadline of one /metrics scrape (connect, headers, the whole body): a "
              "body that does not end in time is given up, and not scraped again in that "
              "level."),
)
# fmt: on

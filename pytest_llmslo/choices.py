"""The named choices of the settings and the load generator, each defined once.

Each choice is a ``Literal`` type, for annotations, and the tuple of its values
(``typing.get_args``), for checks and ``--help``. Both ``settings`` (the options' choices) and
``load`` (what ``ClientSettings`` and ``WorkloadSpec`` accept) take them from here: this
module imports nothing of the package, so reading the options never imports the load
generator (importing any ``load`` module runs ``load/__init__.py``, the whole of it).

Arrival processes are not here: they are the entries of the arrivals registry
(``arrivals.py``), which carries each one's parameters and gaps besides its name.
"""

from __future__ import annotations

from typing import Literal, get_args

#: The OpenAI endpoint a request goes to (``--endpoint``).
Endpoint = Literal["chat", "completions"]
ENDPOINTS: tuple[Endpoint, ...] = get_args(Endpoint)

#: The load generator's HTTP client (``--transport``); ``auto`` is ``fast``.
TransportName = Literal["auto", "fast", "httpx"]
TRANSPORTS: tuple[TransportName, ...] = get_args(TransportName)

#: The event loop of the load generator's worker processes.
LoopName = Literal["auto", "asyncio", "uvloop"]
EVENT_LOOPS: tuple[LoopName, ...] = get_args(LoopName)

#: When a chunk counts as received (``--receive-stamps``).
ReceiveStamps = Literal["auto", "read"]
RECEIVE_STAMPS: tuple[ReceiveStamps, ...] = get_args(ReceiveStamps)

#: Where a workload's prompts come from (``--workload``).
WorkloadKind = Literal["synthetic", "sharegpt", "jsonl", "shared_prefix", "trace"]
WORKLOAD_KINDS: tuple[WorkloadKind, ...] = get_args(WorkloadKind)

#: How prompt and output lengths spread when a stddev is set (``--length-distribution``).
LengthDistribution = Literal["fixed", "normal", "lognormal", "uniform"]
DISTRIBUTIONS: tuple[LengthDistribution, ...] = get_args(LengthDistribution)

#: How think times between conversation turns spread (``--think-distribution``).
ThinkDistribution = Literal["fixed", "exponential", "uniform"]
THINK_DISTRIBUTIONS: tuple[ThinkDistribution, ...] = get_args(ThinkDistribution)

#: The formats of a replayed trace (``--trace-format``); ``auto`` reads its header.
TraceFormat = Literal["auto", "mooncake", "azure", "burstgpt", "jsonl"]
TRACE_FORMATS: tuple[TraceFormat, ...] = get_args(TraceFormat)

#: What a capacity search varies: a closed loop's concurrency or an open loop's rate.
CapacityMode = Literal["concurrency", "rate"]
CAPACITY_MODES: tuple[CapacityMode, ...] = get_args(CapacityMode)

#: ``--slo-early-stop``: ``auto`` is on for capacity probes and sweep extensions.
EarlyStopMode = Literal["auto", "on", "off"]
EARLY_STOP_MODES: tuple[EarlyStopMode, ...] = get_args(EarlyStopMode)

#: ``--reset-cache``: ``auto`` empties the prefix cache of the engines the harness started.
ResetCacheMode = Literal["auto", "on", "off"]
RESET_CACHE_MODES: tuple[ResetCacheMode, ...] = get_args(ResetCacheMode)

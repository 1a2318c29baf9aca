"""Timestamped request traces, read for replay.

Four formats, each mapped to the same columns (arrival time, input tokens, output tokens,
prompt blocks):

- ``mooncake``: JSON lines ``{"timestamp": 27482, "input_length": 6955, "output_length":
  52, "hash_ids": [46, 47, ...]}`` (Mooncake's FAST'25 release, ``FAST25-release/traces``;
  also what AIPerf's and Dynamo's trace replay read). ``timestamp`` is milliseconds since
  the first request; each hash id names a block of ``block_tokens`` prompt tokens (512 in
  the release), so two requests whose ids start alike share a real prompt prefix;
- ``azure``: the Azure LLM inference trace CSV (``AzurePublicDataset``,
  ``AzureLLMInferenceTrace_{code,conv}.csv``, 2023 and 2024 releases): ``TIMESTAMP``
  (``2023-11-16 18:15:46.6805900``), ``ContextTokens``, ``GeneratedTokens``;
- ``burstgpt``: the BurstGPT CSV (``HPMLL/BurstGPT`` release v1.1): ``Timestamp`` (seconds),
  ``Model``, ``Request tokens``, ``Response tokens``, ``Total tokens``, ``Log Type``. Rows with
  0 request or response tokens are the trace's own failed requests: they are skipped and
  counted (``Trace.skipped``);
- ``jsonl``: any JSON lines with ``timestamp`` (ms) and either ``prompt`` (or ``text``) or
  ``input_length``, and optionally ``output_length`` (or ``output_tokens`` / ``max_tokens``)
  and ``hash_ids``. A Mooncake file is this format's special case.

``read_trace`` checks every line: a missing column or field, a timestamp that goes
backwards, a negative or non-integer length or an unreadable file raises ``WorkloadError``
naming the file, the line and what to fix, before any load is sent. A window
(``start_s``, ``window_s``, on the trace's own clock from its first request) selects a part
of it; the first request in the window is time 0. Columns are numpy arrays, and prompts are
built later, one at a time (``workload.PromptSource``), so a trace of millions of lines
costs a few bytes per line.
"""

from __future__ import annotations

import csv
import json
import math
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import numpy as np

from ..choices import TRACE_FORMATS
from ..errors import WorkloadError

_AZURE = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
_BURSTGPT = ("Timestamp", "Request tokens", "Response tokens")


@dataclass(frozen=True, slots=True)
class Trace:
    """A trace's requests in time order: ``ts_ms`` (from the window's first request),
    ``isl``, ``osl`` (-1: not given), prompt texts where the trace has them, and each
    request's block ids (``hash_ids[hash_start[i]:hash_start[i + 1]]``)."""

    path: str
    format: str
    ts_ms: np.ndarray
    isl: np.ndarray
    osl: np.ndarray
    hash_start: np.ndarray
    hash_ids: np.ndarray
    prompts: tuple[str | None, ...] = ()
    skipped: int = 0
    window: tuple[float, float | None] = (0.0, None)
    lines: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))

    def __len__(self) -> int:
        return len(self.ts_ms)

    def hashes(self, i: int) -> np.ndarray:
        return self.hash_ids[self.hash_start[i] : self.hash_start[i + 1]]

    def prompt(self, i: int) -> str | None:
        return self.prompts[i] if self.prompts else None

    @property
    def span_s(self) -> float:
        """From the first request to the last, on the trace's clock."""
        return float(self.ts_ms[-1] / 1e3) if len(self) else 0.0

    def offsets_ns(self, speed: float = 1.0, n: int | None = None) -> np.ndarray:
        """Send offsets of the first n requests at ``speed`` times the trace's pace."""
        if not speed > 0:
            raise WorkloadError(f"a trace's speed-up must be > 0, got {speed!r}")
        ts = self.ts_ms if n is None else self.ts_ms[:n]
        return np.rint(ts * (1e6 / speed)).astype(np.int64)

    def offered_rate(self, speed: float = 1.0, n: int | None = None) -> float:
        """Requests per second the trace offers at ``speed`` (over its first n)."""
        k = len(self) if n is None else min(n, len(self))
        if k < 2:
            return 0.0
        span = float(self.ts_ms[k - 1]) / 1e3 / speed
        return (k - 1) / span if span > 0 else math.inf

    def describe(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "format": self.format,
            "requests": len(self),
            "span_s": self.span_s,
            "skipped": self.skipped,
            "window_s": list(self.window),
            "isl_mean": float(self.isl[self.isl >= 0].mean()) if len(self) else 0.0,
            "with_blocks": int((np.diff(self.hash_start) > 0).sum()),
        }


def detect_format(path: str) -> str:
    """``mooncake``/``jsonl`` by the first JSON line, ``azure``/``burstgpt`` by a CSV's
    header."""
    head = _first_line(path)
    if head.lstrip().startswith("{"):
        try:
            obj = json.loads(head)
        except ValueError as exc:
            raise WorkloadError(f"{path}:1: not JSON: {exc}") from None
        return "mooncake" if isinstance(obj, dict) and "hash_ids" in obj else "jsonl"
    cols = [c.strip() for c in next(csv.reader([head]), [])]
    if all(c in cols for c in _AZURE):
        return "azure"
    if all(c in cols for c in _BURSTGPT):
        return "burstgpt"
    raise WorkloadError(
        f"{path}:1: not a known trace format. A trace is JSON lines with 'timestamp' "
        f"(Mooncake or generic), or a CSV with the columns {', '.join(_AZURE)} (Azure) or "
        f"{', '.join(_BURSTGPT)} (BurstGPT); the header has: {', '.join(cols) or 'nothing'}"
    )


def _first_line(path: str) -> str:
    if not os.path.isfile(path):
        what = "a directory" if os.path.isdir(path) else "not found"
        raise WorkloadError(f"trace {path}: {what} (--trace-file takes a .jsonl or .csv file)")
    try:
        with open(path, encoding="utf-8-sig") as f:
            for line in f:
                if line.strip():
                    return line
    except (OSError, UnicodeDecodeError) as exc:
        raise WorkloadError(f"cannot read trace {path}: {exc}") from None
    raise WorkloadError(f"trace {path} is empty")


def read_trace(
    path: str | os.PathLike[str],
    fmt: str = "auto",
    *,
    start_s: float = 0.0,
    window_s: float | None = None,
    limit: int | None = None,
) -> Trace:
    """Read and check a trace (see the module docstring); ``limit`` stops after that many
    requests of the window."""
    path = os.fspath(path)
    if fmt not in TRACE_FORMATS:
        raise WorkloadError(
            f"{fmt!r} is not a trace format. Valid formats: {', '.join(TRACE_FORMATS)}."
        )
    if start_s < 0 or (window_s is not None and not window_s > 0):
        raise WorkloadError(
            f"trace window: start must be >= 0 s and the window > 0 s, "
            f"got start {start_s!r}, window {window_s!r}"
        )
    real = detect_format(path) if fmt == "auto" else (_first_line(path) and fmt)
    rows = _read_json(path, real) if real in ("mooncake", "jsonl") else _read_csv(path, real)
    ts: list[float] = []
    isl: list[int] = []
    osl: list[int] = []
    starts = [0]
    ids: list[int] = []
    prompts: list[str | None] = []
    lines: list[int] = []
    skipped = 0
    first: float | None = None
    prev: float | None = None
    prev_line = 0
    t_start: float | None = None
    for lineno, t, i_len, o_len, hashes, text in rows:
        if prev is not None and t < prev:
            raise WorkloadError(
                f"{path}:{lineno}: the timestamp goes backwards ({_ms(t)} after {_ms(prev)} "
                f"on line {prev_line}); a trace must be sorted by time: sort it first"
            )
        prev, prev_line = t, lineno
        if i_len == 0 or o_len == 0:
            skipped += 1
            continue
        if first is None:
            first = t
        rel_s = (t - first) / 1e3
        if rel_s < start_s:
            continue
        if window_s is not None and rel_s >= start_s + window_s:
            break
        if t_start is None:
            t_start = t
        ts.append(t - t_start)
        isl.append(i_len)
        osl.append(o_len)
        ids.extend(hashes)
        starts.append(len(ids))
        prompts.append(text)
        lines.append(lineno)
        if limit is not None and len(ts) >= limit:
            break
    if not ts:
        where = f" in the window {start_s:g} s + {window_s:g} s" if window_s else ""
        raise WorkloadError(f"{path}: no usable request{where}")
    return Trace(
        path=path,
        format=real,
        ts_ms=np.asarray(ts, dtype=np.float64),
        isl=np.asarray(isl, dtype=np.int64),
        osl=np.asarray(osl, dtype=np.int64),
        hash_start=np.asarray(starts, dtype=np.int64),
        hash_ids=np.asarray(ids, dtype=np.int64),
        prompts=tuple(prompts) if any(p is not None for p in prompts) else (),
        skipped=skipped,
        window=(start_s, window_s),
        lines=np.asarray(lines, dtype=np.int64),
    )


def _ms(t: float) -> str:
    return f"{t:g} ms"


_Row = tuple[int, float, int, int, list[int], "str | None"]


def _length(path: str, lineno: int, obj: dict[str, Any], keys: tuple[str, ...]) -> int | None:
    for k in keys:
        if k in obj:
            v = obj[k]
            ok = isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
            if not ok or v != int(v):
                raise WorkloadError(f"{path}:{lineno}: {k!r} must be an integer, got {v!r}")
            if v < 0:
                raise WorkloadError(f"{path}:{lineno}: {k!r} must be >= 0, got {v!r}")
            return int(v)
    return None


def json_lines(path: str, what: str) -> Iterator[tuple[int, Any]]:
    """(line number, value) of each non-empty line of a JSON-lines file; ``WorkloadError``
    names the file and the line that is not JSON, or why the file cannot be read. Shared
    by the traces here and the JSONL datasets of ``workload.py``."""
    try:
        with open(path, encoding="utf-8-sig") as f:
            for lineno, line in enumerate(f, 1):
                line = line.strip()
                if not line:
                    continue
                try:
                    obj = json.loads(line)
                except ValueError as exc:
                    raise WorkloadError(f"{path}:{lineno}: not JSON: {exc}") from None
                yield lineno, obj
    except (OSError, UnicodeDecodeError) as exc:
        raise WorkloadError(f"cannot read {what} {path}: {exc}") from None


def _read_json(path: str, fmt: str) -> Iterator[_Row]:
    need = (
        "a Mooncake trace line needs timestamp (ms), input_length, output_length, hash_ids"
        if fmt == "mooncake"
        else "a JSONL trace line needs timestamp (ms) and prompt or input_length"
    )
    for lineno, obj in json_lines(path, "trace"):
        if not isinstance(obj, dict):
            raise WorkloadError(f"{path}:{lineno}: expected a JSON object; {need}")
        t = obj.get("timestamp")
        if isinstance(t, bool) or not isinstance(t, int | float) or not math.isfinite(t):
            raise WorkloadError(f"{path}:{lineno}: no numeric 'timestamp' (got {t!r}); {need}")
        if t < 0:
            raise WorkloadError(f"{path}:{lineno}: 'timestamp' must be >= 0, got {t!r}")
        text = obj.get("prompt", obj.get("text"))
        if text is not None and not isinstance(text, str):
            raise WorkloadError(f"{path}:{lineno}: 'prompt' must be a string")
        isl = _length(path, lineno, obj, ("input_length",))
        if isl is None and text is None:
            raise WorkloadError(f"{path}:{lineno}: no 'input_length'; {need}")
        if isl is None:
            isl = max(1, len(str(text).split()))
        osl = _length(path, lineno, obj, ("output_length", "output_tokens", "max_tokens"))
        if osl is None and fmt == "mooncake":
            raise WorkloadError(f"{path}:{lineno}: no 'output_length'; {need}")
        hashes = obj.get("hash_ids", [])
        if not isinstance(hashes, list) or not all(
            isinstance(h, int) and not isinstance(h, bool) for h in hashes
        ):
            raise WorkloadError(f"{path}:{lineno}: 'hash_ids' must be a list of integers")
        yield lineno, float(t), isl, -1 if osl is None else osl, hashes, text


def _azure_time(text: str) -> float:
    """``2023-11-16 18:15:46.6805900`` (7 fractional digits, which ``fromisoformat``
    refuses before Python 3.11) or plain seconds, as ms."""
    text = text.strip()
    try:
        return float(text) * 1e3
    except ValueError:
        pass
    whole, _, frac = text.partition(".")
    stamp = datetime.strptime(whole.replace("T", " "), "%Y-%m-%d %H:%M:%S")
    return stamp.timestamp() * 1e3 + (float("0." + frac) * 1e3 if frac else 0.0)


def _read_csv(path: str, fmt: str) -> Iterator[_Row]:
    t_col, i_col, o_col = _AZURE if fmt == "azure" else _BURSTGPT
    try:
        with open(path, encoding="utf-8-sig", newline="") as f:
            reader = csv.DictReader(f, skipinitialspace=True)
            cols = [c.strip() for c in reader.fieldnames or ()]
            missing = [c for c in (t_col, i_col, o_col) if c not in cols]
            if missing:
                raise WorkloadError(
                    f"{path}:1: no column {', '.join(map(repr, missing))}; a {fmt} trace has "
                    f"the columns {t_col}, {i_col}, {o_col}"
                )
            reader.fieldnames = cols
            for row in reader:
                lineno = reader.line_num
                values = [row.get(c) for c in (t_col, i_col, o_col)]
                if any(v is None or str(v).strip() == "" for v in values):
                    raise WorkloadError(
                        f"{path}:{lineno}: a value is missing ({t_col}, {i_col}, {o_col} "
                        "are needed on every row)"
                    )
                first = str(values[0])
                try:
                    t = _azure_time(first) if fmt == "azure" else float(first) * 1e3
                except ValueError:
                    raise WorkloadError(
                        f"{path}:{lineno}: {t_col} {values[0]!r} is not a time"
                        + (" (2023-11-16 18:15:46.680 or seconds)" if fmt == "azure" else " (s)")
                    ) from None
                lengths = []
                for col, v in zip((i_col, o_col), values[1:], strict=True):
                    try:
                        n = int(str(v).strip())
                    except ValueError:
                        raise WorkloadError(
                            f"{path}:{lineno}: {col} {v!r} is not an integer"
                        ) from None
                    if n < 0:
                        raise WorkloadError(f"{path}:{lineno}: {col} must be >= 0, got {n}")
                    lengths.append(n)
                yield lineno, t, lengths[0], lengths[1], [], None
    except OSError as exc:
        raise WorkloadError(f"cannot read trace {path}: {exc}") from None
    except csv.Error as exc:
        raise WorkloadError(f"{path}: not a readable CSV: {exc}") from None

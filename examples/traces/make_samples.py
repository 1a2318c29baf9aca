"""Write the small trace samples of this folder (seeded: the same files every time).

- ``mooncake_sample.jsonl``: 120 requests over 40 s in Mooncake's format (``timestamp`` ms,
  ``input_length``, ``output_length``, ``hash_ids`` of 512-token blocks). Like the
  release's conversation trace, most requests open with one of a few shared system
  prompts (hash ids 0-1, 2-3 or 4-5, so 1,024 shared tokens), then a document and a
  question of their own; arrivals come in bursts (gamma gaps, CV 2);
- ``azure_sample.csv``: 200 rows of the Azure LLM inference trace's columns
  (``TIMESTAMP,ContextTokens,GeneratedTokens``, its timestamp format);
- ``burstgpt_sample.csv``: 200 rows of BurstGPT's columns, a few of them the trace's own
  failed requests (0 response tokens), which a replay skips.

Run: ``python examples/traces/make_samples.py``.
"""

from __future__ import annotations

import csv
import json
from datetime import datetime, timedelta
from pathlib import Path

import numpy as np

HERE = Path(__file__).parent


def mooncake(path: Path, n: int = 120, seconds: float = 40.0) -> None:
    rng = np.random.default_rng(7)
    k = 0.25  # gamma shape: CV 2
    gaps = rng.gamma(k, (seconds / n) / k, n - 1)
    ts = np.concatenate(([0.0], np.cumsum(gaps)))
    next_id = 6
    with open(path, "w") as f:
        for t in ts:
            system = int(rng.integers(0, 3))
            own = int(rng.integers(1, 4))  # 1-3 blocks of its own
            tail = int(rng.integers(40, 400))
            ids = [2 * system, 2 * system + 1, *range(next_id, next_id + own + 1)]
            next_id += own + 1
            isl = 512 * (2 + own) + tail
            osl = int(rng.integers(32, 160))
            row = {"timestamp": int(t * 1000), "input_length": isl, "output_length": osl}
            f.write(json.dumps({**row, "hash_ids": ids}) + "\n")


def azure(path: Path, n: int = 200) -> None:
    rng = np.random.default_rng(8)
    t = datetime(2023, 11, 16, 18, 15, 46, 680590)
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["TIMESTAMP", "ContextTokens", "GeneratedTokens"])
        for _ in range(n):
            t += timedelta(seconds=float(rng.exponential(0.25)))
            w.writerow(
                [t.strftime("%Y-%m-%d %H:%M:%S.%f") + "0", int(rng.lognormal(6.5, 0.8)) + 1,
                 int(rng.lognormal(4.5, 0.6)) + 1]
            )  # fmt: skip


def burstgpt(path: Path, n: int = 200) -> None:
    rng = np.random.default_rng(9)
    t = 5
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(
            ["Timestamp", "Model", "Request tokens", "Response tokens", "Total tokens", "Log Type"]
        )
        for i in range(n):
            t += int(rng.integers(0, 2))
            req = int(rng.lognormal(6.0, 0.9)) + 1
            resp = 0 if i % 40 == 17 else int(rng.lognormal(5.0, 0.7)) + 1
            model = "GPT-4" if rng.random() < 0.3 else "ChatGPT"
            w.writerow([t, model, req, resp, req + resp, "Conversation log"])


if __name__ == "__main__":
    mooncake(HERE / "mooncake_sample.jsonl")
    azure(HERE / "azure_sample.csv")
    burstgpt(HERE / "burstgpt_sample.csv")

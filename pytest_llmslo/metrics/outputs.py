"""Outputs that are not what was asked or claimed.

- ``short_outputs``: completed requests that returned fewer tokens than they asked for
  while the output length was pinned (``ignore_eos``/``min_tokens``): a server that ignores
  the pin measured another workload.
- ``usage_mismatches``: completed requests whose ``usage`` disagreed with their stream
  (counted, not credited: their streamed tokens are), with the tokens usage claimed and
  the tokens that streamed for them.
"""

from __future__ import annotations

import numpy as np

from pytest_llmslo.records import Run

from .columns import columns

__all__ = ["output_pinned", "short_outputs", "usage_mismatches"]


def output_pinned(run: Run) -> bool:
    """Whether the run's requests pinned their output length (``ignore_eos`` and
    ``min_tokens``), as recorded in its meta by the load generator."""
    client = run.meta.client
    return bool(client is not None and client.get("ignore_eos"))


def usage_mismatches(run: Run) -> tuple[int, int, int]:
    """(completed requests whose usage disagreed with their stream, the completion tokens
    their usage claimed, the tokens that streamed for them); see ``RequestRecord.credit``."""
    arr = columns(run)
    bad = np.flatnonzero(arr.ok & arr.usage_mismatch)
    if not bad.size:
        return 0, 0, 0
    recs, rows = run.records, bad.tolist()
    claimed = sum(recs[i].completion_tokens or 0 for i in rows)
    streamed = sum(recs[i].streamed_tokens for i in rows)
    return int(bad.size), int(claimed), int(streamed)


def short_outputs(run: Run) -> int:
    """Completed requests whose output was shorter than requested while the output length
    was pinned (0 when it was not: then a short answer is the model's choice)."""
    if not output_pinned(run):
        return 0
    arr = columns(run)
    req = arr.requested_output
    return int((arr.ok & (req > 0) & (arr.output_tokens < req)).sum())

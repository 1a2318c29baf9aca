"""A metric's values three ways: per request (aligned with the records), as the samples an
aggregate gate pools, and as what a goodput threshold checks each request against.

Per request (completed requests only; a failed request has NaN everywhere), by the
catalogue's formulas (``catalog.BUILTIN``):

- ``ttft``  = first output chunk (content *or* reasoning) − request sent
- ``ttfot`` = first *content* chunk − request sent (time to first output token of a
  reasoning model; equal to ``ttft`` for other models; NaN when no content came)
- ``e2e``   = last byte − request sent
- ``tpot``  = (e2e − ttft) / (output_tokens − 1); NaN when output_tokens < 2.
  ``output_tokens`` is what the request is credited (``RequestRecord.credit``): the
  server's ``usage.completion_tokens`` when it agrees with the tokens that streamed (the
  per-chunk counts the server gave, else one per chunk; a tolerance of 2 tokens or 5 %),
  else the streamed tokens; never more than the ``max_tokens`` the request sent.
- ``itl``   = the gaps between successive output chunks (content and reasoning alike),
  one value per *token*: a gap is divided evenly over the tokens the later chunk carries
  (see :func:`token_gaps` for the rule when the server's per-chunk counts are inexact).
"""

from __future__ import annotations

import numpy as np

from pytest_llmslo.catalog import CATALOGUE, Stat, parse_stat
from pytest_llmslo.records import Run
from pytest_llmslo.stats import _finite

from .columns import columns, entry

__all__ = ["aggregate_values", "per_request", "request_values", "token_gaps"]


def per_request(run: Run) -> dict[str, np.ndarray]:
    """Per-request values (ms) of every catalogue metric, aligned with ``run.records``:
    ``ttft``, ``ttfot``, ``itl`` (the request's mean token gap), ``tpot`` and ``e2e``. NaN
    for failed requests and where a value is undefined (no content chunk, fewer than two
    tokens)."""
    cols = columns(run)
    out: dict[str, np.ndarray] = {}
    for name, m in CATALOGUE.items():
        v = cols.value(name)
        out[name] = v.mean() if m.per == "token" else v.copy()
    return out


def token_gaps(run: Run) -> np.ndarray:
    """All ITL samples (ms) of completed requests, one per token after each request's
    first chunk.

    A gap g between chunk i−1 and chunk i that carries t_i tokens gives t_i samples of
    g / t_i (speculative decoding and frontends such as Dynamo pack several tokens into
    one chunk). t_i is ``chunk_tokens[i]`` (1 when absent). When ``tokens_exact`` is
    False and the request's credited output tokens N (``RequestRecord.credit``: usage
    only when it agrees with the stream) exceed the counted Σ t_i, the E = N − Σ t_i
    uncounted tokens are spread evenly over the request's m chunks in integer shares
    (chunk j gets ⌊(j+1)E/m⌋ − ⌊jE/m⌋ more), so the samples of a request add up to its
    last − first chunk time and their count matches its credit. A usage that disagrees
    with the stream is not credited, so it never spreads: the gaps are the chunks' own.
    Tokens that arrived in the first chunk have no preceding chunk and give no sample
    (their time is in TTFT). When usage reports fewer tokens than the chunks show, the
    chunks win."""
    return columns(run).token_gaps().values.copy()


def request_values(run: Run, metric: str, stat: Stat | str) -> np.ndarray:
    """The per-request value a goodput threshold ``metric`` ``stat`` is checked against,
    aligned with ``run.records``. For ``itl`` (a metric per token) it is the request's own
    statistic over its own token gaps (its median gap for p50, its mean gap for mean); the
    other metrics have one value per request, so the statistic does not change it."""
    m = entry(metric)
    stat = parse_stat(stat)
    v = columns(run).value(metric)
    out: np.ndarray
    if m.per == "request":
        out = v.copy()
    elif stat == "mean":
        out = v.mean()
    else:
        out = v.percentile(float(stat))
    return out


def aggregate_values(run: Run, metric: str, *, copy: bool = True) -> np.ndarray:
    """The samples an aggregate gate on ``metric`` is computed over (ms, finite only):
    one per completed request, or one per token gap for ``itl``. ``copy=False`` gives a
    per-token metric's cached samples themselves (a long run's token gaps are hundreds
    of MB), for a caller that only reads them."""
    m = entry(metric)
    v = columns(run).value(metric)
    if m.per == "token":
        samples: np.ndarray = v.values.copy() if copy else v.values
        return samples
    return _finite(v)

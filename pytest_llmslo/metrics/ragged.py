"""Samples grouped by request (``Ragged``): a ``per="token"`` metric's values, such as the
token gaps of ITL, flat in record order with a count per record, and each request's own
mean and percentiles over its own samples, vectorised."""

from __future__ import annotations

import numpy as np

__all__ = ["Ragged"]


class Ragged:
    """``values`` (ms) flat in record order, ``counts[i]`` of them for record i. The
    per-request grouping and the sorted blocks are built on demand: only the per-request
    statistics need them."""

    __slots__ = ("_blocks", "_groups", "counts", "n", "values")

    def __init__(self, values: np.ndarray, counts: np.ndarray) -> None:
        self.values = values
        self.counts = counts
        self.n = int(counts.size)
        self._groups: np.ndarray | None = None
        self._blocks: list[tuple[np.ndarray, np.ndarray, np.ndarray]] | None = None

    @property
    def groups(self) -> np.ndarray:
        """The record index of every sample of :attr:`values`."""
        if self._groups is None:
            self._groups = np.repeat(np.arange(self.n, dtype=np.int64), self.counts)
        return self._groups

    def mean(self) -> np.ndarray:
        """Each request's mean sample; NaN for a request without samples."""
        counts = self.counts
        out = np.full(self.n, np.nan)
        has = counts > 0
        if has.any():
            offsets = np.cumsum(counts[has]) - counts[has]
            out[has] = np.add.reduceat(self.values, offsets) / counts[has]
        return out

    def _sorted_blocks(self) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """Each request's samples sorted, as dense blocks: requests are bucketed by sample
        count (powers of two), each bucket padded with +inf to its longest request and
        sorted along rows. Much faster than a lexsort of all samples, and the padding costs
        at most 2x memory. Returns (request indices, sample counts, sorted rows) per bucket."""
        if self._blocks is not None:
            return self._blocks
        values, groups = self.values, self.groups
        counts = self.counts
        starts = np.cumsum(counts) - counts
        pos = np.arange(values.size, dtype=np.int64) - starts[groups]
        bucket = np.zeros(self.n, dtype=np.int64)
        has = counts > 0
        bucket[has] = np.ceil(np.log2(counts[has])).astype(np.int64)
        blocks: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        sample_bucket = bucket[groups]
        single = np.unique(bucket[has]).size == 1
        for b in np.unique(bucket[has]):
            rows = np.flatnonzero(has & (bucket == b))
            row_of = np.empty(self.n, dtype=np.int64)
            row_of[rows] = np.arange(rows.size)
            if single:
                sel_g, sel_v, sel_p = groups, values, pos
            else:
                m = sample_bucket == b
                sel_g, sel_v, sel_p = groups[m], values[m], pos[m]
            width = int(counts[rows].max())
            mat = np.full((rows.size, width), np.inf)
            mat[row_of[sel_g], sel_p] = sel_v
            mat.sort(axis=1)
            blocks.append((rows, counts[rows], mat))
        self._blocks = blocks
        return blocks

    def percentile(self, q: float) -> np.ndarray:
        """Each request's own P_q over its own samples (linear method), vectorised over the
        sorted blocks of :meth:`_sorted_blocks`; NaN for a request without samples."""
        out = np.full(self.n, np.nan)
        for rows, m, mat in self._sorted_blocks():
            h = (m - 1) * (q / 100.0)
            lo = np.floor(h).astype(np.int64)
            hi = np.minimum(lo + 1, m - 1)
            frac = h - lo
            r = np.arange(rows.size)
            x_lo = mat[r, lo]
            x_hi = mat[r, hi]
            out[rows] = x_lo + frac * (x_hi - x_lo)
        return out

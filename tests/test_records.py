"""Records keep their per-chunk data compactly, whatever sequence they are given."""

from __future__ import annotations

import pickle
from array import array

from pytest_llmslo.records import RequestRecord


def test_chunks_are_compact_arrays_and_round_trip() -> None:
    r = RequestRecord(0, 1, 2, 9, chunk_ns=(3, 4, 5), chunk_tokens=[1, 1, 1])
    assert r.chunk_ns == array("q", [3, 4, 5]) and r.chunk_ns.itemsize == 8
    # One token per chunk is the common case: no per-chunk counts are kept.
    assert len(r.chunk_tokens) == 0 and r.output_tokens == 3
    multi = RequestRecord(0, 1, 2, 9, chunk_ns=[3, 4], chunk_tokens=(2, 3))
    assert list(multi.chunk_tokens) == [2, 3] and multi.output_tokens == 5
    assert RequestRecord.from_dict(multi.to_dict()) == multi
    assert pickle.loads(pickle.dumps(multi)) == multi  # worker processes send records
    assert multi.to_dict()["chunk_ns"] == [3, 4]


def test_output_tokens_are_never_credited_beyond_the_stream_or_max_tokens() -> None:
    def r(chunks: int, usage: int | None, asked: int | None = 16, **kw: object) -> RequestRecord:
        return RequestRecord(
            0, 0, 0, 9, chunk_ns=range(1, chunks + 1), completion_tokens=usage,
            requested_output_tokens=asked, **kw,  # type: ignore[arg-type]
        )  # fmt: skip

    # 4 chunks, usage claims 1000 (past max_tokens too): the 4 streamed tokens count.
    assert r(4, 1000).credit() == (4, True)
    # Usage within 2 tokens (or 5 %) of the stream agrees and is credited.
    assert r(16, 16).credit() == (16, False) and r(14, 16).credit() == (16, False)
    assert r(100, 104, asked=128).credit() == (104, False)  # 4 % over
    assert r(100, 110, asked=128).credit() == (100, True)  # 10 % over
    assert r(10, 3).credit() == (10, True)  # usage below the chunks: the chunks win
    # Above the max_tokens sent it disagrees, however close to the stream.
    assert r(16, 17).credit() == (16, True)
    # A stream that carried more chunks than max_tokens is capped at max_tokens.
    assert r(20, None).credit() == (16, False)
    # Per-chunk counts from the server are what streamed: usage is checked against them.
    exact = r(2, 8, chunk_tokens=(4, 4), tokens_exact=True)
    assert exact.credit() == (8, False) and exact.streamed_tokens == 8
    # No usage, or no requested length: the stream alone.
    assert r(5, None, asked=None).credit() == (5, False)
    # Nothing streamed: nothing credited, whatever usage says.
    assert r(0, 16).output_tokens == 0 and r(0, 16).usage_mismatch

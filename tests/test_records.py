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

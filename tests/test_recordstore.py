"""The record store: records kept as columns, spilled to files past a bound, sorted by
index, read back as the same records; and a run read from it gives the same metrics,
gates and samples as the same records held as objects."""

from __future__ import annotations

import gc
import math
import os
import pickle
import random
from pathlib import Path

import numpy as np
import pytest

from pytest_llmslo import metrics, recordfile, recordstore, slo
from pytest_llmslo.document import compact_samples
from pytest_llmslo.load.backlog import Backlog, BatchBuilder
from pytest_llmslo.load.client import RawExchange
from pytest_llmslo.load.jobsource import Job
from pytest_llmslo.metrics.columns import clear_cache
from pytest_llmslo.records import LoadLevel, RequestRecord, Run
from pytest_llmslo.recordstore import RecordStore, credits

MS = 1_000_000


@pytest.fixture(autouse=True)
def small_segments(monkeypatch: pytest.MonkeyPatch) -> None:
    """Segments of a few records, so that a few hundred records make many of them."""
    monkeypatch.setattr(recordstore, "SEGMENT_ROWS", 16)


def _record(i: int, rnd: random.Random, multi: bool = True) -> RequestRecord:
    """A record with what real runs have: failures with texts, per-chunk counts, usage
    that agrees or disagrees with the stream, reasoning before content, conversations."""
    sent = i * 7 * MS + rnd.randrange(MS)
    failed = i % 13 == 5
    n = 0 if i % 17 == 3 else rnd.randrange(1, 30)
    chunk_ns = sorted(sent + 40 * MS + rnd.randrange(200 * MS) for _ in range(n))
    counts = [rnd.choice((1, 1, 2, 3)) for _ in range(n)] if multi and i % 4 == 0 else []
    usage = {0: None, 1: n, 2: n + 9, 3: n + 1}[i % 4] if multi else n
    return RequestRecord(
        index=i,
        scheduled_ns=sent - rnd.randrange(MS),
        sent_ns=sent,
        end_ns=(chunk_ns[-1] if chunk_ns else sent) + MS,
        chunk_ns=chunk_ns,
        chunk_tokens=counts,
        tokens_exact=i % 8 == 0,
        first_content_ns=chunk_ns[min(2, n - 1)] if n and i % 5 else None,
        prompt_tokens=None if i % 6 == 0 else 64,
        completion_tokens=usage,
        requested_prompt_tokens=64,
        requested_output_tokens=None if i % 9 == 0 else 32,
        status=500 if failed else 200,
        error=f"HTTP 500: overloaded {i % 3}" if failed else None,
        error_kind="http" if failed else None,
        finish_reason=None if failed else ("length" if i % 2 else "stop"),
        worker=i % 3,
        session=i // 4 if i % 10 == 0 else -1,
        turn=i % 4 if i % 10 == 0 else 0,
    )


def _records(n: int = 300, seed: int = 1, multi: bool = True) -> list[RequestRecord]:
    """``multi``: some chunks carry several tokens and some usage disagrees; else one
    token a chunk, as most servers stream (the store's gaps are then read by segment)."""
    rnd = random.Random(seed)
    return [_record(i, rnd, multi) for i in range(n)]


def _shuffled(records: list[RequestRecord], seed: int = 2) -> list[RequestRecord]:
    """In the order they might end: nearly sorted, a few far away."""
    rnd = random.Random(seed)
    out = list(records)
    for a in range(0, len(out), 40):
        block = out[a : a + 40]
        rnd.shuffle(block)
        out[a : a + 40] = block
    out[0], out[-1] = out[-1], out[0]
    return out


def _store(records: list[RequestRecord], limit: int | None = None) -> RecordStore:
    store = RecordStore(limit)
    store.extend(records)
    return store.finish()


def test_records_come_back_as_they_went_sorted_by_index() -> None:
    records = _records()
    store = _store(_shuffled(records))
    assert len(store) == len(records)
    assert list(store) == records
    assert store[0] == records[0] and store[-1] == records[-1] and store[123] == records[123]
    assert list(store[10:20]) == records[10:20]
    assert list(store.where(2)) == [r for r in records if r.worker == 2]
    assert store == records
    with pytest.raises(IndexError):
        store[len(records)]
    with pytest.raises(ValueError, match="finished"):
        store.append(records[0])


def test_columns_match_the_records() -> None:
    records = _records()
    store = _store(_shuffled(records), limit=0)
    assert store.column("sent_ns").tolist() == [r.sent_ns for r in records]
    assert store.ok().tolist() == [r.ok for r in records]
    assert store.chunk_ns().tolist() == [t for r in records for t in r.chunk_ns]
    assert store.nth_chunk_ns(1).tolist() == [
        r.chunk_ns[1] if len(r.chunk_ns) > 1 else -1 for r in records
    ]
    view = store.where(1)
    assert view.chunk_ns().tolist() == [t for r in records if r.worker == 1 for t in r.chunk_ns]
    tokens, mismatch = credits(store)
    assert tokens.tolist() == [r.credit()[0] for r in records]
    assert mismatch.tolist() == [r.credit()[1] for r in records]
    assert mismatch.any() and not mismatch.all()


def test_past_its_bound_a_store_writes_segments_to_files_and_removes_them() -> None:
    records = _records()
    segment_bytes = _store(records[:16], limit=None).memory_bytes
    store = _store(_shuffled(records), limit=3 * segment_bytes)
    directory = store.file_dir
    assert directory is not None and store.spilled_segments > 0
    assert store.memory_bytes <= 3 * segment_bytes + segment_bytes
    files = os.listdir(directory)
    assert files and all(f.endswith(".npz") for f in files)
    # The segments the sort replaced are gone: one file per segment still in a file.
    held = sum(1 for s in store._segments if s.path is None)
    assert len(files) == len(store._segments) - held
    assert list(store) == records  # read back from the files
    store.close()
    assert not os.path.exists(directory)


def test_the_files_go_with_the_store() -> None:
    store = _store(_records(100), limit=0)
    directory = store.file_dir
    assert directory is not None and os.path.isdir(directory)
    del store
    gc.collect()
    assert not os.path.exists(directory)


def test_no_bound_keeps_everything_in_memory() -> None:
    store = _store(_records(100), limit=None)
    assert store.file_dir is None and store.spilled_segments == 0 and store.memory_bytes > 0


def test_export_and_pickle(tmp_path: Path) -> None:
    records = _records()
    store = _store(_shuffled(records), limit=0)
    path = str(tmp_path / "records.npz")
    store.save(path)
    assert list(RecordStore.load(path, limit=0)) == records
    again = pickle.loads(pickle.dumps(store))
    assert list(again) == records and again.file_dir is None


def test_a_negative_bound_is_refused() -> None:
    with pytest.raises(ValueError, match=">= 0 bytes"):
        RecordStore(-1)


def _nan_equal(a: object, b: object) -> bool:
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_nan_equal(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return len(a) == len(b) and all(_nan_equal(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return a == b


def _runs(records: list[RequestRecord], limit: int | None) -> tuple[Run, Run]:
    start = min(r.sent_ns for r in records)
    end = max(r.end_ns for r in records)
    level = LoadLevel.concurrency(8)
    return (
        Run(level, tuple(records), start, end),
        Run(level, _store(_shuffled(records), limit), start, end),
    )


@pytest.mark.parametrize(("limit", "multi"), [(None, True), (0, True), (0, False)])
def test_metrics_gates_and_samples_are_those_of_the_records(limit: int | None, multi: bool) -> None:
    objects, stored = _runs(_records(multi=multi), limit)
    objectives = "ttft_p90 < 150ms, itl_mean < 20ms, e2e_p99 < 400ms"
    clear_cache()
    a = metrics.summarize(objects, slo.parse_objectives(objectives)).to_dict()
    clear_cache()
    b = metrics.summarize(stored, slo.parse_objectives(objectives)).to_dict()
    assert _nan_equal(a, b)
    assert 0 < a["good"] < a["completed"] < a["requests"]
    assert (a["usage_mismatches"] > 0) == multi and a["throughput_window"] == "steady"
    for name, values in metrics.per_request(objects).items():
        assert np.array_equal(values, metrics.per_request(stored)[name], equal_nan=True), name
    assert _nan_equal(compact_samples(objects), compact_samples(stored))
    assert metrics.failure_messages(objects, 5) == metrics.failure_messages(stored, 5)
    va = slo.evaluate(objects, objectives, max_error_rate=0.5)
    vb = slo.evaluate(stored, objectives, max_error_rate=0.5)
    assert va.passed == vb.passed and _nan_equal(va.to_dict(), vb.to_dict())
    assert objects.ok_count == stored.ok_count and objects.failed_records == stored.failed_records
    assert _nan_equal(objects.to_dict(), stored.to_dict())


def _exchange(i: int) -> RawExchange:
    raw = RawExchange()
    raw.sent_ns, raw.end_ns, raw.status = 10 * i, 10 * i + 9, 200
    pieces = [b'data: {"choices":[{"delta":{"content":"x"}}]}\n\n'] * (i % 5 + 1)
    pieces.append(b'data: {"choices":[{"delta":{},"finish_reason":"stop"}]}\n\ndata: [DONE]\n\n')
    raw.pieces = pieces
    raw.times = [10 * i + 1 + k for k in range(len(pieces))]
    if i % 7 == 6:
        raw.kind, raw.error = "reset", "connection reset"
    return raw


def test_columnar_batches_decode_as_the_exchanges_do() -> None:
    one = Backlog(0, budget=0)
    batched = Backlog(0, budget=0)
    builder = BatchBuilder()
    for i in range(40):
        job = Job(i, b"", 8, 16, False)
        one.add(job, 10 * i - 1, _exchange(i), worker=i % 2)
        builder.add(i, 8, 16, 10 * i - 1, _exchange(i))
        if i % 9 == 8:
            batched.add_batch(pickle.loads(pickle.dumps(builder.take())), 0)
    batched.add_batch(builder.take(), 0)
    assert len(batched) == 40 and batched.over_budget
    got = list(batched.drain())
    want = [
        RequestRecord.from_dict({**r.to_dict(), "worker": 0}) for r in one.drain()
    ]  # the same but for the worker, which a batch's sender gives
    assert got == want and len(batched) == 0 and batched.bytes == 0
    assert sum(not r.ok for r in got) == 5


def test_the_bound_is_a_setting_in_megabytes() -> None:
    from pytest_llmslo.settings import LoadOptions
    from pytest_llmslo.settings.parsers import parse_records_memory

    assert parse_records_memory("64") == 64.0 and parse_records_memory("0.5MB") == 0.5
    assert parse_records_memory("none") is None and parse_records_memory("0") == 0.0
    with pytest.raises(ValueError, match="megabytes >= 0"):
        parse_records_memory("-1")
    assert LoadOptions(records_memory_mb=2.0).records_memory == 2 * 1024 * 1024
    assert LoadOptions(records_memory_mb=None).records_memory is None


def test_a_new_store_moves_the_finished_ones_to_files() -> None:
    records = _records(100)
    first = _store(records, limit=10**9)
    assert first.memory_bytes > 0 and first.file_dir is None
    unbounded = _store(records, limit=None)
    assert first.memory_bytes > 0  # a store without a bound leaves the others be
    RecordStore(10**9)
    assert first.memory_bytes == 0 and first.spilled_segments > 0
    assert unbounded.memory_bytes > 0
    assert list(first) == records  # read back from its files


def test_batches_past_the_budget_and_its_margin_wait_in_a_file() -> None:
    one = Backlog(0, budget=0)
    for i in range(30):
        one.add(Job(i, b"", 8, 16, False), 10 * i - 1, _exchange(i))
    want = list(one.drain())
    backlog = Backlog(0, budget=1, spill_margin=1)
    for i in range(30):
        builder = BatchBuilder()
        builder.add(i, 8, 16, 10 * i - 1, _exchange(i))
        backlog.add_batch(builder.take(), 0)
    assert backlog.spilled == 30 and backlog.in_file == 30 and len(backlog) == 30
    backlog.decode_slice()  # decodes on while batches wait in the file
    assert backlog.in_file < 30
    assert list(backlog.drain()) == want and backlog.in_file == 0


def test_a_records_file_is_read_as_data_alone(tmp_path: Path) -> None:
    """``RecordStore.load`` reads no pickle (an object array in the file is refused) and
    refuses columns that do not agree with each other (docs/security.md)."""
    records = _records(20)
    path = str(tmp_path / "records.npz")
    _store(records, limit=None).save(path)
    with np.load(path) as z:
        cols = {k: z[k] for k in z.files}
    assert cols["texts"].dtype.kind == "U"  # text as a unicode column, not objects
    bad = str(tmp_path / "objects.npz")
    np.savez(bad, **{**cols, "texts": np.array(["x", None], dtype=object)})
    with pytest.raises(ValueError, match="pickle"):
        RecordStore.load(bad)
    short = str(tmp_path / "short.npz")
    np.savez(short, **{**cols, "chunk_ns": cols["chunk_ns"][:-1]})
    with pytest.raises(ValueError, match="chunk counts do not match"):
        RecordStore.load(short)


def test_a_spilled_segment_is_read_back_as_data_alone(tmp_path: Path) -> None:
    """A store's own segment files go through ``recordfile`` too: plain arrays written,
    read back equal, and an object array in one refused rather than unpickled."""
    cols = recordfile.Columns(
        np.zeros(2, dtype=recordfile.FIXED),
        np.arange(3, dtype=np.int64),
        np.empty(0, dtype=np.uint32),
    )
    path = str(tmp_path / "segment.npz")
    recordfile.write_segment(path, cols)
    back = recordfile.read_segment(path)
    assert all(np.array_equal(a, b) for a, b in zip(back, cols, strict=True))
    assert np.array_equal(recordfile.read_segment(path, fixed_only=True).fixed, cols.fixed)
    np.savez(path, fixed=cols.fixed, chunk_ns=np.array([None], dtype=object),
             chunk_tokens=cols.chunk_tokens)  # fmt: skip
    with pytest.raises(ValueError, match="pickle"):
        recordfile.read_segment(path)
    # The names the store exported before the file format had a module of its own.
    assert recordstore.FIXED is recordfile.FIXED and recordstore.NONE == recordfile.NONE

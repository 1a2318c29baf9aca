"""The exports of a run: the benchmark JSON in the shapes github-action-benchmark and
Bencher document, the per-request JSONL and Parquet read back with their schema, and the
Pushgateway and OTLP pushes received by a local HTTP server on loopback."""

from __future__ import annotations

import dataclasses
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from sweep_helpers import make_point

from pytest_llmslo import cli
from pytest_llmslo.document import Results, build_document
from pytest_llmslo.errors import ConfigError
from pytest_llmslo.exports import benchjson, push, requests
from pytest_llmslo.exports.levelmetrics import EXPORTED

SMALLER = {
    "ttft_p50",
    "ttft_p99",
    "itl_p50",
    "itl_p99",
    "tpot_p50",
    "e2e_p50",
    "e2e_p99",
    "error_rate",
}


@pytest.fixture
def results() -> Results:
    points = [
        make_point(c, ttft_ms=50.0 * c, gap_ms=10.0, samples=True, requests=60) for c in (1, 4)
    ]
    return Results.of(
        points,
        constants={"per_engine": {"sim": {"model": "llama-3.1-8b"}}},
        engines={"sim": {"version": "0.9.2"}},
    )


def test_github_action_benchmark_custom_json(results: Results) -> None:
    smaller = benchjson.github_benchmark(results, bigger=False)
    bigger = benchjson.github_benchmark(results, bigger=True)
    for entry in smaller + bigger:  # the fields the action documents: name, unit, value
        assert set(entry) <= {"name", "unit", "value", "range", "extra"}
        assert isinstance(entry["name"], str) and isinstance(entry["unit"], str)
        assert isinstance(entry["value"], float)
        assert isinstance(entry.get("range", ""), str) and isinstance(entry["extra"], str)
    assert {e["name"].split()[-1] for e in smaller} == SMALLER
    assert {e["name"].split()[-1] for e in bigger} == {
        "throughput",
        "req_s",
        "goodput",
        "attainment",
    }
    ttft = next(e for e in smaller if e["name"] == "sim/test_chat/c4 ttft_p50")
    assert ttft["unit"] == "ms" and ttft["range"].startswith("± ")
    assert ttft["extra"] == "60 requests; sim 0.9.2"
    # A P99 of 60 requests has no upper bound: no range rather than a false one.
    assert "range" not in next(e for e in smaller if e["name"] == "sim/test_chat/c4 ttft_p99")
    attainment = next(e for e in bigger if e["name"].endswith("attainment"))
    assert attainment["unit"] == "%" and 0 <= attainment["value"] <= 100


def test_bencher_metric_format(results: Results) -> None:
    bmf = benchjson.bencher_metrics(results)
    assert set(bmf) == {"sim/test_chat/c1", "sim/test_chat/c4"}
    for measures in bmf.values():
        assert len(measures) == len(EXPORTED)
        for slug, metric in measures.items():
            assert len(slug) <= 64 and slug == slug.lower() and " " not in slug
            assert set(metric) <= {"value", "lower_value", "upper_value"}
            assert isinstance(metric["value"], float)
            if "lower_value" in metric:
                assert metric["lower_value"] <= metric["value"] <= metric["upper_value"]
    assert "lower_value" in bmf["sim/test_chat/c4"]["ttft-p50-ms"]
    assert "lower_value" not in bmf["sim/test_chat/c4"]["itl-p50-ms"]  # see levels._interval
    json.dumps(bmf, allow_nan=False)


def test_requests_as_jsonl(results: Results, tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    assert requests.write_jsonl(results, path) == 120
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert len(rows) == 120 and all(list(r) == list(requests.COLUMNS) for r in rows)
    assert rows[0]["level"] == "c1" and rows[-1]["level"] == "c4" and rows[-1]["index"] == 59
    assert all(r["ok"] is True and r["output_tokens"] == 16 for r in rows)
    assert rows[0]["ttft_ms"] == pytest.approx(50.0, abs=0.5)


def test_requests_as_parquet_read_back_with_their_schema(results: Results, tmp_path: Path) -> None:
    pq = pytest.importorskip("pyarrow.parquet")
    path = tmp_path / "r.parquet"
    assert requests.write_parquet(results, path) == 120
    table = pq.read_table(path)
    assert table.num_rows == 120
    types = {f.name: str(f.type) for f in table.schema}
    expected = {"string": "string", "int64": "int64", "bool_": "bool", "float64": "double"}
    assert types == {k: expected[v] for k, v in requests.COLUMNS.items()}
    assert table.column("level").to_pylist()[:1] == ["c1"]
    assert pq.ParquetFile(path).num_row_groups == 2  # one per level
    jsonl = tmp_path / "r.jsonl"
    requests.write_jsonl(results, jsonl)
    assert table.to_pylist() == [json.loads(line) for line in jsonl.read_text().splitlines()]


class _Receiver(BaseHTTPRequestHandler):
    received: list[tuple[str, str, bytes]]
    status = 200

    def _take(self) -> None:
        n = int(self.headers.get("Content-Length") or 0)
        self.received.append((self.command, self.path, self.rfile.read(n)))
        self.send_response(self.status)
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_PUT = do_POST = _take

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def receiver() -> Iterator[tuple[str, type[_Receiver]]]:
    handler = type("Handler", (_Receiver,), {"received": [], "status": 200})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", handler
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def test_push_to_a_pushgateway(results: Results, receiver) -> None:
    url, handler = receiver
    push.push_gateway(results, url, job="nightly")
    ((method, path, body),) = handler.received
    assert (method, path) == ("PUT", "/metrics/job/nightly")
    text = body.decode()
    assert 'llmslo_ttft_p99_seconds{engine="sim",level="c4",test="test_chat"}' in text
    assert "llmslo_throughput_tokens_per_second{" in text
    assert "llmslo_attainment_ratio{" in text


def test_push_over_otlp_with_the_genai_names(results: Results, receiver) -> None:
    url, handler = receiver
    assert push.push_otlp(results, url) == 200
    ((method, path, body),) = handler.received
    assert (method, path) == ("POST", "/v1/metrics")
    doc = json.loads(body)
    (scope,) = doc["resourceMetrics"][0]["scopeMetrics"]
    metrics = {m["name"]: m for m in scope["metrics"]}
    ttft = metrics["gen_ai.server.time_to_first_token"]
    assert ttft["unit"] == "s" and ttft["histogram"]["aggregationTemporality"] == 1
    for dp in ttft["histogram"]["dataPoints"]:
        assert sum(int(c) for c in dp["bucketCounts"]) == int(dp["count"]) == 60
        assert len(dp["bucketCounts"]) == len(dp["explicitBounds"]) + 1
        attrs = {a["key"]: a["value"]["stringValue"] for a in dp["attributes"]}
        assert attrs["gen_ai.request.model"] == "llama-3.1-8b"
    c1 = ttft["histogram"]["dataPoints"][0]
    # TTFT about 50-60 ms at c1: all in the (0.04, 0.06] bucket.
    assert c1["bucketCounts"][c1["explicitBounds"].index(0.06)] == "60"
    assert {"gen_ai.server.time_per_output_token", "gen_ai.server.request.duration"} <= set(metrics)
    assert metrics["llmslo.throughput"]["gauge"]["dataPoints"][0]["asDouble"] > 0


def test_a_refusing_or_absent_receiver_is_a_clear_error(results: Results, receiver) -> None:
    url, handler = receiver
    handler.status = 500
    with pytest.raises(ConfigError, match="answered HTTP 500"):
        push.push_otlp(results, url)
    with pytest.raises(ConfigError, match="Pushgateway"):
        push.push_gateway(results, url)
    with pytest.raises(ConfigError, match="OTLP endpoint"):
        push.push_otlp(results, "http://127.0.0.1:9")


def test_llmslo_export(results: Results, tmp_path: Path, capsys) -> None:
    doc = tmp_path / "run.json"
    doc.write_text(json.dumps(build_document(results)))
    assert cli.main(["export", str(doc)]) == cli.EXIT_USAGE
    assert "nothing to export" in capsys.readouterr().err
    out = tmp_path / "out"
    code = cli.main(
        [
            "export", str(doc), "--github-smaller", str(out / "s.json"),
            "--github-bigger", str(out / "b.json"), "--bencher", str(out / "bmf.json"),
            "--requests-jsonl", str(out / "r.jsonl"),
        ]
    )  # fmt: skip
    assert code == cli.EXIT_OK
    said = capsys.readouterr().out
    assert "120 requests written to" in said
    assert json.loads((out / "s.json").read_text())[0]["name"] == "sim/test_chat/c1 ttft_p50"


def test_requests_carry_the_good_flags_the_level_stored(results: Results) -> None:
    point = results.points[0]
    # A level judged by no objective stores no good flags: null.
    assert {r["good"] for r in requests.point_rows(point)} == {None}
    n = len(point.samples["ok"])  # type: ignore[index]
    flags = [i % 3 != 0 for i in range(n)]
    judged = dataclasses.replace(
        point, samples={**(point.samples or {}), "good": [int(f) for f in flags]}
    )
    assert [r["good"] for r in requests.point_rows(judged)] == flags

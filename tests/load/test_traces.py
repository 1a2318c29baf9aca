"""Trace files: each format's parser on good and bad lines, windows, and prompts built from
hash-id blocks."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from pytest_llmslo.errors import WorkloadError
from pytest_llmslo.load import WorkloadSpec, build_prompts
from pytest_llmslo.load.traces import detect_format, read_trace
from pytest_llmslo.load.workload import check_workload

SAMPLES = Path(__file__).parents[2] / "examples" / "traces"


def _jsonl(tmp_path: Path, rows: list[object], name: str = "t.jsonl") -> Path:
    p = tmp_path / name
    p.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return p


def test_mooncake_columns_and_blocks(tmp_path: Path) -> None:
    p = _jsonl(
        tmp_path,
        [
            {"timestamp": 1000, "input_length": 700, "output_length": 5, "hash_ids": [0, 1]},
            {"timestamp": 1000, "input_length": 1100, "output_length": 6, "hash_ids": [0, 2, 3]},
            {"timestamp": 3500, "input_length": 20, "output_length": 7, "hash_ids": [9]},
        ],
    )
    assert detect_format(str(p)) == "mooncake"
    t = read_trace(p)
    assert t.format == "mooncake" and len(t) == 3
    assert t.ts_ms.tolist() == [0.0, 0.0, 2500.0]  # from the first request
    assert t.isl.tolist() == [700, 1100, 20] and t.osl.tolist() == [5, 6, 7]
    assert t.hashes(1).tolist() == [0, 2, 3]
    assert t.offsets_ns(2.0).tolist() == [0, 0, 1_250_000_000]
    assert t.offered_rate(1.0) == pytest.approx(2 / 2.5)


def test_hash_ids_share_real_prefixes(tmp_path: Path) -> None:
    rows = [
        {"timestamp": 0, "input_length": 1200, "output_length": 4, "hash_ids": [7, 8, 50]},
        {"timestamp": 10, "input_length": 1300, "output_length": 4, "hash_ids": [7, 8, 51]},
        {"timestamp": 20, "input_length": 600, "output_length": 4, "hash_ids": [60, 61]},
    ]
    p = _jsonl(tmp_path, rows)
    spec = WorkloadSpec(kind="trace", path=str(p), block_tokens=512, calibrate=False)
    a, b, c = build_prompts(spec, 3)
    wa, wb, wc = a.text.split(), b.text.split(), c.text.split()
    # One word per token without calibration: two blocks (1024 words) shared, then apart.
    assert wa[:1024] == wb[:1024] and wa[1024:1100] != wb[1024:1100]
    assert wa[:50] != wc[:50]
    assert (len(wa), len(wb), len(wc)) == (1200, 1300, 600)
    assert (a.isl, a.osl) == (1200, 4)
    # Levels draw their own blocks (no cache carried from one level to the next).
    other = build_prompts(spec.for_level("rate", 2.0), 1)[0]
    assert other.text.split()[:20] != wa[:20]


def test_jsonl_trace_with_prompts_and_window(tmp_path: Path) -> None:
    rows = [{"timestamp": i * 500, "prompt": f"question {i}", "max_tokens": 3} for i in range(10)]
    p = _jsonl(tmp_path, rows)
    t = read_trace(p, start_s=1.0, window_s=2.0)
    assert t.format == "jsonl" and len(t) == 4  # 1.0, 1.5, 2.0, 2.5 s
    assert t.ts_ms.tolist() == [0.0, 500.0, 1000.0, 1500.0]
    assert t.prompt(0) == "question 2" and t.osl.tolist() == [3] * 4
    assert read_trace(p, limit=3).ts_ms.tolist() == [0.0, 500.0, 1000.0]
    spec = WorkloadSpec(kind="trace", path=str(p), trace_start_s=1.0, trace_window_s=2.0)
    assert build_prompts(spec, 1)[0].text == "question 2"
    assert check_workload(spec) == 4


def test_azure_csv(tmp_path: Path) -> None:
    p = tmp_path / "azure.csv"
    p.write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n"
        "2023-11-16 18:15:46.6805900,374,44\n"
        "2023-11-16 18:15:50.9152840,396,109\n"
    )
    t = read_trace(p)
    assert t.format == "azure"
    assert t.ts_ms.tolist() == pytest.approx([0.0, 4234.694])
    assert t.isl.tolist() == [374, 396] and t.osl.tolist() == [44, 109]


def test_burstgpt_csv_skips_the_traces_failed_requests(tmp_path: Path) -> None:
    p = tmp_path / "b.csv"
    p.write_text(
        "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
        "5,ChatGPT,472,18,490,Conversation log\n"
        "45,ChatGPT,1087,0,1087,Conversation log\n"
        "118,GPT-4,417,276,693,Conversation log\n"
    )
    t = read_trace(p)
    assert t.format == "burstgpt" and len(t) == 2 and t.skipped == 1
    assert t.ts_ms.tolist() == [0.0, 113_000.0]


@pytest.mark.parametrize(
    "name", ["mooncake_sample.jsonl", "azure_sample.csv", "burstgpt_sample.csv"]
)
def test_the_shipped_samples_read(name: str) -> None:
    t = read_trace(SAMPLES / name)
    assert len(t) >= 100 and np.all(np.diff(t.ts_ms) >= 0)


@pytest.mark.parametrize(
    ("content", "fmt", "message"),
    [
        (
            '{"timestamp": 0, "output_length": 3, "hash_ids": []}\n',
            "mooncake",
            "t.x:1: no 'input_length'",
        ),
        (
            '{"timestamp": 5, "input_length": 3, "output_length": 3, "hash_ids": []}\n'
            '{"timestamp": 2, "input_length": 3, "output_length": 3, "hash_ids": []}\n',
            "auto",
            "t.x:2: the timestamp goes backwards (2 ms after 5 ms on line 1)",
        ),
        (
            '{"timestamp": 0, "input_length": -3, "output_length": 3, "hash_ids": []}\n',
            "auto",
            "t.x:1: 'input_length' must be >= 0",
        ),
        (
            '{"timestamp": 0, "input_length": 3.5, "output_length": 3}\n',
            "auto",
            "t.x:1: 'input_length' must be an integer",
        ),
        ('{"timestamp": "soon", "input_length": 3}\n', "auto", "t.x:1: no numeric 'timestamp'"),
        (
            '{"timestamp": 0, "input_length": 3, "output_length": 1, "hash_ids": ["a"]}\n',
            "auto",
            "'hash_ids' must be a list of integers",
        ),
        ("{not json\n", "jsonl", "t.x:1: not JSON"),
        (
            "TIMESTAMP,ContextTokens\n2023-11-16 18:15:46.68,3\n",
            "azure",
            "t.x:1: no column 'GeneratedTokens'",
        ),
        (
            "Timestamp,Request tokens,Response tokens\n1,2,x\n",
            "burstgpt",
            "t.x:2: Response tokens 'x' is not an integer",
        ),
        (
            "Timestamp,Request tokens,Response tokens\n1,-2,3\n",
            "burstgpt",
            "t.x:2: Request tokens must be >= 0",
        ),
        (
            "TIMESTAMP,ContextTokens,GeneratedTokens\nyesterday,3,4\n",
            "azure",
            "t.x:2: TIMESTAMP 'yesterday' is not a time",
        ),
        ("a,b,c\n1,2,3\n", "auto", "t.x:1: not a known trace format"),
        ("", "auto", "is empty"),
    ],
)
def test_bad_lines_name_the_file_the_line_and_the_fix(
    tmp_path: Path, content: str, fmt: str, message: str
) -> None:
    p = tmp_path / "t.x"
    p.write_text(content)
    with pytest.raises(WorkloadError) as info:
        read_trace(p, fmt)
    assert message in str(info.value)
    # check_workload (called before any engine starts) says the same.
    with pytest.raises(WorkloadError, match=r"t\.x"):
        check_workload(WorkloadSpec(kind="trace", path=str(p), trace_format=fmt))


def test_missing_file_directory_and_empty_window(tmp_path: Path) -> None:
    with pytest.raises(WorkloadError, match="not found"):
        read_trace(tmp_path / "none.jsonl")
    with pytest.raises(WorkloadError, match="a directory"):
        read_trace(tmp_path)
    p = _jsonl(tmp_path, [{"timestamp": 0, "input_length": 3, "output_length": 2}])
    with pytest.raises(WorkloadError, match="no usable request in the window"):
        read_trace(p, start_s=10, window_s=5)
    with pytest.raises(WorkloadError, match="not a trace format"):
        read_trace(p, "parquet")
    with pytest.raises(WorkloadError, match="needs a path"):
        WorkloadSpec(kind="trace")

"""Eval answers on remote load workers: the streams come back raw in ``Raw`` batches and
the session scores them as it scores a local level's (the same accuracy, the same digests);
a worker's result never carries answers of its own, and a frame that does is malformed."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

import msgspec
import pytest

from pytest_llmslo.errors import LoadError
from pytest_llmslo.evals import AnswerBook, HfReading, make_item
from pytest_llmslo.load import ClientSettings, LoadJob, WorkloadSpec, run_load_sync
from pytest_llmslo.load.drive import WorkerResult
from pytest_llmslo.load.levelplan import plan_level
from pytest_llmslo.load.protocol import PROTOCOL_VERSION, Hello, Ready, Result
from pytest_llmslo.load.remote import WorkerHub
from pytest_llmslo.load.wire import WireError, decode, encode
from pytest_llmslo.load.workload import LengthModel
from pytest_llmslo.records import LoadLevel, Run

from .remote_helpers import ROOT, workers

sys.path.insert(0, str(ROOT / "tests" / "sim"))
from sim_helpers import MODEL, start_sim


def _reframed(payload: bytes, change: Any) -> bytes:
    """``payload`` (a frame's ``[kind, body]``) with its body changed by ``change``."""
    kind, body = msgspec.msgpack.decode(payload)
    change(body)
    return msgspec.msgpack.encode([kind, body])


def test_a_result_carries_no_answers_and_one_that_does_is_malformed() -> None:
    book = AnswerBook("arithmetic", 1, 1.0)
    book.add(0, "12")
    sent = encode(Result(WorkerResult(2, warmup_done=3, answers=book)))
    back = decode(sent)
    assert isinstance(back, Result) and back.result.answers is None
    assert back.result.warmup_done == 3
    # A peer's answer book would name an eval file to read and a scorer module to import.
    hostile = {"task": "jsonl", "seed": 0, "share": 1.0, "path": "/etc/passwd"}
    for answers in (hostile, {**hostile, "task": "arithmetic", "scorer": "os:system"}):
        frame = _reframed(sent, lambda body, a=answers: body.update(answers=a))  # type: ignore[misc]
        with pytest.raises(WireError, match="a malformed 'result' message"):
            decode(frame)


def test_a_ready_names_the_eval_rows_by_a_bounded_digest() -> None:
    assert decode(encode(Ready(PROTOCOL_VERSION, 1, "ab" * 16))) == Ready(
        PROTOCOL_VERSION, 1, "ab" * 16
    )
    assert decode(encode(Ready(PROTOCOL_VERSION, 1))) == Ready(PROTOCOL_VERSION, 1, "")
    for bad in ("a" * 65, "not hex", "AB"):
        with pytest.raises(WireError, match="eval digest"):
            decode(encode(Ready(PROTOCOL_VERSION, 1, bad)))


def test_a_plan_whose_dataset_reading_is_malformed_is_refused() -> None:
    spec = WorkloadSpec(isl=8, osl=4, calibrate=False, eval_task="arithmetic")
    job = LoadJob(ClientSettings("http://127.0.0.1:9", "m"), spec, LoadLevel.concurrency(1), 2)
    plan = plan_level(job, LengthModel()).plans[0]
    hf = dataclasses.replace(plan.jobs.workload, eval_task="hf", eval_path="gsm8k")
    hf = dataclasses.replace(hf, eval_hf=HfReading(prompt="question"))
    hello = Hello(PROTOCOL_VERSION, dataclasses.replace(plan, jobs=_with(plan.jobs, hf)))
    sent = encode(hello)
    back = decode(sent)
    assert isinstance(back, Hello) and back.plan.jobs.workload.eval_hf == HfReading(
        prompt="question"
    )

    def bad_scorer(body: dict[str, Any]) -> None:
        body["plan"]["jobs"]["workload"]["eval_hf"]["scorer"] = "os:system"

    with pytest.raises(WireError, match=r"a malformed 'hello' message.*scorers are"):
        decode(_reframed(sent, bad_scorer))


def _with(jobs: Any, workload: WorkloadSpec) -> Any:
    return dataclasses.replace(jobs, workload=workload)


def _level(url: str, spec: WorkloadSpec, hub: WorkerHub | None, processes: int = 1) -> Run:
    return run_load_sync(
        LoadJob(
            ClientSettings(url, MODEL, processes=processes),
            spec,
            LoadLevel.concurrency(4),
            requests=48,
            warmup=0,
            workers=hub,
        )
    )


def _specs(tmp_path: Path) -> list[WorkloadSpec]:
    base = WorkloadSpec(isl=32, osl=8, calibrate=False, seed=9)
    specs = [dataclasses.replace(base, eval_task="arithmetic", eval_share=0.5)]
    if importlib.util.find_spec("datasets") is not None:
        from datasets import Dataset

        items = [make_item("arithmetic", 4, i) for i in range(10)]
        Dataset.from_dict(
            {
                "question": [it.prompt for it in items] + ["Capital of France?"],
                "answer": [it.answer for it in items] + ["Paris"],
            }
        ).save_to_disk(str(tmp_path / "ds"))
        reading = HfReading(prompt="question", reference="answer", scorer="contains")
        specs.append(
            dataclasses.replace(
                base, eval_task="hf", eval_path=str(tmp_path / "ds"), eval_hf=reading
            )
        )
    return specs


# Three runs of two evals each (in-process, two local and two remote workers): ~25 s. The
# default suite keeps test_workers_score_nothing_and_must_read_the_sessions_rows, a remote
# level whose answers the session scores.
@pytest.mark.slow
def test_remote_workers_answers_are_scored_as_a_local_levels(tmp_path: Path) -> None:
    """The same items on the sim, from this process, from two local worker processes and
    from two ``llmslo worker`` processes: the same accuracy and the same answers, digest for
    digest."""
    specs = _specs(tmp_path)
    with start_sim(tmp_path, "--profile", "llama3-8b-fp8-1xh100-vllm") as sim:
        local = [_level(sim.url, spec, None).meta["quality"] for spec in specs]
        # Local worker processes ship their streams to this one too.
        shipped = [_level(sim.url, spec, None, 2).meta["quality"] for spec in specs]
        hub = WorkerHub("127.0.0.1:0", 2, wait_s=60)
        hub.open()
        try:
            with workers(hub.address, [None, None]):
                runs = [_level(sim.url, spec, hub) for spec in specs]
        finally:
            hub.close()
    for run in runs:
        assert not run.meta["remote"]["lost"]
        assert sum(w["requests"] for w in run.meta["remote"]["workers"]) == 48
        assert all(w["requests"] for w in run.meta["remote"]["workers"])  # both sent
    remote = [run.meta["quality"] for run in runs]
    for spec, here, there in [
        *zip(specs, local, remote, strict=True),
        *zip(specs, local, shipped, strict=True),
    ]:
        assert there["items"] == here["items"] > 0 and there["failed"] == 0
        assert there["correct"] == here["correct"]
        # Item for item: right or wrong alike, and the same answer where the sim's "model"
        # knows the item (one it does not gets filler words, drawn afresh on each request).
        book = spec.answer_book()
        assert book is not None
        assert [a[:2] for a in there["answers"]] == [a[:2] for a in here["answers"]]
        known = [a for a in here["answers"] if book.item(a[0]).answer != "Paris"]
        assert known and all(a in there["answers"] for a in known)
    assert local[0]["items"] < 48 and local[0]["correct"] >= local[0]["items"] - 3
    if len(local) > 1:
        assert local[1]["task"] == "hf" and local[1]["items"] == 48
        # The row the sim cannot answer is wrong wherever it was sent from.
        assert any(not s["correct"] for s in remote[1]["samples"] if s["expected"] == "Paris")


def test_workers_score_nothing_and_must_read_the_sessions_rows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A ``custom`` scorer importable by the session alone: the workers never import it
    (the session scores). Workers whose ``evals.jsonl`` (a relative path, read in their
    own working folder) holds other rows than the session's stop the level before it
    starts, saying so."""
    (tmp_path / "mods").mkdir()
    (tmp_path / "mods" / "judge_here.py").write_text(
        "def judge(reply, reference):\n    return reference in reply\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path / "mods"))
    for folder, seed in (("a", 1), ("b", 2)):
        (tmp_path / folder).mkdir()
        rows = [make_item("arithmetic", seed, i) for i in range(8)]
        (tmp_path / folder / "evals.jsonl").write_text(
            "\n".join(
                json.dumps({"prompt": it.prompt, "reference": it.answer, "scorer": "custom"})
                for it in rows
            )
        )
    spec = WorkloadSpec(
        isl=32,
        osl=8,
        calibrate=False,
        eval_task="jsonl",
        eval_path="evals.jsonl",
        eval_scorer="judge_here:judge",
    )
    with start_sim(tmp_path, "--profile", "llama3-8b-fp8-1xh100-vllm") as sim:
        monkeypatch.chdir(tmp_path / "a")
        here = _level(sim.url, spec, None).meta["quality"]
        for worker_folder in ("a", "b"):
            monkeypatch.chdir(tmp_path / worker_folder)
            hub = WorkerHub("127.0.0.1:0", 2, wait_s=60)
            hub.open()
            try:
                with workers(hub.address, [None, None]):
                    monkeypatch.chdir(tmp_path / "a")  # the session's rows
                    if worker_folder == "a":
                        q = _level(sim.url, spec, hub).meta["quality"]
                        assert q["items"] == 48 and q["failed"] == 0 and "scorer_error" not in q
                        assert q["answers"] == here["answers"] and q["correct"] > 24
                    else:
                        with pytest.raises(LoadError, match="read other rows from the eval file"):
                            _level(sim.url, spec, hub)
            finally:
                hub.close()

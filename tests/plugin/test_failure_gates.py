"""No gate passes on failures, hangs, or loses a level: one test per case of a new user's
tour against misbehaving servers, a killed engine, signals and bad configuration (an
external endpoint at c=4 with 30 requests unless noted)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

CHAT = """
import pytest

@pytest.mark.slo(concurrency=[4])
def test_chat(slo_run):
    pass
"""


def args(url: str, *extra: str) -> list[str]:
    return [
        "-p", "no:cacheprovider",
        "--engine=external", f"--engine-url={url}",
        "--warmup=0", "--requests=30", "--isl=8", "--osl=16",
        "--client-max-lag=2000", "--client-max-cpu=1.5", "--client-min-load=0.5",
        *extra,
    ]  # fmt: skip


def test_every_request_failing_fails_without_objectives(slo_pytester, misbehaving) -> None:
    slo_pytester.makepyfile(test_chat=CHAT)
    result = slo_pytester.runpytest_subprocess(*args(misbehaving("reset"), "--slo-json=r.json"))
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*SloViolation: SLO not met: every request failed (30 of 30) (no objectives "
            "configured: the failure gates alone judged the level)*",
            "*c4: 30 of 30 requests failed: reset 30:*",
        ]
    )
    point = json.loads((slo_pytester.path / "r.json").read_text())["points"][0]
    assert point["verdict"]["passed"] is False
    assert point["summary"]["errors"][0]["kind"] == "reset"


def test_errors_above_the_default_rate_fail_even_a_passing_percentile(
    slo_pytester, misbehaving
) -> None:
    # Every third request is an HTTP 500: P99 over the survivors passed before; now the
    # failures count as +inf and the error rate is above 1 %.
    slo_pytester.makepyfile(
        test_chat="""
        import pytest
        from pytest_llmslo import assert_slo, ttft_p99, ttft_p50

        @pytest.mark.slo(concurrency=[4])
        def test_chat(slo_run):
            assert_slo(ttft_p99 < 500)

        @pytest.mark.slo(concurrency=[4])
        def test_median(slo_run):
            assert_slo(ttft_p50 < 500)  # the median is fine; the error rate is not
        """
    )
    result = slo_pytester.runpytest_subprocess(*args(misbehaving("http500-every-3")))
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines(
        [
            "*SLO not met: ttft_p99 < 500 ms (observed ∞ (failures)); error rate 33.3% > "
            "allowed 1.0%*",
            "*ttft_p99 < 500 ms*∞ (failures)*FAIL*",
            "*ttft_p99: 10 of its 30 samples are failed requests, counted as +∞*",
            "*http 10: HTTP 500: InternalServerError: engine overloaded*",
        ]
    )
    result.stdout.fnmatch_lines(["*c4 *FAIL ttft_p99*", "*c4 *FAIL errors*"])


def test_chunks_without_output_are_failures_and_credit_no_tokens(slo_pytester, misbehaving) -> None:
    slo_pytester.makepyfile(
        test_chat="""
        import pytest
        from pytest_llmslo import assert_goodput, e2e_p99

        @pytest.mark.slo(concurrency=[4])
        def test_chat(slo_run):
            assert_goodput(e2e_p99 < 4000)
        """
    )
    result = slo_pytester.runpytest_subprocess(
        *args(misbehaving("empty-choices"), "--slo-json=r.json")
    )
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*no_output 30: stream finished*usage says 16 tokens*"])
    summary = json.loads((slo_pytester.path / "r.json").read_text())["points"][0]["summary"]
    assert summary["completed"] == 0 and summary["output_tok_s"] == 0.0


def test_keepalive_pings_do_not_hang_a_stream(slo_pytester, misbehaving) -> None:
    slo_pytester.makepyfile(test_chat=CHAT)
    result = slo_pytester.runpytest_subprocess(
        *args(misbehaving("ping-forever"), "--requests=4", "--idle-timeout=1"), timeout=120
    )
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*timeout 4: stream stalled: no data for 1 s*"])


@pytest.mark.slow
def test_a_stalled_server_ends_within_the_level_bound(slo_pytester, misbehaving) -> None:
    # --level-timeout=6 with --duration=2: the harness's own bound ends the level during the
    # warm-up, with the phase named; the level is inconclusive (the bound is the harness's),
    # never an SLO failure of the engine.
    slo_pytester.makepyfile(test_chat=CHAT)
    t0 = time.monotonic()
    result = slo_pytester.runpytest_subprocess(
        *args(misbehaving("stall"), "--duration=2", "--warmup=2", "--level-timeout=6", "-v"),
        timeout=120,
    )
    took = time.monotonic() - t0
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(
        [
            "*external c4: 0/0 requests ok in 0.0 s [[]cut by the level's time bound during "
            "warm-up]*",
            "*inconclusive at c4: the level's time bound (6.0 s, --level-timeout) cut it during "
            "warm-up*",
        ]
    )
    assert "SLO not met" not in result.stdout.str()
    assert took < 60, f"the session took {took:.0f} s"
    # By default the requests sent in the window run to their end: the requests' own
    # deadlines end a stall, and that is the engine's failure.
    result = slo_pytester.runpytest_subprocess(
        *args(misbehaving("stall"), "--duration=2", "--warmup=0", "--idle-timeout=1"), timeout=120
    )
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*every request failed*", "*stream stalled: no data for 1 s*"])


def test_a_ten_megabyte_line_is_measured_not_choked_on(slo_pytester, misbehaving) -> None:
    slo_pytester.makepyfile(test_chat=CHAT)
    # One 10 MB chunk is another workload than asked (short, usage against the stream):
    # opted out of that gate, this test is about the client measuring it.
    result = slo_pytester.runpytest_subprocess(
        *args(misbehaving("huge-line"), "--requests=4", "--slo-json=r.json"),
        "--max-short-outputs=100%", "--max-usage-mismatch=100%", timeout=120,
    )  # fmt: skip
    result.assert_outcomes(passed=1)
    summary = json.loads((slo_pytester.path / "r.json").read_text())["points"][0]["summary"]
    assert summary["completed"] == 4


def test_readiness_sends_the_api_key(slo_pytester, misbehaving, monkeypatch) -> None:
    url = misbehaving("auth", env={"SERVER_KEY": "s3cret"})
    slo_pytester.makepyfile(test_chat=CHAT)
    monkeypatch.setenv("OPENAI_API_KEY", "s3cret")
    result = slo_pytester.runpytest_subprocess(*args(url, "--requests=4"), timeout=120)
    result.assert_outcomes(passed=1)
    # Without the key: a clear error at once, not a 900 s wait.
    monkeypatch.delenv("OPENAI_API_KEY")
    result = slo_pytester.runpytest_subprocess(*args(url, "--requests=4"), timeout=120)
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(
        ["*refused the API key*HTTP 401*read from $OPENAI_API_KEY (not set)*"]
    )


def test_nothing_listening_fails_within_seconds(slo_pytester) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    slo_pytester.makepyfile(test_chat=CHAT)
    t0 = time.monotonic()
    result = slo_pytester.runpytest_subprocess(*args(url, "-q"), timeout=120)
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines([f"*nothing answers at {url}*start the server first*"])
    assert time.monotonic() - t0 < 60


def test_a_wrong_key_says_401_everywhere(slo_pytester, misbehaving, monkeypatch) -> None:
    url = misbehaving("auth-completions", env={"SERVER_KEY": "right"})
    monkeypatch.setenv("OPENAI_API_KEY", "wrong")
    slo_pytester.makepyfile(test_chat=CHAT)
    result = slo_pytester.runpytest_subprocess(*args(url, "--slo-json=r.json", "--junitxml=j.xml"))
    result.assert_outcomes(failed=1)
    line = "http 30: HTTP 401: Unauthorized"
    result.stdout.fnmatch_lines([f"*{line}*", f"*c4: 30 of 30 requests failed: {line}*"])
    junit = (slo_pytester.path / "j.xml").read_text()
    assert 'name="llmslo.errors.1.message" value="HTTP 401: Unauthorized"' in junit
    assert 'name="llmslo.errors.1.count" value="30"' in junit
    errors = json.loads((slo_pytester.path / "r.json").read_text())["points"][0]["summary"][
        "errors"
    ]
    assert errors == [{"kind": "http", "message": "HTTP 401: Unauthorized", "count": 30}]


@pytest.mark.slow
def test_engine_killed_mid_level_is_a_clean_error_and_restarted(slo_pytester) -> None:
    slo_pytester.makepyfile(
        test_kill="""
        import os, signal, threading
        import pytest

        @pytest.fixture
        def killer(slo_engine, slo_level):
            if slo_level.value == 4:
                pid = slo_engine.handle._units[0].pid
                threading.Timer(1.0, os.kill, (pid, signal.SIGKILL)).start()

        @pytest.mark.slo(concurrency=[4, 8])
        def test_chat(killer, slo_run):
            pass
        """
    )
    result = slo_pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "--engine=sim", "--warmup=0", "--requests=400",
        "--isl=64", "--osl=64", "--client-max-lag=2000", "--client-max-cpu=1.5",
        "--slo-json=r.json", "-v", "--slo-max-error-rate=100%", "--duration=3",
        timeout=300,
    )  # fmt: skip
    # The load runs in the slo_run fixture: the engine's death there is an error of c4.
    result.assert_outcomes(errors=1, passed=1)
    result.stdout.fnmatch_lines(
        [
            "*test_chat[[]sim-c4] ERROR*",
            "*engine sim exited*restarting it (1 of 1, --engine-restarts)*",
            "*test_chat[[]sim-c8] PASSED*",
            "*EngineDiedError: engine 'sim' exited: sim exit status -9 (killed by SIGKILL) "
            "during the load at c4*it is restarted for the next test*",
        ]
    )
    result.stdout.no_fnmatch_line("*Traceback*")
    points = json.loads((slo_pytester.path / "r.json").read_text())["points"]
    assert [p["level"]["value"] for p in points] == [4.0, 8.0]
    assert points[0]["summary"]["requests"] > 0  # the partial c4 point is kept


@pytest.mark.slow
def test_sigterm_keeps_the_level_in_progress(slo_pytester, fixed_server) -> None:
    def served() -> int:
        with urllib.request.urlopen(f"{fixed_server}/stats", timeout=5) as r:
            return int(json.load(r)["requests"])

    before = served()
    slo_pytester.makepyfile(CHAT)
    proc = subprocess.Popen(
        [sys.executable, "-m", "pytest", *args(fixed_server, "--requests=100000", "--osl=16",
                                                "--slo-json=r.json", "-s")],
        cwd=slo_pytester.path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )  # fmt: skip
    try:
        # Once the engine is ready, a few seconds of load, then the signal: a fixed sleep
        # from the start would race a slow collection on a busy machine.
        assert proc.stdout is not None
        head: list[str] = []
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            head.append(line)
            if not line or "ready at" in line:
                break
        # Signal once the level is measuring: the server has answered a few dozen of its
        # requests (a fixed sleep raced a level that was slow to start on a busy machine).
        deadline = time.monotonic() + 60
        while served() - before < 40 and time.monotonic() < deadline:
            time.sleep(0.2)
        proc.send_signal(signal.SIGTERM)
        rest, _ = proc.communicate(timeout=120)
        out = "".join(head) + rest
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == pytest.ExitCode.INTERRUPTED, out
    for bad in ("Event loop is closed", "Task was destroyed", "RuntimeError"):
        assert bad not in out, out
    doc = json.loads((slo_pytester.path / "r.json").read_text())
    assert doc["complete"] is False
    (point,) = doc["points"]
    assert point["interrupted"] is True and point["summary"]["requests"] > 10, out


@pytest.mark.parametrize(
    ("make", "option", "message"),
    [
        (None, "--dataset=missing.json", "*--dataset: dataset missing.json: not found*"),
        (("bad.json", "[{not json"), "--dataset=bad.json", "*cannot read ShareGPT file bad.json*"),
        (
            ("bad.jsonl", '{"prompt": "a"}\n{"prompt": 1}\n'),
            "--dataset=bad.jsonl",
            "*bad.jsonl:2: no 'prompt' string*",
        ),
        (None, "--request-timeout=0", "*--request-timeout*Must be > 0*"),
        (None, "--idle-timeout=-1", "*--idle-timeout*"),
        (None, "--slo-save=../../x", "*--slo-save*not a valid baseline name*"),
        (None, "--ca-bundle=nope.pem", "*--ca-bundle*is not a file*"),
    ],
)
def test_bad_input_fails_before_any_engine_starts(
    slo_pytester, misbehaving, make, option: str, message: str
) -> None:
    if make:
        (slo_pytester.path / make[0]).write_text(make[1])
    slo_pytester.makepyfile(test_chat=CHAT)
    result = slo_pytester.runpytest_subprocess(*args(misbehaving("ok")), option)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([message])
    assert "starting engine" not in result.stdout.str()
    assert len(result.stderr.lines) < 10  # a message, not a chained traceback


def test_a_bad_marker_fails_even_when_overridden(slo_pytester, misbehaving) -> None:
    slo_pytester.makepyfile(
        test_chat="""
        import pytest

        @pytest.mark.slo(concurrency=[-1])
        def test_chat(slo_run):
            pass
        """
    )
    result = slo_pytester.runpytest_subprocess(*args(misbehaving("ok"), "--concurrency=2"))
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*@pytest.mark.slo(concurrency=...) on *Levels must be > 0*"])


@pytest.mark.slow
def test_results_that_cannot_be_written(slo_pytester, misbehaving) -> None:
    slo_pytester.makepyfile(test_chat=CHAT)
    (slo_pytester.path / "adir").mkdir()
    (slo_pytester.path / "afile").write_text("x")
    url = misbehaving("ok")
    result = slo_pytester.runpytest_subprocess(*args(url, "--slo-json=adir"))
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--slo-json: *adir is a directory*"])
    result = slo_pytester.runpytest_subprocess(*args(url, "--slo-json=afile/r.json"))
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*afile is not a directory*"])
    # A path that becomes unwritable during the session: the tests pass, the session fails.
    slo_pytester.makepyfile(
        test_chat="""
        import os, pytest

        @pytest.mark.slo(concurrency=[4])
        def test_chat(slo_run):
            os.makedirs("later.json")
        """
    )
    result = slo_pytester.runpytest_subprocess(*args(url, "--slo-json=later.json", "--requests=4"))
    result.assert_outcomes(passed=1)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["*ERROR: could not write the results to *later.json*"])
    result.stdout.no_fnmatch_line("*results written to*")


@pytest.mark.slow
def test_a_server_ignoring_the_pinned_length_is_inconclusive(slo_pytester, misbehaving) -> None:
    slo_pytester.makepyfile(test_chat=CHAT)
    result = slo_pytester.runpytest_subprocess(
        *args(misbehaving("short-output"), "--slo-json=r.json", "--junitxml=j.xml", "-v")
    )  # -v: the level's note under its row
    # Another workload than asked gates nothing: not a pass, and the run exits non-zero.
    result.assert_outcomes(failed=1)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(
        [
            "Inconclusive: inconclusive at c4: the engine answered another workload than the "
            "one asked, so its numbers gate nothing: 30 of 30 completed requests*",
            "*test_chat.py*LlmSloWarning: llmslo external c4: 30 of 30 completed requests (100%) "
            "returned fewer tokens than the pinned output length, more than the 5% allowed*not "
            "comparable*",
            "*c4: 30 of 30 completed requests (100%) returned fewer tokens than the pinned*",
        ]
    )
    point = json.loads((slo_pytester.path / "r.json").read_text())["points"][0]
    assert point["comparable"] is False and point["summary"]["short_outputs"] == 30
    assert 'name="llmslo.comparable" value="false"' in (slo_pytester.path / "j.xml").read_text()
    # The opt-out is explicit: allow every output to be short.
    result = slo_pytester.runpytest_subprocess(
        *args(misbehaving("short-output"), "--max-short-outputs=100%")
    )
    result.assert_outcomes(passed=1)


def test_client_health_is_in_the_json_and_junit(slo_pytester, misbehaving) -> None:
    slo_pytester.makepyfile(test_chat=CHAT)
    result = slo_pytester.runpytest_subprocess(
        *args(misbehaving("ok"), "--requests=8", "--slo-json=r.json", "--junitxml=j.xml")
    )
    result.assert_outcomes(passed=1)
    health = json.loads((slo_pytester.path / "r.json").read_text())["points"][0]["summary"][
        "client_health"
    ]
    assert set(health) >= {
        "schedule_lag_p99_ms",
        "loop_lag_max_ms",
        "cpu_util",
        "processes",
        "valid",
        "idle_share",
        "stalled_share",
    }
    assert health["receive_stamps"] == "kernel"  # plain http on Linux
    junit = (slo_pytester.path / "j.xml").read_text()
    for name in (
        "schedule_lag_p99_ms",
        "loop_lag_p99_ms",
        "loop_lag_max_ms",
        "cpu_util",
        "processes",
        "idle_share",
        "stalled_share",
    ):
        assert f'name="llmslo.client.{name}"' in junit
    assert 'name="llmslo.client.receive_stamps" value="kernel"' in junit
    # --receive-stamps read: the client's read times, and the run says so.
    result = slo_pytester.runpytest_subprocess(
        *args(misbehaving("ok"), "--requests=8", "--slo-json=r.json", "--receive-stamps=read")
    )
    result.assert_outcomes(passed=1)
    point = json.loads((slo_pytester.path / "r.json").read_text())["points"][0]
    assert point["summary"]["client_health"]["receive_stamps"] == "read"


def _private_ca(tmp: Path) -> tuple[Path, Path, Path]:
    """A CA and a certificate for 127.0.0.1 it signed: (ca.pem, cert.pem, key.pem)."""

    def openssl(*a: str) -> None:
        subprocess.run(["openssl", *a], check=True, capture_output=True, cwd=tmp)

    openssl(
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "ca.key",
        "-out",
        "ca.pem",
        "-days",
        "2",
        "-subj",
        "/CN=llmslo test CA",
    )
    openssl(
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "key.pem",
        "-out",
        "srv.csr",
        "-subj",
        "/CN=127.0.0.1",
    )
    (tmp / "ext.cnf").write_text("subjectAltName=IP:127.0.0.1\n")
    openssl("x509", "-req", "-in", "srv.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
            "-CAcreateserial", "-out", "cert.pem", "-days", "2", "-extfile", "ext.cnf")  # fmt: skip
    return tmp / "ca.pem", tmp / "cert.pem", tmp / "key.pem"


@pytest.mark.parametrize("transport", ["fast", pytest.param("httpx", marks=pytest.mark.slow)])
def test_one_tls_policy_for_every_client(
    slo_pytester, misbehaving, tmp_path: Path, monkeypatch, transport: str
) -> None:
    ca, cert, key = _private_ca(tmp_path)
    url = misbehaving("ok", "--tls-cert", str(cert), "--tls-key", str(key))
    slo_pytester.makepyfile(test_chat=CHAT)
    base = args(url, "--requests=4", f"--transport={transport}")
    # The system store does not know the CA: a clear certificate error, at once.
    result = slo_pytester.runpytest_subprocess(*base, timeout=120)
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(
        ["*TLS to https://127.0.0.1*CERTIFICATE_VERIFY_FAILED*--ca-bundle*"]
    )
    # --ca-bundle, SSL_CERT_FILE and --insecure: readiness and the load generator agree.
    result = slo_pytester.runpytest_subprocess(*base, f"--ca-bundle={ca}", timeout=120)
    result.assert_outcomes(passed=1)
    monkeypatch.setenv("SSL_CERT_FILE", str(ca))
    result = slo_pytester.runpytest_subprocess(*base, timeout=120)
    result.assert_outcomes(passed=1)
    monkeypatch.delenv("SSL_CERT_FILE")
    result = slo_pytester.runpytest_subprocess(*base, "--insecure", timeout=120)
    result.assert_outcomes(passed=1)


def test_misbehaving_server_modes_are_the_documented_ones() -> None:
    sys.path.insert(0, os.fspath(Path(__file__).parents[1]))
    try:
        import misbehaving_server
    finally:
        sys.path.pop(0)
    doc = misbehaving_server.__doc__ or ""
    assert all(f"``{m}``" in doc for m in misbehaving_server.MODES)

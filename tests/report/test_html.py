"""The HTML report (``--slo-html``): made from a small real run (``llmslo run`` against the
fixed-timing servers: two engines, two tests), every test has its charts, every number
shown is the results document's, every text is escaped and nothing refers outside the
page; then the page in a real browser (headless Chromium): every chart is in the DOM, the
script ran without an error, and the page asked the network for nothing."""

from __future__ import annotations

import dataclasses
import json
import math
import re
import shutil
import socketserver
import subprocess
import threading
from collections.abc import Iterator
from html import escape
from pathlib import Path
from typing import Any

import pytest

from pytest_llmslo import cli
from pytest_llmslo import session as core
from pytest_llmslo import settings as S
from pytest_llmslo.capacity import CapacityResult
from pytest_llmslo.document import Results, read_document
from pytest_llmslo.metrics.timeseries import per_second
from pytest_llmslo.records import LoadLevel
from pytest_llmslo.report.formats import FORMATS
from pytest_llmslo.report.html import render_html, render_runs

#: The per-second charts of a level (``data-chart="p<i>-<name>-time"``).
TIME_CHARTS = ("ttft", "itl", "tokens", "done", "flight")

CHROMIUM = shutil.which("chromium")
needs_chromium = pytest.mark.skipif(
    CHROMIUM is None,
    reason="Chromium is not installed (Debian: apt-get install chromium; .ci/run installs "
    "it): the page is checked in a real browser only where one is",
)

#: The sweep table's numeric columns after requests and failed: the document's value of
#: each (a point of the document in, a number out) and the digits shown.
COLUMNS: tuple[tuple[Any, int], ...] = (
    (lambda p: p["summary"]["output_tok_s"], 1),
    (lambda p: _judged(p, "goodput_tok_s"), 1),
    (lambda p: 100.0 * _judged(p, "attainment"), 1),
    (lambda p: p["summary"]["req_s"], 2),
    (lambda p: _pct(p, "ttft", "50"), 1),
    (lambda p: _pct(p, "ttft", "99"), 1),
    (lambda p: _pct(p, "itl", "50"), 2),
    (lambda p: _pct(p, "tpot", "50"), 2),
    (lambda p: _pct(p, "e2e", "99"), 1),
)


def _judged(p: dict[str, Any], key: str) -> float:
    v = (p.get("verdict") or {}).get(key)
    return p["summary"][key] if v is None else v


def _pct(p: dict[str, Any], metric: str, q: str) -> float:
    return p["summary"]["distributions"][metric]["percentiles"][q]


def _run(url: str, name: str, *extra: str) -> list[str]:
    return [
        "run", "--name", name, "--requests", "8", "--warmup", "1", "--isl", "16", "--osl", "8",
        "--client-max-lag", "2000", "--client-max-cpu", "1.5", *extra,
    ]  # fmt: skip


@pytest.fixture(scope="module")
def run_doc(
    tmp_path_factory: pytest.TempPathFactory, fixed_server: str, slow_fixed_server: str
) -> tuple[Path, dict[str, Any]]:
    """A real run of two tests: one swept on engine ``fast`` and on engine ``slow`` (TTFT
    20 and 60 ms, the SLO's bound 40 ms), one at two rates on ``fast``; merged into one
    document as a session of both tests would write it."""
    d = tmp_path_factory.mktemp("html")
    config = d / "engines.toml"
    config.write_text(
        f'[engines.fast]\nkind = "external"\nurl = "{fixed_server}"\n'
        f'[engines.slow]\nkind = "external"\nurl = "{slow_fixed_server}"\n'
    )
    common = ("--engine-config", str(config), "--slo", "ttft_p99<40,itl_p50<30")
    cli.main(
        _run(fixed_server, "test_chat", *common, "--engine", "fast,slow", "--concurrency",
             "1,2,4", "--slo-json", str(d / "chat.json"))
    )  # fmt: skip
    cli.main(
        _run(fixed_server, "test_rate", *common, "--engine", "fast", "--rate", "20,40",
             "--slo-json", str(d / "rate.json"))
    )  # fmt: skip
    chat, rate = read_document(d / "chat.json"), read_document(d / "rate.json")
    chat["points"] = chat["points"] + rate["points"]
    chat["constants"]["tests"] = {**chat["constants"]["tests"], **rate["constants"]["tests"]}
    doc = json.loads(json.dumps(chat))
    path = d / "results.json"
    path.write_text(json.dumps(doc))
    return path, doc


@pytest.fixture(scope="module")
def results(run_doc: tuple[Path, dict[str, Any]]) -> Results:
    path, doc = run_doc
    return Results.from_document(doc, source=str(path))


@pytest.fixture(scope="module")
def page(results: Results) -> str:
    return render_html(results)


def _section(page: str, test: str) -> str:
    start = page.index(f'data-test="{test}"')
    end = page.find('<section class="test"', start)
    return page[start : end if end > 0 else len(page)]


def test_the_format_is_registered_with_its_option() -> None:
    fmt = FORMATS["html"]
    assert (fmt.flag, fmt.report_flag, fmt.spec.topic) == ("--slo-html", "--html", "outputs")
    assert fmt.render_runs is render_runs


def test_every_test_has_its_sweep_charts_and_every_level_its_distributions(
    results: Results, page: str
) -> None:
    assert page.startswith("<!DOCTYPE html>")
    tests = list(dict.fromkeys(p.test for p in results.points))
    assert tests == ["test_chat", "test_rate"]
    for test in tests:
        section = _section(page, test)
        for chart in ("pareto", "goodput", "attainment", "itl"):
            assert re.search(rf'data-chart="t\d-{test.replace("_", "-")}-\w+-{chart}"', section)
        for i, p in enumerate(results.points):
            if p.test != test:
                continue
            level = section[section.index(f'<details class="level" id="p{i}"') :]
            level = level[: level.index("</details>")]
            for chart in ("ttft-hist", "itl-hist", *(f"{c}-time" for c in TIME_CHARTS)):
                assert f'data-chart="p{i}-{chart}"' in level
            assert "ttft-seq" not in level and "no per-second series" not in level
    # The SLO's bound is drawn on the chart of its metric.
    chat = _section(page, "test_chat")
    assert "SLO ttft_p99 &lt; 40 ms" in chat and "SLO itl_p50 &lt; 30 ms" in chat
    # Two engines: the Pareto frontier's table, over levels that met their SLO only.
    assert "<h3>Pareto frontier</h3>" in chat and "<h3>Pareto frontier</h3>" not in _section(
        page, "test_rate"
    )


def _check_numbers(page: str, doc: dict[str, Any]) -> None:
    """Every row of the sweep tables in ``page`` shows its point's figures as the document
    ``doc`` has them: the exact value in ``data-v``, the text it rounds to, the outcome."""
    sweeps = [t.split("</table>")[0] for t in page.split('<table class="sweep">')[1:]]
    rows = [r for t in sweeps for r in re.findall(r'<tr data-point="(\d+)">(.*?)</tr>', t)]
    assert sorted(int(i) for i, _ in rows) == list(range(len(doc["points"])))
    for index, row in rows:
        p = doc["points"][int(index)]
        cells = re.findall(
            r'<td class="n"(?: data-v="([^"]*)")?(?: data-n="\d+" title="[^"]*")?>([^<]*)</td>', row
        )
        # A tail percentile from too few samples carries its mark.
        cells = [(raw, shown.removesuffix("†")) for raw, shown in cells]
        requests, failed, *numbers = cells
        assert (int(requests[0]), requests[1]) == (
            p["summary"]["requests"],
            str(p["summary"]["requests"]),
        )
        assert int(failed[0]) == p["summary"]["failed"]
        assert len(numbers) == len(COLUMNS)
        for (raw, shown), (value_of, digits) in zip(numbers, COLUMNS, strict=True):
            expected = value_of(p)
            assert float(raw) == expected
            assert shown == f"{expected:,.{digits}f}"
        badge = {"pass": "pass", "fail": "fail", "inconclusive": "invalid"}[p["outcome"]]
        assert f'<span class="badge {badge}">' in row


def test_every_number_shown_is_the_documents(
    run_doc: tuple[Path, dict[str, Any]], page: str
) -> None:
    _path, doc = run_doc
    _check_numbers(page, doc)
    # The knees named are the document's.
    for sweep in doc["sweeps"]:
        label = (sweep["knee"].get("level") or {}).get("label")
        if label:
            assert f"{sweep['engine']}: knee {label}" in page


def test_the_run_constants_are_shown(results: Results, page: str) -> None:
    consts = page[page.index('id="constants"') : page.index('<section class="test"')]
    assert f"{results.harness['name']} {results.harness['version']}" in consts
    for engine in ("fast", "slow"):
        assert f"<td>{engine}</td>" in consts
    assert "ttft_p99 &lt; 40 ms, itl_p50 &lt; 30 ms" in page  # each test's SLO
    assert "ISL 16, OSL 8" in page


def test_every_text_from_the_results_is_escaped(results: Results) -> None:
    evil = "<script>alert('x')</script>&<img src=http://evil.example/x.png>"
    p = results.points[0]
    points = (dataclasses.replace(p, engine=evil, notes=(evil,)), *results.points[1:])
    bad = dataclasses.replace(results, points=points, constants={**results.constants, "note": evil})
    page = render_html(bad)
    assert evil not in page and "<script>alert" not in page
    assert "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;&amp;&lt;img" in page
    assert page.count("<script>") == 1  # the page's own


def _external_references(page: str) -> list[str]:
    found = re.findall(r"""(?:src|href|xlink:href|action|poster)\s*=\s*["']?([^"'\s>]+)""", page)
    refs = [ref for ref in found if not ref.startswith("#")]
    refs += re.findall(r"@import[^;]*", page)
    refs += re.findall(r"url\(\s*['\"]?(?!#)[^)]*\)", page)
    return refs


def test_nothing_refers_outside_the_page(results: Results, page: str) -> None:
    assert _external_references(page) == []
    assert "http://" not in page.replace("http://127.0.0.1", "")  # loopback URLs are text
    assert "https://" not in page
    # The check itself finds a reference.
    assert _external_references('<img src="http://x.example/a.png">') == ["http://x.example/a.png"]


def test_a_test_of_one_level_has_a_table_not_empty_charts(results: Results) -> None:
    one = dataclasses.replace(
        results, points=tuple(p for p in results.points if p.level.label in ("c1", "r20"))
    )
    page = render_html(one)
    assert 'data-no-charts="concurrency"' in page and 'data-no-charts="rate"' in page
    assert re.search(r'data-chart="t\d', page) is None
    assert page.count('<table class="sweep">') == 2


def test_a_capacity_search_is_shown_with_its_test(results: Results) -> None:
    c1, c2, c4 = (LoadLevel.concurrency(n) for n in (1, 2, 4))
    search = CapacityResult(
        "concurrency", c2, 2.0, 4.0, 3, ((c1, True), (c2, True), (c4, False)), True, "bracketed"
    )
    page = render_html(dataclasses.replace(results, capacities={("fast", "test_chat"): search}))
    chat = _section(page, "test_chat")
    assert "<h3>Capacity search</h3>" in chat
    assert escape(f"fast: {search.describe()}") in chat
    assert "<h3>Capacity search</h3>" not in _section(page, "test_rate")


def test_each_level_has_its_per_second_series_that_add_up_to_its_counts(
    results: Results, page: str
) -> None:
    for i, p in enumerate(results.points):
        ts = per_second(p.samples)
        assert ts is not None
        # Every request ended in one second of the window: completed or failed.
        assert sum(ts.completed) == p.summary.completed
        assert sum(ts.errors) == p.summary.failed
        horizon = max(v for v in p.samples["end_s"] if v is not None)
        assert len(ts.seconds) == max(1, math.ceil(horizon))
        # Tokens/s times each second's length adds up to the completed requests' tokens.
        width = [min(1.0, horizon - t) for t in ts.seconds]
        tokens = sum(r * w for r, w in zip(ts.output_tok_s, width, strict=True))
        ok = [n for n, k in zip(p.samples["output_tokens"], p.samples["ok"], strict=True) if k]
        assert tokens == pytest.approx(sum(ok), rel=0.01)
        if p.level.mode == "concurrency":  # a closed loop never has more in flight
            assert 0 < max(ts.in_flight) <= p.level.value + 1e-9
        level = page[page.index(f'<details class="level" id="p{i}"') :]
        level = level[: level.index("</details>")]
        tips = re.findall(r"<title>completed, second \d+: ([\d,.]+)</title>", level)
        assert sum(float(t.replace(",", "")) for t in tips) == p.summary.completed


def test_a_level_from_results_without_times_shows_its_requests_in_the_order_sent(
    results: Results,
) -> None:
    times = ("sent_s", "first_token_s", "end_s")
    old = dataclasses.replace(
        results,
        points=tuple(
            dataclasses.replace(
                p, samples={k: v for k, v in (p.samples or {}).items() if k not in times}
            )
            for p in results.points
        ),
    )
    page = render_html(old)
    for chart in ("ttft-hist", "ttft-seq", "itl-hist", "itl-seq"):
        assert f'data-chart="p0-{chart}"' in page
    assert "no per-second series" in page and '-time"' not in page


def test_a_level_without_samples_says_so(results: Results) -> None:
    bare = dataclasses.replace(
        results, points=tuple(dataclasses.replace(p, samples=None) for p in results.points)
    )
    page = render_html(bare)
    assert "hold no per-request samples of this level" in page
    assert "ttft-hist" not in page


def test_a_baseline_is_shown_beside_with_each_metrics_verdict(results: Results) -> None:
    # Monday's run was the fast server; today the same engine name answers as the slow one.
    chat = [p for p in results.points if p.test == "test_chat"]
    monday = dataclasses.replace(
        results, points=tuple(p for p in chat if p.engine == "fast"), source="/runs/monday.json"
    )
    today = dataclasses.replace(
        results,
        points=tuple(dataclasses.replace(p, engine="fast") for p in chat if p.engine == "slow"),
        source="/runs/today.json",
    )
    page = render_runs(today, [monday])
    assert "<h3>Runs side by side</h3>" in page
    header = page[: page.index('<nav class="toc">')]
    assert re.search(r"against monday: 3 levels compared, [1-3] regressed", header)
    assert '<p class="verdict fail" data-compared="monday">' in header
    # Each level: its metrics, old and new side by side, with the verdict of each.
    assert page.count('<table class="compare"><tr><th>metric</th><th>monday</th><th>today') == 3
    assert re.search(r'<tr class="regressed"><td>ttft_p50</td>', page)
    assert page.count('<span class="badge fail">regressed</span>') >= 3
    # Monday's sweep is drawn dashed on the same charts.
    assert "fast (monday)" in page and 'stroke-dasharray="6 4"' in page


def test_a_session_writes_the_page_with_its_baseline_beside(
    results: Results, tmp_path: Path
) -> None:
    settings = S.resolve_session(S.Sources())
    settings = dataclasses.replace(
        settings, outputs={**settings.outputs, "slo_html": "out/report.html"}
    )
    state = core.Session(settings, S.Sources(), rootpath=tmp_path, invocation_dir=tmp_path)
    state.points.extend(results.points)
    core.write_reports(state, complete=True)
    page = (tmp_path / "out" / "report.html").read_text()
    assert state.write_errors == [] and "Runs side by side" not in page
    assert f"HTML report written to {tmp_path / 'out' / 'report.html'}" in state.notes
    # With --slo-compare, the baseline is beside.
    state.baseline = dataclasses.replace(results, source="/runs/monday.json")
    core.write_reports(state, complete=True)
    page = (tmp_path / "out" / "report.html").read_text()
    assert "<h3>Runs side by side</h3>" in page and 'data-compared="monday"' in page


# --------------------------------------------------------------------------- in a browser


#: Hosts of the browser's own services (its component updater, clock and sign-in), which
#: it calls whatever page it shows, flags or not: not the page's requests. The page itself
#: names none of them (checked below).
BROWSER_OWN = (".google.com", ".googleapis.com", ".gstatic.com", ".gvt1.com")


class _Counter(socketserver.ThreadingTCPServer):
    """A proxy that answers nothing and records the target of every request made to it."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Hit)
        self.targets: list[str] = []
        self.lock = threading.Lock()

    @property
    def page_requests(self) -> list[str]:
        """Every request but the browser's own (``BROWSER_OWN``)."""
        with self.lock:
            targets = list(self.targets)
        return [t for t in targets if not _host(t).endswith(BROWSER_OWN)]


def _host(target: str) -> str:
    """The host of a proxy request's target (``CONNECT h:443``, ``GET http://h/x``)."""
    rest = target.split("://", 1)[-1]
    return "." + rest.split("/", 1)[0].rsplit(":", 1)[0].lower()


class _Hit(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        self.request.settimeout(5)
        try:
            line = self.request.recv(4096).split(b"\r\n", 1)[0].decode("latin-1")
        except OSError:
            line = "?"
        parts = line.split()
        with self.server.lock:  # type: ignore[attr-defined]
            self.server.targets.append(parts[1] if len(parts) > 1 else line)  # type: ignore[attr-defined]
        self.request.close()


@pytest.fixture
def proxy() -> Iterator[_Counter]:
    server = _Counter()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


def _chromium(proxy: _Counter, tmp: Path, url: str, *mode: str) -> subprocess.CompletedProcess:
    """Chromium, headless, every host name unresolvable and every request through the
    counting proxy, its console on stderr. The proxy's own address is left resolvable
    (``EXCLUDE``): with ``MAP *`` alone the proxy cannot be reached and a request is
    never seen."""
    assert CHROMIUM is not None
    return subprocess.run(
        [
            CHROMIUM, "--headless", "--disable-gpu", "--no-sandbox", "--no-first-run",
            f"--user-data-dir={tmp / 'profile'}",
            "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
            f"--proxy-server=127.0.0.1:{proxy.server_address[1]}",
            "--proxy-bypass-list=<-loopback>", "--disable-background-networking",
            "--disable-component-update", "--disable-sync", "--disable-default-apps",
            "--enable-logging=stderr", "--v=0", *mode, url,
        ],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


@needs_chromium
def test_the_page_in_a_browser_has_every_chart_and_fetches_nothing(
    run_doc: tuple[Path, dict[str, Any]],
    results: Results,
    page: str,
    proxy: _Counter,
    tmp_path: Path,
) -> None:
    path = tmp_path / "report.html"
    path.write_text(page)
    done = _chromium(proxy, tmp_path, path.as_uri(), "--dump-dom")
    dom = done.stdout
    assert re.search(r'<body[^>]*data-ready="1"', dom), done.stderr[-2000:]
    assert "Uncaught" not in done.stderr
    for test in dict.fromkeys(p.test for p in results.points):
        section = _section(dom, test)
        assert len(re.findall(r'<svg class="chart"', section.split("<h3>Levels</h3>")[0])) == 4
    assert dom.count('<svg class="chart"') == page.count('<svg class="chart"')
    _check_numbers(dom, run_doc[1])  # the numbers as the browser has them
    assert proxy.page_requests == []
    assert not any(host.lstrip(".") in page for host in BROWSER_OWN)
    # The same browser does report a page that fetches something.
    fetching = tmp_path / "fetching.html"
    fetching.write_text('<!DOCTYPE html><img src="http://example.com/x.png">')
    _chromium(proxy, tmp_path, fetching.as_uri(), "--dump-dom")
    assert proxy.page_requests == ["http://example.com/x.png"]


@needs_chromium
def test_the_page_in_a_browser_opens_a_level_and_has_a_screenshot(
    page: str, proxy: _Counter, tmp_path: Path
) -> None:
    path = tmp_path / "report.html"
    path.write_text(page)
    # A link to a level opens it (the page's script).
    done = _chromium(proxy, tmp_path, path.as_uri() + "#p1", "--dump-dom")
    assert re.search(r'<details class="level" id="p1"[^>]* open', done.stdout)
    shot = tmp_path / "shot.png"
    _chromium(proxy, tmp_path, path.as_uri(), f"--screenshot={shot}", "--window-size=1280,1800")
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20_000
    assert proxy.page_requests == []


def test_the_warm_up_shown_is_what_each_level_ran(
    page: str, run_doc: tuple[Path, dict[str, Any]]
) -> None:
    # --warmup 1, and a closed loop warms up one wave at least: c1 1, c2 2, c4 4.
    _, doc = run_doc
    ran = {
        p["summary"]["warmup_requests"]
        for p in doc["points"]
        if p["test"] == "test_chat" and p["summary"].get("warmup_requests") is not None
    }
    assert ran == {1, 2, 4}
    assert "1-4 (c1 1, c2 2, c4 4)" in _section(page, "test_chat")


def test_a_level_with_faults_lists_them_and_marks_them_on_its_per_second_charts(
    results: Results,
) -> None:
    from pytest_llmslo.report.faulttext import fault_text

    p = results.points[0]
    ts = per_second(p.samples)
    assert ts is not None
    fault = {
        "label": "kill at=300ms",
        "asked": {"kind": "kill"},
        "asked_s": 0.3,
        "done_s": 0.31,
        "failed": 2,
        "before_tok_s": 100.0,
        "goodput_min_tok_s": 40.0,
        "goodput_dip": 0.6,
        "recovered_at_s": 1,
        "recovery_s": 0.7,
        "window_s": 1,
        "share": 0.9,
    }
    goodput = [round(v / 2, 3) for v in ts.output_tok_s]
    faulted = dataclasses.replace(p, faults=[fault], series={"goodput_tok_s": goodput})
    page = render_html(dataclasses.replace(results, points=(faulted, *results.points[1:])))
    level = page[page.index('<details class="level" id="p0"') :]
    level = level[: level.index("</details>")]
    assert f'<ul class="faults"><li>{escape(fault_text(fault))}</li></ul>' in level
    for chart in TIME_CHARTS:
        svg = level[level.index(f'data-chart="p0-{chart}-time"') :]
        svg = svg[: svg.index("</svg>")]
        assert re.search(r'class="slot"[^>]*>kill<', svg), chart
        assert re.search(r'class="slot"[^>]*>recovered<', svg), chart
    tips = re.findall(r"<title>goodput, second \d+: ([\d,.]+) tok/s</title>", level)
    assert [float(t.replace(",", "")) for t in tips] == pytest.approx(goodput, rel=1e-3)
    # A level without faults has neither.
    other = page[page.index('<details class="level" id="p1"') :]
    other = other[: other.index("</details>")]
    assert 'class="faults"' not in other and ">recovered<" not in other

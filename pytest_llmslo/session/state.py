"""What a session knows (``Session``): its settings, its tests (``TestContext``), the
running engines' factory, every measured point with its verdict, the baseline it compares
with; and how it talks (``Voice``) and where users extend it (``SessionHooks``)."""

from __future__ import annotations

import dataclasses
import os
import secrets
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_llmslo import settings as S
from pytest_llmslo.capacity import CapacityResult
from pytest_llmslo.document import Results, build_document
from pytest_llmslo.document.samples import with_good
from pytest_llmslo.engines.base import EngineConfig
from pytest_llmslo.interrupts import Interrupts
from pytest_llmslo.records import LoadLevel, Run
from pytest_llmslo.redact import redact, redact_obj

from .constants import constants_of_test, session_constants
from .factory import EngineFactory, NullProgress, Progress

if TYPE_CHECKING:
    from pytest_llmslo.history.trend import HistoryRun
    from pytest_llmslo.load.remote import WorkerHub
    from pytest_llmslo.metrics import RunSummary
    from pytest_llmslo.regression import Comparison
    from pytest_llmslo.regression.tolerances import Tolerance
    from pytest_llmslo.slo import Verdict
    from pytest_llmslo.sweep import SweepPoint

__all__ = [
    "README_XDIST",
    "XDIST_REASON",
    "Session",
    "SessionHooks",
    "TestContext",
    "Voice",
    "add_test",
    "baseline_root",
    "commit_info",
    "history_root",
    "machine_info",
    "primary",
    "prompt_salt",
    "resolve_path",
]

#: The guide's "### Under pytest-xdist" heading (docs/guide.md), as GitHub anchors it.
README_XDIST = "docs/guide.md#under-pytest-xdist"
XDIST_REASON = (
    "pytest-llmslo: SLO tests cannot run under pytest-xdist (-n): each worker would start "
    "its own engine and the loads would run at the same time, corrupting every number. "
    f"Run them without -n (or with -p no:xdist). See {README_XDIST}."
)


@dataclasses.dataclass
class SessionHooks:
    """Where users extend a session (the plugin binds its hookspecs here,
    ``hookspecs.py``): ``engine_config(name, cfg)`` may return a changed config just
    before an engine starts; ``level_result(point, run)`` is told each level once its
    test judged it; ``document(doc)`` may add fields to the results document before it
    is written."""

    engine_config: Callable[[str, EngineConfig], EngineConfig | None] | None = None
    level_result: Callable[[SweepPoint, Run], None] | None = None
    document: Callable[[dict[str, Any]], None] | None = None

    @classmethod
    def calling(cls, call: Callable[..., Any]) -> SessionHooks:
        """Hooks that call ``call(hook_name, **kwargs)`` with the hookspecs' names and
        keywords (``hookspecs.py``; ``call``'s first parameter must not be called
        ``name``): the plugin passes pytest's hook caller."""
        return cls(
            engine_config=lambda name, cfg: call(
                "pytest_llmslo_engine_config", name=name, engine_config=cfg
            ),
            level_result=lambda point, run: call(
                "pytest_llmslo_level_result", point=point, run=run
            ),
            document=lambda doc: call("pytest_llmslo_update_document", document=doc),
        )


def machine_info() -> dict[str, Any]:
    """The load generator's machine, as pytest-benchmark records it (node, processor,
    Python, system, CPU model and count), for the results document and baselines."""
    try:
        from pytest_benchmark.plugin import pytest_benchmark_generate_machine_info

        info = dict(pytest_benchmark_generate_machine_info())
    except Exception as exc:  # information only: never fail a session over it
        info = {"error": repr(exc)}
    info.setdefault("cpus", os.cpu_count())
    return info


def commit_info(path: Path) -> dict[str, Any]:
    """The git commit of the project under test (id, time, branch, dirty), as
    pytest-benchmark records it; ``{"error": ...}`` outside a repository."""
    try:
        from pytest_benchmark.utils import get_commit_info

        cwd = os.getcwd()
        try:
            os.chdir(path)
            return dict(get_commit_info())
        finally:
            os.chdir(cwd)
    except Exception as exc:
        return {"error": repr(exc)}


@dataclasses.dataclass
class TestContext:
    """What the plugin knows about one collected SLO test item."""

    __test__ = False

    test: str  # the sweep's test id: the node id without the engine/level parameters
    engine: str
    level: LoadLevel
    settings: S.TestSettings
    last_level: bool
    point_keys: list[int] = dataclasses.field(default_factory=list)
    verdicts: list[Verdict] = dataclasses.field(default_factory=list)
    #: The body judged the level's faults (``assert_recovery``): what it asserted.
    recoveries: list[Any] = dataclasses.field(default_factory=list)
    notes: list[str] = dataclasses.field(default_factory=list)
    comparison: Comparison | None = None
    compare_skip: str | None = None  # why the baseline comparison did not run
    capacity: bool = False  # --slo-capacity: the test runs a capacity search
    capacity_result: CapacityResult | None = None  # the CapacityResult of the search the test ran
    primary: int | None = None  # the point the test is judged and reported by


def _redacting(say: Callable[[str], None]) -> Callable[[str], None]:
    """``say`` with every message through ``redact`` first."""

    def out(msg: str) -> None:
        say(redact(msg))

    return out


@dataclasses.dataclass
class Voice:
    """How a session talks: ``say(msg)`` (a line for the user), ``progress(label, requests,
    warmup)`` (a live progress object of one level, ``NullProgress`` by default) and
    ``warn(node, msg)`` (a warning located at a test). Each message passes ``redact``."""

    say: Callable[[str], None] | None = None
    progress: Callable[[str, int, int], Progress] | None = None
    warn: Callable[[str, str], None] | None = None


class Session:
    """One SLO session without pytest: its settings, engines, points, verdicts, the
    baseline it compares with, and the documents it writes (the plugin keeps one in
    ``config.stash``; ``llmslo run`` makes one of its own).

    ``rootpath`` holds ``.llmslo/baselines`` and the ``pyproject.toml`` whose engines are
    used when no engine config file is named; relative paths from an ini file resolve
    against ``inipath``'s folder, others against ``invocation_dir``. ``voice`` is how the
    session talks (``Voice``: a line to say, a progress line, a warning at a test)."""

    def __init__(
        self,
        session: S.SessionSettings,
        sources: S.Sources,
        *,
        rootpath: Path,
        inipath: Path | None = None,
        invocation_dir: Path | None = None,
        voice: Voice | None = None,
        hooks: SessionHooks | None = None,
    ) -> None:
        self.hooks = hooks or SessionHooks()
        self._machine: dict[str, Any] | None = None
        self._commit: dict[str, Any] | None = None
        self.reported: set[int] = set()  # points told to hooks.level_result
        self.session = session
        self.sources = sources
        self.rootpath = Path(rootpath)
        self.inipath = inipath
        self.invocation_dir = Path(invocation_dir) if invocation_dir else Path.cwd()
        # What the session says passes through ``redact``: a server's error text or a URL
        # in a message never shows a key or a password.
        voice = voice or Voice()
        self.say = _redacting(voice.say or (lambda _msg: None))
        self.progress: Callable[[str, int, int], Progress] = voice.progress or (
            lambda _label, _requests, _warmup: NullProgress()
        )
        warn_to = voice.warn or (lambda _node, _msg: None)
        self.warn: Callable[[Any, str], None] = lambda node, msg: warn_to(node, redact(msg))
        self.defaults = S.resolve_test(self.sources, {}, "")
        self.engine_configs: dict[str, EngineConfig] = {}
        #: Every engine of the engine config file, by name (before the session's settings).
        self.configured_engines: dict[str, EngineConfig] = {}
        #: --engine-opt items by engine name.
        self.engine_opts: dict[str, list[str]] = {}
        self.factory: EngineFactory | None = None
        self.points: list[SweepPoint] = []  # replaced in place when a verdict arrives
        self.point_runs: dict[int, Run] = {}
        self.contexts: dict[str, TestContext] = {}
        self.current: TestContext | None = None
        self.engine_meta: dict[str, dict[str, Any]] = {}
        self.capacities: dict[tuple[str, str], CapacityResult] = {}  # by (engine, test)
        self.test_constants: dict[str, dict[str, Any]] = {}
        self.marker_errors: list[str] = []
        self.notes: list[str] = []
        self.comparisons: list[tuple[str, Comparison]] = []
        self.mismatches: list[str] = []
        self.baseline: Results | None = None
        self.baseline_source: str | None = None
        #: ``--slo-compare=history``: the runs of the history each test is judged against.
        self.history_runs: list[HistoryRun] | None = None
        self.tolerances: dict[str, Tolerance] | None = None
        self.suite_property: Callable[[str, object], None] | None = None
        self.disabled_reason: str | None = None
        self.checked_inputs: set[str] = set()
        self.write_errors: list[str] = []
        self.dirty = False
        #: SIGINT and SIGTERM of the session (installed by the plugin and ``llmslo run``).
        self.interrupts = Interrupts()
        #: The salt of ``--prompt-salt=auto`` prompts: one per session, so a session's
        #: prompts are its own, also against an engine that served an earlier session.
        self.prompt_salt = secrets.token_hex(6)
        #: Seconds each level took (by point index), calibration and warm-up included.
        self.level_seconds: dict[int, float] = {}
        self.estimated = False
        #: The remote load workers' listener (``--worker-listen``; ``open_workers``).
        self.workers: WorkerHub | None = None
        self.worker_job: Any = None  # their Kubernetes Job (--worker-image), if any
        #: What the estimates of the time left scale from, once the first level ran
        #: (``report.plan.estimate_basis``).
        self.estimate_basis: tuple[float | None, float] | None = None

    # ---- points

    def add_point(self, ctx: TestContext | None, run: Run, point: SweepPoint) -> int:
        idx = len(self.points)
        self.points.append(point)
        self.point_runs[idx] = run
        if ctx is not None:
            ctx.point_keys.append(idx)
        self.dirty = True
        return idx

    def point_of(self, run: Run) -> int | None:
        """The index of the point ``run`` was recorded as (None: not a level of this
        session), found by the run itself: the session keeps every run it recorded."""
        for idx in reversed(self.point_runs):
            if self.point_runs[idx] is run:
                return idx
        return None

    def set_verdict(self, idx: int, verdict: Verdict, confidence: float) -> None:
        point = self.points[idx]
        old = point.verdict
        # A failed verdict is what the point is remembered by; among passing ones the latest.
        if old is not None and not old.passed and verdict.passed:
            return
        run = self.point_runs[idx]
        summary = judged_summary(point.summary, run, verdict, confidence)
        # The good flags under the verdict's objectives: goodput's per-window noise bound.
        samples = with_good(point.samples, run, [r.objective for r in verdict.results])
        self.points[idx] = dataclasses.replace(
            point, summary=summary, verdict=verdict, samples=samples
        )
        self.dirty = True

    def on_verdict(self, run: Run, verdict: Verdict) -> None:
        idx = self.point_of(run)
        ctx = self.current
        if ctx is not None:
            ctx.verdicts.append(verdict)
        if idx is not None:
            conf = ctx.settings.confidence if ctx is not None else self.defaults.confidence
            self.set_verdict(idx, verdict, conf)

    # ---- the document

    def constants(self) -> dict[str, Any]:
        """The session's pinned constants (``constants.session_constants``)."""
        return session_constants(
            self.defaults,
            self.engine_configs,
            self.engine_meta,
            engines=self.session.engines,
            tests=self.test_constants,
            salt=prompt_salt(self, self.defaults),
        )

    def results(self, *, complete: bool = True) -> Results:
        """What the session measured so far, as every report takes it: its points, capacity
        searches, constants and engines (``complete=False``: partial results)."""
        return Results.of(
            self.points,
            constants=self.constants(),
            engines=self.engine_meta,
            capacities=self.capacities,
            complete=complete,
        )

    def document(self, *, complete: bool) -> dict[str, Any]:
        """The results document, with the machine and the commit it was measured from
        (``machine_info``, ``commit_info``), after ``hooks.document`` changed it."""
        doc = build_document(self.results(complete=complete))
        if self._machine is None:
            self._machine = machine_info()
            self._commit = commit_info(self.rootpath)
        doc["machine_info"] = self._machine
        doc["commit_info"] = self._commit
        if self.hooks.document is not None:
            self.hooks.document(doc)
        # Every file made from the document (JSON, Markdown, CSV, SVG, a baseline) is
        # made from this one: no key or URL password in any of them.
        redacted: dict[str, Any] = redact_obj(doc)
        return redacted

    def report_levels(self, ctx: TestContext) -> None:
        """Tell ``hooks.level_result`` each point of the test ``ctx`` not told yet (once
        the test judged them). A hook's error becomes a note."""
        if self.hooks.level_result is None:
            return
        for idx in ctx.point_keys:
            if idx in self.reported:
                continue
            self.reported.add(idx)
            try:
                self.hooks.level_result(self.points[idx], self.point_runs[idx])
            except Exception as exc:
                self.notes.append(f"{ctx.engine} {ctx.test}: the level_result hook failed: {exc!r}")


def judged_summary(
    summary: RunSummary, run: Run, verdict: Verdict, confidence: float
) -> RunSummary:
    """The summary of a judged level: its goodput is the verdict's (over the verdict's
    objectives), its distributions' bounds at ``confidence``. The level was summarised
    once when it was recorded; only a verdict judged at another confidence than that
    summary's makes it summarised again."""
    if summary.confidence != confidence:
        from pytest_llmslo import metrics

        objectives = [r.objective for r in verdict.results]
        return metrics.summarize(run, objectives, confidence=confidence)
    return dataclasses.replace(
        summary,
        goodput_tok_s=verdict.goodput_tok_s,
        goodput_req_s=verdict.goodput_req_s,
        attainment=verdict.attainment,
        good=verdict.good,
        objectives=tuple(r.objective.label for r in verdict.results),
    )


def primary(ctx: TestContext) -> int | None:
    """The point test ``ctx`` is judged and reported by: its capacity's, else its first."""
    if ctx.primary is not None:
        return ctx.primary
    return ctx.point_keys[0] if ctx.point_keys else None


def prompt_salt(state: Session, ts: S.TestSettings) -> str:
    """The salt of a test's built prompts (``--prompt-salt``): the session's own for
    ``auto``, none (``""``) for ``none``, else the text given."""
    if ts.prompt_salt == "auto":
        return state.prompt_salt
    return "" if ts.prompt_salt == "none" else ts.prompt_salt


def baseline_root(state: Session) -> str:
    """Where named baselines are saved: ``.llmslo/baselines`` under the root path."""
    return str(state.rootpath / ".llmslo" / "baselines")


def history_root(state: Session) -> Path | None:
    """Where the session keeps its run (``--slo-history``): ``.llmslo/runs`` under the
    root path unless a directory is named; None when it is ``none`` (or ``off``)."""
    text = state.session.history
    if text is None:
        return state.rootpath / ".llmslo" / "runs"
    if text.strip().lower() in ("", "none", "off"):
        return None
    return resolve_path(state, text, "slo_history")


def resolve_path(state: Session, text: str, name: str) -> Path:
    """A relative path from an ini file is relative to that file (as pytest's own ini
    paths are); from the command line or the environment, to the invocation directory."""
    path = Path(text)
    if path.is_absolute():
        return path
    if state.session.sources.get(name, "").startswith("ini") and state.inipath is not None:
        return state.inipath.parent / path
    return state.invocation_dir / path


def open_workers(state: Session) -> None:
    """Listen for the session's remote load workers (``--worker-listen``), so that they
    can join while the engines start; the first level waits for them."""
    from pytest_llmslo.errors import ConfigError, LoadError
    from pytest_llmslo.load.remote import WorkerHub
    from pytest_llmslo.load.workerkey import session_key

    ss = state.session
    if ss.worker_listen is None or state.workers is not None:
        return
    try:
        key = session_key(ss.worker_key_file)
        hub = WorkerHub(ss.worker_listen, ss.remote_workers, ss.worker_wait_s, key, _worker_tls(ss))
        hub.open()
    except LoadError as exc:
        raise ConfigError(str(exc)) from None
    state.workers = hub
    state.say(
        f"listening for {ss.remote_workers} remote load worker(s) on {hub.address}"
        + (" (TLS)" if hub.tls is not None else "")
        + f", each proving it holds the key in {key.where}: start each with "
        f"`{hub.worker_command}`"
    )
    if ss.worker_image:
        try:
            state.worker_job = _start_worker_job(state, hub.host, hub.port)
        except Exception:
            close_workers(state)
            raise


def _worker_tls(ss: Any) -> Any:
    """The TLS context of the workers' link (``load.linktls``), None without a
    certificate; ``LoadError`` when the options do not go together."""
    from pytest_llmslo.errors import LoadError
    from pytest_llmslo.load.linktls import server_context

    if ss.worker_tls_cert is None:
        if ss.worker_tls_key is not None or ss.worker_tls_ca is not None:
            raise LoadError(
                "--slo-worker-tls-key/--slo-worker-tls-ca need --slo-worker-tls-cert (the "
                "session's certificate)"
            )
        return None
    if ss.worker_tls_key is None:
        raise LoadError("--slo-worker-tls-cert needs --slo-worker-tls-key (its key)")
    return server_context(ss.worker_tls_cert, ss.worker_tls_key, ss.worker_tls_ca)


def _start_worker_job(state: Session, host: str, port: int) -> Any:
    """The workers as a Kubernetes Indexed Job (``engines.runtimes.k8s.workerjob``),
    connecting to ``--worker-advertise`` or, for a wildcard listen address, this host's."""
    import socket

    from pytest_llmslo.engines.runtimes.k8s.apply import reason_of
    from pytest_llmslo.engines.runtimes.k8s.kubeclient import cluster
    from pytest_llmslo.engines.runtimes.k8s.settings import KubeSettings
    from pytest_llmslo.engines.runtimes.k8s.workerjob import WorkerJob, WorkerJobSpec
    from pytest_llmslo.errors import ConfigError, EngineUnavailable

    ss = state.session
    address = ss.worker_advertise
    if address is None:
        if host in ("", "0.0.0.0", "::"):
            host = socket.gethostbyname(socket.gethostname())
        address = f"{host}:{port}"
    key = os.environ.get("LLMSLO_WORKER_KEY_SECRET")  # "secret/key" of the shared key
    secret_name, slash, secret_key = (key or "").partition("/")
    secret = (secret_name, secret_key) if slash else None
    hub_key = state.workers.key if state.workers is not None else None
    try:
        where = cluster(KubeSettings())
        spec = WorkerJobSpec(
            workers=ss.remote_workers,
            image=ss.worker_image or "",
            address=address,
            namespace=where.namespace,
            key_secret=secret,
            # No Secret named: the launcher makes one of the session's key.
            key=hub_key.secret if secret is None and hub_key is not None else None,
        )
        job = WorkerJob(where, spec)
        job.start()
    except EngineUnavailable as exc:
        raise ConfigError(f"--worker-image: {exc}") from None
    except Exception as exc:
        raise ConfigError(
            f"--worker-image: cannot create the workers' Job: {reason_of(exc)}"
        ) from None
    state.say(
        f"started {spec.workers} load worker pod(s) (Job {spec.name} in {spec.namespace}), "
        f"connecting to {address}"
    )
    return job


def close_workers(state: Session) -> None:
    """Release the remote load workers (they exit), delete their Job, stop listening."""
    if state.workers is not None:
        state.workers.close()
        state.workers = None
    if state.worker_job is not None:
        state.worker_job.stop()
        state.worker_job = None


def add_test(state: Session, node: str, ctx: TestContext) -> None:
    """Register the collected test ``node`` (one engine, one level) with the session."""
    state.contexts[node] = ctx
    salt = prompt_salt(state, ctx.settings)
    state.test_constants.setdefault(ctx.test, constants_of_test(ctx.settings, salt))

"""What a session knows (``Session``): its settings and its tests (``TestContext``), and the
parts it is composed of, each changed through its own methods: its engines (``roster``: a
``roster.EngineRoster``), its measured points (``book``: a ``points.PointBook``), how long
its levels took (``timing``: a ``timing.Timing``) and its remote load workers (``remote``:
a ``workers.RemoteWorkers``); the baseline it compares with; how it talks (``Voice``) and
where users extend it (``SessionHooks``)."""

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
from pytest_llmslo.engines.base import EngineConfig
from pytest_llmslo.interrupts import Interrupts
from pytest_llmslo.records import LoadLevel, Run
from pytest_llmslo.redact import redact, redact_obj

from .factory import NullProgress, Progress
from .pinned import constants_of_test, session_constants
from .points import PointBook
from .roster import EngineRoster
from .timing import Timing
from .workers import RemoteWorkers

if TYPE_CHECKING:
    from pytest_llmslo.history.trend import HistoryRun
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
        settings: S.SessionSettings,
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
        self.settings = settings
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
        #: The session's engines: configs, the factory that starts them, what they told.
        self.roster = EngineRoster()
        #: Every measured point with its run and verdict, the capacity searches.
        self.book = PointBook()
        self.contexts: dict[str, TestContext] = {}
        self.current: TestContext | None = None
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
        #: SIGINT and SIGTERM of the session (installed by the plugin and ``llmslo run``).
        self.interrupts = Interrupts()
        #: The salt of ``--prompt-salt=auto`` prompts: one per session, so a session's
        #: prompts are its own, also against an engine that served an earlier session.
        self.prompt_salt = secrets.token_hex(6)
        #: How long each level took, and what the estimates of the time left scale from.
        self.timing = Timing()
        #: The remote load workers (``--worker-listen``): their listener and their Job.
        self.remote = RemoteWorkers()

    # ---- points

    @property
    def points(self) -> list[SweepPoint]:
        """Every measured point, in order (``book.points``; the book changes them)."""
        return self.book.points

    # ---- the document

    def constants(self) -> dict[str, Any]:
        """The session's pinned constants (``constants.session_constants``)."""
        return session_constants(
            self.defaults,
            self.roster.configs,
            self.roster.meta,
            engines=self.settings.engines,
            tests=self.test_constants,
            salt=prompt_salt(self, self.defaults),
        )

    def results(self, *, complete: bool = True) -> Results:
        """What the session measured so far, as every report takes it: its points, capacity
        searches, constants and engines (``complete=False``: partial results)."""
        return Results.of(
            self.points,
            constants=self.constants(),
            engines=self.roster.meta,
            capacities=self.book.capacities,
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
            if idx in self.book.reported:
                continue
            self.book.reported.add(idx)
            try:
                self.hooks.level_result(self.book.points[idx], self.book.runs[idx])
            except Exception as exc:
                self.notes.append(f"{ctx.engine} {ctx.test}: the level_result hook failed: {exc!r}")


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
    text = state.settings.history
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
    if state.settings.sources.get(name, "").startswith("ini") and state.inipath is not None:
        return state.inipath.parent / path
    return state.invocation_dir / path


def add_test(state: Session, node: str, ctx: TestContext) -> None:
    """Register the collected test ``node`` (one engine, one level) with the session."""
    state.contexts[node] = ctx
    salt = prompt_salt(state, ctx.settings)
    state.test_constants.setdefault(ctx.test, constants_of_test(ctx.settings, salt))

"""The SLO session without pytest: engines, levels, sweeps, extension, capacity search,
retries, the baseline comparison and the documents of a session.

``Session`` holds what a session knows (settings, engine configs, the running engines'
factory, every measured point with its verdict, the baseline) and the functions below
act on it, each in the order a test needs them:

- ``resolve_engines`` (the session's engine configs), ``test_engines`` (a test's own,
  from ``engines=``), ``check_inputs`` / ``check_test_inputs`` (paths, datasets, TLS
  files: a ``ConfigError`` before anything starts), ``load_baseline``;
- ``run_level``: one level of one test on one engine, retried while the client run is
  invalid, recorded as a point (``record``); ``search_capacity``: the capacity search,
  every probe a point; ``after_test``: the configured gate (when the body asserted none),
  the sweep extension and the baseline comparison;
- ``finish``: the results document, the Markdown, SVG and CSV reports and the saved
  baseline.

The pytest plugin (``plugin.py``) and ``llmslo run`` (``cli.py``) both drive a Session:
the plugin from its hooks and fixtures, with a node id per test; the command line with a
``TestContext`` it makes for each engine and level. The session talks through the
callbacks it is given (``say``, ``progress``, ``warn``), never to a terminal itself.
"""

from __future__ import annotations

import dataclasses
import os
import platform
import secrets
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from pytest_llmslo import settings as S
from pytest_llmslo._version import __version__
from pytest_llmslo.capacity import CapacityResult, CapacitySearch, CapacitySpec
from pytest_llmslo.catalog import METRICS
from pytest_llmslo.document import (
    Results,
    build_document,
    constants,
    write_atomic,
    write_atomic_bytes,
    write_atomic_text,
)
from pytest_llmslo.engines.base import EngineConfig, EngineHandle
from pytest_llmslo.errors import (
    ConfigError,
    EngineDiedError,
    EngineStartError,
    EngineUnavailable,
    LoadError,
    LoadInterrupted,
    RegressionError,
    SloViolation,
    WorkloadError,
)
from pytest_llmslo.interrupts import Interrupts
from pytest_llmslo.records import LoadLevel, Run
from pytest_llmslo.redact import redact, redact_obj, remember, url_password
from pytest_llmslo.regression import Judging, Pairing, baselines, compare_test, tolerances
from pytest_llmslo.stats import DEFAULT_CONFIDENCE

__all__ = [
    "EngineFactory",
    "EngineRef",
    "NullProgress",
    "Progress",
    "Session",
    "TestContext",
    "after_test",
    "baseline_root",
    "check_inputs",
    "check_output_path",
    "check_test_inputs",
    "compare_with_baseline",
    "configured_gate",
    "constants_of_test",
    "engine_config",
    "engines_of_test",
    "exit_reason",
    "extend",
    "extend_safely",
    "finish",
    "gate_kwargs",
    "inconclusive",
    "inconclusive_message",
    "json_path",
    "load_baseline",
    "objective_dict",
    "output_flags",
    "output_path",
    "point_notes",
    "primary",
    "prompt_salt",
    "record",
    "record_engine",
    "resolve_engines",
    "resolve_path",
    "run_level",
    "search_capacity",
    "summary_lines_of_test",
    "workload_text",
    "write_json",
    "write_reports",
]


#: The README's "### Under pytest-xdist" heading, as GitHub anchors it.
README_XDIST = "README.md#under-pytest-xdist"
XDIST_REASON = (
    "pytest-llmslo: SLO tests cannot run under pytest-xdist (-n): each worker would start "
    "its own engine and the loads would run at the same time, corrupting every number. "
    f"Run them without -n (or with -p no:xdist). See {README_XDIST}."
)


class Progress(Protocol):
    """The live progress of one level: called with the load generator's progress
    snapshots, closed with the level's final line."""

    def __call__(self, p: Any) -> None: ...
    def close(self, text: str) -> None: ...


class NullProgress:
    """Progress that shows nothing."""

    def __call__(self, p: Any) -> None:
        return None

    def close(self, text: str) -> None:
        return None


@dataclasses.dataclass
class SessionHooks:
    """Where users extend a session (the plugin binds its hookspecs here,
    ``hookspecs.py``): ``engine_config(name, cfg)`` may return a changed config just
    before an engine starts; ``level_result(point, run)`` is told each level once its
    test judged it; ``document(doc)`` may add fields to the results document before it
    is written."""

    engine_config: Callable[[str, EngineConfig], EngineConfig | None] | None = None
    level_result: Callable[[Any, Run], None] | None = None
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
    verdicts: list[Any] = dataclasses.field(default_factory=list)
    notes: list[str] = dataclasses.field(default_factory=list)
    comparison: Any = None
    compare_skip: str | None = None  # why the baseline comparison did not run
    capacity: bool = False  # --slo-capacity: the test runs a capacity search
    capacity_result: Any = None  # the CapacityResult of the search the test ran
    primary: int | None = None  # the point the test is judged and reported by


class EngineFactory:
    """Starts engines by name, once each, and keeps them until ``stop``/``stop_all``.

    A start failure is remembered, so every test of that engine reports the same error
    without starting it again. ``on_start`` is told each new handle (for the report).
    An engine found dead when a test asks for it is started again, at most
    ``max_restarts`` times per name (``--engine-restarts``); past that its tests error with
    how it exited and its log tail. While an engine starts, ``progress(label, 0, 0)``
    (the session's progress line) shows what the start waits for."""

    def __init__(
        self,
        configs: Mapping[str, EngineConfig],
        starter: Callable[[EngineConfig], EngineHandle] | None = None,
        announce: Callable[[str], None] | None = None,
        on_start: Callable[[str, EngineHandle], None] | None = None,
        max_restarts: int = 1,
        prepare: Callable[[str, EngineConfig], EngineConfig | None] | None = None,
        progress: Callable[[str, int, int], Progress] | None = None,
    ) -> None:
        self.configs = dict(configs)
        self._progress = progress
        self._prepare = prepare
        self._starter = starter
        self._announce = announce or (lambda _msg: None)
        self._on_start = on_start
        self.max_restarts = max_restarts
        self._handles: dict[str, EngineHandle] = {}
        self._failed: dict[str, BaseException] = {}
        self.restarts: dict[str, int] = {}

    def config(self, name: str) -> EngineConfig:
        if name not in self.configs:
            known = ", ".join(self.configs)
            raise ConfigError(f"engine {name!r} is not configured. Configured: {known}.")
        return self.configs[name]

    def get(self, name: str) -> EngineHandle:
        """The running engine ``name``: started on first use, restarted when it died."""
        handle = self._handles.get(name)
        if handle is not None:
            if handle.alive():
                return handle
            return self._restart(name, handle)
        if name in self._failed:
            raise self._failed[name]
        return self._start(name)

    def _start(self, name: str, what: str = "starting") -> EngineHandle:
        config = self.config(name)
        starter = self._starter
        if starter is None:
            from pytest_llmslo.engines import start_engine

            starter = start_engine
        self._announce(f"llmslo: {what} engine {name} ({config.kind}, {config.runtime}) ...")
        t0 = time.monotonic()
        try:
            if self._prepare is not None:
                config = self._prepare(name, config) or config
            handle = self._started(name, starter, config)
        except (EngineUnavailable, EngineStartError, ConfigError) as exc:
            self._failed[name] = exc
            raise
        except Exception as exc:  # a launcher bug still must not stop other engines' tests
            err = EngineStartError(f"engine {name!r} failed to start: {exc!r}")
            self._failed[name] = err
            raise err from exc
        self._handles[name] = handle
        self._announce(
            f"llmslo: engine {name} ready at {handle.base_url} "
            f"(model {handle.model}) in {time.monotonic() - t0:.1f} s"
        )
        if self._on_start is not None:
            self._on_start(name, handle)
        return handle

    def _started(
        self, name: str, starter: Callable[[EngineConfig], EngineHandle], config: EngineConfig
    ) -> EngineHandle:
        """``starter(config)`` with its startup phases on a progress line of its own."""
        from pytest_llmslo.engines import startup

        if self._progress is None:
            return starter(config)
        line = self._progress(f"engine {name}", 0, 0)
        try:
            with startup.reporting(line):
                return starter(config)
        finally:
            done = getattr(line, "done", None)
            if callable(done):
                done()

    def _restart(self, name: str, dead: EngineHandle) -> EngineHandle:
        why = exit_reason(dead)
        tail = dead.log_tail()
        self._handles.pop(name, None)
        try:
            dead.stop()
        except Exception as exc:  # what is left of it must not keep a restart from trying
            self._announce(f"llmslo: cleaning up dead engine {name} failed: {exc!r}")
        done = self.restarts.get(name, 0)
        if done >= self.max_restarts:
            after = f" after {done} restart(s)" if done else ""
            err = EngineDiedError(
                f"engine {name!r} is not running any more: {why}{after}; it is not started "
                f"again (--engine-restarts={self.max_restarts})",
                tail,
            )
            self._failed[name] = err
            raise err
        self.restarts[name] = done + 1
        self._announce(
            f"llmslo: engine {name} {why}; restarting it "
            f"({done + 1} of {self.max_restarts}, --engine-restarts)"
        )
        return self._start(name, "restarting")

    def try_start(self, name: str) -> tuple[str | None, str | None]:
        """Start (or find running) engine ``name`` for a test: ``(None, None)`` when it
        runs, ``(why, None)`` when it cannot run here (no docker, GPU or package: its
        tests skip), ``(None, why)`` when it failed to start (its tests error)."""
        try:
            self.get(name)
        except EngineUnavailable as exc:
            return f"engine {name!r} unavailable: {exc}", None
        except (EngineStartError, EngineDiedError, ConfigError) as exc:
            return None, f"engine {name!r} did not start:\n{exc}"
        return None, None

    def running(self) -> dict[str, EngineHandle]:
        return dict(self._handles)

    def stop(self, name: str) -> None:
        handle = self._handles.pop(name, None)
        if handle is not None:
            handle.stop()

    def stop_all(self) -> None:
        for name in list(self._handles):
            try:
                self.stop(name)
            except Exception as exc:  # keep stopping the others
                self._announce(f"llmslo: stopping engine {name} failed: {exc!r}")


def _redacting(say: Callable[[str], None]) -> Callable[[str], None]:
    """``say`` with every message through ``redact`` first."""

    def out(msg: str) -> None:
        say(redact(msg))

    return out


def exit_reason(handle: EngineHandle) -> str:
    """How an engine ended (``vllm exited with exit status -9 (killed by SIGKILL)``)."""
    reason = getattr(handle, "exit_reason", None)
    if callable(reason):
        try:
            return f"exited: {reason()}"
        except Exception:  # a report detail must not hide the death itself
            pass
    return "exited"


class EngineRef:
    """The engine of one name as a test sees it (the ``slo_engine`` fixture): every
    attribute is the factory's current handle's, so a test that runs after a restart sees
    the new engine, not the dead one."""

    def __init__(self, factory: EngineFactory, name: str) -> None:
        self._factory = factory
        self.name = name

    @property
    def handle(self) -> EngineHandle:
        return self._factory.get(self.name)

    @property
    def config(self) -> EngineConfig:
        """The config the engine runs with (after ``pytest_llmslo_engine_config``), or the
        configured one while it is not running."""
        handle = self._factory.running().get(self.name)
        return handle.config if handle is not None else self._factory.config(self.name)

    @property
    def base_url(self) -> str:
        return self.handle.base_url

    @property
    def model(self) -> str:
        return self.handle.model

    def version(self) -> str | None:
        return self.handle.version()

    def metadata(self) -> dict[str, Any]:
        return self.handle.metadata()

    def alive(self) -> bool:
        handle = self._factory.running().get(self.name)
        return handle is not None and handle.alive()

    def log_tail(self, lines: int = 40) -> str:
        handle = self._factory.running().get(self.name)
        return "" if handle is None else handle.log_tail(lines)

    def stop(self) -> None:
        self._factory.stop(self.name)

    def __repr__(self) -> str:
        return f"<EngineRef {self.name}>"


class Session:
    """One SLO session without pytest: its settings, engines, points, verdicts, the
    baseline it compares with, and the documents it writes (the plugin keeps one in
    ``config.stash``; ``llmslo run`` makes one of its own).

    ``rootpath`` holds ``.llmslo/baselines`` and the ``pyproject.toml`` whose engines are
    used when no engine config file is named; relative paths from an ini file resolve
    against ``inipath``'s folder, others against ``invocation_dir``. The callbacks are
    how the session talks: ``say(msg)`` (a line for the user), ``progress(label,
    requests, warmup)`` (a live progress object of one level, ``NullProgress`` by
    default) and ``warn(node, msg)`` (a warning located at a test)."""

    def __init__(
        self,
        session: S.SessionSettings,
        sources: S.Sources,
        *,
        rootpath: Path,
        inipath: Path | None = None,
        invocation_dir: Path | None = None,
        say: Callable[[str], None] | None = None,
        progress: Callable[[str, int, int], Progress] | None = None,
        warn: Callable[[str, str], None] | None = None,
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
        self.say = _redacting(say or (lambda _msg: None))
        self.progress = progress or (lambda _label, _requests, _warmup: NullProgress())
        warn_to = warn or (lambda _node, _msg: None)
        self.warn = lambda node, msg: warn_to(node, redact(msg))
        self.defaults = S.resolve_test(self.sources, {}, "")
        self.engine_configs: dict[str, EngineConfig] = {}
        #: Every engine of the engine config file, by name (before the session's settings).
        self.configured_engines: dict[str, EngineConfig] = {}
        #: --engine-opt items by engine name.
        self.engine_opts: dict[str, list[str]] = {}
        self.factory: EngineFactory | None = None
        self.points: list[Any] = []  # SweepPoint, replaced in place when a verdict arrives
        self.point_runs: dict[int, Run] = {}
        self.run_index: dict[int, int] = {}  # id(run) -> index into points
        self.contexts: dict[str, TestContext] = {}
        self.current: TestContext | None = None
        self.engine_meta: dict[str, Any] = {}
        self.capacities: dict[tuple[str, str], CapacityResult] = {}  # by (engine, test)
        self.test_constants: dict[str, dict[str, Any]] = {}
        self.marker_errors: list[str] = []
        self.notes: list[str] = []
        self.comparisons: list[tuple[str, Any]] = []
        self.mismatches: list[str] = []
        self.baseline: Results | None = None
        self.baseline_source: str | None = None
        self.tolerances: Any = None
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

    # ---- points

    def add_point(self, ctx: TestContext | None, run: Run, point: Any) -> int:
        idx = len(self.points)
        self.points.append(point)
        self.point_runs[idx] = run
        self.run_index[id(run)] = idx
        if ctx is not None:
            ctx.point_keys.append(idx)
        self.dirty = True
        return idx

    def set_verdict(self, idx: int, verdict: Any, confidence: float) -> None:
        from pytest_llmslo import metrics

        point = self.points[idx]
        old = point.verdict
        # A failed verdict is what the point is remembered by; among passing ones the latest.
        if old is not None and not old.passed and verdict.passed:
            return
        objectives = [r.objective for r in verdict.results]
        summary = metrics.summarize(self.point_runs[idx], objectives, confidence=confidence)
        self.points[idx] = dataclasses.replace(point, summary=summary, verdict=verdict)
        self.dirty = True

    def on_verdict(self, run: Any, verdict: Any) -> None:
        idx = self.run_index.get(id(run))
        ctx = self.current
        if ctx is not None:
            ctx.verdicts.append(verdict)
        if idx is not None:
            conf = ctx.settings.confidence if ctx is not None else self.defaults.confidence
            self.set_verdict(idx, verdict, conf)

    # ---- the document

    def per_engine_constants(self) -> dict[str, dict[str, Any]]:
        """Each started engine's own pinned constants (``constants.engine_constants``): its
        model, precision, and hardware (its GPUs, or the sim engine's profile)."""
        from pytest_llmslo.engines.sim import DEFAULT_PROFILE

        out: dict[str, dict[str, Any]] = {}
        for name, meta in self.engine_meta.items():
            cfg = self.engine_configs.get(name)
            metadata = dict(meta)
            precision = profile = None
            if cfg is not None:
                metadata.setdefault("kind", cfg.kind)
                metadata.setdefault("gpus", cfg.gpus)
                precision = cfg.quantization or cfg.dtype
                if cfg.kind == "sim":
                    profile = str(cfg.options.get("profile") or DEFAULT_PROFILE)
            out[name] = constants.engine_constants(
                metadata,
                model=self.defaults.model or None,
                precision=precision,
                sim_profile=profile,
            )
        return out

    def constants(self) -> dict[str, Any]:
        d = self.defaults
        kind, path = d.dataset_kind()
        models = sorted({str(m.get("model")) for m in self.engine_meta.values() if m.get("model")})
        precision = sorted(
            {
                str(c.quantization or c.dtype)
                for c in self.engine_configs.values()
                if c.quantization or c.dtype
            }
        )
        per_engine = self.per_engine_constants()
        # The machine of the load generator: information, not a constant of the measurement
        # (a baseline from a laptop pairs with a CI runner's run of the same engine).
        client = {
            "machine": platform.machine(),
            "system": platform.system(),
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
        }
        return {
            "harness": "pytest-llmslo",
            "harness_version": __version__,
            "model": d.model or (models[0] if len(models) == 1 else ",".join(models)),
            "precision": ",".join(precision) or None,
            # Per engine (the pinned values are in per_engine; these say the same at a glance).
            "hardware": {name: c["hardware"] for name, c in per_engine.items()},
            "per_engine": per_engine,
            "client": client,
            "workload": {"kind": kind, "path": path, **workload_text(d)},
            "dataset": path,
            "isl": d.isl,
            "osl": d.osl,
            # Not pinned: runs with other salts are compared (their prompts differ in words,
            # not in lengths); --prompt-salt=<this> repeats the prompts exactly.
            "prompt_salt": prompt_salt(self, d) or None,
            "slo": [objective_dict(o) for o in d.objectives],
            "strict": d.strict,
            "confidence": d.confidence,
            "warmup": d.warmup,
            "requests": d.requests,
            "duration_s": d.duration_s,
            "endpoint": d.endpoint,
            "levels": [lv.label for lv in d.levels],
            "engines": list(self.session.engines),
            "engine_versions": {n: m.get("version") for n, m in self.engine_meta.items()},
            "tests": self.test_constants,
        }

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


def workload_text(d: S.TestSettings) -> dict[str, Any]:
    f = d.workload_fields()
    return {k: v for k, v in f.items() if k not in ("kind", "path")}


def prompt_salt(state: Session, ts: S.TestSettings) -> str:
    """The salt of a test's built prompts (``--prompt-salt``): the session's own for
    ``auto``, none (``""``) for ``none``, else the text given."""
    if ts.prompt_salt == "auto":
        return state.prompt_salt
    return "" if ts.prompt_salt == "none" else ts.prompt_salt


def objective_dict(o: Any) -> Any:
    to_dict = getattr(o, "to_dict", None)
    return to_dict() if callable(to_dict) else str(o)


def resolve_engines(state: Session) -> dict[str, EngineConfig]:
    """The configs of the session's engines (``--engine``); engines that only a test's
    ``engines=`` names are resolved at collection (``_test_engine_configs``)."""
    from pytest_llmslo.engines import apply_overrides, load_engine_configs

    session = state.session
    configured: dict[str, EngineConfig] = {}
    if session.engine_config:
        path = resolve_path(state, session.engine_config, "engine_config")
        label = session.sources.get("engine_config", "--engine-config")
        try:
            configured = load_engine_configs(path)
        except ConfigError as exc:
            raise ConfigError(f"{label}: {exc}") from None
    else:
        pyproject = state.rootpath / "pyproject.toml"
        if pyproject.is_file():
            try:
                import tomllib  # type: ignore[import-not-found]
            except ImportError:  # pragma: no cover - 3.10
                import tomli as tomllib  # type: ignore[no-redef]
            try:
                doc = tomllib.loads(pyproject.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                doc = {}
            if doc.get("tool", {}).get("llmslo", {}).get("engines"):
                configured = load_engine_configs(pyproject)
    state.configured_engines = configured
    where = session.sources.get("engine", "--engine")
    S.check_engine_names(session.engines, configured, where)
    out = {name: engine_config(state, name, where) for name in session.engines}
    opts: dict[str, list[str]] = {}
    for item in session.engine_opts:
        head, _, value = item.partition("=")
        ename, _, key = head.partition(".")
        if ename not in out and ename not in configured:
            raise ConfigError(
                f"--engine-opt {item!r}: {ename!r} is not an engine of this session. "
                f"Engines: {', '.join(dict.fromkeys([*out, *configured]))}."
            )
        opts.setdefault(ename, []).append(f"{key}={value}")
    state.engine_opts = opts
    for ename, items in opts.items():
        if ename in out:
            out[ename] = apply_overrides(out[ename], items, where=f"--engine-opt {ename}")
    if session.engine_url and not any(c.kind == "external" for c in out.values()):
        url_label = session.sources.get("engine_url", "--engine-url")
        raise ConfigError(
            f"{url_label} {S.shown_url(session.engine_url)}: {where} chose "
            f"{', '.join(out)}, none of them external, so the URL would not be measured. "
            "Leave --engine out (--engine-url alone means --engine=external), give "
            "--engine=external, or drop --engine-url."
        )
    for name, cfg in out.items():
        check_sim_profile(state, name, cfg)
    return out


def check_sim_profile(state: Session, name: str, cfg: EngineConfig) -> None:
    """A sim engine's profile must be one the sim knows (unless its extra arguments give a
    ``--profile-file``): found out when the engine starts, it would fail every test."""
    if cfg.kind != "sim" or "--profile-file" in " ".join(cfg.extra_args):
        return
    profile = cfg.options.get("profile")
    if not profile:
        return
    from pytest_llmslo.sim.profiles import PROFILES

    if str(profile) in PROFILES:
        return
    session = state.session
    label = (
        session.sources.get("sim_profile", "--sim-profile")
        if profile == session.sim_profile
        else f"engine {name}: options.profile"
    )
    raise ConfigError(
        f"{label}: {profile!r} is not a sim profile. Profiles: {', '.join(sorted(PROFILES))} "
        "(python -m pytest_llmslo.sim --list-profiles)."
    )


def engine_target(state: Session, name: str) -> str:
    """What engine ``name`` measures, in a few words: the URL of an external engine (a
    password in it masked), the built-in sim and its profile, or the kind and runtime."""
    cfg = state.engine_configs.get(name)
    if cfg is None:
        return name
    if cfg.kind == "external":
        return S.shown_url(cfg.url or "") or "external"
    if cfg.kind == "sim":
        from pytest_llmslo.engines.sim import DEFAULT_PROFILE

        return f"built-in sim, {cfg.options.get('profile') or DEFAULT_PROFILE}"
    return f"{cfg.kind}, {cfg.runtime}"


def engines_text(state: Session, names: Sequence[str]) -> str:
    """Engine names with what each measures: ``external (http://127.0.0.1:8000)``."""
    return ", ".join(f"{n} ({engine_target(state, n)})" for n in names)


def engine_config(state: Session, name: str, where: str) -> EngineConfig:
    """The config of engine ``name`` (configured, or the defaults of a bare kind) with the
    session's settings applied: model, sim profile (for sim engines whose config names
    none), API key, TLS, the external URL."""
    session = state.session
    cfg = state.configured_engines.get(name) or EngineConfig(kind=name, name=name)
    if not cfg.name:
        cfg = dataclasses.replace(cfg, name=name)
    model = state.defaults.model
    model_set = state.defaults.sources.get("model", "default") != "default"
    if model_set or not cfg.model:
        cfg = dataclasses.replace(cfg, model=model or cfg.model)
    if cfg.kind == "sim" and session.sim_profile and not cfg.options.get("profile"):
        cfg = dataclasses.replace(cfg, options={**cfg.options, "profile": session.sim_profile})
    # The readiness probes talk to the engine as the load generator will.
    d = state.defaults
    cfg = dataclasses.replace(
        cfg,
        api_key_env=d.api_key_env or None,
        ca_bundle=d.ca_bundle,
        verify_tls=not d.insecure,
    )
    if cfg.kind == "external":
        url = session.engine_url or cfg.url
        if not url:
            raise ConfigError(
                f"{where}: engine {name!r} is external and needs a URL: give --engine-url "
                "(or url = ... in its engine config)."
            )
        remember(url_password(url))
        cfg = dataclasses.replace(cfg, url=url)
        if session.sources.get("external_ready_timeout", "default") != "default":
            cfg = dataclasses.replace(
                cfg, external_ready_timeout_s=session.external_ready_timeout_s
            )
    return cfg


def engines_of_test(state: Session, ts: S.TestSettings, where: str) -> tuple[list[str], str | None]:
    """The engines a test runs on, and why it runs on none (a skip reason).

    A test's ``engines=`` replaces the session's engines, unless ``--engine`` (or its
    environment variable) chose engines: then the test runs on those of its own that were
    chosen, and is skipped when none was."""
    from pytest_llmslo.engines import apply_overrides

    session = state.session
    if not ts.engines:
        return list(session.engines), None
    label = f"@pytest.mark.slo(engines=...) on {where}"
    S.check_engine_names(ts.engines, state.configured_engines, label)
    for name in ts.engines:
        if name not in state.engine_configs:
            cfg = engine_config(state, name, label)
            items = state.engine_opts.get(name)
            if items:
                cfg = apply_overrides(cfg, items, where=f"--engine-opt {name}")
            check_sim_profile(state, name, cfg)
            state.engine_configs[name] = cfg
    src = session.sources.get("engine", "default")
    if not (src.startswith("--") or src.startswith(S.ENV_PREFIX)):
        return list(ts.engines), None
    picked = [e for e in ts.engines if e in session.engines]
    if picked:
        return picked, None
    return [], (
        f"this test runs on {', '.join(ts.engines)} (its engines=); {src} chose "
        f"{', '.join(session.engines)}"
    )


def check_output_path(path: Path, label: str) -> None:
    """A results file must be writable where it is asked for, checked before anything runs:
    found out at the end, an hour of measurements would have nowhere to go."""
    if path.is_dir():
        raise ConfigError(f"{label}: {path} is a directory; give a file path, e.g. {path}/run.json")
    parent = path.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        raise ConfigError(f"{label}: {path} cannot be created: {parent} is not a directory")
    if not os.access(parent, os.W_OK | os.X_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise ConfigError(f"{label}: {path} is not writable")
    # Permissions do not tell everything (root passes every access check; a read-only or
    # special file system such as /proc refuses at the write): try it, with a file that
    # is removed at once, in the nearest folder that exists.
    try:
        fd, probe = tempfile.mkstemp(prefix=".llmslo-probe-", dir=parent)
    except OSError as exc:
        raise ConfigError(
            f"{label}: {path} cannot be written: {exc.strerror or exc} in {parent}"
        ) from None
    os.close(fd)
    try:
        os.unlink(probe)
    except OSError:
        pass


def check_inputs(state: Session) -> None:
    """Paths, names and files of the session, checked in ``pytest_configure``: a usage error
    before any engine starts, naming the option and the fix."""
    session = state.session
    for name, flag in output_flags().items():
        path = output_path(state, name)
        if path is not None:
            check_output_path(path, session.sources.get(name, flag))
    if session.save:
        label = session.sources.get("slo_save", "--slo-save")
        try:
            saved = baselines.baseline_path(session.save, baseline_root(state))
        except ConfigError as exc:
            raise ConfigError(f"{label}: {exc}") from None
        check_output_path(saved, label)
    check_test_inputs(state, state.defaults, "")


def check_test_inputs(state: Session, ts: S.TestSettings, where: str) -> None:
    """A test's workload (its dataset read as a run would) and TLS files; each distinct
    one is checked once per session."""
    from pytest_llmslo import load
    from pytest_llmslo.tls import make_ssl_context

    fields = ts.workload_fields()
    shaping = (ts.headers, ts.models, ts.session_header)
    key = repr(sorted(fields.items())) + repr((ts.ca_bundle, ts.insecure, shaping))
    if key in state.checked_inputs:
        return
    on = f" (test {where})" if where else ""
    try:
        load.ClientSettings(
            base_url="http://127.0.0.1:1",
            model="check",
            headers=dict(ts.headers),
            models=tuple(ts.models or ()),
            session_header=ts.session_header,
        )
    except ConfigError as exc:
        raise ConfigError(f"request shaping{on}: {exc}") from None
    try:
        load.check_workload(load.WorkloadSpec(**fields))
    except (WorkloadError, ValueError, TypeError) as exc:
        src = (
            ts.sources.get("trace")
            if ts.trace
            else ts.sources.get("dataset")
            if fields.get("path")
            else ts.sources.get("workload")
        )
        raise ConfigError(f"{src or 'workload'}{on}: {exc}") from None
    if ts.ca_bundle:
        try:
            make_ssl_context(ts.ca_bundle, not ts.insecure)
        except ConfigError as exc:
            raise ConfigError(f"{ts.sources.get('ca_bundle', '--ca-bundle')}{on}: {exc}") from None
    state.checked_inputs.add(key)


def load_baseline(state: Session) -> None:
    session = state.session
    if not session.compare and not session.compare_fail:
        return

    try:
        state.tolerances = tolerances.parse_tolerances(session.compare_fail)
    except (ConfigError, ValueError) as exc:
        label = session.sources.get("slo_compare_fail", "--slo-compare-fail")
        raise ConfigError(f"{label}: {exc}") from None
    if session.compare:
        label = session.sources.get("slo_compare", "--slo-compare")
        try:
            doc = baselines.load_baseline(session.compare, root=baseline_root(state))
        except (ConfigError, OSError, ValueError) as exc:
            raise ConfigError(f"{label}: {exc}") from None
        try:
            state.baseline = Results.from_document(doc, source=session.compare)
        except (KeyError, TypeError, ValueError) as exc:
            raise ConfigError(f"{label}: a point cannot be read: {exc!r}") from None
        state.baseline_source = session.compare
        if not state.baseline.complete:
            state.notes.append(
                f"warning: baseline {session.compare!r} is incomplete (its session was "
                "interrupted): tests it lacks are not compared"
            )


def baseline_root(state: Session) -> str:
    return str(state.rootpath / ".llmslo" / "baselines")


def constants_of_test(ts: S.TestSettings, salt: str | None = None) -> dict[str, Any]:
    """A test's own constants of the results document; ``salt``: its prompts' salt
    (``prompt_salt``)."""
    kind, path = ts.dataset_kind()
    return {
        "workload": {"kind": kind, "path": path, **workload_text(ts)},
        "dataset": path,
        "isl": ts.isl,
        "osl": ts.osl,
        "prompt_salt": salt or None,
        "slo": [objective_dict(o) for o in ts.objectives],
        "levels": [lv.label for lv in ts.levels],
        "warmup": ts.warmup,
        "requests": ts.requests,
        "duration_s": ts.duration_s,
        "endpoint": ts.endpoint,
        "strict": ts.strict,
        "confidence": ts.confidence,
    }


def record_engine(state: Session, name: str, handle: EngineHandle) -> None:
    try:
        meta = dict(handle.metadata())
    except Exception as exc:  # metadata is for the report: never fail a test over it
        meta = {"error": repr(exc)}
    try:
        version = handle.version()
    except Exception:
        version = None
    meta.setdefault("model", handle.model)
    meta.setdefault("kind", handle.config.kind)
    meta["version"] = meta.get("version") or version
    state.engine_meta[name] = meta


def point_notes(state: Session, run: Run) -> tuple[str, ...]:
    idx = state.run_index.get(id(run))
    return () if idx is None else state.points[idx].notes


def search_capacity(
    state: Session,
    node: str,
    handle: EngineHandle,
    ts: S.TestSettings,
    objectives: tuple[Any, ...],
    spec: CapacitySpec,
) -> tuple[CapacityResult, Run | None]:
    """Run ``capacity.CapacitySearch`` with this test's settings (``spec``; a probe budget
    of 12 levels unless it sets one): every probe is a point of the test's sweep with its
    verdict. Returns the result and the run at the capacity (the last probe when no level
    passed), which becomes the test's primary point."""
    from pytest_llmslo import slo

    if not objectives:
        raise ConfigError(
            "a capacity search needs objectives: pass them (slo_capacity(ttft_p99 < 500)) or "
            "configure --slo / the marker's objectives="
        )
    if spec.max_probes is None:
        spec = dataclasses.replace(spec, max_probes=12)
    search = CapacitySearch(spec)
    ts = dataclasses.replace(ts, objectives=tuple(objectives))
    best: tuple[int, Run] | None = None
    last: tuple[int, Run] | None = None
    while (level := search.next_level()) is not None:
        run = run_level(state, node, handle, level, ts, stop_early_on=ts.objectives)
        idx = state.run_index[id(run)]
        verdict = slo.evaluate(run, ts.objectives, **gate_kwargs(ts))
        state.set_verdict(idx, verdict, ts.confidence)
        decided = run.health.valid or verdict.failures_decide
        passed: bool | None = verdict.passed if decided else None
        search.record(level, passed)
        last = (idx, run)
        if passed:
            best = (idx, run)
    result = search.result
    chosen = best or last
    ctx = state.contexts.get(node)
    cap = result.capacity.label if result.capacity is not None else "none"
    note = f"capacity {cap} after {result.probes} levels ({result.reason})"
    if ctx is not None:
        ctx.notes.append(note)
        ctx.capacity_result = result
        if chosen is not None:
            ctx.primary = chosen[0]
    engine = ctx.engine if ctx is not None else handle.config.display_name
    test = ctx.test if ctx is not None else node
    state.capacities[(engine, test)] = result
    state.dirty = True
    state.notes.append(f"{node}: {note}")
    return result, (chosen[1] if chosen is not None else None)


def run_level(
    state: Session,
    node: str,
    handle: EngineHandle,
    level: LoadLevel,
    ts: S.TestSettings,
    *,
    extended: bool = False,
    stop_early_on: tuple[Any, ...] | None = None,
) -> Run:
    """Run one level, retried up to ``ts.retries`` times while the client run is invalid;
    record it as a point of the test's sweep. ``stop_early_on``: the objectives an early
    stop watches, for the levels where ``--slo-early-stop=auto`` turns it on (capacity
    probes, sweep extensions)."""
    from pytest_llmslo import load, metrics, slo, sweep
    from pytest_llmslo.report import jsonio

    ctx = state.contexts.get(node)
    engine = ctx.engine if ctx is not None else handle.config.display_name
    test = ctx.test if ctx is not None else node
    if state.factory is not None and engine in state.factory.configs:
        # The engine running now (restarted when it died during an earlier test).
        handle = state.factory.get(engine)
    elif not handle.alive():
        raise EngineDiedError(
            f"engine {engine!r} is not running any more: {exit_reason(handle)}",
            handle.log_tail(),
        )
    # A marker's model= names the model to request from an engine that serves several;
    # a session's --model is what the engines serve (handle.model is its served name).
    model = handle.model
    if ts.model and ts.sources.get("model", "").startswith("@pytest"):
        model = ts.model
    client = ts.client_settings(handle.base_url, model)
    try:
        # Levels never share prompts, a trace's blocks included (``for_level``); nor do
        # sessions, unless they share a salt (``--prompt-salt``).
        workload = ts.workload_spec(prompt_salt(state, ts)).for_level(level.mode, level.value)
    except (TypeError, ValueError, WorkloadError) as exc:
        raise ConfigError(f"{test}: bad workload: {exc}") from None
    meta = {
        "engine": engine,
        "test": test,
        "engine_version": state.engine_meta.get(engine, {}).get("version"),
        "extended": extended,
    }
    thresholds = ts.health_thresholds()
    early = _early_stop(ts, level, stop_early_on)
    warmup = ts.warmup_for(level)
    tries: list[str] = []
    for attempt in range(ts.retries + 1):
        label = f"{engine} {level.label}" + (f" (retry {attempt})" if attempt else "")
        progress = state.progress(label, ts.requests or 0, warmup)
        started = time.monotonic()
        partial: Run | None = None
        measured: Run | None = None  # this try's load, once it returned
        signame: str | None = None
        # Each try starts cold where it can: a retry sends the same prompts again.
        cache = reset_engine_cache(handle, ts)
        scraper = start_signals(handle, ts, client)
        try:
            try:
                run = load.run_load_sync(
                    load.LoadJob(
                        client,
                        workload,
                        level,
                        requests=ts.requests,
                        warmup=warmup,
                        duration_s=ts.duration_s,
                        grace_s=ts.grace_s,
                        level_timeout_s=ts.level_bound_s(),
                        progress=_watch_measuring(progress, scraper),
                        meta={**meta, "cache": cache},
                        thresholds=thresholds,
                        early_stop=early,
                    )
                )
                measured = run
                run = check_prefix_share(with_signals(run, scraper), ts)
            except LoadInterrupted as exc:
                partial = exc.run if isinstance(exc.run, Run) else None
                if partial is not None:
                    partial = with_signals(partial, scraper)
                signame = exc.signal
                raise
            finally:
                if scraper is not None and not scraper.stopped:
                    scraper.stop()
        except (LoadInterrupted, KeyboardInterrupt):
            kept = 0
            if partial is None:
                # Interrupted after the load returned (its signals' last scrape): the
                # requests were all measured, and are kept.
                partial = measured
            if partial is not None:
                record(
                    state, node, ctx, engine, test, level, partial, ts, metrics, sweep, jsonio,
                    tries,
                )  # fmt: skip
                kept = len(partial.records)
            by = f" by {signame}" if signame else ""
            if signame:
                # The load generator's handler took the signal: the session is stopping.
                state.interrupts.note(signame)
            progress.close(f"interrupted{by}; the {kept} measured requests are kept")
            # Ctrl-C and SIGTERM stop the session (pytest's own handling); the partial run
            # is kept, and the results document is written at session end.
            raise KeyboardInterrupt from None
        if run.health.valid or attempt >= ts.retries or not handle.alive():
            break
        if slo.failures_fail(run, ts.max_error_rate):
            break  # the failures decide the level (``inconclusive``): no retry can change it
        why = "; ".join(run.health.reasons)
        tries.append(f"try {attempt + 1} was an invalid client run: {why}")
        progress.close(
            f"invalid client run, retrying ({attempt + 1} of {ts.retries}, --slo-retries): {why}"
        )
    progress.close(_run_line(run))
    idx = record(state, node, ctx, engine, test, level, run, ts, metrics, sweep, jsonio, tries)
    state.level_seconds[idx] = time.monotonic() - started
    if not state.estimated:
        state.estimated = True
        from pytest_llmslo.report.plan import estimate_line

        line = estimate_line(state.contexts.values(), ctx, run, warmup, state.level_seconds[idx])
        if line:
            state.say(line)
    if not handle.alive():
        restart = (
            "it is restarted for the next test"
            if state.factory is not None
            and state.factory.restarts.get(engine, 0) < state.factory.max_restarts
            else "it is not restarted (--engine-restarts)"
        )
        raise EngineDiedError(
            f"engine {engine!r} {exit_reason(handle)} during the load at {level.label}; "
            f"{len(run.ok_records)} of {len(run.records)} requests completed (the results "
            f"measured so far are kept in the report); {restart}",
            handle.log_tail(),
        )
    return run


def start_signals(handle: EngineHandle, ts: S.TestSettings, client: Any) -> Any:
    """A started ``signals.scraper.Scraper`` on the engine's /metrics (and the URLs of its
    config's ``metrics_urls`` option: a Dynamo deployment's workers), or None when
    ``--slo-signals`` is off."""
    if not ts.signals:
        return None
    from pytest_llmslo.signals.scraper import Scraper, ScrapeSettings

    urls = [handle.base_url.rstrip("/") + "/metrics", *getattr(handle, "metrics_urls", ())]
    extra = (handle.config.options or {}).get("metrics_urls") if handle.config else None
    if isinstance(extra, str):
        extra = [extra]
    urls.extend(str(u) for u in extra or ())
    key = client.api_key()
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    # A scrape never takes longer than the level may.
    bound = ts.level_bound_s()
    deadline = ts.signals_timeout_s if bound is None else min(ts.signals_timeout_s, bound)
    settings = ScrapeSettings(
        interval_s=ts.signals_interval_s,
        headers=headers,
        verify=client.ssl_context() if handle.base_url.startswith("https") else True,
        deadline_s=deadline,
        timeout_s=min(2.0, deadline),
    )
    return Scraper(list(dict.fromkeys(urls)), settings, dcgm_url=ts.dcgm_url).start()


def reset_engine_cache(handle: EngineHandle, ts: S.TestSettings) -> dict[str, Any]:
    """Empty the engine's prefix cache before a level (``--reset-cache``): ``auto`` where
    the harness started the engine, ``on`` for an external one too. What was done, for
    the level's record: ``{"mode", "reset", "how", "why"}``."""
    mode = ts.reset_cache
    cfg = getattr(handle, "config", None)
    if mode == "off":
        return {"mode": mode, "reset": False, "why": "--reset-cache=off"}
    if mode == "auto" and (cfg is None or cfg.kind == "external"):
        return {
            "mode": mode,
            "reset": False,
            "why": "an engine the harness did not start is reset only with --reset-cache=on",
        }
    reset = getattr(handle, "reset_cache", None)
    if not callable(reset):
        return {"mode": mode, "reset": False, "why": "this engine cannot empty its cache"}
    return {"mode": mode, **reset()}


def check_prefix_share(run: Run, ts: S.TestSettings) -> Run:
    """``run`` with its cache record (``meta["cache"]``) completed by the engine's prefix-hit
    rate, the share the workload was built to have, and a warning when the first is far
    above the second (``signals.prefix_share``)."""
    from pytest_llmslo.signals.prefix_share import expected_prefix_share, warm_cache_warning

    meta = dict(run.meta)
    cache = dict(meta.get("cache") or {})
    sig = meta.get("signals") if isinstance(meta.get("signals"), Mapping) else {}
    hit = sig.get("prefix_hit_rate") if sig else None
    cal = meta.get("calibration") if isinstance(meta.get("calibration"), Mapping) else {}
    overhead = cal.get("overhead") if cal and cal.get("fitted") else None
    kind, _ = ts.dataset_kind()
    expected = expected_prefix_share(
        kind,
        isl=ts.isl,
        osl=ts.osl,
        prefix_len=ts.prefix_len,
        turns=ts.turns,
        overhead=float(overhead) if isinstance(overhead, (int, float)) else 0.0,
    )
    if isinstance(hit, (int, float)):
        cache["prefix_hit_rate"] = round(float(hit), 4)
    if expected is not None:
        cache["expected_prefix_share"] = round(expected, 4)
    warning = warm_cache_warning(hit if isinstance(hit, (int, float)) else None, expected)
    if warning:
        cache["warning"] = warning
    meta["cache"] = cache
    return dataclasses.replace(run, meta=meta)


def _watch_measuring(progress: Any, scraper: Any) -> Any:
    """The load's progress callback, which also tells the scraper when the measured part
    begins (its counters' baseline: warm-up is not counted)."""
    if scraper is None:
        return progress

    def report(p: Any) -> None:
        if getattr(p, "phase", None) == "measuring":
            scraper.mark_measuring()
        progress(p)

    return report


def with_signals(run: Run, scraper: Any) -> Run:
    """``run`` with the level's signals in its meta (``meta["signals"]``)."""
    if scraper is None:
        return run
    sig = scraper.stop()
    return dataclasses.replace(run, meta={**dict(run.meta), "signals": sig.to_dict()})


def record(
    state: Session,
    node: str | None,
    ctx: TestContext | None,
    engine: str,
    test: str,
    level: LoadLevel,
    run: Run,
    ts: S.TestSettings,
    metrics: Any,
    sweep: Any,
    jsonio: Any,
    tries: list[str] | None = None,
) -> int:
    summary = metrics.summarize(run, ts.objectives, confidence=ts.confidence)
    try:
        samples = jsonio.compact_samples(run)
    except Exception:  # samples only help later comparisons
        samples = None
    notes: list[str] = []
    comparable = True
    if summary.short_outputs and summary.completed:
        share = summary.short_outputs / summary.completed
        text = (
            f"{summary.short_outputs} of {summary.completed} completed requests "
            f"({share:.0%}) returned fewer tokens than the pinned output length"
        )
        if share > ts.max_short_outputs:
            comparable = False
            text += (
                f", more than the {ts.max_short_outputs:.0%} allowed (--max-short-outputs): "
                "not comparable; the server ignores ignore_eos/min_tokens, so this level ran "
                "another workload (use --pin-output=false if that is expected)"
            )
            if node is not None:
                # Located at the test (pytest's warning summary).
                state.warn(node, f"llmslo {engine} {level.label}: {text}")
        notes.append(text)
    if summary.usage_mismatches and summary.completed:
        comparable = usage_note(state, node, engine, level, summary, ts, notes) and comparable
    if summary.level_timeout:
        notes.append(
            f"cut by the level's time bound ({ts.level_bound_s():g} s, --level-timeout) "
            f"during {summary.level_timeout}"
        )
    early = run.meta.get("early_stop")
    if isinstance(early, Mapping):
        notes.append(
            f"stopped early after {len(run.records)} requests (--slo-early-stop): "
            f"{early.get('reason')}"
        )
    cache = run.meta.get("cache") if isinstance(run.meta.get("cache"), Mapping) else None
    if cache is not None and cache.get("warning"):
        notes.append(str(cache["warning"]))
        if node is not None:
            state.warn(node, f"llmslo {engine} {level.label}: {cache['warning']}")
    if cache is not None and cache.get("mode") == "on" and not cache.get("reset"):
        notes.append(
            "the prefix cache was not emptied before this level (--reset-cache=on): "
            f"{cache.get('why')}"
        )
    notes.extend(tries or ())
    if tries and inconclusive(run, ts):
        notes.append(f"inconclusive after {len(tries) + 1} tries: the client stayed the bottleneck")
    point = sweep.SweepPoint(
        engine=engine,
        test=test,
        level=level,
        summary=summary,
        verdict=None,
        samples=samples,
        interrupted=bool(run.meta.get("interrupted", False)),
        comparable=comparable,
        notes=tuple(notes),
        cache=dict(cache) if cache is not None else None,
    )
    return state.add_point(ctx, run, point)


def usage_note(
    state: Session,
    node: str | None,
    engine: str,
    level: LoadLevel,
    summary: Any,
    ts: S.TestSettings,
    notes: list[str],
) -> bool:
    """The level's note on usage counts that disagreed with the stream; False when there
    were more than ``--max-usage-mismatch`` of them (the level is then not comparable)."""
    n, done = summary.usage_mismatches, summary.completed
    share = n / done
    text = (
        f"{n} of {done} completed requests ({share:.0%}) reported a usage.completion_tokens "
        f"that disagrees with the stream ({summary.usage_claimed_tokens} tokens claimed, "
        f"{summary.usage_streamed_tokens} streamed, which are what is counted)"
    )
    ok = share <= ts.max_usage_mismatch
    if not ok:
        text += (
            f", more than the {ts.max_usage_mismatch:.0%} allowed (--max-usage-mismatch): "
            "not comparable; a server that packs several tokens into a chunk must say how "
            "many: token ids, or usage on every chunk (vLLM, SGLang, Dynamo: --extra-body "
            '\'{"stream_options": {"continuous_usage_stats": true}}\')'
        )
        if node is not None:
            state.warn(node, f"llmslo {engine} {level.label}: {text}")
    notes.append(text)
    return ok


def _early_stop(
    ts: S.TestSettings, level: LoadLevel, objectives: tuple[Any, ...] | None
) -> Callable[[Any], str | None] | None:
    """The early-stop decision of a level (``slo.settled`` over the records so far), when
    ``--slo-early-stop`` is ``on``, or ``auto`` and the caller gave the objectives to watch
    (capacity probes, sweep extensions); None otherwise."""
    from pytest_llmslo import slo

    watch = objectives if objectives is not None else ts.objectives
    if ts.early_stop == "off" or not watch:
        return None
    if ts.early_stop == "auto" and objectives is None:
        return None

    def decide(records: Any) -> str | None:
        partial = Run(
            level,
            tuple(records),
            min(r.sent_ns for r in records),
            max(r.end_ns for r in records),
        )
        return slo.settled(
            partial,
            watch,
            strict=ts.strict,
            confidence=ts.confidence,
            max_error_rate=ts.max_error_rate,
            planned=ts.requests,
            min_completed=ts.early_stop_min,
        )

    return decide


def _run_line(run: Run) -> str:
    from pytest_llmslo import metrics

    ok = len(run.ok_records)
    n = len(run.records)
    line = f"{ok}/{n} requests ok in {run.duration_s:.1f} s"
    timeout = run.meta.get("level_timeout")
    if isinstance(timeout, Mapping):
        line += f" [cut by the level's time bound during {timeout.get('phase')}]"
    if isinstance(run.meta.get("early_stop"), Mapping):
        line += " [stopped early: its verdict was settled]"
    if ok < n:
        top = metrics.failure_messages(run, 1)
        if top:
            line += f" [most failures: {top[0]}]"
    mismatched = metrics.usage_mismatches(run)[0]
    if mismatched:
        line += f" [usage disagreed with the stream in {mismatched} requests]"
    if not run.health.valid:
        line += " [client-limited: " + "; ".join(run.health.reasons) + "]"
    cache = run.meta.get("cache")
    if isinstance(cache, Mapping) and cache.get("warning"):
        line += f" [{cache['warning']}]"
    return line + load_text(run.health)


def load_text(health: Any) -> str:
    """The load the client applied against the load asked, for the level's line:
    `` [3.9 of 4 in flight]`` (a closed loop), `` [9.8 of 10 req/s sent]`` (an open loop)."""
    if health.load_kind == "in_flight":
        return f" [{health.load_achieved:.1f} of {health.load_asked:g} in flight]"
    if health.load_kind == "arrival_rate":
        return f" [{health.load_achieved:.3g} of {health.load_asked:.3g} req/s sent]"
    return ""


def extend_safely(state: Session, node: str, ctx: TestContext) -> None:
    """The extension never changes the test's outcome; a problem there becomes a note."""
    try:
        extend(state, node, ctx)
    except Exception as exc:
        note = f"extension stopped: {exc}"
        ctx.notes.append(note)
        state.notes.append(f"{ctx.engine} {ctx.test}: {note}")


def primary(state: Session, ctx: TestContext) -> int | None:
    if ctx.primary is not None:
        return ctx.primary
    return ctx.point_keys[0] if ctx.point_keys else None


def gate_kwargs(ts: S.TestSettings) -> dict[str, Any]:
    return ts.gate_kwargs()


def configured_gate(state: Session, ctx: TestContext) -> None:
    """After the body: the configured SLO (``--slo``, ini, marker ``objectives=``) when the
    body asserted none itself, and without objectives the error gate (a level where every
    request failed, or more than ``--slo-max-error-rate`` did, never passes); and the
    session's ``--slo-strict``/``--slo-confidence`` on what the body asserted with the
    defaults, so a CI gate made strict on the command line cannot pass on a point
    estimate."""
    from pytest_llmslo import slo

    __tracebackhide__ = True
    ts = ctx.settings
    idx = primary(state, ctx)
    if idx is None:
        return
    run = state.point_runs[idx]
    if not ctx.verdicts:
        if ts.objectives:
            slo.assert_goodput(run, *ts.objectives, **gate_kwargs(ts))
            return
        verdict = slo.evaluate(run, (), max_error_rate=ts.max_error_rate, allow_no_objectives=True)
        # Only the error gates judge here: a test without objectives asked nothing else.
        if verdict.problems:
            state.set_verdict(idx, verdict, ts.confidence)
            raise SloViolation(
                verdict.summary_line()
                + " (no objectives configured: the failure gates alone judged the level)\n"
                + verdict.format(),
                verdict,
            )
        return
    if not (ts.strict or ts.confidence != DEFAULT_CONFIDENCE):
        return
    for verdict in list(ctx.verdicts):
        if verdict.strict == ts.strict and verdict.confidence == ts.confidence:
            continue
        objectives = tuple(r.objective for r in verdict.results)
        again = slo.evaluate(
            run,
            objectives,
            strict=ts.strict,
            confidence=ts.confidence,
            min_attainment=verdict.min_attainment,
            min_goodput_tok_s=verdict.min_goodput_tok_s,
        )
        state.set_verdict(idx, again, ts.confidence)
        if not again.passed:
            mode = "strict (upper confidence bounds)" if ts.strict else "the point estimates"
            raise SloViolation(
                f"SLO failed under {mode} at {ts.confidence:.0%} confidence "
                f"({ts.sources.get('slo_strict', '')}):\n"
                + again.summary_line()
                + "\n"
                + again.format(),
                again,
            )


def extend(state: Session, node: str, ctx: TestContext) -> None:
    """``--slo-extend``: in the last level's test, run further levels (x1.5 each) until
    goodput falls below half its best; the extra points join the sweep, not the verdict."""
    if not (ctx.settings.extend and ctx.last_level and ctx.point_keys):
        return
    from pytest_llmslo import slo, sweep

    factory = state.factory
    if factory is None:
        return
    handle = factory.running().get(ctx.engine)
    if handle is None:
        return
    ts = ctx.settings
    objectives = ts.objectives
    last_verdict = state.points[ctx.point_keys[0]].verdict
    gate = gate_kwargs(ts)
    if last_verdict is not None:
        objectives = tuple(r.objective for r in last_verdict.results)
        # The extra levels are judged as the test's own level was.
        gate = {
            "strict": last_verdict.strict,
            "confidence": last_verdict.confidence,
            "min_attainment": last_verdict.min_attainment,
            "min_goodput_tok_s": last_verdict.min_goodput_tok_s,
            "max_error_rate": last_verdict.max_error_rate,
        }
    if ts.strict or ts.confidence != DEFAULT_CONFIDENCE:
        # As in configured_gate: a session made strict holds for every level it judges.
        gate.update(strict=ts.strict, confidence=ts.confidence)
    if not objectives:
        ctx.notes.append("not extended: the extension needs objectives (goodput)")
        return
    added: list[str] = []
    for _ in range(S.MAX_EXTEND_LEVELS):
        pts = [p for p in state.points if p.engine == ctx.engine and p.test == ctx.test]
        nxt = sweep.extend_sweep(pts)
        if nxt is None:
            break
        # A level is only that load when it holds at least two rounds of requests.
        level_ts = ts
        if nxt.mode == "concurrency" and ts.requests is not None and ts.requests < 2 * nxt.value:
            level_ts = dataclasses.replace(ts, requests=int(2 * nxt.value))
        run = run_level(
            state, node, handle, nxt, level_ts, extended=True, stop_early_on=tuple(objectives)
        )
        verdict = slo.evaluate(run, objectives, **gate)
        state.set_verdict(state.run_index[id(run)], verdict, gate["confidence"])
        added.append(nxt.label)
    if added:
        note = f"extended past {ctx.level.label}: {', '.join(added)} (--slo-extend)"
        ctx.notes.append(note)
        state.notes.append(f"{ctx.engine} {ctx.test}: {note}")


def compare_with_baseline(state: Session, ctx: TestContext) -> None:
    """``--slo-compare``: the same test, engine and level in the baseline; a regression
    beyond the tolerance fails this test. A test that searched its capacity is compared
    with the baseline's search of the same test and engine: by the capacity itself, and by
    the points at the capacity when both searches ended at the same level
    (``regression.compare_test``)."""
    if state.baseline is None:
        return
    idx = primary(state, ctx)
    if idx is None:
        return
    point = state.points[idx]
    source = state.baseline_source
    capacity = ctx.capacity_result
    if not point.comparable:
        key = f"{ctx.engine} {ctx.test} {point.level.label}"
        reason = "the level is not comparable: " + "; ".join(point.notes)
        _not_compared(state, ctx, key, reason, f"not compared, {reason}")
        return
    # The level the test is judged by (a slo_load level may differ from its parameter).
    key = f"{ctx.engine} {ctx.test} {'capacity' if capacity is not None else point.level.label}"
    judging = Judging.of(state.tolerances or None, confidence=ctx.settings.confidence)
    pairing = Pairing(state.baseline, state.results(), judging)
    if capacity is not None:
        tested = compare_test(
            pairing, ctx.engine, ctx.test, (), capacity=capacity, at_capacity=point
        )
        comparison = tested.capacity
        missing = f"the baseline {source} has no capacity search of this test"
    else:
        tested = compare_test(pairing, ctx.engine, ctx.test, (point,))
        comparison = tested.points[0][1]
        missing = f"not in the baseline {source}"
    if comparison is None:
        _not_compared(state, ctx, key, missing, missing)
        return
    if comparison.constants_differ:
        reason = f"constants differ: {'; '.join(comparison.problems)}"
        _not_compared(state, ctx, key, reason, f"not compared, {reason}")
        return
    if not comparison.comparable:
        reason = "; ".join(comparison.problems)
        _not_compared(state, ctx, key, reason, f"not compared: {reason}")
        return
    ctx.comparison = comparison
    state.comparisons.append((key, comparison))
    if comparison.regressed:
        __tracebackhide__ = True
        where = "capacity" if capacity is not None else point.level.label
        raise RegressionError(
            f"regression against baseline {source} ({ctx.engine}, {where}):\n{comparison.format()}",
            point.verdict,
        )


def _not_compared(state: Session, ctx: TestContext, key: str, reason: str, line: str) -> None:
    """A comparison that did not run: said in the summary (``line``), in the test's own
    report section and in its JUnit properties (``reason``)."""
    state.mismatches.append(f"{key}: {line}")
    ctx.compare_skip = reason
    ctx.notes.append(f"not compared with baseline {state.baseline_source}: {reason}")


def summary_lines_of_test(state: Session, ctx: TestContext) -> list[str]:
    from pytest_llmslo.report import terminal

    lines: list[str] = []
    for idx in ctx.point_keys:
        p = state.points[idx]
        s = p.summary
        lines.append(
            f"{ctx.engine} {ctx.test} {p.level.label}: {s.completed}/{s.requests} completed, "
            f"{s.failed} failed, {s.output_tok_s:.1f} out tok/s, "
            f"goodput {_fmt(s.goodput_tok_s)} tok/s, attainment {_fmt_pct(s.attainment)}"
        )
        for name in METRICS:
            d = s.distributions.get(name)
            if d is None or not d.count:
                continue
            lines.append(
                f"  {name}: p50 {_fmt(d.p(50))} ms, p99 {_fmt(d.p(99))} ms "
                f"(upper bound {_fmt(d.ub(99))} ms at {d.confidence:.0%}), n={d.count}"
            )
        for e in s.errors:
            lines.append(f"  error {e}")
        if not s.valid:
            lines.append("  INVALID (client-limited): " + "; ".join(s.invalid_reasons))
        lines.extend(f"  note: {n}" for n in p.notes)
        if p.verdict is not None:
            lines.extend("  " + ln for ln in terminal.render_verdict(p.verdict))
    lines.extend(ctx.notes)
    if ctx.comparison is not None:
        lines.extend(str(ctx.comparison.format()).splitlines())
    return [redact(line) for line in lines]


def _fmt(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.1f}"


def _fmt_pct(v: float | None) -> str:
    return "-" if v is None else f"{100 * v:.1f}%"


def output_flags() -> dict[str, str]:
    """The output settings of a session and their command-line flags: the results
    document's and each report format's (``report.formats.FORMATS``)."""
    from pytest_llmslo.report.formats import FORMATS

    return {"slo_json": "--slo-json", **{f.option: f.flag for f in FORMATS.values()}}


def json_path(state: Session) -> Path | None:
    return output_path(state, "slo_json")


def output_path(state: Session, name: str) -> Path | None:
    """The resolved path of output setting ``name`` (``output_flags``)."""
    p = state.session.outputs.get(name)
    if not p:
        return None
    return resolve_path(state, p, name)


def write_reports(state: Session, *, complete: bool) -> None:
    """The report formats asked for (``report.formats``: the Markdown summary, the SVG
    chart, the CSV table), each written whole or not at all; errors are noted, and fail
    the session as a lost results file does."""
    from pytest_llmslo.report.formats import FORMATS

    paths = [(fmt, output_path(state, fmt.option)) for fmt in FORMATS.values()]
    if all(p is None for _, p in paths) or not state.points:
        return
    # Made from what the document says: its secrets masked, in the constants and the
    # engines' metadata as in every text written.
    results = state.results(complete=complete).redacted()
    for fmt, path in paths:
        if path is None:
            continue
        try:
            # A format that shows several runs shows the baseline (--slo-compare) beside.
            if state.baseline is not None and fmt.render_runs is not None:
                out = fmt.render_runs(results, [state.baseline])
            else:
                out = fmt.render(results)
            if isinstance(out, bytes):
                write_atomic_bytes(path, out)
            else:
                write_atomic_text(path, redact(out))
            note = f"{fmt.label} report written to {path}"
            if note not in state.notes:
                state.notes.append(note)
        except Exception as exc:
            state.write_errors.append(
                f"ERROR: could not write the {fmt.label} report to {path}: {exc!r}"
            )


def resolve_path(state: Session, text: str, name: str) -> Path:
    """A relative path from an ini file is relative to that file (as pytest's own ini
    paths are); from the command line or the environment, to the invocation directory."""
    path = Path(text)
    if path.is_absolute():
        return path
    if state.session.sources.get(name, "").startswith("ini") and state.inipath is not None:
        return state.inipath.parent / path
    return state.invocation_dir / path


def write_json(state: Session, *, complete: bool) -> bool:
    """Write the results document; False (and an error note) when it could not be."""
    path = json_path(state)
    if path is None:
        return True
    try:
        write_atomic(path, state.document(complete=complete))
        state.dirty = False
    except Exception as exc:
        msg = f"ERROR: could not write the results to {path}: {exc!r}"
        if msg not in state.write_errors:
            state.write_errors.append(msg)
        return False
    return True


def inconclusive(run: Run, ts: S.TestSettings) -> bool:
    """Whether a level ends inconclusive: its client run stayed invalid and its failed
    requests do not fail it on their own. The failure gates are judged before the client's
    health (``slo.failures_fail``): a level where every request failed, or more than
    ``--slo-max-error-rate`` did, is an SLO failure with the error texts, whatever the
    client's state."""
    from pytest_llmslo import slo

    return not run.health.valid and not slo.failures_fail(run, ts.max_error_rate)


def inconclusive_message(state: Session, run: Run) -> str:
    """Why a level whose client run stayed invalid through the retries shows nothing
    about the engine (the ``Inconclusive`` error of its test)."""
    tries = 1 + sum(1 for n in point_notes(state, run) if n.startswith("try "))
    return (
        f"inconclusive at {run.level.label} after {tries} tr{'y' if tries == 1 else 'ies'}: "
        "the load generator, not the engine, was the bottleneck ("
        + "; ".join(run.health.reasons)
        + "). Nothing was shown about the engine's SLO: run on a quieter machine, with "
        "more client processes, or at a lower load."
    )


def after_test(state: Session, node: str, ctx: TestContext, *, body_error: bool = False) -> None:
    """What follows a test's body: the configured SLO (when the body asserted none) and
    the error gate, the sweep extension (also after a failed body: a failed last level is
    the usual case for extending) and the baseline comparison. Raises ``SloViolation`` or
    ``RegressionError`` for the test."""
    __tracebackhide__ = True
    if body_error:
        extend_safely(state, node, ctx)
        return
    try:
        configured_gate(state, ctx)
    finally:
        extend_safely(state, node, ctx)
    compare_with_baseline(state, ctx)


def save_session_baseline(state: Session, *, interrupted: bool) -> None:
    """``--slo-save NAME``: the session's document as a baseline (a partial one as
    ``NAME.partial``, which never replaces the baseline)."""
    name = state.session.save
    if not name or not state.points:
        return
    try:
        saved = baselines.save_baseline(
            state.document(complete=not interrupted), name, root=baseline_root(state)
        )
        if interrupted:
            partial = baselines.partial_name(name)
            state.notes.append(
                f"the session was interrupted: baseline {name!r} was left as it was; the "
                f"partial results are saved as {partial!r} in {saved}"
            )
        else:
            state.notes.append(f"baseline {name!r} saved to {saved}")
    except Exception as exc:
        state.write_errors.append(f"ERROR: could not save baseline {name!r}: {exc!r}")


def finish(state: Session, *, interrupted: bool = False) -> bool:
    """The session's outputs: the results document, the Markdown, SVG and CSV reports and
    the saved baseline. What could not be written is in ``state.write_errors``.

    No stop signal cuts them (``state.interrupts.shielded``); one that arrived before or
    while they were written makes them partial (``complete: false``, the baseline saved
    as ``NAME.partial``). Returns whether the session was interrupted."""
    guard = state.interrupts
    with guard.shielded():
        interrupted = interrupted or guard.interrupted
        _write_outputs(state, interrupted=interrupted)
        if not interrupted and guard.interrupted:
            interrupted = True  # a signal while they were written: they are partial now
            _write_outputs(state, interrupted=True)
        save_session_baseline(state, interrupted=interrupted)
    return interrupted


def _write_outputs(state: Session, *, interrupted: bool) -> None:
    if state.session.json_path:
        write_json(state, complete=not interrupted)
    write_reports(state, complete=not interrupted)


def run_test_load(
    state: Session, node: str, handle: EngineHandle, level: LoadLevel, ts: S.TestSettings
) -> Run:
    """The load of test ``node``: its level, or, for a test that searches its capacity,
    the search (the run at the capacity, or the last probe when no level passed)."""
    ctx = state.contexts.get(node)
    if ctx is None or not ctx.capacity:
        return run_level(state, node, handle, level, ts)
    spec = CapacitySpec.from_level(ts.levels[0], max_value=ts.capacity_max)
    _result, found = search_capacity(state, node, handle, ts, ts.objectives, spec)
    if found is None:
        raise LoadError(f"{ctx.test}: the capacity search ran no level")
    return found


def junit_properties(state: Session, ctx: TestContext) -> list[tuple[str, str]]:
    """The JUnit properties of a test case: its primary point's numbers and verdict, its
    notes, and its comparison with the baseline (or why it was not compared)."""
    from pytest_llmslo.report import junit

    idx = primary(state, ctx)
    if idx is None:
        return []
    point = state.points[idx]
    try:
        props = junit.testcase_properties(
            point.summary, point.verdict, engine=ctx.engine, test=ctx.test
        )
    except Exception as exc:  # the report must not change a test's outcome
        props = [("llmslo.error", repr(exc))]
    if not point.comparable:
        props.append(("llmslo.comparable", "false"))
    props.extend((f"llmslo.notes.{i}", n) for i, n in enumerate(point.notes, 1))
    cache = point.cache if isinstance(getattr(point, "cache", None), Mapping) else None
    if cache is not None:
        props.append(("llmslo.cache_reset", str(bool(cache.get("reset"))).lower()))
    if ctx.comparison is not None:
        props.append(("llmslo.baseline", str(state.baseline_source)))
        props.append(("llmslo.regressed", str(bool(ctx.comparison.regressed)).lower()))
        props.extend(ctx.comparison.properties())
    elif ctx.compare_skip is not None:
        props.append(("llmslo.baseline", str(state.baseline_source)))
        props.append(("llmslo.compare.status", "not_compared"))
        props.append(("llmslo.compare.reason", ctx.compare_skip))
    return [(k, redact(str(v))) for k, v in props]


def suite_properties(state: Session) -> list[tuple[str, str]]:
    """The run constants as JUnit suite properties (per test and per engine they are in
    the document; "hardware" has each engine's at a glance)."""
    from pytest_llmslo.report import junit

    consts = {k: v for k, v in state.constants().items() if k not in ("tests", "per_engine")}
    return [(k, redact(str(v))) for k, v in junit.suite_properties(consts)]


def tests_overview(state: Session, limit: int = 20) -> list[str]:
    """One line per SLO test: the engines and levels it will really run (its marker's,
    with the command line's overrides) and its workload."""
    tests: dict[str, tuple[list[str], list[str], S.TestSettings]] = {}
    for ctx in state.contexts.values():
        engines, levels, _ = tests.setdefault(ctx.test, ([], [], ctx.settings))
        if ctx.engine is not None and ctx.engine not in engines:
            engines.append(ctx.engine)
        label = "capacity search" if ctx.capacity else ctx.level.label
        if label not in levels:
            levels.append(label)
    lines = [
        f"llmslo: {test}: {engines_text(state, engines) or 'no engine'} x {','.join(levels)}; "
        + S.describe_workload(ts)
        for test, (engines, levels, ts) in tests.items()
    ]
    if len(lines) > limit:
        lines = [*lines[:limit], f"llmslo: ... and {len(lines) - limit} more SLO tests"]
    return lines


def summary_report(state: Session, width: int) -> list[tuple[str, str]]:
    """The session's closing report as ``(kind, text)``: kind ``=`` or ``-`` is a section
    heading, ``line`` a line, ``error`` a line to show in red (a lost result). The sweep
    tables with their knees and the Pareto summaries, the comparison with the baseline,
    the notes, and where the results went."""
    from pytest_llmslo.report import terminal

    if not (state.points or state.notes or state.mismatches or state.write_errors):
        return []
    out: list[tuple[str, str]] = [("=", "llmslo: SLO sweeps")]
    if state.points:
        try:
            results = Results(tuple(state.points), capacities=state.capacities)
            lines = terminal.render_summary(results, width=width)
        except Exception as exc:  # a renderer bug must not hide the test results
            lines = [f"(could not render the sweep tables: {exc!r})"]
        out.extend(("line", ln) for ln in lines)
    if state.comparisons or state.mismatches:
        out.append(("-", f"llmslo: comparison with baseline {state.baseline_source}"))
        for key, comp in state.comparisons:
            status = "REGRESSED" if comp.regressed else "improved" if comp.improved else "ok"
            out.append(("line", f"{key}: {status}"))
            out.extend(("line", "  " + ln) for ln in str(comp.format()).splitlines())
        out.extend(("line", ln) for ln in state.mismatches)
    out.extend(("line", f"llmslo: {note}") for note in state.notes)
    out.extend(("error", f"llmslo: {err}") for err in state.write_errors)
    path = json_path(state)
    if path is not None and path.exists() and not state.write_errors:
        out.append(("line", f"llmslo: results written to {path}"))
    return [(kind, redact(text)) for kind, text in out]


def prepare(state: Session) -> None:
    """Everything that can be checked before an engine starts: the session's engine
    configs, output paths, datasets and TLS files, and the baseline to compare with.
    Raises ``ConfigError`` naming the option and the fix."""
    state.engine_configs = resolve_engines(state)
    check_inputs(state)
    load_baseline(state)


def engine_factory(state: Session) -> EngineFactory:
    """The session's engine factory (made on first use): engines start lazily, announce
    themselves through ``state.say``, are recorded for the report, restart up to
    ``--engine-restarts`` times and pass ``hooks.engine_config`` before they start."""
    if state.factory is None:
        state.factory = EngineFactory(
            state.engine_configs,
            announce=state.say,
            on_start=lambda name, h: record_engine(state, name, h),
            max_restarts=state.session.engine_restarts,
            prepare=state.hooks.engine_config,
            progress=state.progress,
        )
    return state.factory


def plan_test(state: Session, ts: S.TestSettings, where: str) -> tuple[list[str], str | None]:
    """Check a test's settings before it runs (its dataset and TLS files, its engines, a
    capacity search's objectives) and return the engines it runs on with the reason it
    runs on none (``engines_of_test``). Raises ``ConfigError`` naming the fix."""
    check_test_inputs(state, ts, where)
    if ts.capacity and not ts.objectives:
        src = ts.sources.get("slo_capacity", "--slo-capacity")
        raise ConfigError(
            f"{src}: {where} has no objectives to search the capacity for; give them with "
            "--slo, llmslo_slo or the marker's objectives="
        )
    return engines_of_test(state, ts, where)


def add_test(state: Session, node: str, ctx: TestContext) -> None:
    """Register the collected test ``node`` (one engine, one level) with the session."""
    state.contexts[node] = ctx
    salt = prompt_salt(state, ctx.settings)
    state.test_constants.setdefault(ctx.test, constants_of_test(ctx.settings, salt))


def other_load(
    ts: S.TestSettings, level: LoadLevel | float | None, overrides: Mapping[str, Any]
) -> tuple[LoadLevel, S.TestSettings]:
    """The level and settings of a load a test asks for besides its own (``slo_load``):
    ``level`` a ``LoadLevel``, a number (concurrency) or None (the test's first level);
    ``overrides`` fields of ``TestSettings``, a ``ConfigError`` naming the valid ones
    otherwise."""
    if level is None:
        level = ts.levels[0]
    elif not isinstance(level, LoadLevel):
        level = LoadLevel.concurrency(int(level))
    try:
        return level, dataclasses.replace(ts, **overrides)
    except TypeError as exc:
        fields = ", ".join(f.name for f in dataclasses.fields(S.TestSettings))
        raise ConfigError(f"slo_load: {exc}. Valid settings: {fields}.") from None

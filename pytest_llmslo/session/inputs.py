"""What a session is given, checked before anything starts: its engines' configs, output
paths, datasets, TLS files and baseline (``prepare``), and each test's (``plan_test``).
Every problem is a ``ConfigError`` naming the option and the fix."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from pytest_llmslo import settings as S
from pytest_llmslo.errors import ConfigError, WorkloadError
from pytest_llmslo.regression import baselines

from .baseline import load_baseline
from .engines import engines_of_test, resolve_engines
from .state import Session, baseline_root
from .writers import output_flags, output_path

__all__ = ["check_inputs", "check_output_path", "check_test_inputs", "plan_test", "prepare"]


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
    settings = state.settings
    for name, flag in output_flags().items():
        path = output_path(state, name)
        if path is not None:
            check_output_path(path, settings.sources.get(name, flag))
    if settings.save:
        label = settings.sources.get("slo_save", "--slo-save")
        try:
            saved = baselines.baseline_path(settings.save, baseline_root(state))
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
    if ts.tokenizer:
        try:
            load.check_workload(load.WorkloadSpec(tokenizer=ts.tokenizer))
        except WorkloadError as exc:
            raise ConfigError(f"{ts.sources.get('tokenizer') or 'tokenizer'}{on}: {exc}") from None
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


def prepare(state: Session) -> None:
    """Everything that can be checked before an engine starts: the session's engine
    configs, output paths, datasets and TLS files, and the baseline to compare with.
    Raises ``ConfigError`` naming the option and the fix."""
    state.roster.configs = resolve_engines(state)
    check_inputs(state)
    load_baseline(state)
    state.remote.open(state.settings, state.say)


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

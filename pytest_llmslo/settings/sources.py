"""Where a setting's value comes from: ``Sources`` holds what each source gave, and
``lookup`` applies the one precedence rule: the command line, then the environment, then the
run file, then the ini files, then the test's marker, then the default (``Sources.defaults``
over the spec's).
A value that does not parse is a ``ConfigError`` naming its source. ``check_environment``
refuses an ``LLMSLO_*`` variable that is a near miss of a setting's own."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pytest_llmslo.errors import ConfigError

from .runfile import RunFile
from .specs import ENV_PREFIX, SPECS, Spec


@dataclass(frozen=True, slots=True)
class Sources:
    """Raw values from each source. ``cli`` holds the values argparse parsed for the options
    that were given (only those: a given value may be None, e.g. ``--duration=0``;
    repeatable flags a list of parsed values); ``ini`` holds the raw text of each ini key
    (``""`` when unset); ``env`` is the process environment."""

    cli: Mapping[str, Any] = field(default_factory=dict)
    env: Mapping[str, str] = field(default_factory=dict)
    ini: Mapping[str, Any] = field(default_factory=dict)
    #: Parsed values that replace the specs' defaults (``llmslo run``: ``RUN_DEFAULTS``).
    defaults: Mapping[str, Any] = field(default_factory=dict)
    #: The run file's settings (``runfile.py``), between the environment and the ini keys.
    file: RunFile | None = None

    @classmethod
    def from_environ(
        cls,
        cli: Mapping[str, Any],
        ini: Mapping[str, Any],
        env: Mapping[str, str] | None = None,
        defaults: Mapping[str, Any] | None = None,
        file: RunFile | None = None,
    ) -> Sources:
        return cls(
            cli=cli,
            env=dict(os.environ if env is None else env),
            ini=ini,
            defaults=dict(defaults or {}),
            file=file,
        )


def _flatten_cli(spec: Spec, value: Any) -> Any:
    if spec.repeatable and isinstance(value, list):
        out: list[Any] = []
        for v in value:
            out.extend(v if isinstance(v, (tuple, list)) else (v,))
        return tuple(out)
    return value


def lookup(
    spec: Spec, sources: Sources, marker: Mapping[str, Any] | None, where: str
) -> tuple[Any, str, bool]:
    """(value, source label, found). Checks the sources in precedence order."""
    if spec.cli and spec.name in sources.cli:
        v = sources.cli[spec.name]
        if not (spec.repeatable and v in (None, [])):
            return _flatten_cli(spec, v), spec.cli, True
    raw = sources.env.get(spec.env)
    if raw is not None and raw.strip() != "":
        return parse_from(spec, raw, spec.env), spec.env, True
    if sources.file is not None and spec.name in sources.file.values:
        return sources.file.values[spec.name], sources.file.label(spec.name), True
    raw = sources.ini.get(spec.ini)
    if isinstance(raw, list):  # ini "args"/"linelist" types
        raw = " ".join(raw)
    if raw is not None and str(raw).strip() != "":
        label = f"ini {spec.ini}"
        return parse_from(spec, str(raw), label), label, True
    if marker is not None and spec.marker and spec.marker in marker:
        label = f"@pytest.mark.slo({spec.marker}=...) on {where}"
        try:
            return spec.coerce_marker(marker[spec.marker]), label, True
        except ValueError as exc:
            raise ConfigError(f"{label}: {exc}") from None
    return sources.defaults.get(spec.name, spec.default), "default", False


def parse_from(spec: Spec, raw: str, label: str) -> Any:
    try:
        return spec.parse(raw)
    except ValueError as exc:
        raise ConfigError(f"{label}: {exc}") from None


#: ``LLMSLO_*`` variables the package reads besides the settings' own: where the engine
#: suites find their installs (``engines/local.py``, ``.ci/engines.sh``) and CI switches.
OTHER_ENV: frozenset[str] = frozenset(
    {
        "LLMSLO_ENGINES_HOME",
        "LLMSLO_ENGINES_STRICT",
        "LLMSLO_REQUIRE_ENGINES",
        "LLMSLO_VLLM_PYTHON",
        "LLMSLO_DYNAMO_PYTHON",
        "LLMSLO_TINY_MODEL",
        "LLMSLO_SIM_IMAGE",
        "LLMSLO_IMAGE_PYTHON",
        "LLMSLO_CI_VENV",
        # Remote load workers: the shared key, the file that holds it, and the Secret
        # ("name/key") that holds it for worker pods (load/workerkey.py,
        # engines/runtimes/k8s/workerjob.py).
        "LLMSLO_WORKER_KEY",
        "LLMSLO_WORKER_KEY_FILE",
        "LLMSLO_WORKER_KEY_SECRET",
        # The token of the sim's admin endpoints beyond loopback (sim/admintoken.py).
        "LLMSLO_SIM_ADMIN_TOKEN",
    }
)


def check_environment(env: Mapping[str, str], also: Iterable[str] = ()) -> list[str]:
    """Warnings for the ``LLMSLO_*`` variables that nothing reads (``also``: names read
    elsewhere, such as the API key variable). One that is a near miss of a setting's own
    (``LLMSLO_CONCURENCY``) is a ``ConfigError`` naming it: the typo would silently run
    the defaults, a sweep of seven levels instead of the one asked for."""
    import difflib

    known = {s.env for s in SPECS} | OTHER_ENV | set(also)
    suffixes = {s.env.removeprefix(ENV_PREFIX): s.env for s in SPECS}
    out: list[str] = []
    for name in sorted(env):
        if not name.startswith(ENV_PREFIX) or name in known:
            continue
        close = difflib.get_close_matches(
            name.removeprefix(ENV_PREFIX), list(suffixes), n=1, cutoff=0.8
        )
        if close:
            raise ConfigError(
                f"{name} is set, but no setting reads it: did you mean {suffixes[close[0]]}? "
                "(docs/options.md lists every variable.)"
            )
        out.append(f"{name} is set, but no pytest-llmslo setting reads it; it is ignored")
    return out

"""``llmslo render`` and ``llmslo check``: the kubernetes objects of an engine with
``runtime = "kubernetes"``, and the preflight of the cluster it names."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any, TextIO

from pytest_llmslo.cliargs import EXIT_OK, UsageError, add_engines_file
from pytest_llmslo.errors import ConfigError

__all__ = ["add_check", "add_render", "check", "render"]


def add_render(sub: Any) -> None:
    """The ``render`` subcommand's arguments."""
    ren = sub.add_parser(
        "render",
        help='print the Kubernetes manifests of an engine with runtime = "kubernetes"',
        description="Print the objects the kubernetes runtime would apply for the engine "
        "(YAML, one document each, secrets as Secret references); nothing is applied.",
    )
    add_engines_file(ren)


def add_check(sub: Any) -> None:
    """The ``check`` subcommand's arguments."""
    chk = sub.add_parser(
        "check",
        help='check a cluster for what an engine with runtime = "kubernetes" needs',
        description="Before anything is applied: read the cluster the engine's kubeconfig "
        "names and list what it lacks (namespace, CRDs, RBAC, GPUs, runtime class, "
        "Secrets, the cache's access mode). Exit 1 when something is missing.",
    )
    add_engines_file(chk)


def render(args: argparse.Namespace, out: TextIO) -> int:
    """``llmslo render``: the manifests of one engine, as YAML."""
    from pytest_llmslo.engines import load_engine_configs, plan_engine, resolve_engine
    from pytest_llmslo.engines.runtimes.k8s.render import render_manifests
    from pytest_llmslo.engines.tempdirs import remove_dirs
    from pytest_llmslo.errors import EngineUnavailable

    source = args.engines_file or ("pyproject.toml" if Path("pyproject.toml").exists() else None)
    try:
        configs = load_engine_configs(source) if source else {}
        config = resolve_engine(args.engine, configs)
        if config.runtime != "kubernetes":
            raise UsageError(
                f"engine {args.engine!r} has runtime={config.runtime!r}: render prints the "
                'objects of runtime = "kubernetes"'
            )
        plan = plan_engine(config)
        try:
            out.write(render_manifests(plan))
        finally:
            remove_dirs(plan.temp_dirs)
    except (ConfigError, EngineUnavailable) as exc:
        raise UsageError(str(exc)) from None
    return EXIT_OK


def check(args: argparse.Namespace, out: TextIO) -> int:
    """``llmslo check``: the preflight of one engine's cluster (exit 1: something missing)."""
    from pytest_llmslo.engines import load_engine_configs, resolve_engine
    from pytest_llmslo.engines.runtimes.k8s.preflight import check_engine
    from pytest_llmslo.errors import EngineUnavailable

    source = args.engines_file or ("pyproject.toml" if Path("pyproject.toml").exists() else None)
    try:
        return check_engine(resolve_engine(args.engine, load_engine_configs(source or {})), out)
    except (ConfigError, EngineUnavailable) as exc:
        raise UsageError(str(exc)) from None

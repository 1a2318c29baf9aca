"""The pinned constants of a run, and whether two runs may be compared.

A run document's ``constants`` say what was measured: model, precision, hardware, dataset
and workload, lengths and the SLO (``PINNED_CONSTANTS``); ``model``, ``precision`` and
``hardware`` belong to each engine (``ENGINE_CONSTANTS``, from ``constants["per_engine"]``,
built by ``engine_constants`` from what an engine reports). ``constants_for_test`` picks
the values that hold for one test on one engine, and ``constants_mismatch`` says which of
them differ between a baseline and a new run (paths compared by file name; a loopback URL
or a tokenizer path is where, not what). The results document, the baselines and the
regression check all read this module; of the package it imports only the SLO DSL (to
normalise objectives written in different ways).
"""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from pytest_llmslo.slo import parse_objectives

__all__ = [
    "ENGINE_CONSTANTS",
    "PINNED_CONSTANTS",
    "constants_for_test",
    "constants_mismatch",
    "engine_constants",
    "engine_gpus",
]


#: Constants of a run document that must match for two runs to be compared.
PINNED_CONSTANTS: tuple[str, ...] = (
    "model",
    "precision",
    "hardware",
    "dataset",
    "workload",
    "isl",
    "osl",
    "slo",
)


#: Pinned constants that belong to one engine: with ``constants["per_engine"]`` they are
#: taken from the engine's entry there.
ENGINE_CONSTANTS: tuple[str, ...] = ("model", "precision", "hardware")


# Leaves of the pinned constants that name a place on one machine, not what was measured.
# The Python version is the harness's interpreter, not the serving hardware.
_IGNORED_LEAVES = frozenset({"tokenizer", "python"})


# Leaves compared by file name only: a dataset read from another directory is the same one.
_BASENAME_LEAVES = frozenset({"path", "dataset", "dataset_path"})


def _flatten(value: Any, prefix: str, out: dict[str, Any]) -> None:
    if isinstance(value, Mapping):
        if not value:
            out[prefix] = {}
        for k, v in value.items():
            if str(k) in _IGNORED_LEAVES:
                continue
            _flatten(v, f"{prefix}.{k}", out)
    else:
        out[prefix] = value


def _normalise_slo(value: Any) -> Any:
    """An SLO as a sorted tuple of objective labels, whatever its spelling: a text such as
    ``"ttft_p99<500,itl_p50<30"``, a list of labels, or of objective dicts."""
    items: list[Any]
    if isinstance(value, str):
        items = [p for p in value.replace(";", ",").split(",") if p.strip()]
    elif isinstance(value, Sequence):
        items = list(value)
    else:
        return value
    labels = []
    for item in items:
        if isinstance(item, Mapping):
            label = item.get("label")
            if label is None:
                label = json.dumps(item, sort_keys=True)
            labels.append(_objective_label(str(label)))
        else:
            labels.append(_objective_label(str(item)))
    return tuple(sorted(labels))


def _objective_label(text: str) -> str:
    try:
        objs = parse_objectives(text)
        if len(objs) == 1:
            return objs[0].label
    except Exception:
        # Not an objective this version can parse: compare the text as written.
        pass
    return " ".join(text.split())


def _leaf_equal(path: str, a: Any, b: Any) -> bool:
    leaf = path.rsplit(".", 1)[-1]
    if leaf in _BASENAME_LEAVES and isinstance(a, str) and isinstance(b, str):
        return Path(a).name == Path(b).name
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return not isinstance(a, bool) and not isinstance(b, bool) and float(a) == float(b)
    return bool(a == b)


_MISSING = object()


def _show(value: Any) -> str:
    if value is _MISSING:
        return "(not recorded)"
    if isinstance(value, tuple):
        return ", ".join(map(str, value)) or "(none)"
    return json.dumps(value, sort_keys=True, default=str)


def constants_mismatch(
    old_constants: Mapping[str, Any] | None,
    new_constants: Mapping[str, Any] | None,
    *,
    labels: tuple[str, str] = ("baseline", "new"),
) -> list[str]:
    """The pinned constants that differ between two documents, one line each
    (``"workload.isl: 512 (baseline) != 1024 (this run)"``); empty when the runs are
    comparable. Nested values are compared leaf by leaf; ``tokenizer`` paths are ignored
    and dataset paths compared by file name; the SLO by its objectives in any order or
    spelling. A constant recorded on one side only differs."""
    old = dict(old_constants or {})
    new = dict(new_constants or {})
    out: list[str] = []
    for key in PINNED_CONSTANTS:
        if key not in old and key not in new:
            continue
        a: dict[str, Any] = {}
        b: dict[str, Any] = {}
        if key in old:
            value = _normalise_slo(old[key]) if key == "slo" else old[key]
            _flatten(value, key, a)
        if key in new:
            value = _normalise_slo(new[key]) if key == "slo" else new[key]
            _flatten(value, key, b)
        for path in sorted(set(a) | set(b)):
            va, vb = a.get(path, _MISSING), b.get(path, _MISSING)
            if va is _MISSING or vb is _MISSING or not _leaf_equal(path, va, vb):
                out.append(f"{path}: {_show(va)} ({labels[0]}) != {_show(vb)} ({labels[1]})")
    return out


def constants_for_test(
    constants: Mapping[str, Any] | None, test: str, engine: str | None = None
) -> dict[str, Any]:
    """The constants that apply to ``test`` (on ``engine``): the document's, with the
    test's own settings (``constants["tests"][test]``, from its marker) over them; the
    lists of tests, engines and levels left out (they say what ran, not how), and so is the
    client machine (``client``: information, not a constant of the measurement).

    A document that records constants per engine (``constants["per_engine"]``) has its
    ``ENGINE_CONSTANTS`` (model, precision, hardware) taken from ``engine``'s entry; without
    ``engine`` they are left out (they are no constant of the whole document). A document
    without ``per_engine`` (written by another tool) keeps its own."""
    constants = constants or {}
    skip = ("tests", "engines", "levels", "per_engine", "client")
    out = {k: v for k, v in constants.items() if k not in skip}
    per_engine = constants.get("per_engine")
    if isinstance(per_engine, Mapping):
        for key in ENGINE_CONSTANTS:
            out.pop(key, None)
        mine = per_engine.get(engine) if engine is not None else None
        if isinstance(mine, Mapping):
            out.update({k: v for k, v in mine.items() if k in ENGINE_CONSTANTS})
    per_test = (constants.get("tests") or {}).get(test)
    if isinstance(per_test, Mapping):
        out.update({k: v for k, v in per_test.items() if k != "levels"})
    return out


def _loopback(url: Any) -> bool:

    try:
        host = urlsplit(str(url)).hostname or ""
    except ValueError:
        return False
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _argv_option(metadata: Mapping[str, Any], flag: str) -> str | None:
    """The value after ``flag`` in the command line of one of the engine's units."""
    for unit in metadata.get("units") or ():
        if not isinstance(unit, Mapping):
            continue
        given = unit.get("argv") or unit.get("command") or ()
        argv = [str(a) for a in given] if isinstance(given, (list, tuple)) else []
        for i, arg in enumerate(argv[:-1]):
            if arg == flag:
                return argv[i + 1]
    return None


def engine_gpus(metadata: Mapping[str, Any]) -> list[str] | None:
    """The GPUs an engine ran on, from its metadata (``EngineHandle.metadata()``), as
    sorted ``"NAME, MEMORY"`` strings (the driver version left out: it is software, like
    the engine's version, and a comparison across a driver update is a fair question).

    The machine's GPUs (``metadata["hardware"]["gpus"]``, from ``nvidia-smi``) narrowed to
    the engine's ``gpus`` setting: ``none`` -> none, a count -> the first that many, device
    indices -> those. None when they are not known: no hardware recorded, or an external
    engine on another host (the GPUs this machine sees are not its)."""
    hardware = metadata.get("hardware")
    if not isinstance(hardware, Mapping) or not isinstance(hardware.get("gpus"), list):
        return None
    if metadata.get("kind") == "external":
        url = metadata.get("url") or metadata.get("base_url")
        if not _loopback(url):
            return None
    names = [", ".join(p.strip() for p in str(g).split(",")[:2]) for g in hardware["gpus"]]
    setting = str(metadata.get("gpus") or "all").strip().lower()
    if setting == "none":
        names = []
    elif setting.isdigit():
        names = names[: int(setting)]
    elif setting != "all":
        ids = [i.strip() for i in setting.removeprefix("device=").split(",") if i.strip()]
        if ids and all(i.isdigit() for i in ids):
            names = [names[int(i)] for i in ids if int(i) < len(names)]
    return sorted(names)


def engine_constants(
    metadata: Mapping[str, Any],
    *,
    model: str | None = None,
    precision: str | None = None,
    sim_profile: str | None = None,
) -> dict[str, Any]:
    """One engine's ``ENGINE_CONSTANTS`` from its metadata: ``model`` (the given one, else
    the served model), ``precision`` (the given one, else the engine's quantization or
    dtype), and ``hardware``: for the sim engine its profile (``sim_profile``, else the
    ``--profile`` of its command line), for any other engine ``{"gpus": engine_gpus()}``;
    for an engine in a cluster also its ``access`` path (``port-forward`` or ``service``).
    The client machine is not part of it: a load generator on a laptop and on a CI runner
    measure the same engine."""
    if metadata.get("kind") == "sim":
        hardware: dict[str, Any] = {
            "sim_profile": sim_profile or _argv_option(metadata, "--profile")
        }
    else:
        hardware = {"gpus": engine_gpus(metadata)}
    # How the harness reaches an engine in a cluster (port-forward or the Service's DNS
    # name) is part of what is measured: a port-forward adds latency to every request.
    units = metadata.get("units")
    access = next(
        (u["access"] for u in units if isinstance(u, Mapping) and u.get("access")), None
    ) if isinstance(units, Sequence) else None  # fmt: skip
    if access:
        hardware["access"] = str(access)
    found = metadata.get("quantization") or metadata.get("dtype")
    served = metadata.get("model")
    return {
        "model": model or (None if served is None else str(served)),
        "precision": precision or (None if found is None else str(found)),
        "hardware": hardware,
    }

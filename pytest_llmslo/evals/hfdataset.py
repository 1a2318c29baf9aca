"""Eval items from a Hugging Face dataset, read offline through the ``datasets`` library.

``--slo-eval=hf:NAME`` names one of:

- a folder written by ``Dataset.save_to_disk`` or ``DatasetDict.save_to_disk`` (it holds
  ``dataset_info.json``, ``state.json`` or ``dataset_dict.json``): ``load_from_disk``;
- another folder of data files (Parquet, JSON lines, CSV...): ``load_dataset(folder)``;
- one data file, by its suffix (``.parquet``, ``.json``, ``.jsonl``, ``.csv``, ``.arrow``):
  ``load_dataset("parquet", data_files=...)`` and the like;
- a dataset of the Hub (``gsm8k``, ``openai/gsm8k``), from the local ``datasets`` cache
  alone (``cache_dir=`` of ``--slo-eval-hf``, else ``HF_DATASETS_CACHE``).

A dataset is data, never code: a library old enough to run a dataset's loading script
(before 4.0) is told not to (``trust_remote_code=False``). Nothing is downloaded while a
test runs: the load is made with the library's offline mode forced on (``HF_HUB_OFFLINE``
and ``HF_DATASETS_OFFLINE``, the library's own flags, for the time of the load alone),
``download_mode="reuse_dataset_if_exists"`` and local files only, and a dataset that is
not there is a ``WorkloadError`` that says what to do: download it once where the network
is open, save it to disk, or export it to JSONL. ``datasets`` is an optional dependency,
imported here alone; without it the eval is an error saying to install it.

A dataset's contents are input from outside, like an eval file's: at most ``max_items``
rows are read (the first ones), in Arrow batches whose text fields are measured before one
is turned into Python (a field over ``MAX_FIELD_BYTES``, more than ``MAX_MESSAGES`` chat
messages or ``MAX_READ_BYTES`` in all is refused, naming the row), columns of other types
than text, numbers, lists and records are refused, and each row is checked as an eval
file's row is (``dataset.validate_row``).
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..errors import WorkloadError
from .dataset import MAX_FILE_BYTES, MAX_MESSAGES, MAX_PROMPT_CHARS, EvalRow, validate_row
from .hfreading import HfReading

__all__ = ["MAX_FIELD_BYTES", "MAX_READ_BYTES", "read_hf_rows"]

#: The most bytes one text field of a row may hold (a prompt is at most 1M characters).
MAX_FIELD_BYTES = 4 * MAX_PROMPT_CHARS
#: The most bytes of text read from a dataset in all (an eval file's bound).
MAX_READ_BYTES = MAX_FILE_BYTES
_BATCH = 256
_SAVED = ("dataset_info.json", "state.json", "dataset_dict.json")
_BUILDERS = {
    ".parquet": "parquet",
    ".json": "json",
    ".jsonl": "json",
    ".csv": "csv",
    ".arrow": "arrow",
}
_HUB_NAME = re.compile(r"[A-Za-z0-9][\w.-]{0,95}(/[\w.-]{1,96})?")
_OFFLINE_ENV = ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")


def _import_datasets() -> Any:
    try:
        return importlib.import_module("datasets")
    except ImportError:
        raise WorkloadError(
            "an eval dataset (--slo-eval=hf:NAME) is read with the 'datasets' library, which "
            "is not installed: install datasets (pip install datasets), or export the "
            "dataset to JSONL and name the file (--slo-eval=PATH.jsonl)"
        ) from None


@contextlib.contextmanager
def _offline(datasets: Any) -> Iterator[None]:
    """The library offline and quiet for the time of a load, whatever it was before."""
    config = datasets.config
    hub: Any = sys.modules.get("huggingface_hub.constants")
    env = {k: os.environ.get(k) for k in _OFFLINE_ENV}
    flags = {k: getattr(config, k) for k in _OFFLINE_ENV if hasattr(config, k)}
    hub_flag = getattr(hub, "HF_HUB_OFFLINE", None)
    bars = datasets.utils.are_progress_bars_disabled()
    try:
        for k in _OFFLINE_ENV:
            os.environ[k] = "1"
        for k in flags:
            setattr(config, k, True)
        if hub is not None:
            hub.HF_HUB_OFFLINE = True
        datasets.disable_progress_bars()
        yield
    finally:
        for k, v in env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        for k, flag in flags.items():
            setattr(config, k, flag)
        if hub is not None:
            hub.HF_HUB_OFFLINE = hub_flag
        if not bars:
            datasets.enable_progress_bars()


def _advice(name: str, reading: HfReading) -> str:
    if Path(name).expanduser().exists():
        return (
            "the folder or file is read as a dataset saved with save_to_disk, a folder of "
            "data files or one data file (.parquet, .json, .jsonl, .csv, .arrow)"
        )
    config = f", {reading.config!r}" if reading.config else ""
    return (
        "a dataset of the Hub is read offline, from the local datasets cache "
        f"({reading.cache_dir or 'HF_DATASETS_CACHE'}), and no test run downloads one: "
        'download it once where the network is open (python -c "import datasets; '
        f'datasets.load_dataset({name!r}{config})"), or save it with save_to_disk and name '
        "that folder (hf:PATH), or export it to JSONL (--slo-eval=PATH.jsonl)"
    )


def _load(datasets: Any, name: str, reading: HfReading) -> Any:
    path = Path(name).expanduser()
    common: dict[str, Any] = {
        "cache_dir": reading.cache_dir,
        "download_mode": "reuse_dataset_if_exists",
        "download_config": datasets.DownloadConfig(local_files_only=True),
    }
    if "trust_remote_code" in inspect.signature(datasets.load_dataset).parameters:
        # A library before 4.0 can run a dataset's loading script: a dataset is data here.
        common["trust_remote_code"] = False
    if path.is_dir() and any((path / f).is_file() for f in _SAVED):
        return datasets.load_from_disk(str(path))
    if path.is_dir():
        return datasets.load_dataset(str(path), reading.config, **common)
    if path.is_file():
        builder = _BUILDERS.get(path.suffix.lower())
        if builder is None:
            raise WorkloadError(
                f"eval dataset hf:{name}: a data file is one of {', '.join(_BUILDERS)}"
            )
        return datasets.load_dataset(builder, data_files=str(path), **common)
    if not _HUB_NAME.fullmatch(name):
        raise WorkloadError(
            f"eval dataset hf:{name}: no such folder or file, and not a dataset name of the "
            "Hub (NAME or OWNER/NAME)"
        )
    return datasets.load_dataset(name, reading.config, **common)


def _split(data: Any, name: str, reading: HfReading) -> Any:
    """The one split to read from what was loaded (a ``DatasetDict`` or a ``Dataset``)."""
    splits = list(data) if isinstance(data, dict) else None  # a DatasetDict is a dict
    if splits is None:
        if reading.split is not None:
            raise WorkloadError(
                f"eval dataset hf:{name} is one split (saved with save_to_disk) and has no "
                f"split {reading.split!r}: drop split="
            )
        return data
    if reading.split is None and len(splits) == 1:
        return data[splits[0]]
    if reading.split not in splits:
        asked = "names none" if reading.split is None else f"names {reading.split!r}"
        raise WorkloadError(
            f"eval dataset hf:{name} has the splits {', '.join(map(str, splits))}, and "
            f"--slo-eval-hf {asked}: say which with split=NAME"
        )
    return data[reading.split]


def _text_bytes(column: Any, pa: Any, pc: Any, where: str) -> int:
    """The bytes of text in ``column`` (an Arrow array), each field and list bounded;
    ``WorkloadError`` for a field too large or a type an eval row cannot be made of."""
    kind = column.type
    types = pa.types
    if types.is_string(kind) or types.is_large_string(kind) or types.is_binary(kind):
        lengths = pc.binary_length(column)
        longest = pc.max(lengths).as_py() or 0
        if longest > MAX_FIELD_BYTES:
            raise WorkloadError(f"{where}: a field of {longest} bytes, over {MAX_FIELD_BYTES}")
        return int(pc.sum(lengths).as_py() or 0)
    if types.is_list(kind) or types.is_large_list(kind):
        longest = pc.max(pc.list_value_length(column)).as_py() or 0
        if longest > MAX_MESSAGES:
            raise WorkloadError(f"{where}: a list of {longest} items, over {MAX_MESSAGES}")
        return _text_bytes(pc.list_flatten(column), pa, pc, where)
    if types.is_struct(kind):
        flat = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
        return sum(_text_bytes(child, pa, pc, where) for child in flat.flatten())
    if types.is_integer(kind) or types.is_floating(kind) or types.is_boolean(kind):
        return 0
    if types.is_null(kind):
        return 0
    raise WorkloadError(f"{where}: a column of type {kind}, which is no text, number or list")


def _reference(value: Any, reading: HfReading, where: str) -> Any:
    marker = reading.reference_after
    if marker is None or not isinstance(value, str):
        return value
    at = value.rfind(marker)
    if at < 0:
        raise WorkloadError(f"{where}: the reference holds no {marker!r} (reference_after=)")
    return value[at + len(marker) :].strip()


def _rows(data: Any, name: str, reading: HfReading) -> list[EvalRow]:
    columns = [reading.text_column, reading.reference]
    have = list(data.column_names)
    missing = [c for c in columns if c not in have]
    if missing:
        raise WorkloadError(
            f"eval dataset hf:{name} has no column {', '.join(map(repr, missing))}; its "
            f"columns: {', '.join(have[:50])}: name them with --slo-eval-hf "
            "prompt=COLUMN (or messages=COLUMN),reference=COLUMN"
        )
    pa = importlib.import_module("pyarrow")
    pc = importlib.import_module("pyarrow.compute")
    n = min(len(data), reading.max_items)
    view = data.with_format("arrow", columns=columns)
    text_key = "prompt" if reading.messages is None else "messages"
    rows: list[EvalRow] = []
    total = 0
    for start in range(0, n, _BATCH):
        table = view[start : min(n, start + _BATCH)]
        where = f"eval dataset hf:{name}, rows {start} to {start + table.num_rows - 1}"
        for column in columns:
            total += _text_bytes(table.column(column), pa, pc, f"{where}, column {column!r}")
        if total > MAX_READ_BYTES:
            raise WorkloadError(
                f"eval dataset hf:{name}: more than {MAX_READ_BYTES >> 20} MiB of text in its "
                "first rows: read fewer (max_items=)"
            )
        texts = table.column(reading.text_column).to_pylist()
        refs = table.column(reading.reference).to_pylist()
        for k, (text, ref) in enumerate(zip(texts, refs, strict=True)):
            at = f"eval dataset hf:{name}, row {start + k}"
            obj = {
                text_key: text,
                "reference": _reference(ref, reading, at),
                "scorer": reading.scorer,
                "tolerance": reading.tolerance,
                "max_tokens": reading.max_tokens,
            }
            rows.append(validate_row(obj, at))
    if not rows:
        raise WorkloadError(f"eval dataset hf:{name} has no rows")
    return rows


def read_hf_rows(name: str, reading: HfReading) -> list[EvalRow]:
    """The eval rows of the dataset ``name`` read as ``reading`` says (module docstring)."""
    datasets = _import_datasets()
    try:
        with _offline(datasets):
            data = _load(datasets, name, reading)
    except WorkloadError:
        raise
    except Exception as exc:  # the library's own errors, of many kinds: say what to do
        raise WorkloadError(
            f"eval dataset hf:{name} cannot be loaded ({type(exc).__name__}: {exc!s:.300}): "
            f"{_advice(name, reading)}"
        ) from None
    return _rows(_split(data, name, reading), name, reading)

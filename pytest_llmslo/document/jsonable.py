"""Plain JSON data of any value the package holds: what the results document is made of."""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Mapping
from typing import Any, Protocol, runtime_checkable

__all__ = ["SupportsToDict", "jsonable"]


@runtime_checkable
class SupportsToDict(Protocol):
    """A value that says what it is as JSON data (a summary, a verdict, an objective, a
    knee): ``jsonable`` expands it, the JUnit properties flatten it, the pinned constants
    keep it."""

    def to_dict(self) -> Mapping[str, Any]: ...


#: Per class, whether its instances are ``SupportsToDict`` (a cache: the answer of a class
#: does not change, and a runtime-checkable check costs about 8 us where a document holds
#: many values of a few classes).
_SAYS_ITSELF: dict[type, bool] = {}


def _says_itself(cls: type) -> bool:
    known = _SAYS_ITSELF.get(cls)
    if known is None:
        known = _SAYS_ITSELF[cls] = issubclass(cls, SupportsToDict)
    return known


def jsonable(value: Any) -> Any:
    """``value`` as plain JSON data: mappings with str keys, lists, finite floats (NaN and
    infinities become None), objects with ``to_dict()`` or dataclasses expanded, numpy
    scalars and arrays converted, paths as strings; anything else becomes ``str()``."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):  # also numpy float64, made a plain float here
        return float(value) if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [jsonable(v) for v in value]
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    if not isinstance(value, type) and _says_itself(type(value)):
        return jsonable(value.to_dict())
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return jsonable(dataclasses.asdict(value))
    tolist = getattr(value, "tolist", None)  # numpy arrays and scalars
    if callable(tolist):
        return jsonable(tolist())
    return str(value)

"""numpy arrays as data: a dtype named from a short list, a shape, and the raw
little-endian bytes, checked on the way in against what they declare.

msgspec encodes a message's arrays through ``to_data`` and decodes them through
``from_data`` (its ``enc_hook``/``dec_hook``). Nothing is executed and nothing is read
past the bytes received: a dtype outside ``dtypes``, a shape of more than two sizes or
one that does not match the byte count is a ``DataError``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import LoadError

__all__ = ["MAX_ITEMS", "DataError", "from_data", "to_data"]

#: The most items an array may declare (2**31: far past any frame's bound).
MAX_ITEMS = 2**31
_MAX_DIMS = 2


class DataError(LoadError):
    """Bytes that are not the data they claim to be (from a peer or a spill file)."""


def to_data(arr: np.ndarray, names: dict[np.dtype[Any], str]) -> tuple[str, list[int], Any]:
    """``arr`` as ``(dtype name, shape, bytes)``; ``TypeError`` for a dtype not in
    ``names`` (dtype: name, little-endian)."""
    le = arr.dtype.newbyteorder("<")
    name = names.get(le)
    if name is None:
        raise TypeError(f"an array of dtype {arr.dtype} cannot be sent as data")
    if arr.dtype != le:
        arr = arr.astype(le)
    return (name, list(arr.shape), np.ascontiguousarray(arr).data)


def from_data(obj: Any, dtypes: dict[str, np.dtype[Any]]) -> np.ndarray:
    """The array ``to_data`` made, checked (see the module docstring); read-only."""
    if not (isinstance(obj, list | tuple) and len(obj) == 3):
        raise DataError("an array is [dtype, shape, bytes]")
    name, shape, data = obj
    dtype = dtypes.get(name) if isinstance(name, str) else None
    if dtype is None:
        raise DataError(f"an array of dtype {name!r:.40}, not one of {sorted(dtypes)}")
    if (
        not isinstance(shape, list | tuple)
        or len(shape) > _MAX_DIMS
        or not all(type(n) is int and 0 <= n <= MAX_ITEMS for n in shape)
    ):
        raise DataError(f"an array's shape must be at most {_MAX_DIMS} sizes from 0 to 2**31")
    if not isinstance(data, bytes | bytearray | memoryview):
        raise DataError("an array's data must be bytes")
    count = 1
    for n in shape:
        count *= n
    if count * dtype.itemsize != len(data):
        raise DataError(
            f"an array of shape {list(shape)} and dtype {name} holds "
            f"{count * dtype.itemsize} bytes, not the {len(data)} sent"
        )
    return np.frombuffer(data, dtype=dtype).reshape(shape)

"""Argument checks at the boundary of the public API.

Every public method of :class:`~qaindex.Ranker`, :meth:`~qaindex.Model.encode`,
:meth:`~qaindex.Model.score`, :func:`~qaindex.read_corpus` and the evaluation functions
checks the type and range of what it is given with these helpers, so a wrong argument is a
:class:`~qaindex.QueryError` (a :class:`~qaindex.QAIndexError`) naming the argument and the
value, never a bare ``TypeError`` from deep inside numpy or onnxruntime.

Example
-------
>>> positive_int(3, "k")
3
>>> positive_int(0, "k")
Traceback (most recent call last):
...
qaindex.errors.QueryError: k must be a positive integer, got 0
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from typing import Any

import numpy as np

from .errors import QueryError

__all__ = [
    "MAX_INT64",
    "finite_vectors",
    "first_surrogate",
    "id_list",
    "optional_callable",
    "path_or_records",
    "positive_int",
    "text_list",
]

MAX_INT64 = (1 << 63) - 1
_SURROGATE = re.compile("[\ud800-\udfff]")


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def positive_int(value: Any, name: str, *, maximum: int | None = None) -> int:
    """``value`` as an ``int`` >= 1 (and <= ``maximum``); bools, floats and strings are refused.

    Example
    -------
    >>> positive_int(np.int64(5), "batch_size")
    5
    """
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 1:
        raise QueryError(f"{name} must be a positive integer, got {_show(value)}")
    if maximum is not None and value > maximum:
        raise QueryError(f"{name} must be at most {maximum:,}, got {_show(value)}")
    return int(value)


def optional_callable(value: Any, name: str) -> None:
    """Refuse anything but ``None`` or a callable."""
    if value is not None and not callable(value):
        raise QueryError(f"{name} must be a function or None, got {type(value).__name__}")


def first_surrogate(text: str) -> str | None:
    """The first lone UTF-16 surrogate in ``text`` (which cannot be written as UTF-8), or None."""
    found = _SURROGATE.search(text)
    return found.group() if found else None


def text_list(texts: Any, name: str, *, what: str = "text") -> list[str]:
    """A list of strings from a list/tuple/iterable of strings (a single string is refused).

    Each item must be a ``str`` without lone surrogates; emptiness is left to the caller.

    Example
    -------
    >>> text_list(("a", "b"), "texts")
    ['a', 'b']
    """
    if isinstance(texts, str | bytes | bytearray):
        raise QueryError(f"{name} must be a list of {what}s, got a single {type(texts).__name__}; wrap it in a list")
    if isinstance(texts, np.ndarray) and texts.ndim != 1:
        raise QueryError(f"{name} must be a one-dimensional list of {what}s, got an array of shape {texts.shape}")
    if not isinstance(texts, Iterable):
        raise QueryError(f"{name} must be a list of {what}s, got {type(texts).__name__}")
    out = list(texts)
    for i, t in enumerate(out):
        if type(t) is str and t.isascii():  # the common case: no surrogate possible
            continue
        if not isinstance(t, str):
            raise QueryError(f"{name}[{i}] must be a {what} (str), got {type(t).__name__} {_show(t)}")
        bad = first_surrogate(t)
        if bad is not None:
            raise QueryError(
                f"{name}[{i}] contains a lone surrogate U+{ord(bad):04X}, which is not valid Unicode; "
                "pass text decoded from valid UTF-8"
            )
    return out


def id_list(ids: Any, name: str = "ids") -> list[str | int]:
    """A list of answer ids (str or int) from a list/tuple/set/iterable; a single id is refused.

    Example
    -------
    >>> id_list(["a", 3])
    ['a', 3]
    """
    if isinstance(ids, str | bytes | bytearray | int | np.integer):
        raise QueryError(
            f"{name} must be a list of ids, got a single {type(ids).__name__} {_show(ids)}; "
            f"wrap it in a list, e.g. [{_show(ids)}]"
        )
    if isinstance(ids, np.ndarray) and ids.ndim != 1:
        raise QueryError(f"{name} must be a one-dimensional list of ids, got an array of shape {ids.shape}")
    if not isinstance(ids, Iterable):
        raise QueryError(f"{name} must be a list of ids (str or int), got {type(ids).__name__}")
    out: list[str | int] = []
    for i, ident in enumerate(ids):
        if isinstance(ident, np.integer | np.str_):
            ident = ident.item()
        if isinstance(ident, bool) or not isinstance(ident, str | int):
            raise QueryError(f"{name}[{i}] must be a str or int id, got {type(ident).__name__} {_show(ident)}")
        out.append(ident)
    return out


def finite_vectors(values: Any, name: str, *, shape: tuple[int | None, ...], ball: bool = False) -> np.ndarray:
    """A C-contiguous float32 array of the given shape (None: any size), every value finite.

    Integer and floating arrays (or nested lists of numbers) are accepted; strings, objects,
    complex numbers and booleans are refused. ``ball``: every row must lie strictly inside the
    unit ball (Poincaré geometry).

    Example
    -------
    >>> finite_vectors([[0.1, 0.2]], "queries", shape=(None, 2)).dtype
    dtype('float32')
    """
    if isinstance(values, str | bytes | bytearray):
        raise QueryError(f"{name} must be a numeric array, got {type(values).__name__}")
    try:
        arr = np.asarray(values)
    except (ValueError, TypeError, OverflowError, RecursionError, MemoryError) as exc:
        raise QueryError(f"{name} must be a numeric array of shape {_shape(shape)} ({exc})") from None
    if arr.dtype.kind not in "iuf":
        raise QueryError(
            f"{name} must hold integers or floats, got dtype {arr.dtype}; pass a float32 array of shape {_shape(shape)}"
        )
    pairs = zip(arr.shape, shape, strict=False)  # lengths differ only when ndim is wrong (checked first)
    if arr.ndim != len(shape) or any(want is not None and got != want for got, want in pairs):
        raise QueryError(f"{name} must have shape {_shape(shape)}, got {arr.shape}")
    with np.errstate(over="ignore", invalid="ignore"):
        out = np.ascontiguousarray(arr, dtype=np.float32)
    if not np.isfinite(out).all():
        raise QueryError(
            f"{name} contains NaN or infinite values (or values too large for float32); pass finite numbers"
        )
    if ball and out.size:
        sq = np.einsum("...j,...j->...", out.astype(np.float64), out.astype(np.float64))
        if np.any(sq >= 1.0):
            raise QueryError(
                f"{name} has vectors of norm >= 1, outside the Poincaré ball; use vectors from model.encode()"
            )
    return out


def _shape(shape: tuple[int | None, ...]) -> str:
    return "(" + ", ".join("n" if s is None else str(s) for s in shape) + ")"


def path_or_records(value: Any, name: str) -> bool:
    """True when ``value`` is a path (str/PathLike), False for an iterable of records."""
    if isinstance(value, str | os.PathLike):
        return True
    if isinstance(value, bytes | bytearray | dict) or not isinstance(value, Iterable):
        raise QueryError(
            f"{name} must be a corpus file path or a list of records (dicts with an 'answer'), "
            f"got {type(value).__name__}"
        )
    return False

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

import math
import os
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from .errors import QueryError

__all__ = [
    "MAX_INT64",
    "MAX_THREADS_PER_CORE",
    "choice",
    "finite_number",
    "finite_vectors",
    "first_surrogate",
    "flag",
    "id_list",
    "max_threads",
    "numeric_table",
    "optional_callable",
    "path_arg",
    "path_or_records",
    "positive_int",
    "text_list",
    "threads_arg",
    "verify_arg",
]

MAX_INT64 = (1 << 63) - 1
MAX_SETTING = 1 << 20  # bound of overfetch, ef_search and index parameters (FAISS takes C ints)
MAX_THREADS_PER_CORE = 4
NAME_MAX = 255  # bytes in one path component (ext4, xfs, btrfs, APFS, NTFS)
PATH_MAX = 4096  # bytes in a whole path (Linux)
_SURROGATE = re.compile("[\ud800-\udfff]")


def shown(value: Any) -> str:
    """``repr(value)`` cut to 60 characters, for error messages (a huge value is never printed whole).

    Example
    -------
    >>> shown("x" * 100)
    "'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx..."
    """
    try:
        text = repr(value)
    except Exception:  # noqa: BLE001 - a broken __repr__ must not hide the real error
        text = f"<{type(value).__name__}>"
    return text if len(text) <= 60 else text[:57] + "..."


def positive_int(value: Any, name: str, *, maximum: int | None = None) -> int:
    """``value`` as an ``int`` >= 1 (and <= ``maximum``); bools, floats and strings are refused.

    Example
    -------
    >>> positive_int(np.int64(5), "batch_size")
    5
    """
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 1:
        raise QueryError(f"{name} must be a positive integer, got {shown(value)}")
    if maximum is not None and value > maximum:
        raise QueryError(f"{name} must be at most {maximum:,}, got {shown(value)}")
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
            raise QueryError(f"{name}[{i}] must be a {what} (str), got {type(t).__name__} {shown(t)}")
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
            f"{name} must be a list of ids, got a single {type(ids).__name__} {shown(ids)}; "
            f"wrap it in a list, e.g. [{shown(ids)}]"
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
            raise QueryError(f"{name}[{i}] must be a str or int id, got {type(ident).__name__} {shown(ident)}")
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
        path_arg(value, name, what="a corpus file path")
        return True
    if isinstance(value, np.ndarray) and value.ndim != 1:
        raise QueryError(
            f"{name} must be a corpus file path or a list of records (dicts with an 'answer'), "
            f"got an array of shape {value.shape}"
        )
    if isinstance(value, bytes | bytearray | dict) or not isinstance(value, Iterable):
        raise QueryError(
            f"{name} must be a corpus file path or a list of records (dicts with an 'answer'), "
            f"got {type(value).__name__}"
        )
    return False


def verify_arg(value: Any) -> bool | str:
    """``verify`` of a load: True, False (numpy bools too), ``"lazy"`` or ``"full"``.

    Example
    -------
    >>> verify_arg("full"), verify_arg("lazy"), verify_arg(np.bool_(False))
    ('full', 'lazy', False)
    >>> verify_arg("yes")
    Traceback (most recent call last):
    ...
    qaindex.errors.QueryError: verify must be True, False, "lazy" or "full", got str 'yes'
    """
    if isinstance(value, str) and value in ("full", "lazy"):
        return value
    if isinstance(value, bool | np.bool_):
        return bool(value)
    raise QueryError(f'verify must be True, False, "lazy" or "full", got {type(value).__name__} {shown(value)}')


def flag(value: Any, name: str) -> bool:
    """``value`` as a bool: only ``True``/``False`` (or a numpy bool scalar) are accepted.

    Example
    -------
    >>> flag(np.bool_(True), "verify")
    True
    >>> flag(np.array([1, 2]), "verify")
    Traceback (most recent call last):
    ...
    qaindex.errors.QueryError: verify must be True or False, got ndarray array([1, 2])
    """
    if isinstance(value, bool | np.bool_):
        return bool(value)
    raise QueryError(f"{name} must be True or False, got {type(value).__name__} {shown(value)}")


def choice(value: Any, name: str, choices: tuple[str, ...]) -> str:
    """``value`` if it is one of the strings ``choices`` (compared as strings only).

    Example
    -------
    >>> choice("cpu", "device", ("auto", "cpu", "cuda"))
    'cpu'
    """
    if not isinstance(value, str) or value not in choices:
        raise QueryError(f"{name} must be one of {', '.join(choices)}; got {shown(value)}")
    return value


def finite_number(
    value: Any, name: str, *, minimum: float | None = None, maximum: float | None = None, optional: bool = False
) -> float:
    """``value`` as a finite float (an int, float or numpy number; bools and strings refused).

    Integers too large for a float (e.g. ``10**400``) are refused, not rounded to infinity.

    Example
    -------
    >>> finite_number(3, "min_score")
    3.0
    >>> finite_number(10**400, "min_score")
    Traceback (most recent call last):
    ...
    qaindex.errors.QueryError: min_score must be a finite number, got 1000000000000000000000000000000000000000000...
    """
    accepted = "a finite number or None" if optional else "a finite number"
    if isinstance(value, bool | np.bool_) or not isinstance(value, int | float | np.integer | np.floating):
        raise QueryError(f"{name} must be {accepted}, got {shown(value)}")
    try:
        number = float(value)
    except OverflowError:
        number = math.inf
    if not math.isfinite(number):
        raise QueryError(f"{name} must be {accepted}, got {shown(value)}")
    if minimum is not None and number < minimum:
        raise QueryError(f"{name} must be at least {minimum:g}, got {shown(value)}")
    if maximum is not None and number > maximum:
        raise QueryError(f"{name} must be at most {maximum:g}, got {shown(value)}")
    return number


def max_threads() -> int:
    """The largest ``threads`` accepted: :data:`MAX_THREADS_PER_CORE` per core of this machine."""
    return MAX_THREADS_PER_CORE * (os.cpu_count() or 1)


def threads_arg(value: Any, name: str = "threads") -> int | None:
    """``None`` (every core) or an int from 1 to :func:`max_threads`.

    More threads than that only slows onnxruntime down (each thread is created and spun at
    load); a negative or zero count has no meaning.

    Example
    -------
    >>> threads_arg(None) is None, threads_arg(1)
    (True, 1)
    """
    if value is None:
        return None
    limit = max_threads()
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or not 1 <= value <= limit:
        raise QueryError(
            f"{name} must be None (every core) or an integer from 1 to {limit} "
            f"({MAX_THREADS_PER_CORE} per core of this machine), got {shown(value)}"
        )
    return int(value)


def path_arg(value: Any, name: str, *, what: str = "a path") -> Path:
    """``value`` as a :class:`~pathlib.Path`, checked before any file is touched.

    A ``str`` or ``os.PathLike`` (returning ``str``) is accepted; ``bytes``, other types, an
    empty string, a NUL character, text that is not valid UTF-8 (lone surrogates), a path
    component longer than 255 bytes or a path longer than 4,096 bytes are refused.

    Example
    -------
    >>> path_arg("my-index", "path")
    PosixPath('my-index')
    >>> path_arg("a\\0b", "path")
    Traceback (most recent call last):
    ...
    qaindex.errors.QueryError: path contains a NUL character: 'a\\x00b'; a path cannot contain one
    """
    if isinstance(value, bytes | bytearray):
        raise QueryError(f"{name} must be {what} as str or pathlib.Path, got bytes {shown(value)}; decode it")
    if not isinstance(value, str | os.PathLike):
        raise QueryError(f"{name} must be {what} (str or pathlib.Path), got {type(value).__name__} {shown(value)}")
    try:
        text = os.fspath(value)
    except Exception as exc:  # noqa: BLE001 - a user's __fspath__ may raise anything
        raise QueryError(f"{name}: os.fspath() failed on {shown(value)} ({type(exc).__name__})") from None
    if not isinstance(text, str):
        raise QueryError(f"{name} must be {what} as str or pathlib.Path, got a path of {type(text).__name__}")
    if not text:
        raise QueryError(f"{name} is empty; give {what}")
    if "\0" in text:
        raise QueryError(f"{name} contains a NUL character: {shown(text)}; a path cannot contain one")
    try:
        raw = text.encode("utf-8")  # FAISS and the manifests take UTF-8 paths: no lone surrogates
    except UnicodeError:
        raise QueryError(f"{name} is not valid UTF-8 text ({shown(text)}); use a path of valid characters") from None
    if len(raw) > PATH_MAX:
        raise QueryError(f"{name} is {len(raw):,} bytes long ({shown(text)}); paths are at most {PATH_MAX:,} bytes")
    for part in raw.split(b"/"):
        if len(part) > NAME_MAX:
            raise QueryError(
                f"{name} has a component of {len(part):,} bytes ({shown(part.decode('utf-8'))}); "
                f"a file or folder name is at most {NAME_MAX} bytes"
            )
    return Path(text)


def numeric_table(values: Any, name: str, *, integer: bool = False) -> np.ndarray:
    """A numeric array from an array or a nested list of equal-length rows (the caller checks
    the shape).

    Ragged lists, strings and objects are refused; ``integer`` accepts only integer dtypes
    (booleans excluded).

    Example
    -------
    >>> numeric_table([[1, 2], [3, 4]], "rows", integer=True).shape
    (2, 2)
    >>> numeric_table([[1.0], [2.0, 3.0]], "scores")
    Traceback (most recent call last):
    ...
    qaindex.errors.QueryError: scores must be a 2-D numeric array (rows of equal length), got a ragged list
    """
    if isinstance(values, str | bytes | bytearray):
        raise QueryError(f"{name} must be a 2-D numeric array, got {type(values).__name__}")
    try:
        arr = np.asarray(values)
    except (ValueError, TypeError, OverflowError, RecursionError, MemoryError):
        raise QueryError(f"{name} must be a 2-D numeric array (rows of equal length), got a ragged list") from None
    kinds = "iu" if integer else "iuf"
    if arr.dtype.kind not in kinds:
        want = "integers" if integer else "integers or floats"
        raise QueryError(f"{name} must hold {want}, got dtype {arr.dtype}")
    return arr

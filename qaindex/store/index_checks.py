"""Content checks of a snapshot being loaded: what a checksum cannot vouch for.

A checksum proves that a file is the one the manifest lists, not that the manifest's writer
wrote sensible content (a hand-edited index with recomputed checksums, or a bug). On every
load (:meth:`qaindex.Ranker.load`):

* ``records.offsets.npy`` has an integer dtype, starts at 0, strictly increases and ends
  at the size of ``records.jsonl``; every line starts with ``{`` and ends with a newline;
* ``vectors.npy`` is exactly float32;
* the model's scorer gives finite numbers and measures the geometry the index and the model
  declare (a Poincaré scorer relabelled ``cosine`` is refused): one tiny scorer call;
* the lexical index's parameters and each answer's BM25 term counts are in their ranges
  (:mod:`qaindex.store.field_ranges`, the one table of valid stored values).

With ``verify=True`` (the default, which also hashes every file) the content is scanned too,
in blocks:

* every vector is finite, and inside the unit ball for Poincaré models;
* every record parses as strict JSON (no ``NaN``/``Infinity``, also in metadata) with a
  string or integer ``id`` (a signed 64-bit one), a string ``answer``, a list of string
  ``questions`` and an object ``metadata``, and no lone surrogate; ids are unique.

A build and a save apply the same checks (:func:`check_content`), scanning every vector and
every record not known good, so nothing a load refuses is written.

``verify=False`` skips the scans (and the checksums); a record that is damaged is then
refused when it is read, by :meth:`qaindex.store.records.RecordStore.get`. Each failure is an
:class:`~qaindex.errors.IndexFormatError` naming the file, the line or row, and what is
wrong. ``benchmarks/speed/load.py`` measures what the checks cost.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import IndexFormatError, ModelFormatError
from .field_ranges import ID_RANGE, check_term_counts, has_escaped_surrogate, lexical_error, record_value_error

__all__ = [
    "check_content",
    "check_geometry",
    "check_lexical",
    "check_offsets",
    "check_postings",
    "check_records",
    "check_vectors",
    "parse_record",
    "stored_vectors_error",
]

_BLOCK_ROWS = 1 << 16
_BLOCK_BYTES = 1 << 24
_REBUILD = "the index is corrupted, rebuild it"


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON (strict JSON has no NaN or Infinity)")


_DECODER = json.JSONDecoder(parse_constant=_refuse_constant)


def parse_record(raw: bytes) -> dict[str, Any]:
    """Decode one stored line and check its fields; raises ``ValueError`` saying what is wrong.

    Example
    -------
    >>> parse_record(b'{"id": 1, "answer": "Yes.", "questions": [], "metadata": {}}\\n')["answer"]
    'Yes.'
    >>> parse_record(b'{"id": 1, "metadata": {"x": NaN}}\\n')
    Traceback (most recent call last):
    ...
    ValueError: not strict JSON (NaN is not valid JSON (strict JSON has no NaN or Infinity))
    """
    try:
        obj = _DECODER.decode(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise ValueError("not UTF-8") from None
    except (ValueError, RecursionError) as exc:
        raise ValueError(f"not strict JSON ({exc})") from None
    if _key(obj) is None:  # the usual types pass one quick test; anything else is looked at closely
        _check_fields(obj)
    why = record_value_error(obj, raw)  # the ranges: qaindex.store.field_ranges
    if why is not None:
        raise ValueError(why)
    return obj  # type: ignore[no-any-return]


def _check_fields(obj: Any) -> None:
    if not isinstance(obj, dict):
        raise ValueError(f"not a JSON object but {type(obj).__name__}")
    ident = obj.get("id")
    if isinstance(ident, bool) or not isinstance(ident, str | int):
        raise ValueError(f'field "id" must be a string or an integer, got {ident!r}')
    if not isinstance(obj.get("answer"), str):
        raise ValueError(f'field "answer" must be a string, got {obj.get("answer")!r}')
    questions = obj.get("questions", [])
    if not isinstance(questions, list) or not all(isinstance(q, str) for q in questions):
        raise ValueError('field "questions" must be a list of strings')
    if not isinstance(obj.get("metadata", {}), dict):
        raise ValueError('field "metadata" must be an object')


def check_offsets(path: Path, offsets: np.ndarray, data: Any) -> None:
    """Offsets of ``records.jsonl`` (``path``): integer, from 0, strictly increasing, to its size;
    each line starts with ``{`` and ends with a newline. O(n) numpy on the offsets."""
    where = path.with_name("records.offsets.npy")
    if offsets.dtype.kind not in "iu":
        raise IndexFormatError(f"{where}: dtype {offsets.dtype}, expected integer byte offsets; {_REBUILD}")
    if offsets.ndim != 1 or len(offsets) == 0 or int(offsets[0]) != 0:
        raise IndexFormatError(f"{where}: must start at byte 0; {_REBUILD}")
    steps = np.diff(offsets.astype(np.int64, copy=False))
    if len(steps) and int(steps.min()) <= 0:
        row = int(np.argmax(steps <= 0))
        raise IndexFormatError(
            f"{where}: offsets must strictly increase, but line {row + 1} ends at byte {int(offsets[row + 1])}, "
            f"not after its start {int(offsets[row])}; {_REBUILD}"
        )
    if int(offsets[-1]) != len(data):
        raise IndexFormatError(f"{path}: size does not match its offsets; rebuild the index")
    if len(offsets) > 1:
        view = np.frombuffer(data, dtype=np.uint8) if len(data) else np.zeros(0, np.uint8)
        starts = view[offsets[:-1]]
        ends = view[offsets[1:] - 1]
        bad = (starts != ord("{")) | (ends != ord("\n"))
        if bad.any():
            row = int(np.argmax(bad))
            raise IndexFormatError(
                f"{path}: line {row + 1} (bytes {int(offsets[row])}..{int(offsets[row + 1])}) is not one JSON "
                f"object per line as its offsets say; {_REBUILD}"
            )


def check_vectors(path: Path, vectors: np.ndarray, *, ball: bool, scan: bool, rows: np.ndarray | None = None) -> None:
    """``vectors.npy``: exactly float32; with ``scan``, finite and (``ball``) of norm below 1
    (``rows``: the file's row number of each of ``vectors``, for the messages; default
    ``0 .. len - 1``)."""
    if vectors.dtype != np.dtype(np.float32):
        raise IndexFormatError(f"{path}: dtype {vectors.dtype}, expected float32; {_REBUILD}")
    if not scan:
        return

    def row_of(i: int) -> int:
        return i if rows is None else int(rows[i])

    for start in range(0, len(vectors), _BLOCK_ROWS):
        block = np.asarray(vectors[start : start + _BLOCK_ROWS])
        with np.errstate(over="ignore", invalid="ignore"):
            sq = np.einsum("ij,ij->i", block, block)
        suspect = ~np.isfinite(sq)
        if suspect.any():  # overflow of a finite but huge row, or a NaN / Infinity
            found = np.flatnonzero(suspect)
            bad = found[~np.isfinite(block[found]).all(axis=1)]
            if len(bad):
                raise IndexFormatError(
                    f"{path}: row {row_of(start + int(bad[0]))} holds NaN or infinite values; {_REBUILD}"
                )
        if ball:
            outside = ~(sq < 1.0)
            if outside.any():
                row = int(np.argmax(outside))
                norm = float(np.sqrt(np.float64(sq[row])))
                raise IndexFormatError(
                    f"{path}: row {row_of(start + row)} has norm {norm:.6g}, outside the unit ball of a "
                    f"Poincaré model; {_REBUILD}"
                )


def check_records(path: Path, data: Any, offsets: np.ndarray) -> dict[str, int]:
    """Parse every line of ``records.jsonl`` in blocks; returns ``{str(id): row}`` (ids unique).

    One C-level decode per block (the block's lines joined as a JSON array), then a check
    of each record's fields.
    """
    ids: dict[str, int] = {}
    n = len(offsets) - 1
    row = 0
    while row < n:
        end = int(np.searchsorted(offsets, offsets[row] + _BLOCK_BYTES, side="right")) - 1
        end = min(n, max(end, row + 1))
        chunk = bytes(data[int(offsets[row]) : int(offsets[end])])
        try:
            text = chunk.decode("utf-8")
            if text.count("\n") != end - row:
                raise ValueError("a raw newline inside a record")
            parsed = _DECODER.decode("[" + text[:-1].replace("\n", ",") + "]")
            if not isinstance(parsed, list) or len(parsed) != end - row:
                raise ValueError("not one object per line")
            keys = _block_keys(parsed)
            if _out_of_range(parsed, chunk):
                raise ValueError("a value out of range")  # _locate names the line and the field
            before = len(ids)
            ids.update(zip(keys, range(row, end), strict=True))
            if len(ids) != before + end - row:
                _duplicate(path, data, offsets)
        except (ValueError, RecursionError):
            _locate(path, data, offsets, row, end)  # raises, naming the line
            raise AssertionError("unreachable") from None
        row = end
    return ids


def _block_keys(parsed: list[Any]) -> list[str]:
    """``str(id)`` of every record of a block, its fields' types checked with C-level loops
    (``map``, ``set``); any doubt and each record is checked on its own (which raises)."""
    try:
        idents = [obj["id"] for obj in parsed]
        answers = [obj["answer"] for obj in parsed]
        metadata = [obj.get("metadata", _EMPTY) for obj in parsed]
        questions = [obj.get("questions", _NO_QUESTIONS) for obj in parsed]
        ok = (
            set(map(type, parsed)) <= {dict}
            and set(map(type, idents)) <= {str, int}
            and set(map(type, answers)) <= {str}
            and set(map(type, metadata)) <= {dict}
            and set(map(type, questions)) <= {list}
            and set(map(type, itertools.chain.from_iterable(questions))) <= {str}
        )
    except (KeyError, TypeError, AttributeError):
        ok = False
    if not ok:
        for obj in parsed:
            if _key(obj) is None:
                _check_fields(obj)  # raises, saying what is wrong
    return list(map(str, idents))


_NO_QUESTIONS: list[str] = []


def _out_of_range(parsed: list[Any], chunk: bytes) -> bool:
    """Whether a block may hold an integer id beyond 64 bits or a lone surrogate (an escape
    like ``\\ud800``: UTF-8 cannot hold one raw); C-level scans, details by :func:`parse_record`."""
    ints = [obj["id"] for obj in parsed if type(obj["id"]) is int]
    if ints and not (ID_RANGE.holds(min(ints)) and ID_RANGE.holds(max(ints))):
        return True
    return has_escaped_surrogate(chunk) and any(record_value_error(obj, None) is not None for obj in parsed)


def _key(obj: Any) -> str | None:
    """``str(id)`` of a record whose fields have the usual types, else None (checked in full then)."""
    if type(obj) is not dict:
        return None
    ident, questions, metadata = obj.get("id"), obj.get("questions", ()), obj.get("metadata", _EMPTY)
    kind = type(ident)
    if (
        (kind is str or kind is int)
        and type(obj.get("answer")) is str
        and type(metadata) is dict
        and (questions == () or (type(questions) is list and all(type(q) is str for q in questions)))
    ):
        return ident if kind is str else str(ident)
    return None


_EMPTY: dict[str, Any] = {}


def _duplicate(path: Path, data: Any, offsets: np.ndarray) -> None:
    """Raise for the first id seen twice (a rare path: every line is read again)."""
    seen: dict[str, int] = {}
    for row in range(len(offsets) - 1):  # rare path: find both lines from the start
        key = str(parse_record(bytes(data[int(offsets[row]) : int(offsets[row + 1])]))["id"])
        if key in seen:
            ident = json.loads(bytes(data[int(offsets[row]) : int(offsets[row + 1])]))["id"]
            raise IndexFormatError(
                f"{path}: id {json.dumps(ident)} is on lines {seen[key] + 1} and {row + 1}; ids must be unique; "
                f"{_REBUILD}"
            )
        seen[key] = row
    raise AssertionError("unreachable")


def _locate(path: Path, data: Any, offsets: np.ndarray, start: int, end: int) -> None:
    """Find the first bad line of a block that failed as a whole, and raise for it."""
    for row in range(start, end):
        try:
            parse_record(bytes(data[int(offsets[row]) : int(offsets[row + 1])]))
        except ValueError as exc:
            raise IndexFormatError(f"{path}: line {row + 1}: {exc}; {_REBUILD}") from None
    raise IndexFormatError(f"{path}: lines {start + 1}..{end} are not one JSON object per line; {_REBUILD}")


def check_geometry(mpath: Path, model: Any, *, blame: Path | None = None) -> None:
    """The model's scorer gives finite numbers and measures its declared geometry (one call
    on two tiny vectors).

    Poincaré distance between ``0.1 e1`` and ``0.2 e1`` is about 0.2; their cosine distance
    is 0. Other geometries are not probed for their distance. ``blame``: the model directory
    a build or save names (a :class:`~qaindex.errors.ModelFormatError`); None: the index
    manifest ``mpath`` of a load (an :class:`~qaindex.errors.IndexFormatError`).
    """
    geometry = model.geometry
    q = np.zeros((1, model.dimension), dtype=np.float32)
    c = np.zeros((1, 1, model.dimension), dtype=np.float32)
    q[0, 0], c[0, 0, 0] = 0.1, 0.2

    def bad(what: str) -> Exception:
        if blame is not None:
            return ModelFormatError(f"{blame}: {what}; the model is broken: re-export it, or use another model")
        return IndexFormatError(f"{mpath}: {what}; {_REBUILD}")

    try:
        score, distance = model.score_checked(q, c)
        s, d = float(score[0, 0]), float(distance[0, 0])
    except Exception as exc:  # noqa: BLE001 - a graph that cannot score two vectors is broken
        raise bad(f"the model's scorer fails on two test vectors ({exc})") from None
    if not (np.isfinite(s) and np.isfinite(d)):
        raise bad(f"the model's scorer returns NaN or infinite values for two test vectors (score {s}, distance {d})")
    if model.space.probed and not model.space.scorer_measures(d):
        raise bad(
            f'geometry is "{geometry}", but the model\'s scorer does not measure it (distance {d:.4g} '
            "between two vectors of the same direction)"
        )


def check_postings(directory: Path, lexical: Any, what: str, remedy: str = _REBUILD) -> None:
    """A BM25 index's stored postings equal those its terms and counts give
    (:meth:`~qaindex.text.lexical.LexicalIndex.postings_differ`; ``what``: whose texts they index)."""
    stale = lexical.postings_differ()
    if stale is not None:
        raise IndexFormatError(f"{directory / stale}: does not match the BM25 terms and counts of the {what}; {remedy}")


def check_lexical(where: Path, lexical: Any, offsets: np.ndarray, *, scan: bool = False) -> None:
    """The BM25 index's parameters in their ranges (:func:`~qaindex.store.field_ranges.lexical_error`)
    and each answer's term counts within its record line (:func:`~qaindex.store.field_ranges.check_term_counts`);
    with ``scan``, its stored postings equal those its terms give
    (:meth:`~qaindex.text.lexical.LexicalIndex.postings_differ`)."""
    count = len(offsets) - 1
    meta = {"k1": lexical.k1, "b": lexical.b, "dense_ratio": lexical.ratio_info}
    why = lexical_error(meta, count)
    if why is not None:
        raise IndexFormatError(f"{where / 'lexical' / 'vocab.json'}: {why}; {_REBUILD} with --hybrid")
    row = check_term_counts(lexical._counts, lexical._offsets, np.diff(np.asarray(offsets, dtype=np.int64)))
    if row is not None:
        start, end = int(lexical._offsets[row]), int(lexical._offsets[row + 1])
        total = int(np.asarray(lexical._counts[start:end], dtype=np.int64).sum())
        raise IndexFormatError(
            f"{where / 'lexical' / 'counts.npy'}: answer {row} (line {row + 1} of records.jsonl) counts {total} BM25 "
            f"terms, more than its line's {int(offsets[row + 1]) - int(offsets[row])} bytes can hold; {_REBUILD} "
            "with --hybrid"
        )
    if scan:
        check_postings(where / "lexical", lexical, "answers", f"{_REBUILD} with --hybrid")


def check_content(
    where: Path,
    *,
    mpath: Path | None = None,
    model: Any,
    vectors: np.ndarray,
    records: Any,
    lexical: Any,
    scan: bool,
    blame: Path | None = None,
    keys: Any = None,
) -> None:
    """The content checks a load, a build and a save share: what a checksum cannot vouch for.

    The scorer (:func:`check_geometry`), the vectors' dtype (and with ``scan`` every vector:
    :func:`check_vectors`), with ``scan`` every record unless ``records.checked`` (a store of
    validated records, or one scanned before: :func:`check_records`, the ids found kept by
    ``records``), the lexical index (:func:`check_lexical`) and the stored-question keys'
    vectors as the answers' (``keys``, a :class:`~qaindex.key_index.KeyIndex`). ``where``: the
    index directory or snapshot the messages name; a broken scorer is blamed on ``blame``, the
    model directory of a build or save, or on ``mpath``, the manifest of the index loaded.
    """
    check_geometry(mpath or where / "manifest.json", model, blame=blame)
    check_vectors(where / "vectors.npy", vectors, ball=model.space.ball, scan=scan)
    if scan and not records.checked:  # a store of validated records (a build, an add) is not scanned again
        source = records.source or where / "records.jsonl"
        records._ids = check_records(source, records.data, records.offsets)
        records.checked = True
    if lexical is not None:
        check_lexical(where, lexical, records.offsets, scan=scan)
    if keys is not None:
        check_vectors(where / "keys" / "vectors.npy", np.asarray(keys.vectors), ball=model.space.ball, scan=scan)
        if scan and keys.lexical is not None:
            check_postings(where / "keys" / "lexical", keys.lexical, "stored questions")


def stored_vectors_error(source: Path | str, rows: np.ndarray) -> IndexFormatError:
    """The error for stored vectors that scored NaN or infinity (an index loaded with ``verify=False``)."""
    shown = ", ".join(str(int(r)) for r in np.unique(rows)[:5])
    return IndexFormatError(
        f"{source}: rows {shown} give non-finite scores (NaN or infinite values stored); {_REBUILD} "
        "(a load with verify=True checks every vector)"
    )

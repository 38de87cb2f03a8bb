"""Corpus records and the JSONL corpus format.

A corpus is a UTF-8 JSONL file, one JSON object per line:

- ``answer`` (required): non-empty answer text;
- ``id`` (optional): a string or integer, unique in the corpus; defaults to the line number
  (when adding to an index: the largest integer id already there plus the line number, so
  id-less answers of two files never collide);
- ``question`` (string) or ``questions`` (list of strings), optional: questions this answer
  answers; used by training and kept by ``build``;
- any other key is kept as metadata and returned with search hits.

The answer-selection benchmark format (``qid, question, aid, answer, label``) is accepted
too: ``aid`` is the id, an answer repeated for several questions is stored once, and the
questions whose ``label`` is 1 are kept as its questions.

What is refused (a :class:`~qaindex.CorpusError` naming the line and the field), so that
everything stored can be written back as strict JSON and UTF-8:

- ids that are booleans, floats, empty or blank strings, or integers outside the signed
  64-bit range (other JSON readers lose precision beyond it);
- ``NaN``, ``Infinity`` and ``-Infinity`` anywhere in a line (Python's ``json`` accepts
  them, strict JSON does not): write ``null`` or a string instead;
- lone UTF-16 surrogates (``"\ud800"`` escapes without their pair) in any string or key:
  they cannot be encoded as UTF-8;
- values nested more than 64 levels deep;
- in-memory records (:func:`records_from_dicts`): anything but JSON types (dict with
  string keys, list, str, int, finite float, bool, None).
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, BinaryIO

from . import fast_path_switch
from .checks import path_arg
from .errors import CorpusError

__all__ = ["BENCHMARK_KEYS", "Record", "read_corpus", "records_from_dicts"]

BENCHMARK_KEYS = frozenset({"qid", "question", "aid", "answer", "label"})
MAX_DEPTH = 64
_MAX_ID = (1 << 63) - 1
_SURROGATE = re.compile("[\ud800-\udfff]")
_RESERVED = frozenset({"id", "answer", "question", "questions"})
_READ_HINT = 1 << 20  # bytes of whole lines read per call
MAX_LINE_BYTES = 64 << 20  # the longest line a corpus or labelled file may hold (64 MiB)
_raw_decode = json.JSONDecoder().raw_decode


@dataclass(frozen=True)
class Record:
    """One answer of a corpus.

    Attributes
    ----------
    id : str or int
        Unique identifier.
    answer : str
        The answer text (non-empty).
    questions : tuple of str
        Questions known to be answered by it (may be empty).
    metadata : dict
        Any other JSON fields, returned with search hits.

    Example
    -------
    >>> Record(id="reset", answer="Use the reset link.").to_json()
    {'id': 'reset', 'answer': 'Use the reset link.', 'questions': [], 'metadata': {}}
    """

    id: str | int
    answer: str
    questions: tuple[str, ...] = ()
    metadata: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """The record as the JSON object stored in an index."""
        return {
            "id": self.id,
            "answer": self.answer,
            "questions": list(self.questions),
            "metadata": self.metadata,
        }

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> Record:
        """Inverse of :meth:`to_json` (no validation: for data qaindex wrote itself)."""
        return cls(
            id=obj["id"],
            answer=obj["answer"],
            questions=tuple(obj.get("questions", ())),
            metadata=dict(obj.get("metadata", {})),
        )


def _id_key(value: str | int) -> str:
    return str(value)


def _short(value: Any) -> str:
    try:
        text = json.dumps(value, ensure_ascii=True, allow_nan=True)
    except (TypeError, ValueError, RecursionError):
        text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _check_id_value(ident: Any, name: str, at: str) -> None:
    if isinstance(ident, bool) or not isinstance(ident, str | int):
        raise CorpusError(f'{at}: field "{name}" must be a string or an integer, got {_short(ident)}')
    if isinstance(ident, str) and not ident.strip():
        raise CorpusError(f'{at}: field "{name}" is empty; give a non-empty id or leave it out')
    if isinstance(ident, int) and not -_MAX_ID - 1 <= ident <= _MAX_ID:
        raise CorpusError(f'{at}: field "{name}" is an integer outside the 64-bit range; use a string id instead')


def _field(path: list[str | int]) -> str:
    if not path:
        return "the line"
    out = str(path[0])
    for part in path[1:]:
        out += f"[{part}]" if isinstance(part, int) else f".{part}"
    return f'field "{out}"'


def _nonfinite(value: float) -> str:
    return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")


def _plain_json(obj: dict[str, Any], at: str) -> Any:
    """A fresh copy of an in-memory record as JSON would store it (no cycles, no shared parts)."""
    try:
        text = json.dumps(obj, ensure_ascii=False, allow_nan=True)
    except RecursionError:
        raise CorpusError(f"{at}: nested too deeply (more than {MAX_DEPTH} levels allowed); flatten it") from None
    except (TypeError, ValueError) as exc:
        raise CorpusError(
            f"{at}: cannot be stored as JSON ({exc}); use str, int, float, bool, None, list or dict"
        ) from None
    try:
        return json.loads(text)
    except (RecursionError, ValueError) as exc:
        raise CorpusError(f"{at}: cannot be stored as JSON ({type(exc).__name__}); flatten it") from None


def check_json_values(obj: dict[str, Any], at: str) -> None:
    """Refuse what strict JSON or UTF-8 cannot hold, iteratively (no recursion)."""
    stack: list[tuple[Any, list[str | int]]] = [(obj, [])]
    while stack:
        value, path = stack.pop()
        if len(path) > MAX_DEPTH:
            raise CorpusError(f"{at}: {_field(path[:1])} is nested more than {MAX_DEPTH} levels deep; flatten it")
        if isinstance(value, str):
            bad = _SURROGATE.search(value)
            if bad:
                raise CorpusError(
                    f"{at}: {_field(path)} contains a lone surrogate \\u{ord(bad.group()):04x}, which is not "
                    "valid Unicode and cannot be stored as UTF-8; fix or remove that escape"
                )
        elif isinstance(value, bool) or value is None:
            pass
        elif isinstance(value, int):
            if value.bit_length() > 1024:
                raise CorpusError(f"{at}: {_field(path)} is an integer with more than 300 digits; store it as a string")
        elif isinstance(value, float):
            if not math.isfinite(value):
                raise CorpusError(
                    f"{at}: {_field(path)} is {_nonfinite(value)}, which is not valid JSON; "
                    "use null or a string instead"
                )
        elif isinstance(value, dict):
            for key, item in value.items():
                if not isinstance(key, str):
                    raise CorpusError(f"{at}: {_field(path)} has a key {_short(key)} that is not a string")
                bad = _SURROGATE.search(key)
                if bad:
                    raise CorpusError(
                        f"{at}: key {_short(key)} of {_field(path)} contains a lone surrogate "
                        f"\\u{ord(bad.group()):04x}, which is not valid Unicode; fix or remove that escape"
                    )
                stack.append((item, [*path, key]))
        elif isinstance(value, list):
            for i, item in enumerate(value):
                stack.append((item, [*path, i]))
        else:
            raise CorpusError(
                f"{at}: {_field(path)} is a {type(value).__name__}, which JSON cannot hold; "
                "use str, int, float, bool, None, list or dict"
            )


def _clean_text(value: str) -> bool:
    """Whether a str holds no lone surrogate (what :func:`check_json_values` refuses in text)."""
    return value.isascii() or _SURROGATE.search(value) is None


def _plain_scalar(value: Any) -> bool:
    """Whether a value is a JSON scalar of an exact built-in type that every check accepts."""
    kind = type(value)
    if kind is str:
        return _clean_text(value)
    if kind is int:
        return bool(value.bit_length() <= 1024)
    if kind is float:
        return math.isfinite(value)
    return kind is bool or value is None


def _plain_id(value: Any) -> bool:
    """Whether a value is an id every check accepts (exact int in range, or non-blank clean str)."""
    kind = type(value)
    if kind is int:
        return bool(-_MAX_ID - 1 <= value <= _MAX_ID)
    return kind is str and _clean_text(value) and bool(value.strip())


_Parts = tuple[str | int, str, tuple[str, ...], dict[str, Any]]


def _plain_record(obj: dict[str, Any], default_id: int) -> _Parts | None:
    """``(id, answer, questions, metadata)`` of a corpus-format dict of plain values, or None.

    The fast path of :meth:`_Collector.add`: it accepts only flat records of exact built-in
    types (str, int, finite float, bool, None; ``questions`` a list of str) that pass every
    check of the generic path, and returns None for anything else, which then goes through
    the generic path and gets its exact message. The duplicate-id check stays the caller's.
    """
    answer = obj.get("answer")
    if type(answer) is not str or not answer.strip() or not _clean_text(answer):
        return None
    reserved = 1
    if "id" in obj:
        ident = obj["id"]
        if not _plain_id(ident):
            return None
        reserved += 1
    else:
        ident = default_id
    questions: tuple[str, ...] = ()
    if "questions" in obj:
        if "question" in obj:
            return None
        items = obj["questions"]
        if type(items) is not list:
            return None
        for q in items:
            if type(q) is not str or not _clean_text(q):
                return None
        questions = tuple(q for q in items if q.strip())
        reserved += 1
    elif "question" in obj:
        q = obj["question"]
        if type(q) is not str or not _clean_text(q):
            return None
        questions = (q,) if q.strip() else ()
        reserved += 1
    metadata: dict[str, Any] = {}
    if len(obj) > reserved:
        for key, value in obj.items():
            if key in _RESERVED:
                continue
            if type(key) is not str or not _clean_text(key) or not _plain_scalar(value):
                return None
            metadata[key] = value
    return ident, answer, questions, metadata


def _plain_benchmark_row(obj: dict[str, Any]) -> bool:
    """Whether an answer-selection row has exactly the five fields, each of a type every check accepts."""
    return (
        len(obj) == 5
        and _plain_id(obj.get("qid"))
        and _plain_id(obj.get("aid"))
        and type(obj.get("question")) is str
        and _clean_text(obj["question"])
        and type(obj.get("answer")) is str
        and _clean_text(obj["answer"])
        and type(obj.get("label")) is int
    )


def benchmark_row(obj: Mapping[str, Any], at: str) -> tuple[str | int, str, str | int, str, int]:
    """Validate one answer-selection benchmark line: ``(qid, question, aid, answer, label)``.

    The one definition of the format, used by the corpus reader and by
    :func:`qaindex.eval.datasets.read_labelled`: all five fields present, ``qid`` and ``aid`` ids
    (strings or integers), ``question`` a string, ``answer`` non-empty text, ``label`` 0 or 1
    (not ``true``/``false``). ``at`` names the file and line in messages.

    Example
    -------
    >>> benchmark_row({"qid": "q1", "question": "who?", "aid": "a1", "answer": "me", "label": 1}, "f:1")
    ('q1', 'who?', 'a1', 'me', 1)
    """
    for key in ("qid", "question", "aid", "answer", "label"):
        if key not in obj:
            raise CorpusError(f'{at}: field "{key}" is missing; benchmark lines need qid, question, aid, answer, label')
    _check_id_value(obj["qid"], "qid", at)
    _check_id_value(obj["aid"], "aid", at)
    label = obj["label"]
    if isinstance(label, bool) or label not in (0, 1):
        raise CorpusError(f'{at}: field "label" must be 0 or 1, got {json.dumps(label)}')
    question = obj["question"]
    if not isinstance(question, str):
        raise CorpusError(f'{at}: field "question" must be a string, got {type(question).__name__}')
    return obj["qid"], question, obj["aid"], _Collector._answer(obj, at), int(label)


class _Collector:
    """Validates objects one by one, merging benchmark rows that share an ``aid``."""

    def __init__(self, source: str, *, existing_ids: Iterable[str | int] = ()) -> None:
        self.source = source
        self.records: list[Record] = []
        self._where: dict[str, int] = {}  # id key -> position in self.records
        self._line_of: dict[str, str] = {}  # id key -> where it was first seen
        self._existing = {_id_key(i) for i in existing_ids}

    def _at(self, line: int | None) -> str:
        return f"{self.source}:{line}" if line is not None else self.source

    def add(self, obj: Any, line: int | None, default_id: int) -> None:
        at = self._at(line)
        if not isinstance(obj, dict):
            raise CorpusError(
                f"{at}: expected a JSON object, got {type(obj).__name__}; "
                'write one object per line, e.g. {"answer": "..."}'
            )
        check_json_values(obj, at)
        if "aid" in obj and "id" not in obj:
            self._add_benchmark_row(obj, at)
            return
        answer = self._answer(obj, at)
        ident = obj.get("id", default_id)
        self._check_id(ident, at)
        questions = self._questions(obj, at)
        metadata = {k: v for k, v in obj.items() if k not in _RESERVED}
        self._register(ident, at)
        self.records.append(Record(ident, answer, questions, metadata))

    def add_plain(self, obj: Any, at: str, default_id: int) -> bool:
        """:meth:`add` for the common record shapes; False (nothing done) for anything else.

        Takes a dict of plain values that passes every check (:func:`_plain_record`,
        :func:`_plain_benchmark_row`) and is not a duplicate; the caller gives everything
        else to :meth:`add`, which then raises the generic path's exact message. ``at`` is
        where the object came from (``file:line`` or ``records[i]``).
        """
        if type(obj) is not dict or not fast_path_switch.enabled():
            return False
        if "aid" in obj and "id" not in obj:
            if not _plain_benchmark_row(obj):
                return False
            self._add_benchmark_row(obj, at)  # its checks, and its messages, are the generic ones
            return True
        parts = _plain_record(obj, default_id)
        if parts is None:
            return False
        ident = parts[0]
        key = _id_key(ident)
        if key in self._line_of or key in self._existing:
            return False
        self._register(ident, at)
        self.records.append(Record(*parts))
        return True

    @staticmethod
    def _answer(obj: Mapping[str, Any], at: str) -> str:
        if "answer" not in obj:
            raise CorpusError(f'{at}: field "answer" is missing; every record needs a non-empty "answer" text')
        answer = obj["answer"]
        if not isinstance(answer, str):
            raise CorpusError(f'{at}: field "answer" must be a string, got {type(answer).__name__}')
        if not answer.strip():
            raise CorpusError(f'{at}: field "answer" is empty; give it the answer text or drop the line')
        return answer

    def _check_id(self, ident: Any, at: str) -> None:
        _check_id_value(ident, "id", at)
        key = _id_key(ident)
        if key in self._line_of:
            raise CorpusError(
                f"{at}: duplicate id {json.dumps(ident)} (first seen at {self._line_of[key]}); ids must be unique"
            )
        if key in self._existing:
            raise CorpusError(
                f"{at}: id {json.dumps(ident)} is already in the index; remove it first or use another id"
            )

    def _register(self, ident: str | int, at: str) -> None:
        key = _id_key(ident)
        self._line_of[key] = at
        self._where[key] = len(self.records)

    @staticmethod
    def _questions(obj: Mapping[str, Any], at: str) -> tuple[str, ...]:
        if "question" in obj and "questions" in obj:
            raise CorpusError(f'{at}: give either "question" or "questions", not both')
        if "question" in obj:
            q = obj["question"]
            if not isinstance(q, str):
                raise CorpusError(f'{at}: field "question" must be a string, got {type(q).__name__}')
            return (q,) if q.strip() else ()
        if "questions" in obj:
            qs = obj["questions"]
            if not isinstance(qs, list) or not all(isinstance(q, str) for q in qs):
                raise CorpusError(f'{at}: field "questions" must be a list of strings')
            return tuple(q for q in qs if q.strip())
        return ()

    def _add_benchmark_row(self, obj: Mapping[str, Any], at: str) -> None:
        _qid, question, aid, answer, label = benchmark_row(obj, at)
        key = _id_key(aid)
        if key in self._where:
            pos = self._where[key]
            old = self.records[pos]
            if old.answer != answer:
                raise CorpusError(
                    f"{at}: aid {json.dumps(aid)} was first seen at {self._line_of[key]} with a "
                    "different answer text; an aid must always name the same answer"
                )
            if label == 1 and question.strip() and question not in old.questions:
                self.records[pos] = Record(old.id, old.answer, (*old.questions, question), old.metadata)
            return
        if key in self._existing:
            raise CorpusError(f"{at}: id {json.dumps(aid)} is already in the index; remove it first or use another id")
        self._register(aid, at)
        questions = (question,) if label == 1 and question.strip() else ()
        self.records.append(Record(aid, answer, questions, {}))

    def finish(self) -> list[Record]:
        if not self.records:
            raise CorpusError(f'{self.source}: no answers found; write one JSON object per line with an "answer" field')
        return self.records


def read_corpus(path: str | os.PathLike[str], *, existing_ids: Iterable[str | int] = ()) -> list[Record]:
    """Read and validate a JSONL corpus file.

    Parameters
    ----------
    path : path-like
        The corpus file (UTF-8 JSONL).
    existing_ids : iterable, optional
        Ids already in use (when adding to an index); reusing one is an error.

    Returns
    -------
    list of Record

    Raises
    ------
    CorpusError
        With ``file:line: what is wrong; what to do`` for the first bad line.

    Example
    -------
    >>> import tempfile, pathlib
    >>> p = pathlib.Path(tempfile.mkdtemp()) / "c.jsonl"
    >>> _ = p.write_text('{"answer": "Forty-two."}\\n', encoding="utf-8")
    >>> read_corpus(p)[0].id
    1
    """
    if not isinstance(path, str | os.PathLike):
        raise CorpusError(f"read_corpus takes a file path, got {type(path).__name__}")
    source = os.fspath(path)
    if not isinstance(source, str):
        raise CorpusError(f"read_corpus takes a file path as text, got {type(source).__name__}")
    path_arg(source, "path", what="a corpus file path")
    if isinstance(existing_ids, str | bytes) or not isinstance(existing_ids, Iterable):
        raise CorpusError(f"existing_ids must be a list of ids, got {type(existing_ids).__name__}")
    existing_ids = list(existing_ids)
    base = id_base(existing_ids)
    collector = _Collector(source, existing_ids=existing_ids)
    for number, obj in read_json_lines(path):
        if not collector.add_plain(obj, f"{source}:{number}", base + number):
            collector.add(obj, number, base + number)
    return collector.finish()


def id_base(existing_ids: Iterable[str | int]) -> int:
    """What an id-less answer's default id starts after: the largest integer id in use, or 0.

    An answer without an ``id`` gets ``id_base(existing) + its line number`` (or position),
    so the id-less answers of a file added to an index never collide with the ids already
    there, integer ids or strings of digits alike.

    Example
    -------
    >>> id_base([]), id_base([1, 2, "7", "faq-9", -3])
    (0, 7)
    """
    base = 0
    for ident in existing_ids:
        if isinstance(ident, int) and not isinstance(ident, bool):
            base = max(base, ident)
        elif isinstance(ident, str) and _INT_ID.fullmatch(ident):
            base = max(base, int(ident))
    return base


_INT_ID = re.compile(r"-?[0-9]{1,19}")


def read_json_lines(path: str | os.PathLike[str]) -> Iterator[tuple[int, Any]]:
    """The JSON values of a UTF-8 JSONL file, with their 1-based line numbers.

    Blank lines are skipped and a leading byte-order mark is ignored. Every way a line can
    fail to be JSON (bad UTF-8, bad syntax, nesting beyond :data:`MAX_DEPTH`, integers
    beyond Python's digit limit) and every way the file can fail to be read is a
    :class:`CorpusError` naming the file and line. Shared by :func:`read_corpus` and
    :func:`qaindex.eval.datasets.read_labelled`, so both formats are read by one parser.

    Example
    -------
    >>> import tempfile, pathlib
    >>> p = pathlib.Path(tempfile.mkdtemp()) / "d.jsonl"
    >>> _ = p.write_text('{"a": 1}\\n\\n[2]\\n', encoding="utf-8")
    >>> list(read_json_lines(p))
    [(1, {'a': 1}), (3, [2])]
    """
    source = os.fspath(path)
    try:
        handle = open(path, "rb")  # closed below; read a line at a time (bounded memory)
    except FileNotFoundError:
        raise CorpusError(f"{source}: no such file") from None
    except IsADirectoryError:
        raise CorpusError(f"{source}: is a directory; give a JSONL corpus file") from None
    except (OSError, ValueError) as exc:  # ValueError: an embedded NUL byte in the path
        raise CorpusError(f"{source}: cannot be read ({_reason(exc)})") from None
    with handle:
        number = 0
        # Whole lines about a MiB at a time (one call instead of one per line); no line is
        # read past MAX_LINE_BYTES, so an endless input (/dev/zero) stops at its first line.
        bulk = fast_path_switch.enabled()
        while True:
            try:
                lines = _next_lines(handle, bulk)
            except (OSError, ValueError) as exc:
                raise CorpusError(f"{source}: cannot be read ({_reason(exc)})") from None
            except MemoryError:
                raise CorpusError(f"{source}:{number + 1}: line too large to read into memory; split it") from None
            if not lines or not lines[0]:
                return
            for line_bytes in lines:
                number += 1
                if len(line_bytes) > MAX_LINE_BYTES and not (
                    len(line_bytes) == MAX_LINE_BYTES + 1 and line_bytes.endswith(b"\n")
                ):
                    raise CorpusError(
                        f"{source}:{number}: line longer than {MAX_LINE_BYTES:,} bytes, the most one line may "
                        "hold (is this a JSONL file?); split or shorten the answer"
                    )
                obj = _parse_plain_line(line_bytes) if number > 1 else None
                if obj is not None:
                    yield number, obj
                else:
                    yield from _parse_line(source, number, line_bytes.removesuffix(b"\n"))


def _next_lines(handle: BinaryIO, bulk: bool) -> list[bytes]:
    """The next whole lines of ``handle`` (each with its newline, but the last line of the
    file), about :data:`_READ_HINT` bytes of them when ``bulk``, else one; a line is read
    to at most ``MAX_LINE_BYTES + 1`` bytes (longer ones are the caller's error)."""
    if not bulk:
        return [handle.readline(MAX_LINE_BYTES + 1)]
    block = handle.read(_READ_HINT)
    if block and not block.endswith(b"\n"):
        block += handle.readline(MAX_LINE_BYTES + 1)
    lines = block.split(b"\n")
    last = lines.pop()  # empty after a final newline, else the file's unterminated last line
    return [line + b"\n" for line in lines] + ([last] if last else [])


def _reason(exc: BaseException) -> str:
    return exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)


def _parse_plain_line(line_bytes: bytes) -> Any:
    """The JSON object of a line that :func:`_parse_line` would accept as it is, or None.

    The fast path for the usual line (``{...}`` of valid UTF-8 and JSON): anything else, and
    any error, is left to :func:`_parse_line` and its messages.
    """
    if not line_bytes.startswith(b"{"):
        return None
    try:
        text = line_bytes.decode("utf-8")
        obj, end = _raw_decode(text)
    except (ValueError, RecursionError):  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        return None
    if end != len(text) and text[end:].strip(" \t\r\n"):
        return None
    return obj


def _parse_line(source: str, number: int, line_bytes: bytes) -> Iterator[tuple[int, Any]]:
    """The JSON value of one line (nothing for a blank one), or a CorpusError naming the line."""
    try:
        line = line_bytes.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CorpusError(
            f"{source}:{number}: not valid UTF-8 (byte 0x{line_bytes[exc.start]:02x} at "
            f"column {exc.start + 1}); save the file as UTF-8"
        ) from None
    if number == 1:
        line = line.removeprefix("\ufeff")
    if not line.strip():
        return
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as exc:
        raise CorpusError(
            f"{source}:{number}: not valid JSON ({_json_problem(exc)}); each line must be one JSON object"
        ) from None
    except RecursionError:
        raise CorpusError(
            f"{source}:{number}: nested too deeply to read (more than {MAX_DEPTH} levels allowed); flatten it"
        ) from None
    except ValueError as exc:  # e.g. an integer literal beyond Python's digit limit
        raise CorpusError(f"{source}:{number}: not valid JSON ({exc}); store huge numbers as strings") from None
    yield number, obj


def _json_problem(exc: json.JSONDecodeError) -> str:
    """What :mod:`json` found wrong, and where: ``Unterminated string starting at column 21``.

    Example
    -------
    >>> try:
    ...     json.loads('{"a": "b')
    ... except json.JSONDecodeError as exc:
    ...     _json_problem(exc)
    'Unterminated string starting at column 7'
    """
    message = exc.msg.rstrip()
    return f"{message} column {exc.colno}" if message.endswith(" at") else f"{message} at column {exc.colno}"


def records_from_dicts(
    items: Iterable[Mapping[str, Any] | Record],
    *,
    source: str = "records",
    existing_ids: Iterable[str | int] = (),
) -> list[Record]:
    """Validate in-memory records (dicts in the corpus format, or :class:`Record`).

    Positions are 1-based in messages (``records[3]``); a missing id defaults to the
    position (after the largest integer id of ``existing_ids``, see :func:`id_base`).
    Raises :class:`CorpusError` like :func:`read_corpus`.

    Example
    -------
    >>> [r.id for r in records_from_dicts([{"answer": "a"}, {"id": "x", "answer": "b"}])]
    [1, 'x']
    """
    if isinstance(items, str | bytes | bytearray | Mapping) or not isinstance(items, Iterable):
        raise CorpusError(f"{source}: expected a list of records (dicts with an 'answer'), got {type(items).__name__}")
    if isinstance(existing_ids, str | bytes) or not isinstance(existing_ids, Iterable):
        raise CorpusError(f"existing_ids must be a list of ids, got {type(existing_ids).__name__}")
    existing_ids = list(existing_ids)
    base = id_base(existing_ids)
    collector = _Collector(source, existing_ids=existing_ids)
    for position, item in enumerate(items, start=1):
        obj: Any = item
        if isinstance(item, Record):
            obj = {"id": item.id, "answer": item.answer, "questions": list(item.questions)}
            obj.update(item.metadata)
        at = f"{source}[{position}]"
        # Plain records are copied by the fast path itself (fresh dict, immutable values).
        if collector.add_plain(obj, at, base + position):
            continue
        collector.source = at
        if isinstance(obj, dict):
            obj = _plain_json(obj, collector.source)
        collector.add(obj, None, base + position)
        collector.source = source
    collector.source = source
    return collector.finish()

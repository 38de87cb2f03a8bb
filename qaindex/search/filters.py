"""Metadata filters (``where``): which answers match, and how to search only those.

A ``where`` is a mapping ``{field: value}``, ``{field: [values]}`` or ``{field: {"$op":
operand}}``, with ``$and``/``$or`` (every entry must match; ``"id"`` is the answer's id, any
other field is looked up in its metadata; a list matches any of its values, by Python
equality; the operators are :mod:`qaindex.search.where`'s), or a function of a
:class:`~qaindex.Record` returning True or False.

A mapping is answered from a per-field value index (:class:`FieldIndex`: ``value → rows``,
built in one pass over the stored records the first time a metadata field is filtered on,
and again after ``add``/``remove``; ids use the store's id map and need no pass; the rows of
recent filters are kept), so the matching rows are known, and counted, before any search.
:func:`plan` chooses how a dense search runs (a :class:`FilterPlan`) from that count alone, and
:func:`qaindex.search.pipeline.filtered_vectors` runs it:

- **exact** (while it reads at most :data:`EXACT_FLOATS` vector floats, or the matches are
  few): :func:`qaindex.search.exact.screened_among` screens the matching answers with one
  matrix product (the geometry's ``screened_distance`` from squared norms and inner
  products: the vectors of the matches gathered, or every vector streamed when the matches
  are many), keeps the ``max(4k, k + 64)`` best, and the model's scorer (the same ONNX graph
  and tie order as an unfiltered search) ranks those. The result is the exact top ``k`` of
  the matching answers, whatever the index kind: it is checked, not assumed (the scorer's
  ``k`` best must be the screening's ``k`` best and beat every answer left out, within a
  relative tolerance, else the short list widens ×8, up to every match scored);
- **post-filter** when the exact pass would read more than :data:`EXACT_FLOATS` floats and
  the matches are more than :func:`prefilter_limit` (below it the post-filter's coarse
  candidates cost more than scoring the matches): the ANN index recalls
  ``k · overfetch · N / matches`` candidates (so that about ``k · overfetch`` of them match,
  as many as an unfiltered search reranks), and only the matching ones are scored exactly; a
  question left with fewer than ``k`` matching candidates falls back to the exact pass. Its
  recall is an unfiltered search's, not brute force's.

The exact pass costs ``min(GATHER_COST · matches, N)`` streamed vectors (a gathered vector
costs about :data:`~qaindex.search.exact.GATHER_COST` streamed ones): at 50,000 answers of 256
dimensions it streams at most ``50,000 · 256`` floats, under :data:`EXACT_FLOATS`
(``benchmarks/quality/filters.py`` measures every selectivity against brute force,
``docs/filters.md``). An index of at most ``k · overfetch`` answers is searched whole and
filtered.

A field that no stored answer has is an error naming the fields that exist (a misspelt field
would otherwise silently return nothing). A function cannot be indexed: its search widens the
coarse stage until about ``k · overfetch`` candidates pass, and past half the index calls it on
every stored record.
"""

from __future__ import annotations

import json
import math
import numbers
import threading
import weakref
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..corpus import Record
from ..errors import QueryError
from ..store.records import RecordStore
from .exact import GATHER_COST
from .where import COMPARISONS, Condition, Group, Node, comparable, compile_mapping, evaluate, fields

__all__ = [
    "EXACT_FLOATS",
    "POST_FILTER_COST",
    "PREFILTER_MIN",
    "FieldIndex",
    "Filter",
    "FilterPlan",
    "choose_plan",
    "compile_where",
    "field_index",
    "matching_rows",
    "parse_where_options",
    "passes",
    "plan",
    "prefilter_limit",
    "widen",
]

#: Up to this many matching answers the pre-filter (exact scoring) is always used.
PREFILTER_MIN = 2048
#: Cost of one coarse candidate of the post-filter, in exact scorings of one match: the post
#: plan's CPU time per coarse candidate over the scored plan's per match, both timed per plan by
#: ``benchmarks/quality/filters.py`` (``docs/filters.md``).
POST_FILTER_COST = 16
#: The exact plan is used while it reads at most this many vector floats per question
#: (``min(GATHER_COST · matches, N) · dimension``; 2**25 float32 are 128 MiB, one pass over
#: memory): every selectivity of a 50,000 × 256 index is searched exactly.
EXACT_FLOATS = 1 << 25
_ROWS_CACHE = 64  # filters whose matching rows are kept per store
_DECODE_BLOCK = 8192  # records decoded per json.loads call when building a field index

Where = Mapping[str, Any] | Callable[[Record], bool]


@dataclass(frozen=True)
class Filter:
    """A checked ``where``: field conditions, or a record predicate.

    Attributes
    ----------
    conditions : tuple of nodes
        Every one must hold (:class:`~qaindex.search.where.Condition` on one field, or a
        :class:`~qaindex.search.where.Group` for ``$and``/``$or``).
    predicate : callable or None
        A function of a Record (then ``conditions`` is empty).
    """

    conditions: tuple[Node, ...] = ()
    predicate: Callable[[Record], bool] | None = None

    def matches(self, record: Record) -> bool:
        """Whether ``record`` passes (reference semantics, used by tests and predicates).

        Example
        -------
        >>> compile_where({"category": ["a", "b"]}).matches(Record(id=1, answer="x", metadata={"category": "b"}))
        True
        """
        if self.predicate is not None:
            return bool(self.predicate(record))

        def lookup(key: str) -> tuple[bool, Any]:
            if key == "id":
                return True, record.id
            return key in record.metadata, record.metadata.get(key)

        return evaluate(self.conditions, lookup)


def compile_where(where: Where | None) -> Filter | None:
    """Check a ``where`` argument; None when it filters nothing (None or ``{}``).

    Raises
    ------
    QueryError
        ``where`` is neither a mapping with string keys nor a callable; an unknown operator, a
        dict value that is not an operator dict, or a bad operand
        (:func:`qaindex.search.where.compile_mapping`).

    Example
    -------
    >>> [(t.field, t.op, t.operand) for t in compile_where({"category": "billing", "id": [1, 2]}).conditions]
    [('category', '$eq', 'billing'), ('id', '$in', (1, 2))]
    """
    if where is None:
        return None
    if callable(where):
        return Filter(predicate=where)
    if not isinstance(where, Mapping) or not all(isinstance(key, str) for key in where):
        raise QueryError(
            "where must be a mapping of metadata fields to values (or lists of values), or a function "
            f"of a Record returning True or False; got {type(where).__name__}"
        )
    if not where:
        return None
    return Filter(conditions=compile_mapping(where))


_JSON_EXAMPLE = """e.g. --where '{"price": {"$lt": 10}}'"""


def parse_where_options(items: Sequence[str]) -> dict[str, Any] | None:
    """``where`` from the CLI's ``--where`` options: ``FIELD=VALUE`` (repeated: every field must
    match; the same field twice: any of its values; a value is read as JSON when it is JSON,
    ``3``, ``true``, ``"007"``, else as text) or a JSON object, a whole ``where`` with operators
    (``'{"price": {"$lt": 10}}'``). Several JSON objects, or JSON objects and ``FIELD=VALUE``
    options, must all match (``$and``).

    Raises
    ------
    QueryError
        An option without ``=`` or with an empty field name, or starting with ``{`` but not a
        JSON object.

    Example
    -------
    >>> parse_where_options(["category=billing", "year=2024", "category=account"])
    {'category': ['billing', 'account'], 'year': 2024}
    >>> parse_where_options(['{"price": {"$lt": 10}}', "lang=en"])
    {'$and': [{'lang': 'en'}, {'price': {'$lt': 10}}]}
    """
    values: dict[str, list[Any]] = {}
    objects: list[dict[str, Any]] = []
    for item in items:
        if item.lstrip().startswith("{"):
            try:
                parsed = json.loads(item)
            except ValueError as exc:
                raise QueryError(f"--where {item!r}: not valid JSON ({exc})") from None
            if not isinstance(parsed, dict):
                raise QueryError(f"--where {item!r}: expected a JSON object of fields, " + _JSON_EXAMPLE)
            objects.append(parsed)
            continue
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise QueryError(
                f"--where {item!r}: expected FIELD=VALUE or a JSON object, e.g. --where category=billing or "
                + _JSON_EXAMPLE.removeprefix("e.g. ")
            )
        try:
            value = json.loads(raw)
        except ValueError:
            value = raw
        values.setdefault(key, []).append(value)
    pairs = {key: vs[0] if len(vs) == 1 else vs for key, vs in values.items()}
    parts = [p for p in [pairs, *objects] if p]
    if len(parts) > 1:
        return {"$and": parts}
    return parts[0] if parts else None


def _hashable(value: Any) -> bool:
    try:
        hash(value)
    except TypeError:
        return False
    return True


def _block_metadata(store: RecordStore, first: int, last: int, chunk: bytes) -> list[dict[str, Any]]:
    """The metadata of rows ``first:last`` (their lines joined in ``chunk``), decoded at once.

    A damaged line (an index loaded with ``verify=False``) makes the block decode row by row
    through :meth:`RecordStore.get`, whose error names the file and line.
    """
    try:
        objs = json.loads(b"[" + chunk + b"]")
    except (ValueError, RecursionError):
        objs = None
    if (
        not isinstance(objs, list)
        or len(objs) != last - first
        or not all(isinstance(o, dict) and isinstance(o.get("metadata", {}), dict) for o in objs)
    ):
        return [dict(store.get(row).metadata) for row in range(first, last)]
    return [o.get("metadata", {}) for o in objs]


class FieldIndex:
    """``value → rows`` for every metadata field of a record store, and the fields that exist.

    Built in one pass that decodes every stored record, in blocks of :data:`_DECODE_BLOCK` per
    ``json.loads`` call (its time on the first filtered search: ``docs/filters.md``); unhashable
    values (lists, objects) are kept aside and compared one by one.

    Parameters
    ----------
    store : RecordStore

    Example
    -------
    >>> store = RecordStore.from_records([Record(id=i, answer="a", metadata={"c": i % 2}) for i in range(4)])
    >>> ix = FieldIndex(store)
    >>> sorted(ix.fields), ix.rows("c", 1).tolist()
    (['c', 'id'], [1, 3])
    """

    def __init__(self, store: RecordStore) -> None:
        values: dict[str, dict[Hashable, list[int]]] = {}
        others: dict[str, list[tuple[int, Any]]] = {}
        data, offsets = store.data, store.offsets
        for first in range(0, len(store), _DECODE_BLOCK):
            last = min(len(store), first + _DECODE_BLOCK)
            # stored lines are JSON objects without raw newlines: join them into one array
            chunk = bytes(data[int(offsets[first]) : int(offsets[last])]).rstrip(b"\n").replace(b"\n", b",")
            for row, metadata in enumerate(_block_metadata(store, first, last, chunk), start=first):
                for key, value in metadata.items():
                    if _hashable(value):
                        values.setdefault(key, {}).setdefault(value, []).append(row)
                    else:
                        others.setdefault(key, []).append((row, value))
        self._values = {key: {v: np.asarray(r, np.int64) for v, r in table.items()} for key, table in values.items()}
        self._others = others
        self._present: dict[str, np.ndarray] = {}
        self._comparables: dict[tuple[str, str], list[tuple[Any, np.ndarray]]] = {}
        self.fields = frozenset({"id", *values, *others})
        self._size = len(store)

    def rows(self, key: str, value: Any) -> np.ndarray:
        """Sorted rows whose metadata field ``key`` equals ``value`` (int64)."""
        parts = []
        if _hashable(value):
            hit = self._values.get(key, {}).get(value)
            if hit is not None:
                parts.append(hit)
        extra = [row for row, got in self._others.get(key, ()) if got == value]
        if extra:
            parts.append(np.asarray(extra, np.int64))
        if not parts:
            return np.zeros(0, np.int64)
        return parts[0] if len(parts) == 1 else np.unique(np.concatenate(parts))

    def present(self, key: str) -> np.ndarray:
        """Sorted rows that have the metadata field ``key`` (int64), kept once computed."""
        found = self._present.get(key)
        if found is None:
            others = np.asarray([row for row, _ in self._others.get(key, ())], np.int64)
            parts = [*self._values.get(key, {}).values(), others]
            found = self._present[key] = np.unique(np.concatenate(parts))
        return found

    def select(self, test: Condition) -> np.ndarray:
        """Sorted rows whose metadata passes ``test`` (int64): the value table's lookups for
        ``$eq``/``$in``, else the test on each distinct value of the field.

        """
        key = test.field
        if test.op == "$eq":
            return self.rows(key, test.operand)
        if test.op == "$in":
            parts = [self.rows(key, v) for v in test.operand]
            return np.unique(np.concatenate(parts)) if parts else np.zeros(0, np.int64)
        if test.op == "$exists":
            return self.present(key) if test.operand else np.setdiff1d(np.arange(self._size), self.present(key))
        if test.op in ("$ne", "$nin"):
            keep = [rows for value, rows in self._values.get(key, {}).items() if test.holds(True, value)]
            extra = [row for row, value in self._others.get(key, ()) if test.holds(True, value)]
            return np.unique(np.concatenate([*keep, np.asarray(extra, np.int64)]))
        # a comparison: lists and objects (the unhashable values) are never numbers or dates
        keep = [rows for got, rows in self.comparables(key, test.operand[0]) if test.compare(got)]
        return np.unique(np.concatenate(keep)) if keep else np.zeros(0, np.int64)

    def comparables(self, key: str, kind: str) -> list[tuple[Any, np.ndarray]]:
        """``(value, rows)`` for each distinct value of the field ``key`` that a comparison of
        ``kind`` orders (dates parsed), kept once computed."""
        found = self._comparables.get((key, kind))
        if found is None:
            found = []
            for value, rows in self._values.get(key, {}).items():
                got = comparable(value, kind)
                if got is not None:
                    found.append((got, rows))
            self._comparables[(key, kind)] = found
        return found

    def check(self, condition: Condition) -> None:
        """Refuse a comparison on a field none of whose values is of the operand's kind (a number
        compared with texts): it would match nothing, whatever the bound.

        Raises
        ------
        QueryError
            Naming the field, the comparison and a stored value.
        """
        if condition.op in COMPARISONS and not self.comparables(condition.field, condition.operand[0]):
            values = [*self._values.get(condition.field, {}), *(v for _, v in self._others.get(condition.field, ()))]
            raise QueryError(_incomparable(condition, values))


def _incomparable(test: Condition, values: Sequence[Any]) -> str:
    kind, bound = test.operand
    sample = values[0] if values else None
    what = "a number" if kind == "number" else "an ISO 8601 date (e.g. 2024-05-01)"
    shown = bound if kind == "number" else bound.isoformat()
    return (
        f"where: {test.field!r} {test.op} {shown!r} compares {kind}s, but no answer's {test.field!r} is {what} "
        f"(e.g. {sample!r}); store the field as {what} or compare with a value of its kind"
    )


class _StoreCache:
    """What filters keep per record store: its field index, the rows of recent filters."""

    def __init__(self) -> None:
        self.index: FieldIndex | None = None
        self.rows: dict[Hashable, np.ndarray] = {}


_CACHES: weakref.WeakKeyDictionary[RecordStore, _StoreCache] = weakref.WeakKeyDictionary()
_CACHES_LOCK = threading.Lock()


def _cache(store: RecordStore) -> _StoreCache:
    with _CACHES_LOCK:
        found = _CACHES.get(store)
        if found is None:
            found = _CACHES[store] = _StoreCache()
        return found


def field_index(store: RecordStore) -> FieldIndex:
    """The :class:`FieldIndex` of ``store``, built on first use and kept as long as the store.

    ``Ranker.add``/``remove`` replace the store, so the next filter builds a fresh index.
    """
    cache = _cache(store)
    with _CACHES_LOCK:
        if cache.index is None:
            cache.index = FieldIndex(store)
        return cache.index


def _id_rows(store: RecordStore, values: tuple[Any, ...]) -> np.ndarray:
    """Rows whose id equals one of ``values`` (ids are unique; no pass over the records)."""
    ids = store.ids()
    found = set()
    for value in values:
        if isinstance(value, bool):
            value = int(value)
        elif isinstance(value, numbers.Integral):
            value = int(value)
        elif isinstance(value, float) and value.is_integer():
            value = int(value)
        if not isinstance(value, str | int):
            continue
        row = ids.get(str(value))
        if row is not None and store.get(row).id == value:
            found.add(row)
    return np.asarray(sorted(found), np.int64)


def matching_rows(store: RecordStore, flt: Filter) -> np.ndarray:
    """Sorted rows of the answers that pass ``flt`` (int64).

    Raises
    ------
    QueryError
        A field of ``flt`` is on no stored answer: the message names the fields that exist.

    Example
    -------
    >>> store = RecordStore.from_records([Record(id=i, answer="a", metadata={"c": i % 3}) for i in range(6)])
    >>> matching_rows(store, compile_where({"c": [0, 2], "id": [0, 1, 2]})).tolist()
    [0, 2]
    """
    if flt.predicate is not None:
        keep = [row for row in range(len(store)) if flt.predicate(store.get(row))]
        return np.asarray(keep, np.int64)
    cache = _cache(store)
    key: Hashable | None = flt.conditions if _hashable(flt.conditions) else None
    if key is not None:
        with _CACHES_LOCK:
            hit = cache.rows.get(key)
        if hit is not None:
            return hit
    rows = _matching_rows(store, flt)
    rows.setflags(write=False)  # shared by later searches with the same filter
    if key is not None:
        with _CACHES_LOCK:
            if len(cache.rows) >= _ROWS_CACHE:
                cache.rows.pop(next(iter(cache.rows)))
            cache.rows[key] = rows
    return rows


def _matching_rows(store: RecordStore, flt: Filter) -> np.ndarray:
    index = None
    named = fields(flt.conditions)
    if any(key != "id" for key in named):
        index = field_index(store)
        unknown = [key for key in named if key not in index.fields]
        if unknown:
            known = ", ".join(sorted(index.fields, key=lambda f: (f != "id", f)))
            raise QueryError(
                f"where: no answer has the field {unknown[0]!r}; the fields are: {known} "
                "(names are matched exactly, case included)"
            )
    for condition in _conditions(flt.conditions):
        if condition.field != "id":
            assert index is not None
            index.check(condition)
        elif condition.op in COMPARISONS:
            ids = [store.get(row).id for row in range(len(store))]
            if not any(comparable(i, condition.operand[0]) is not None for i in ids):
                raise QueryError(_incomparable(condition, ids))
    return _all_of(store, index, flt.conditions)


def _conditions(nodes: tuple[Node, ...]) -> list[Condition]:
    """Every condition of ``nodes``, in ``$and``/``$or`` groups included."""
    out: list[Condition] = []
    for node in nodes:
        if isinstance(node, Group):
            for part in node.parts:
                out.extend(_conditions(part))
        else:
            out.append(node)
    return out


def _all_of(store: RecordStore, index: FieldIndex | None, nodes: tuple[Node, ...]) -> np.ndarray:
    """Sorted rows passing every node (int64)."""
    result: np.ndarray | None = None
    for node in nodes:
        rows = _node_rows(store, index, node)
        result = rows if result is None else np.intersect1d(result, rows, assume_unique=True)
        if len(result) == 0:
            break
    return result if result is not None else np.arange(len(store), dtype=np.int64)


def _node_rows(store: RecordStore, index: FieldIndex | None, node: Node) -> np.ndarray:
    if isinstance(node, Group):
        if node.op == "$and":
            return _all_of(store, index, tuple(n for part in node.parts for n in part))
        return np.unique(np.concatenate([_all_of(store, index, part) for part in node.parts]))
    if node.field != "id":
        assert index is not None
        return index.select(node)
    if node.op in ("$eq", "$in", "$ne", "$nin"):
        rows = _id_rows(store, node.operand if node.op in ("$in", "$nin") else (node.operand,))
        return rows if node.op in ("$eq", "$in") else np.setdiff1d(np.arange(len(store)), rows, assume_unique=True)
    ids = [store.get(row).id for row in range(len(store))]  # ids are on every answer: read them all
    return np.asarray([row for row, i in enumerate(ids) if node.holds(True, i)], np.int64)


def choose_plan(count: int, total: int, dimension: int, k: int, overfetch: int) -> str:
    """``"exact"`` or ``"post"`` (post-filter) for a filter with ``count`` of ``total`` matches.

    Exact while its screening pass reads at most :data:`EXACT_FLOATS` floats or the matches
    are few for the post-filter (:func:`prefilter_limit`).

    Example
    -------
    >>> choose_plan(25_000, 50_000, 256, 10, 10), choose_plan(500_000, 1_000_000, 256, 10, 10)
    ('exact', 'post')
    """
    if count <= k or count <= prefilter_limit(k, overfetch, total):
        return "exact"
    return "exact" if min(GATHER_COST * count, total) * dimension <= EXACT_FLOATS else "post"


def prefilter_limit(k: int, overfetch: int, total: int) -> int:
    """Matches up to which the pre-filter is used (see the module docstring).

    Example
    -------
    >>> prefilter_limit(10, 10, 50_000)
    8944
    """
    return max(PREFILTER_MIN, math.isqrt(POST_FILTER_COST * k * overfetch * total))


@dataclass(frozen=True)
class FilterPlan:
    """How a filtered dense search runs, decided from the matches' count before any search.

    :func:`plan` chooses it; :func:`qaindex.search.pipeline.filtered_vectors` runs it (the
    search calls this module, never the other way).

    Attributes
    ----------
    kind : str
        ``"whole"``: an index of at most ``k · overfetch`` answers, searched whole and its
        ranking filtered; ``"none"``: no answer matches; ``"exact"``: the matches screened and
        scored exactly; ``"post"``: the coarse stage's ``candidates`` per question, the matching
        ones scored exactly; ``"predicate"``: a function, the coarse stage widened from
        ``candidates`` (:func:`widen`) until about ``k · overfetch`` candidates pass.
    rows : numpy.ndarray or None
        The matching rows (sorted int64) for ``none``, ``exact`` and ``post``; None otherwise.
    candidates : int
        Coarse candidates per question: every answer for ``whole``, the post-filter's
        ``k · overfetch · N / matches``, the predicate's first pass ``k · overfetch``.
    """

    kind: str
    rows: np.ndarray | None = None
    candidates: int = 0


def plan(store: RecordStore, k: int, flt: Filter, *, overfetch: int, dimension: int) -> FilterPlan:
    """The :class:`FilterPlan` of a filtered search for ``k`` hits per question.

    Parameters
    ----------
    store : RecordStore
    k : int
        Hits per question (at most N).
    flt : Filter
    overfetch : int, keyword-only
        The index's over-fetch (coarse candidates per hit).
    dimension : int, keyword-only
        The vectors' dimension (the exact plan's cost, :func:`choose_plan`).

    Raises
    ------
    QueryError
        A field of ``flt`` is on no stored answer (:func:`matching_rows`).

    Example
    -------
    >>> store = RecordStore.from_records([Record(id=i, answer="a", metadata={"c": i % 4}) for i in range(100)])
    >>> fp = plan(store, 3, compile_where({"c": 1}), overfetch=10, dimension=16)
    >>> fp.kind, len(fp.rows), plan(store, 20, compile_where({"c": 1}), overfetch=10, dimension=16).kind
    ('exact', 25, 'whole')
    """
    total = len(store)
    if total <= k * overfetch:
        # An unfiltered search of so small an index scores every answer in row order; filtering
        # that ranking keeps its scores bit for bit (the scorer's float32 rounding can depend
        # on a candidate's position in the batch), and costs no more than scoring the matches.
        return FilterPlan("whole", candidates=total)
    if flt.predicate is not None:
        return FilterPlan("predicate", candidates=k * overfetch)
    rows = matching_rows(store, flt)
    count = len(rows)
    if count == 0:
        return FilterPlan("none", rows)
    if choose_plan(count, total, dimension, k, overfetch) == "exact":
        return FilterPlan("exact", rows)
    # post-filter: enough coarse candidates that about k * overfetch of them match
    return FilterPlan("post", rows, min(total, math.ceil(k * overfetch * total / count)))


def passes(store: RecordStore, flt: Filter, rows: np.ndarray, mask: np.ndarray | None = None) -> np.ndarray:
    """Whether each of ``rows`` passes ``flt`` (bool array; from ``mask``, a bool per stored
    row, when given).

    Example
    -------
    >>> store = RecordStore.from_records([Record(id=i, answer="a", metadata={"c": i % 2}) for i in range(4)])
    >>> passes(store, compile_where({"c": 1}), np.array([3, 0, 1])).tolist()
    [True, False, True]
    """
    if mask is not None:
        return np.asarray(mask[rows], dtype=bool)
    if flt.predicate is None:
        mask = np.zeros(len(store), bool)
        mask[matching_rows(store, flt)] = True
        return np.asarray(mask[rows], dtype=bool)
    return np.asarray([flt.matches(store.get(int(row))) for row in rows.tolist()], dtype=bool)


def widen(m: int, matched: int, want: int, total: int) -> int | None:
    """A predicate's next coarse width after ``m`` candidates of which ``matched`` passed, so
    that about ``want`` pass: the selectivity guessed from this pass (×8 when none passed), with
    a quarter's margin; None past half the ``total`` answers (then every match is scored).

    Example
    -------
    >>> widen(100, 10, 100, 100_000), widen(100, 0, 100, 100_000), widen(40_000, 10, 100, 100_000)
    (1250, 800, None)
    """
    m = m * 8 if matched == 0 else math.ceil(1.25 * m * want / matched)
    if m > total // 2:
        return None
    return min(m, total)

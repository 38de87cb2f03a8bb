"""The ``where`` language: field conditions with Chroma/MongoDB-style operators, checked.

A ``where`` mapping is a conjunction of entries:

- ``{field: value}``: the field equals ``value`` (Python equality; ``"id"`` is the answer's
  id, any other field is looked up in its metadata);
- ``{field: [v1, v2]}`` (a list, tuple or set): the field equals one of the values;
- ``{field: {"$op": operand, ...}}``: every operator holds, from :data:`OPERATORS`:
  ``$eq``, ``$ne``, ``$in``, ``$nin`` (Python equality), ``$gt``, ``$gte``, ``$lt``, ``$lte``
  (an operand that is a number compares with the numbers stored, one that is an ISO 8601 date
  compares as a point in time with the ISO 8601 dates stored; naive times are UTC) and
  ``$exists`` (True or False);
- ``{"$and": [where, ...]}`` / ``{"$or": [where, ...]}``: every / any of the sub-filters.

An answer without the field never matches a condition on it, except ``$exists: False``
(``$ne`` and ``$nin`` included: ``{"$or": [{f: {"$ne": v}}, {f: {"$exists": False}}]}`` keeps
the answers without ``f`` too). A stored value of another kind than a comparison's operand (a
text compared with a number) does not match. Anything else (an unknown operator, a dict value
that is not an operator dict, an operand of the wrong type) is a :class:`QueryError` naming it.
"""

from __future__ import annotations

import datetime as dt
import math
import numbers
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import QueryError

__all__ = ["COMPARISONS", "LOGICAL", "OPERATORS", "Condition", "Group", "compile_mapping", "evaluate", "parse_date"]

COMPARISONS = ("$gt", "$gte", "$lt", "$lte")
#: The operators of a field's operator dict.
OPERATORS = ("$eq", "$ne", "$in", "$nin", *COMPARISONS, "$exists")
#: The operators that combine sub-filters.
LOGICAL = ("$and", "$or")
_SUPPORTED = ", ".join((*OPERATORS, *LOGICAL))
_MANY = (list, tuple, set, frozenset)
_ISO = re.compile(
    r"\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d{3}(?:\d{3})?)?)?(?:Z|[+-]\d{2}:\d{2})?)?\Z", re.ASCII
)


@dataclass(frozen=True)
class Condition:
    """One condition on one field.

    Attributes
    ----------
    field : str
    op : str
        One of :data:`OPERATORS`.
    operand : object
        A tuple of values for ``$in``/``$nin``; ``(kind, value)`` for a comparison, ``kind``
        being ``"number"`` or ``"date"`` (then ``value`` is an aware datetime); a bool for
        ``$exists``; the value itself for ``$eq``/``$ne``.
    """

    field: str
    op: str
    operand: Any

    def holds(self, present: bool, value: Any) -> bool:
        """Whether a field that is ``present`` with ``value`` passes this test.

        Example
        -------
        >>> below_10 = Condition("price", "$lt", ("number", 10))
        >>> below_10.holds(True, 9.5), below_10.holds(True, "9"), below_10.holds(False, None)
        (True, False, False)
        """
        if self.op == "$exists":
            return present is self.operand
        if not present:
            return False
        if self.op == "$eq":
            return bool(value == self.operand)
        if self.op == "$ne":
            return not value == self.operand
        if self.op == "$in":
            return any(value == v for v in self.operand)
        if self.op == "$nin":
            return not any(value == v for v in self.operand)
        got = comparable(value, self.operand[0])
        return got is not None and self.compare(got)

    def compare(self, got: Any) -> bool:
        """Whether ``got`` (a value of the comparison's kind, see :func:`comparable`) passes."""
        bound = self.operand[1]
        if self.op == "$gt":
            return bool(got > bound)
        if self.op == "$gte":
            return bool(got >= bound)
        if self.op == "$lt":
            return bool(got < bound)
        return bool(got <= bound)


@dataclass(frozen=True)
class Group:
    """``$and`` (every part) or ``$or`` (any part) of sub-filters, each a conjunction of nodes."""

    op: str
    parts: tuple[tuple[Node, ...], ...]


Node = Condition | Group


def parse_date(text: str) -> dt.datetime | None:
    """An ISO 8601 date or date-time as an aware datetime (naive ones are UTC); None if ``text``
    is not one.

    Example
    -------
    >>> parse_date("2024-05-01") < parse_date("2024-05-01T01:00:00+00:00"), parse_date("May 1")
    (True, None)
    """
    if not _ISO.match(text):
        return None
    try:
        when = dt.datetime.fromisoformat(text[:-1] + "+00:00" if text.endswith("Z") else text)
    except ValueError:  # e.g. month 13
        return None
    return when if when.tzinfo is not None else when.replace(tzinfo=dt.timezone.utc)


def comparable(value: Any, kind: str) -> Any:
    """``value`` as something a comparison of ``kind`` (``"number"`` or ``"date"``) orders,
    or None when it is of another kind (booleans are the numbers 0 and 1, as in Python)."""
    if kind == "number":
        return value if isinstance(value, numbers.Real) else None
    return parse_date(value) if isinstance(value, str) else None


def compile_mapping(where: Mapping[str, Any]) -> tuple[Node, ...]:
    """A ``where`` mapping as a conjunction of nodes, checked.

    Raises
    ------
    QueryError
        An unknown operator, a dict value that is not an operator dict, or a bad operand.

    Example
    -------
    >>> [(c.field, c.op, c.operand) for c in compile_mapping({"category": ["a", "b"], "price": {"$lt": 10}})]
    [('category', '$in', ('a', 'b')), ('price', '$lt', ('number', 10))]
    """
    nodes: list[Node] = []
    for key, value in where.items():
        if not isinstance(key, str):
            raise QueryError(f"where: field names are text; got {key!r}")
        if key.startswith("$"):
            nodes.append(_group(key, value))
        elif isinstance(value, Mapping):
            if not value:
                raise QueryError(f"where: {key!r}: {{}} names no operator; the supported operators are: {_SUPPORTED}")
            nodes.extend(_test(key, op, operand) for op, operand in value.items())
        elif isinstance(value, _MANY):
            nodes.append(Condition(key, "$in", tuple(value)))
        else:
            nodes.append(Condition(key, "$eq", value))
    return tuple(nodes)


def _group(key: str, value: Any) -> Group:
    if key not in LOGICAL:
        raise QueryError(f"where: unknown operator {key!r}; the supported operators are: {_SUPPORTED}")
    if not isinstance(value, list | tuple) or not value or not all(isinstance(v, Mapping) for v in value):
        raise QueryError(f"where: {key} takes a non-empty list of filters (mappings); got {value!r}")
    return Group(key, tuple(compile_mapping(v) for v in value))


def _test(field: str, op: Any, operand: Any) -> Condition:
    if not isinstance(op, str) or not op.startswith("$"):
        raise QueryError(
            f"where: {field!r}: {op!r} is not an operator (a dict value must map operators to operands, "
            f'e.g. {{"$in": ["a", "b"]}}; to match a value that is itself a dict, use {{"$eq": ...}}); '
            f"the supported operators are: {_SUPPORTED}"
        )
    if op not in OPERATORS:
        raise QueryError(f"where: unknown operator {op!r} on {field!r}; the supported operators are: {_SUPPORTED}")
    if op in ("$in", "$nin"):
        if not isinstance(operand, _MANY):
            raise QueryError(f"where: {field!r}: {op} takes a list of values; got {operand!r}")
        return Condition(field, op, tuple(operand))
    if op == "$exists":
        if not isinstance(operand, bool):
            raise QueryError(f"where: {field!r}: $exists takes true or false; got {operand!r}")
        return Condition(field, op, operand)
    if op in COMPARISONS:
        if isinstance(operand, numbers.Real) and not (isinstance(operand, float) and math.isnan(operand)):
            return Condition(field, op, ("number", operand))
        when = parse_date(operand) if isinstance(operand, str) else None
        if when is None:
            raise QueryError(
                f"where: {field!r}: {op} compares numbers or ISO 8601 dates (e.g. 2024-05-01 or "
                f"2024-05-01T12:00:00+02:00); got {operand!r}"
            )
        return Condition(field, op, ("date", when))
    return Condition(field, op, operand)


def evaluate(nodes: tuple[Node, ...], lookup: Any) -> bool:
    """Whether every node holds for a record; ``lookup(field)`` gives ``(present, value)``."""
    for node in nodes:
        if isinstance(node, Group):
            passed = (evaluate(part, lookup) for part in node.parts)
            if not (all(passed) if node.op == "$and" else any(passed)):
                return False
        elif not node.holds(*lookup(node.field)):
            return False
    return True


def fields(nodes: tuple[Node, ...]) -> list[str]:
    """Every field the nodes name, in order, once each."""
    out: dict[str, None] = {}
    for node in nodes:
        if isinstance(node, Group):
            for part in node.parts:
                out.update(dict.fromkeys(fields(part)))
        else:
            out[node.field] = None
    return list(out)

"""The memory budget of one request: results bounded before anything is allocated, work in chunks.

A search's memory has two parts:

- **what it returns**: ``questions × min(k, answers)`` hits (a :class:`~qaindex.Hit` costs
  about ``HIT_OVERHEAD`` bytes plus its record's stored size), or 16 bytes per entry of the
  arrays of :meth:`~qaindex.Ranker.search_vectors`;
- **what it scores on the way**: ``questions × candidates`` (``candidates = min(answers,
  k × overfetch)``) rows, scores and sort keys, plus the gathered answer vectors the exact
  scorer reads.

``k`` is first bounded by the number of answers (asking for more than every answer means
every answer). The result must then fit in half the budget, or the request is refused with a
:class:`~qaindex.QueryError` saying how much it needs, before any work; the other half bounds
the working memory, which is processed in chunks of questions (and of candidates) sized to it.
The budget is :data:`DEFAULT_BUDGET` (1 GiB), or the environment variable
``QAINDEX_MEMORY_BUDGET`` (bytes, or a size such as ``512MiB`` or ``4GiB``), or per Ranker
with ``ranker.configure(memory_budget=...)``.

Example
-------
>>> parse_size("512MiB")
536870912
>>> check_result(3 * 2**30, 2**30, "a search", "ask for fewer hits")
Traceback (most recent call last):
...
qaindex.errors.QueryError: a search needs about 3.0 GiB for its result, more than half of the memory budget ...
"""

from __future__ import annotations

import os
import re
from typing import TYPE_CHECKING, Any

from ..checks import shown
from ..errors import QueryError

if TYPE_CHECKING:
    from .state import IndexState

__all__ = [
    "ARRAY_ENTRY_BYTES",
    "CANDIDATE_BYTES",
    "DEFAULT_BUDGET",
    "ENV_VAR",
    "HIT_OVERHEAD",
    "MIN_BUDGET",
    "RECALL_PAIR_BYTES",
    "SCORER_COPIES",
    "check_budget_value",
    "check_result",
    "check_work",
    "chunk",
    "human",
    "parse_size",
    "questions_per_call",
    "request_budget",
    "scorer_bytes",
]

DEFAULT_BUDGET = 1 << 30
MIN_BUDGET = 1 << 20
ENV_VAR = "QAINDEX_MEMORY_BUDGET"
# a Hit beyond its record's stored bytes: the object, its dict, floats and list slot (a bound,
# with margin, on what tracemalloc counts for one Hit of a short or a long answer)
HIT_OVERHEAD = 640
ARRAY_ENTRY_BYTES = 16  # search_vectors: float32 score + float32 distance + int64 row
# per (question, candidate) of the exact rerank, besides the vectors: FAISS distances and
# labels, rows, scores, distances, the sort keys and order, the masked copies
CANDIDATE_BYTES = 96
SCORER_COPIES = 5  # the gathered vectors and the scorer's temporaries of the same size
# per (question, answer) of Ranker.recall: ground truth (float64 distances, int64 rows and
# the merge's concatenations and sort), the pipeline's rows and the overlap
RECALL_PAIR_BYTES = 128
_UNITS = {"": 1, "b": 1, "k": 10**3, "kb": 10**3, "kib": 2**10, "m": 10**6, "mb": 10**6, "mib": 2**20}
_UNITS.update({"g": 10**9, "gb": 10**9, "gib": 2**30, "t": 10**12, "tb": 10**12, "tib": 2**40})
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$")


def human(n: float) -> str:
    """Bytes in binary units: ``human(3 * 2**30) == '3.0 GiB'``."""
    for unit, size in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{int(n)} bytes"


def check_budget_value(value: Any, name: str = "memory_budget") -> int:
    """A budget in bytes: an int of at least :data:`MIN_BUDGET` (1 MiB)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < MIN_BUDGET:
        raise QueryError(f"{name} must be a number of bytes of at least {MIN_BUDGET:,} (1 MiB), got {shown(value)}")
    return int(value)


def parse_size(text: str, name: str = ENV_VAR) -> int:
    """Bytes from ``"1073741824"``, ``"512MiB"``, ``"4GiB"``, ``"2GB"`` (at least 1 MiB)."""
    found = _SIZE.match(text)
    unit = found.group(2).lower() if found else ""
    if found is None or unit not in _UNITS:
        raise QueryError(f"{name} must be a size in bytes such as 1073741824, 512MiB or 4GiB; got {shown(text)}")
    return check_budget_value(int(float(found.group(1)) * _UNITS[unit]), name)


def request_budget(value: int | None = None) -> int:
    """The budget of one request: ``value`` if given, else ``$QAINDEX_MEMORY_BUDGET``, else 1 GiB."""
    if value is not None:
        return value
    env = os.environ.get(ENV_VAR)
    return DEFAULT_BUDGET if env is None or not env.strip() else parse_size(env)


def check_result(needed: int, budget: int, what: str, advice: str) -> None:
    """Refuse a request whose result needs more than half the budget, before any allocation."""
    if needed > budget // 2:
        raise QueryError(
            f"{what} needs about {human(needed)} for its result, more than half of the memory budget of "
            f"{human(budget)}; {advice}, or raise the budget (ranker.configure(memory_budget=...) or the "
            f"{ENV_VAR} environment variable)"
        )


def check_work(needed: int, budget: int, what: str, advice: str) -> None:
    """Refuse a request whose smallest chunk of work (one question) needs more than half the budget."""
    if needed > budget // 2:
        raise QueryError(
            f"{what} needs about {human(needed)} of working memory for a single question, more than half of "
            f"the memory budget of {human(budget)}; {advice}, or raise the budget (ranker.configure("
            f"memory_budget=...) or the {ENV_VAR} environment variable)"
        )


def questions_per_call(state: IndexState, k: int) -> int:
    """How many questions one ``ranker.search_batch(questions, k)`` may take within the budget
    (at least 1): what the CLI searches at a time, printing each chunk's hits before the next
    (:attr:`qaindex.search.plan.SearchPlan.questions_per_call`).

    Example
    -------
    >>> questions_per_call(ranker.state(), 10) >= 1
    True
    """
    per_question = min(k, len(state.records.offsets) - 1) * hit_bytes(state.records)
    return max(1, (request_budget(state.memory_budget) // 2) // max(1, int(per_question)))


def hit_bytes(records: Any) -> int:
    """About what one Hit of a record store costs in memory: :data:`HIT_OVERHEAD` plus the
    mean stored record's bytes (read from the store's offsets: sizes, not records)."""
    offsets = records.offsets
    return HIT_OVERHEAD + int(offsets[-1]) // max(1, len(offsets) - 1)


def scorer_bytes(memory_budget: int | None = None) -> int:
    """Bytes of candidate vectors one scorer call may gather: a quarter of the request's
    budget shared by the vectors and the scorer's temporaries (:data:`SCORER_COPIES`)."""
    return request_budget(memory_budget) // (4 * SCORER_COPIES)


def chunk(per_item: int, budget: int, most: int) -> int:
    """How many items of ``per_item`` bytes fit in a quarter of the budget (1 to ``most``)."""
    return max(1, min(most, (budget // 4) // max(1, per_item)))

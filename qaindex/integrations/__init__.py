"""Retriever adapters for application frameworks (optional extras).

- :mod:`qaindex.integrations.langchain`: ``QAIndexRetriever``, a LangChain ``BaseRetriever``
  (``pip install 'qaindex[langchain]'``);
- :mod:`qaindex.integrations.llamaindex`: ``QAIndexRetriever``, a LlamaIndex ``BaseRetriever``
  (``pip install 'qaindex[llamaindex]'``).

Each module imports its framework when imported, and raises
:class:`qaindex.MissingDependencyError` naming the extra to install when it is absent;
``import qaindex`` never imports either.
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Mapping
from typing import Any

from ..errors import QueryError
from ..ranker import Hit, Ranker

__all__ = ["check_search_kwargs", "hit_metadata", "ranker_from"]


def hit_metadata(hit: Hit) -> dict[str, Any]:
    """The metadata a framework document carries for a hit: the answer's own fields plus
    ``id``, ``score`` (in [0, 1]: the estimated probability of relevance), ``raw_score`` (the
    model's own score) and ``distance`` (the answer's fields never overwrite those four).

    Example
    -------
    >>> from qaindex import Hit
    >>> hit_metadata(Hit("reset", "Use the link.", 0.75, 0.25, {"category": "account"}, raw_score=1.5))
    {'category': 'account', 'id': 'reset', 'score': 0.75, 'raw_score': 1.5, 'distance': 0.25}
    """
    return {
        **hit.metadata,
        "id": hit.id,
        "score": hit.score,
        "raw_score": hit.raw_score,
        "distance": hit.distance,
    }


def ranker_from(ranker: Any) -> Ranker:
    """A :class:`~qaindex.Ranker`: ``ranker`` itself, or the index loaded from a directory path.

    Loading here (when a retriever is built) means a wrong path fails at once, not at the
    first query.

    Example
    -------
    >>> ranker_from(3)
    Traceback (most recent call last):
    ...
    qaindex.errors.QueryError: QAIndexRetriever needs a qaindex.Ranker or an index directory, got int
    """
    if isinstance(ranker, Ranker):
        return ranker
    if isinstance(ranker, str | os.PathLike):
        return Ranker.load(ranker)
    raise QueryError(f"QAIndexRetriever needs a qaindex.Ranker or an index directory, got {type(ranker).__name__}")


def check_search_kwargs(options: Any, name: str) -> dict[str, Any]:
    """``options`` if every key names a keyword argument of :meth:`qaindex.Ranker.search`.

    Example
    -------
    >>> check_search_kwargs({"min_score": 0.5}, "search_kwargs")
    {'min_score': 0.5}
    >>> try:
    ...     check_search_kwargs({"wherex": 1}, "search_kwargs")
    ... except QueryError as exc:
    ...     print(str(exc).split(";")[0])
    search_kwargs: unknown Ranker.search argument(s) 'wherex'
    """
    if not isinstance(options, Mapping):
        raise QueryError(f"{name} must be a dict of Ranker.search arguments, got {type(options).__name__}")
    taken = sorted(p for p in inspect.signature(Ranker.search).parameters if p not in ("self", "question", "k"))
    unknown = sorted(repr(key) for key in options if key not in taken)  # keys of any type (repr sorts)
    if unknown:
        raise QueryError(
            f"{name}: unknown Ranker.search argument(s) {', '.join(unknown)}; it takes "
            f"{', '.join(taken)} (k is the retriever's own argument)"
        )
    return dict(options)

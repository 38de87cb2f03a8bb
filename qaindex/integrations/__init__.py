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

from collections.abc import Mapping
from typing import Any

from ..arguments import positive_int, shown
from ..errors import QueryError
from ..ranker import Hit, Ranker

__all__ = ["SEARCH_OPTIONS", "check_retriever", "hit_metadata"]

SEARCH_OPTIONS = ("where", "min_score", "rerank", "depth")


def check_retriever(ranker: Any, k: Any, search_kwargs: Any) -> tuple[Ranker, int, dict[str, Any]]:
    """The arguments of a retriever's constructor, checked: a Ranker, a positive ``k`` and
    ``search_kwargs`` naming only options of :meth:`qaindex.Ranker.search`.

    Example
    -------
    >>> check_retriever(None, 3, {})
    Traceback (most recent call last):
    ...
    qaindex.errors.QueryError: QAIndexRetriever needs a qaindex.Ranker, got NoneType
    """
    if not isinstance(ranker, Ranker):
        raise QueryError(f"QAIndexRetriever needs a qaindex.Ranker, got {type(ranker).__name__}")
    k = positive_int(k, "k")
    if not isinstance(search_kwargs, Mapping):
        raise QueryError(f"search_kwargs must be a dict of search options, got {type(search_kwargs).__name__}")
    unknown = [key for key in search_kwargs if key not in SEARCH_OPTIONS]
    if unknown:
        raise QueryError(
            f"search_kwargs has unknown option {shown(unknown[0])}; use {', '.join(SEARCH_OPTIONS)} "
            "(the keyword options of Ranker.search)"
        )
    return ranker, k, dict(search_kwargs)


def hit_metadata(hit: Hit) -> dict[str, Any]:
    """The metadata a framework document carries for a hit: the answer's own fields plus
    ``id``, ``score`` and ``distance`` (the answer's fields never overwrite those three).

    Example
    -------
    >>> from qaindex import Hit
    >>> hit_metadata(Hit("reset", "Use the link.", 1.5, 0.25, {"category": "account"}))
    {'category': 'account', 'id': 'reset', 'score': 1.5, 'distance': 0.25}
    """
    return {**hit.metadata, "id": hit.id, "score": hit.score, "distance": hit.distance}

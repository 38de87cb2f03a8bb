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

from typing import Any

from ..ranker import Hit

__all__ = ["hit_metadata"]


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

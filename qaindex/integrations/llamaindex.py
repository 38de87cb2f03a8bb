"""A LlamaIndex retriever over a :class:`qaindex.Ranker` (``pip install 'qaindex[llamaindex]'``).

Example
-------
>>> import qaindex
>>> from qaindex.integrations.llamaindex import QAIndexRetriever
>>> retriever = QAIndexRetriever(qaindex.Ranker.build("examples/faq.jsonl"), k=3)
>>> nodes = retriever.retrieve("How do I reset my password?")
>>> len(nodes), nodes[0].score >= nodes[1].score
(3, True)
"""

from __future__ import annotations

import os
from typing import Any

from ..checks import positive_int
from ..errors import MissingDependencyError
from ..ranker import Ranker
from . import check_search_kwargs, hit_metadata, ranker_from

try:
    from llama_index.core.retrievers import BaseRetriever
    from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode
except ImportError:  # pragma: no cover - exercised by a test that hides the package
    raise MissingDependencyError(
        "qaindex.integrations.llamaindex needs llama-index-core: pip install 'qaindex[llamaindex]'"
    ) from None

__all__ = ["QAIndexRetriever"]


class QAIndexRetriever(BaseRetriever):
    """LlamaIndex retriever: each hit becomes a ``NodeWithScore`` whose ``TextNode`` has the
    answer as text and its id as ``id_``; ``score`` is the hit's calibrated score in [0, 1] (the
    estimated probability that the answer is relevant), so LlamaIndex's
    ``SimilarityPostprocessor(similarity_cutoff=0.5)`` works as a relevance threshold.

    Parameters
    ----------
    ranker : qaindex.Ranker or path
        A built or loaded index, or an index directory (loaded, and so checked, here).
    k : int
        Number of nodes per query.
    **search_kwargs
        Keyword arguments of :meth:`qaindex.Ranker.search`: ``where``, ``min_score``,
        ``rerank``, ``depth``; an unknown name is refused here, not at the first query.
    """

    def __init__(self, ranker: Ranker | str | os.PathLike[str], k: int = 4, **search_kwargs: Any) -> None:
        self.ranker = ranker_from(ranker)
        self.k = positive_int(k, "k")
        self.search_kwargs = check_search_kwargs(search_kwargs, "QAIndexRetriever")
        super().__init__()

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        hits = self.ranker.search(query_bundle.query_str, k=self.k, **self.search_kwargs)
        return [
            NodeWithScore(node=TextNode(text=h.answer, id_=str(h.id), metadata=hit_metadata(h)), score=h.score)
            for h in hits
        ]

"""A LangChain retriever over a :class:`qaindex.Ranker` (``pip install 'qaindex[langchain]'``).

Example
-------
>>> import qaindex
>>> from qaindex.integrations.langchain import QAIndexRetriever
>>> ranker = qaindex.Ranker.build("examples/faq.jsonl")
>>> retriever = QAIndexRetriever(ranker=ranker, k=3)
>>> docs = retriever.invoke("How do I reset my password?")
>>> len(docs), sorted(docs[0].metadata)[:3]
(3, ['category', 'distance', 'id'])
"""

from __future__ import annotations

from typing import Any

from ..errors import MissingDependencyError
from ..ranker import Ranker
from . import hit_metadata

try:
    from langchain_core.callbacks import CallbackManagerForRetrieverRun
    from langchain_core.documents import Document
    from langchain_core.retrievers import BaseRetriever
    from pydantic import ConfigDict, Field
except ImportError:  # pragma: no cover - exercised by a test that hides the package
    raise MissingDependencyError(
        "qaindex.integrations.langchain needs langchain-core: pip install 'qaindex[langchain]'"
    ) from None

__all__ = ["QAIndexRetriever"]


class QAIndexRetriever(BaseRetriever):
    """LangChain retriever: each hit becomes a ``Document`` (answer text as ``page_content``;
    the answer's metadata plus ``id``, ``score`` (in [0, 1]: the estimated probability of
    relevance), ``raw_score`` and ``distance`` as ``metadata``), best first; pass
    ``search_kwargs={"min_score": 0.5}`` to drop answers unlikely to be relevant.

    Parameters
    ----------
    ranker : qaindex.Ranker
        A built or loaded index.
    k : int
        Number of documents per query.
    search_kwargs : dict
        Extra keyword arguments for :meth:`qaindex.Ranker.search` (e.g. ``min_score``).
    """

    ranker: Any
    k: int = 4
    search_kwargs: dict[str, Any] = Field(default_factory=dict)

    model_config = ConfigDict(arbitrary_types_allowed=True)

    def _get_relevant_documents(self, query: str, *, run_manager: CallbackManagerForRetrieverRun) -> list[Document]:
        if not isinstance(self.ranker, Ranker):
            from ..errors import QueryError

            raise QueryError(f"QAIndexRetriever.ranker must be a qaindex.Ranker, got {type(self.ranker).__name__}")
        hits = self.ranker.search(query, k=self.k, **self.search_kwargs)
        return [Document(page_content=h.answer, metadata=hit_metadata(h), id=str(h.id)) for h in hits]

"""A LangChain retriever over a :class:`qaindex.Ranker` (``pip install 'qaindex[langchain]'``).

Example
-------
>>> import qaindex
>>> from qaindex.integrations.langchain import QAIndexRetriever
>>> ranker = qaindex.Ranker.build("examples/faq.jsonl")
>>> retriever = QAIndexRetriever(ranker=ranker, k=3, where={"category": "account"})
>>> docs = retriever.invoke("How do I reset my password?")
>>> len(docs), {d.metadata["category"] for d in docs}
(3, {'account'})
"""

from __future__ import annotations

import os
from typing import Any

from ..arguments import finite_number, positive_int
from ..errors import MissingDependencyError
from ..ranker import Ranker
from . import check_search_kwargs, hit_metadata, ranker_from

try:
    from langchain_core.callbacks import CallbackManagerForRetrieverRun
    from langchain_core.documents import Document
    from langchain_core.retrievers import BaseRetriever
    from pydantic import ConfigDict, Field, ValidationError
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
    ranker : qaindex.Ranker or path
        A built or loaded index, or an index directory (loaded, and so checked, here).
    k : int
        Number of documents per query.
    where : mapping or callable, optional
        Metadata filter, as :meth:`qaindex.Ranker.search`'s ``where``.
    min_score : float, optional
        Drop hits scoring below this, as :meth:`qaindex.Ranker.search`'s ``min_score``.
    search_kwargs : dict
        Any other keyword argument of :meth:`qaindex.Ranker.search` (e.g. ``rerank``);
        an unknown name is refused here, not at the first query.

    Any other keyword is refused (``QueryError``) rather than silently ignored, apart from
    LangChain's own ``tags`` and ``metadata``.
    """

    ranker: Any
    k: int = 4
    where: Any = None
    min_score: float | None = None
    search_kwargs: dict[str, Any] = Field(default_factory=dict)

    model_config = ConfigDict(arbitrary_types_allowed=True, extra="forbid")

    def __init__(self, ranker: Ranker | str | os.PathLike[str], **kwargs: Any) -> None:
        unknown = sorted(set(kwargs) - set(type(self).model_fields))
        if unknown:
            from ..errors import QueryError

            raise QueryError(
                f"QAIndexRetriever got unknown argument(s) {', '.join(map(repr, unknown))}; it takes ranker, k, "
                "where, min_score and search_kwargs (any other Ranker.search argument), plus LangChain's tags "
                "and metadata"
            )
        if "search_kwargs" in kwargs:
            kwargs["search_kwargs"] = check_search_kwargs(kwargs["search_kwargs"], "search_kwargs")
        if "k" in kwargs:  # a QueryError naming it, not a pydantic ValidationError
            kwargs["k"] = positive_int(kwargs["k"], "k")
        if kwargs.get("min_score") is not None:
            kwargs["min_score"] = finite_number(kwargs["min_score"], "min_score", optional=True)
        loaded = ranker_from(ranker)
        try:
            super().__init__(ranker=loaded, **kwargs)  # type: ignore[call-arg]
        except ValidationError as exc:  # LangChain's own fields (tags, metadata) of the wrong type
            from ..errors import QueryError

            first = exc.errors()[0]
            raise QueryError(f"QAIndexRetriever: {'.'.join(map(str, first['loc']))}: {first['msg']}") from None

    def _get_relevant_documents(self, query: str, *, run_manager: CallbackManagerForRetrieverRun) -> list[Document]:
        options = {"where": self.where, "min_score": self.min_score, **self.search_kwargs}
        hits = self.ranker.search(query, k=self.k, **options)
        return [Document(page_content=h.answer, metadata=hit_metadata(h), id=str(h.id)) for h in hits]

"""LangChain over a :class:`qaindex.Ranker` (``pip install 'qaindex[langchain]'``): a retriever
(:class:`QAIndexRetriever`) and a vector store (:class:`QAIndexVectorStore`).

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
import uuid
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from ..checks import finite_number, positive_int
from ..errors import MissingDependencyError, QueryError
from ..ranker import Ranker
from ..store.locking import DEFAULT_LOCK_TIMEOUT
from . import check_search_kwargs, hit_metadata, ranker_from

try:
    from langchain_core.callbacks import CallbackManagerForRetrieverRun
    from langchain_core.documents import Document
    from langchain_core.embeddings import Embeddings
    from langchain_core.retrievers import BaseRetriever
    from langchain_core.vectorstores import VectorStore
    from pydantic import ConfigDict, Field, ValidationError
except ImportError:  # pragma: no cover - exercised by a test that hides the package
    raise MissingDependencyError(
        "qaindex.integrations.langchain needs langchain-core: pip install 'qaindex[langchain]'"
    ) from None

__all__ = ["QAIndexRetriever", "QAIndexVectorStore"]

_T = TypeVar("_T")
_RESERVED = ("id", "answer", "question", "questions")  # corpus fields: not metadata


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


class QAIndexVectorStore(VectorStore):
    """LangChain ``VectorStore`` over a qaindex index: documents are answers (``page_content``
    the answer text, ``metadata`` its metadata, ``id`` its id, as text), encoded by the
    index's own model.

    Writes add or replace by id (:meth:`qaindex.Ranker.upsert`): on an index directory, each
    write is one :meth:`qaindex.Ranker.edit` (under the writer lock, saved atomically when
    it succeeds, nothing changed when it fails); on a Ranker, in memory until :meth:`save`.
    Searches take ``k``, ``filter`` (or ``where``: :meth:`qaindex.Ranker.search`'s metadata
    filter, operators included) and any other :meth:`~qaindex.Ranker.search` argument
    (``min_score``, ``hybrid``, ``rerank``...). The scores of
    :meth:`similarity_search_with_score` are qaindex's: the estimated probability that the
    answer is relevant, in [0, 1], higher is better (so relevance scores are the same).
    The async methods (``aadd_documents``, ``asimilarity_search``...) are LangChain's: they
    run these in a thread, which the Ranker allows (it is thread-safe).

    Parameters
    ----------
    ranker : qaindex.Ranker or path
        An index directory (loaded here; writes are saved to it) or a Ranker (in memory).
    lock_timeout : float or None, keyword-only
        Seconds a write to an index directory waits for another writer.

    Example
    -------
    >>> from qaindex.integrations.langchain import QAIndexVectorStore
    >>> store = QAIndexVectorStore.from_texts(
    ...     ["Open Settings, then Reset password.", "Refunds take 14 days."],
    ...     metadatas=[{"topic": "account"}, {"topic": "billing"}], ids=["reset", "refund"])
    >>> [d.id for d in store.similarity_search("how do I reset my password?", k=1)]
    ['reset']
    >>> store.add_texts(["Refunds take 30 days."], ids=["refund"])  # replaces "refund"
    ['refund']
    >>> store.get_by_ids(["refund"])[0].page_content
    'Refunds take 30 days.'
    """

    def __init__(
        self, ranker: Ranker | str | os.PathLike[str], *, lock_timeout: float | None = DEFAULT_LOCK_TIMEOUT
    ) -> None:
        self.path: Path | None = None if isinstance(ranker, Ranker) else Path(os.fspath(ranker))
        self.ranker: Ranker = ranker_from(ranker)
        self.lock_timeout = lock_timeout

    @classmethod
    def from_texts(
        cls,
        texts: list[str],
        embedding: Embeddings | None = None,
        metadatas: list[dict[str, Any]] | None = None,
        *,
        ids: list[str] | None = None,
        path: str | os.PathLike[str] | None = None,
        **kwargs: Any,
    ) -> QAIndexVectorStore:
        """Build an index of ``texts`` (:meth:`qaindex.Ranker.build`; ``kwargs`` are its
        arguments: ``model``, ``index_kind``, ``hybrid``...), saved at ``path`` when given.

        ``embedding`` must be None: qaindex encodes with its own model (``model=``).
        """
        _no_embedding(embedding)
        ranker = Ranker.build(_records(list(texts), metadatas, ids), **kwargs)
        if path is None:
            return cls(ranker)
        ranker.save(path)
        return cls(path)

    @classmethod
    def from_documents(cls, documents: list[Document], embedding: Embeddings | None = None, **kwargs: Any) -> Any:
        """:meth:`from_texts` of the documents' texts, metadata and ids."""
        return super().from_documents(documents, embedding, **kwargs)  # type: ignore[arg-type]

    def add_texts(
        self,
        texts: Iterable[str],
        metadatas: list[dict[str, Any]] | None = None,
        *,
        ids: list[str] | None = None,
        **kwargs: Any,
    ) -> list[str]:
        """Add answers, or replace those whose id is stored (new random ids where ``ids`` is None
        or an id is None). Returns their ids. All or nothing."""
        if kwargs:
            raise QueryError(f"add_texts: unknown argument(s) {', '.join(map(repr, sorted(kwargs)))}")
        records = _records(list(texts), metadatas, ids)
        self._write(lambda ranker: ranker.upsert(records))
        return [str(r["id"]) for r in records]

    def add_documents(self, documents: list[Document], **kwargs: Any) -> list[str]:
        """:meth:`add_texts` of the documents (``ids=`` overrides their own ids)."""
        ids = kwargs.pop("ids", None)
        if ids is None:
            ids = [doc.id for doc in documents]
        return self.add_texts(
            [d.page_content for d in documents], [dict(d.metadata) for d in documents], ids=ids, **kwargs
        )

    def delete(self, ids: list[str] | None = None, **kwargs: Any) -> bool | None:
        """Remove the answers with these ids (each must exist; an index keeps one answer at least,
        so ``ids=None``, LangChain's "delete all", is refused). Returns True."""
        if kwargs:
            raise QueryError(f"delete: unknown argument(s) {', '.join(map(repr, sorted(kwargs)))}")
        if ids is None:
            raise QueryError("delete needs the ids to remove: a qaindex index cannot be emptied; build a new one")
        self._write(lambda ranker: ranker.remove(list(ids)))
        return True

    def get_by_ids(self, ids: Sequence[str], /) -> list[Document]:
        """The stored answers with these ids, in the order asked; ids not stored are skipped."""
        found = []
        for ident in ids:
            try:
                found.append(_document(self.ranker.get(ident)))
            except QueryError:  # not stored
                continue
        return found

    def similarity_search(self, query: str, k: int = 4, **kwargs: Any) -> list[Document]:
        """The ``k`` best answers for ``query`` as documents."""
        return [doc for doc, _ in self.similarity_search_with_score(query, k, **kwargs)]

    def similarity_search_with_score(self, query: str, k: int = 4, **kwargs: Any) -> list[tuple[Document, float]]:
        """``(document, score)`` of the ``k`` best answers; the score is the estimated probability
        of relevance (in [0, 1], higher is better)."""
        hits = self.ranker.search(query, k=positive_int(k, "k"), **_search_options(kwargs))
        return [(_document(hit), hit.score) for hit in hits]

    def _select_relevance_score_fn(self) -> Callable[[float], float]:
        return lambda score: score  # scores are probabilities already

    def save(self, path: str | os.PathLike[str], **kwargs: Any) -> Path:
        """Save the index (:meth:`qaindex.Ranker.save`); later writes go to ``path``."""
        saved = self.ranker.save(path, **kwargs)
        self.path = saved
        return saved

    def _write(self, change: Callable[[Ranker], _T]) -> _T:
        if self.path is None:
            return change(self.ranker)
        with Ranker.edit(self.path, lock_timeout=self.lock_timeout) as ranker:
            result = change(ranker)
        self.ranker = ranker
        return result


def _no_embedding(embedding: Any) -> None:
    if embedding is not None:
        raise QueryError(
            f"QAIndexVectorStore encodes with the index's own model, not a LangChain embedding "
            f"({type(embedding).__name__}); pass embedding=None and the model with model="
        )


def _records(
    texts: list[str], metadatas: list[dict[str, Any]] | None, ids: Sequence[str | None] | None
) -> list[dict[str, Any]]:
    """Corpus records for texts, their metadata and ids (random where missing)."""
    for name, given in (("metadatas", metadatas), ("ids", ids)):
        if given is not None and len(given) != len(texts):
            raise QueryError(f"{name}: {len(given)} given for {len(texts)} texts; give one per text")
    records = []
    for i, text in enumerate(texts):
        metadata = dict(metadatas[i]) if metadatas else {}
        taken = [key for key in _RESERVED if key in metadata]
        if taken:
            raise QueryError(
                f"metadatas[{i}]: {taken[0]!r} is a corpus field in qaindex, not metadata; rename that key"
            )
        ident = ids[i] if ids is not None and ids[i] is not None else str(uuid.uuid4())
        records.append({"id": ident, "answer": text, **metadata})
    return records


def _document(found: Any) -> Document:
    """A stored :class:`~qaindex.Record` or a :class:`~qaindex.Hit` as a document (the answer's
    metadata, its id as text)."""
    return Document(page_content=found.answer, metadata=dict(found.metadata), id=str(found.id))


def _search_options(kwargs: dict[str, Any]) -> dict[str, Any]:
    """LangChain's ``filter`` is qaindex's ``where``; other keywords are checked by name."""
    options = dict(kwargs)
    if "filter" in options:
        if options.get("where") is not None:
            raise QueryError("give filter or where, not both")
        options["where"] = options.pop("filter")
    return check_search_kwargs(options, "search arguments")

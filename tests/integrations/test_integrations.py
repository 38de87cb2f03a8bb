"""Retriever adapters (LangChain, LlamaIndex) with the real packages, and ``python -m qaindex``."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import FAQ

import qaindex
from qaindex import MissingDependencyError, QAIndexError, QueryError, Ranker


@pytest.fixture(scope="module")
def ranker(faq_model: Path) -> Ranker:
    return Ranker.build(FAQ, model=faq_model, device="cpu")


QUESTION = "how do I reset my password"


def test_langchain_retriever_returns_the_hits_as_documents(ranker: Ranker) -> None:
    pytest.importorskip("langchain_core")
    from qaindex.integrations.langchain import QAIndexRetriever

    hits = ranker.search(QUESTION, k=3)
    docs = QAIndexRetriever(ranker=ranker, k=3).invoke(QUESTION)
    assert [d.page_content for d in docs] == [h.answer for h in hits]
    assert [d.id for d in docs] == [str(h.id) for h in hits]
    for doc, hit in zip(docs, hits, strict=True):
        assert doc.metadata == {
            **hit.metadata,
            "id": hit.id,
            "score": hit.score,
            "raw_score": hit.raw_score,
            "distance": hit.distance,
        }


def test_llamaindex_retriever_returns_the_hits_as_scored_nodes(ranker: Ranker) -> None:
    pytest.importorskip("llama_index.core")
    from qaindex.integrations.llamaindex import QAIndexRetriever

    hits = ranker.search(QUESTION, k=4)
    nodes = QAIndexRetriever(ranker, k=4).retrieve(QUESTION)
    assert [(n.node.id_, n.node.text, n.score) for n in nodes] == [(str(h.id), h.answer, h.score) for h in hits]
    for node, hit in zip(nodes, hits, strict=True):
        assert 0.0 <= node.score <= 1.0
        assert node.node.metadata == {
            **hit.metadata,
            "id": hit.id,
            "score": hit.score,
            "raw_score": hit.raw_score,
            "distance": hit.distance,
        }


def test_llamaindex_retriever_refuses_a_non_ranker(tmp_path: Path) -> None:
    pytest.importorskip("llama_index.core")
    from qaindex.integrations.llamaindex import QAIndexRetriever

    with pytest.raises(QueryError, match=r"^QAIndexRetriever needs a qaindex\.Ranker or an index directory, got int$"):
        QAIndexRetriever(3)  # type: ignore[arg-type]
    with pytest.raises(qaindex.IndexFormatError, match=r"no index here"):
        QAIndexRetriever(tmp_path / "missing")  # a path is loaded, so checked, at construction


@pytest.mark.parametrize("framework", ["langchain", "llamaindex"])
def test_retrievers_filter_with_where_and_load_a_path(ranker: Ranker, framework: str, tmp_path: Path) -> None:
    pytest.importorskip("langchain_core" if framework == "langchain" else "llama_index.core")
    index = ranker.save(tmp_path / "ix")
    where = {"category": ["billing", "data"]}
    hits = ranker.search(QUESTION, k=3, where=where)
    assert {h.metadata["category"] for h in hits} == {"billing", "data"}
    if framework == "langchain":
        from qaindex.integrations.langchain import QAIndexRetriever as LangChainRetriever

        ids = [d.id for d in LangChainRetriever(ranker=ranker, k=3, where=where).invoke(QUESTION)]
        assert ids == [d.id for d in LangChainRetriever(ranker=str(index), k=3, where=where).invoke(QUESTION)]
        kept = LangChainRetriever(ranker=ranker, k=3, min_score=hits[0].score).invoke(QUESTION)
        assert all(d.metadata["score"] >= hits[0].score for d in kept)
    else:
        from qaindex.integrations.llamaindex import QAIndexRetriever as LlamaRetriever

        ids = [n.node.id_ for n in LlamaRetriever(index, k=3, where=where).retrieve(QUESTION)]
    assert ids == [str(h.id) for h in hits]


def test_langchain_retriever_refuses_unknown_arguments_and_bad_paths(ranker: Ranker, tmp_path: Path) -> None:
    pytest.importorskip("langchain_core")
    from qaindex.integrations.langchain import QAIndexRetriever

    with pytest.raises(
        QueryError, match=r"^QAIndexRetriever got unknown argument\(s\) 'wherex'; it takes ranker, k, where"
    ):
        QAIndexRetriever(ranker=ranker, wherex=1)
    with pytest.raises(QueryError, match=r"^search_kwargs: unknown Ranker\.search argument\(s\) 'k'; it takes "):
        QAIndexRetriever(ranker=ranker, search_kwargs={"k": 3})
    with pytest.raises(qaindex.IndexFormatError, match=r"no index here"):
        QAIndexRetriever(ranker=tmp_path / "missing")
    with pytest.raises(QueryError, match=r"^QAIndexRetriever needs a qaindex\.Ranker or an index directory, got int$"):
        QAIndexRetriever(ranker=3)


def test_llamaindex_retriever_refuses_unknown_search_arguments(ranker: Ranker) -> None:
    pytest.importorskip("llama_index.core")
    from qaindex.integrations.llamaindex import QAIndexRetriever

    with pytest.raises(
        QueryError, match=r"^QAIndexRetriever: unknown Ranker\.search argument\(s\) 'wherex'; it takes "
    ):
        QAIndexRetriever(ranker, wherex=1)


@pytest.mark.parametrize(
    ("module", "package", "extra"),
    [
        ("qaindex.integrations.langchain", "langchain_core", "langchain"),
        ("qaindex.integrations.llamaindex", "llama_index", "llamaindex"),
    ],
)
def test_adapter_without_its_package_names_the_extra(
    monkeypatch: pytest.MonkeyPatch, module: str, package: str, extra: str
) -> None:
    for name in [m for m in sys.modules if m == package or m.startswith(package + ".") or m == module]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, package, None)
    with pytest.raises(MissingDependencyError, match=rf"pip install 'qaindex\[{extra}\]'$"):
        importlib.import_module(module)


def test_import_qaindex_does_not_import_the_frameworks() -> None:
    code = (
        "import sys, qaindex; print(sorted(m for m in ('langchain_core', 'llama_index', 'torch') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_python_dash_m_runs_the_cli() -> None:
    out = subprocess.run([sys.executable, "-m", "qaindex", "--version"], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == f"qaindex, version {qaindex.__version__}"


@pytest.mark.parametrize("framework", ["langchain", "llamaindex"])
def test_retriever_arguments_are_query_errors(ranker: Ranker, framework: str) -> None:
    pytest.importorskip("langchain_core" if framework == "langchain" else "llama_index.core")
    module = importlib.import_module(f"qaindex.integrations.{framework}")

    def make(r: object, k: object, kwargs: object) -> object:
        if framework == "langchain":
            return module.QAIndexRetriever(ranker=r, k=k, search_kwargs=kwargs)
        return module.QAIndexRetriever(r, k, **kwargs)  # type: ignore[arg-type]

    named = "search_kwargs" if framework == "langchain" else "QAIndexRetriever"
    cases = [
        ((ranker, 0, {}), "k must be a positive integer, got 0"),
        ((ranker, "3", {}), "k must be a positive integer, got '3'"),
        ((None, 3, {}), "QAIndexRetriever needs a qaindex.Ranker or an index directory, got NoneType"),
        ((ranker, 3, {"bogus": 1}), f"{named}: unknown Ranker.search argument(s) 'bogus'; it takes "),
    ]
    if framework == "langchain":
        cases.append(((ranker, 3, [1]), "search_kwargs must be a dict of Ranker.search arguments, got list"))
    for args, message in cases:
        with pytest.raises(QueryError) as info:
            make(*args)
        assert str(info.value) == message or (message.endswith("it takes ") and str(info.value).startswith(message))
    assert len(make(ranker, 2, {"min_score": -100.0}).ranker.search(QUESTION, k=2)) == 2  # type: ignore[attr-defined]


def test_langchain_retriever_wrong_field_types_are_query_errors(ranker: Ranker) -> None:
    """Every constructor argument of the wrong type is a QueryError, not pydantic's ValidationError
    (a falsy non-mapping search_kwargs, found by the fuzz, included)."""
    pytest.importorskip("langchain_core")
    from qaindex.integrations.langchain import QAIndexRetriever

    cases = [
        ({"search_kwargs": frozenset()}, "search_kwargs must be a dict of Ranker.search arguments, got frozenset"),
        ({"min_score": "x"}, "min_score must be a finite number or None, got 'x'"),
        ({"tags": 5}, "QAIndexRetriever: tags: Input should be a valid list"),
    ]
    for kwargs, message in cases:
        with pytest.raises(QueryError) as info:
            QAIndexRetriever(ranker=ranker, **kwargs)
        assert str(info.value) == message


def test_search_kwargs_with_keys_of_mixed_types_are_named() -> None:
    """Unknown keys of any type are listed (sorting str and int keys together raised TypeError)."""
    from qaindex.integrations import check_search_kwargs

    with pytest.raises(QueryError) as info:
        check_search_kwargs({"a": 1, 3: 2, "where": None}, "search_kwargs")
    assert str(info.value).startswith("search_kwargs: unknown Ranker.search argument(s) 'a', 3; it takes ")


def _store_texts() -> tuple[list[str], list[dict[str, object]], list[str]]:
    records = [r for r in FAQ if "id" in r]
    texts = [str(r["answer"]) for r in records]
    metadatas = [{k: v for k, v in r.items() if k not in ("id", "answer", "question", "questions")} for r in records]
    return texts, metadatas, [str(r["id"]) for r in records]


def test_langchain_vector_store_searches_as_the_ranker(faq_model: Path) -> None:
    pytest.importorskip("langchain_core")
    from langchain_core.documents import Document

    from qaindex.integrations.langchain import QAIndexVectorStore

    texts, metadatas, ids = _store_texts()
    store = QAIndexVectorStore.from_texts(texts, metadatas=metadatas, ids=ids, model=faq_model, device="cpu")
    truth = Ranker.build([{"id": i, "answer": t, **m} for t, m, i in zip(texts, metadatas, ids, strict=True)],
                         model=faq_model, device="cpu")  # fmt: skip
    for question in [QUESTION, "refund", "export notes"]:
        hits = truth.search(question, k=3)
        scored = store.similarity_search_with_score(question, k=3)
        assert [(d.id, d.page_content, d.metadata, s) for d, s in scored] == [
            (str(h.id), h.answer, h.metadata, h.score) for h in hits
        ]
        assert store.similarity_search(question, k=3) == [d for d, _ in scored]
        assert store.as_retriever(search_kwargs={"k": 3}).invoke(question) == [d for d, _ in scored]
        relevance = store.similarity_search_with_relevance_scores(question, k=3)
        assert [s for _, s in relevance] == [s for _, s in scored]
    where = {"category": {"$in": ["billing", "data"]}}
    want = [str(h.id) for h in truth.search("refund", k=4, where=where)]
    assert [d.id for d in store.similarity_search("refund", k=4, filter=where)] == want
    assert sorted(want) == ["export", "refund"]  # the filter keeps exactly the billing and data answers
    # add or replace by id; new ids are random text
    added = store.add_documents(
        [Document(page_content="Refunds take 30 days.", metadata={"category": "billing"}, id="refund"),
         Document(page_content="Sync runs hourly.")]
    )  # fmt: skip
    assert added[0] == "refund" and len(added[1]) == 36
    assert store.get_by_ids(["refund", "ghost", added[1]]) == [
        Document(page_content="Refunds take 30 days.", metadata={"category": "billing"}, id="refund"),
        Document(page_content="Sync runs hourly.", metadata={}, id=added[1]),
    ]
    assert len(store.ranker) == len(texts) + 1
    assert store.delete([added[1]]) is True and store.get_by_ids([added[1]]) == []
    with pytest.raises(QueryError, match="delete needs the ids to remove"):
        store.delete()
    with pytest.raises(QueryError, match=r"^metadatas\[0\]: 'id' is a corpus field in qaindex, not metadata"):
        store.add_texts(["x"], metadatas=[{"id": 3}])
    with pytest.raises(QueryError, match=r"^search arguments: unknown Ranker.search argument\(s\) 'wher'"):
        store.similarity_search("refund", wher={"category": "billing"})
    with pytest.raises(QueryError, match="encodes with the index's own model"):
        QAIndexVectorStore.from_texts(["x"], embedding=object())  # type: ignore[arg-type]


def test_langchain_vector_store_on_a_directory_saves_each_write(faq_model: Path, tmp_path: Path) -> None:
    pytest.importorskip("langchain_core")
    from qaindex.integrations.langchain import QAIndexVectorStore

    texts, metadatas, ids = _store_texts()
    index = tmp_path / "ix"
    store = QAIndexVectorStore.from_texts(texts, metadatas=metadatas, ids=ids, path=index, model=faq_model)
    assert store.path == index
    assert store.add_texts(["Sync runs hourly."], ids=["sync"]) == ["sync"]
    assert Ranker.load(index).get("sync").answer == "Sync runs hourly."
    with pytest.raises(QAIndexError):  # one bad text: nothing written
        store.add_texts(["Sync runs daily.", "   "], ids=["sync", "blank"])
    assert Ranker.load(index).get("sync").answer == "Sync runs hourly."
    store.delete(["sync", "7"])
    assert sorted(str(r.id) for r in Ranker.load(index).records()) == sorted(set(ids) - {"7"})
    again = QAIndexVectorStore(index)  # an index directory: writes go to it
    again.add_texts(["Export to PDF too."], ids=["export"])
    assert Ranker.load(index).get("export").answer == "Export to PDF too."


def test_the_ranker_from_asyncio(ranker: Ranker, faq_model: Path) -> None:
    """The Ranker is thread-safe: asyncio code awaits asyncio.to_thread(ranker.search, ...)."""
    import asyncio

    questions = [QUESTION, "refund", "export notes", "two-factor", "sync"] * 4

    async def main() -> list[list[qaindex.Hit]]:
        return await asyncio.gather(*(asyncio.to_thread(ranker.search, q, 3) for q in questions))

    assert asyncio.run(main()) == [ranker.search(q, 3) for q in questions]
    pytest.importorskip("langchain_core")
    from qaindex.integrations.langchain import QAIndexVectorStore

    # answers only: the random toy model ranks another record's stored question first
    store = QAIndexVectorStore(Ranker.build(FAQ, model=faq_model, device="cpu", question_keys=False))

    async def langchain() -> tuple[list[str], list[str]]:
        added = await store.aadd_texts(["Sync runs hourly."], ids=["sync"])
        found = await store.asimilarity_search("sync hourly", k=1)
        return added, [str(d.id) for d in found]

    assert asyncio.run(langchain()) == (["sync"], ["sync"])

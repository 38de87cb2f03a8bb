"""Retriever adapters (LangChain, LlamaIndex) with the real packages, and ``python -m qaindex``."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import FAQ

import qaindex
from qaindex import MissingDependencyError, QueryError, Ranker


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


def test_llamaindex_retriever_refuses_a_non_ranker() -> None:
    pytest.importorskip("llama_index.core")
    from qaindex.integrations.llamaindex import QAIndexRetriever

    with pytest.raises(QueryError, match=r"^QAIndexRetriever needs a qaindex\.Ranker, got str$"):
        QAIndexRetriever("index-path")  # type: ignore[arg-type]


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
        "import sys, qaindex; "
        "print(sorted(m for m in ('langchain_core', 'llama_index', 'torch') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_python_dash_m_runs_the_cli() -> None:
    out = subprocess.run([sys.executable, "-m", "qaindex", "--version"], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == f"qaindex, version {qaindex.__version__}"

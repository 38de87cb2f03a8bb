"""Shared fixtures: tiny ONNX models written to temporary directories (no torch)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
from helpers.onnx_models import make_model

FAQ = [
    {
        "id": "reset",
        "answer": "Open settings and choose reset password to get a reset link by email.",
        "questions": ["how do I reset my password"],
        "category": "account",
    },
    {
        "id": "refund",
        "answer": "Refunds are paid within 14 days of a cancelled order.",
        "question": "can I get a refund",
        "category": "billing",
    },
    {"id": "export", "answer": "Export notes as Markdown from the file menu.", "category": "data"},
    {"id": 7, "answer": "Two-factor login uses an authenticator app.", "category": "security"},
    {"answer": "Sync runs every five minutes while the app is open."},
]


def vocab_for(texts: list[str]) -> list[str]:
    from qaindex.text.tokenizer import Tokenizer

    return Tokenizer.build_word_vocab(texts)


@pytest.fixture(scope="session")
def faq_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A Poincaré bag-of-words model over the FAQ's words, with random embeddings."""
    texts = [r["answer"] for r in FAQ] + [q for r in FAQ for q in r.get("questions", [r.get("question", "")])]
    vocab = vocab_for(texts)
    rng = np.random.default_rng(1)
    emb = rng.normal(scale=0.15, size=(len(vocab), 6)).astype(np.float32)
    emb[0] = 0.0
    return make_model(tmp_path_factory.mktemp("models") / "faq", vocab, emb)


@pytest.fixture(scope="session")
def planted_data(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The planted word-group task (``qaindex_export.training.synthetic``) as benchmark files: 200 train
    questions, 40 dev questions (also as ``dev_groups`` and as a corpus of their answers)."""
    from qaindex_export.training.synthetic import planted_word_groups, write_benchmark, write_corpus

    root = tmp_path_factory.mktemp("planted")
    dev_groups = planted_word_groups(40, seed=2, prefix="d")
    return {
        "train": write_benchmark(planted_word_groups(200, seed=1), root / "train.jsonl"),
        "dev": write_benchmark(dev_groups, root / "dev.jsonl"),
        "dev_groups": dev_groups,
        "corpus": write_corpus(dev_groups, root / "corpus.jsonl"),
    }


@pytest.fixture()
def faq_file(tmp_path: Path) -> Path:
    import json

    path = tmp_path / "faq.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in FAQ), encoding="utf-8")
    return path


@pytest.fixture(autouse=True)
def _no_index_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("QAINDEX_INDEX", raising=False)
    os.environ.setdefault("OMP_NUM_THREADS", "1")


@pytest.fixture(autouse=True)
def _empty_cwd(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test runs in an empty working directory of its own (CLI subprocesses inherit it), so
    nothing in the folder pytest was started from (a ``./qaindex-index`` the quickstart built)
    changes a result, and no test writes there or races another xdist worker on a relative path."""
    monkeypatch.chdir(tmp_path_factory.mktemp("cwd"))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked ``slow`` (training on ../shared/datasets, or for a minute or more) run only with
    QAINDEX_SLOW=1, which CI sets."""
    if os.environ.get("QAINDEX_SLOW") == "1":
        return
    skip = pytest.mark.skip(reason="slow: set QAINDEX_SLOW=1 to run (a long training, or one on ../shared/datasets)")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)

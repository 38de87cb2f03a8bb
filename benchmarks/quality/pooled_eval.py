"""The pooled evaluation shared by :mod:`benchmarks.quality.pooled` and the default-model builder.

Each labelled test file becomes one pool: every candidate answer of the file is indexed once,
with :data:`JUNK_ANSWERS` added (never relevant), and each question is searched against the
whole pool (MRR@10, recall@10, P@1 and junk@10); ``eval_*`` run one system over every pool.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.common import ROOT, minilm
from qaindex import Ranker
from qaindex.eval.datasets import Candidate, QuestionGroup, read_labelled
from qaindex.eval.evaluate import answer_pool, pooled_metrics
from qaindex.model import Model

POOLS = {
    "WikiQA test": "wikiqa/test.filtered.jsonl",
    "TrecQA raw test": "trecqa_raw/test.jsonl",
    "TrecQA clean test": "trecqa_clean/test.jsonl",
}
FAQ = "FAQ (examples/faq.jsonl)"
K = 10
# Junk answers added to every pool (never relevant): the JUNK list of tests/search/test_hubs.py, then
# more single letters, digits, punctuation runs, emoji and scripts outside the English vocabulary.
JUNK_ANSWERS = [
    ".", "a", "?", "!", ",", "-", "x", "...", "!!", "?!", "()", "--", "…", "—", "ꙮꙮ", "𝔵𝔶𝔷", "ඞ", "☃☃ ⟁",
    "b", "k", "z", "I", "0", "1", "7", "42", "2024", "???", "!!!", "?!?!", ";;", "**", "#", "@", "&&", "%",
    "~~~", "+1", ":)", "😀", "🙂👍", "🔥🔥🔥", "🤷", "жжж", "中文", "العربية", "한국어", "ॐ", "ᚠᚢᚦ", "∑∫∂",
]  # fmt: skip
JUNK_AID = "junk-"


# ------------------------------------------------------------------------ data


def load_pools(data: Path, *, junk: bool = True) -> dict[str, list[QuestionGroup]]:
    """Question groups of every pool (FAQ last), with the junk answers added unless ``junk=False``."""
    pools = {label: read_labelled(data / rel) for label, rel in POOLS.items()}
    pools[FAQ] = read_labelled(ROOT / "examples" / "faq.jsonl")
    return {label: with_junk(groups) for label, groups in pools.items()} if junk else pools


def with_junk(groups: Sequence[QuestionGroup]) -> list[QuestionGroup]:
    """``groups`` plus one question-less group holding every junk answer (label 0).

    The pooled evaluation indexes every distinct answer of the split and skips groups
    without a correct answer, so the junk joins the pool and is never relevant.
    """
    junk = tuple(Candidate(f"{JUNK_AID}{i}", text, 0) for i, text in enumerate(JUNK_ANSWERS))
    return [*groups, QuestionGroup("junk", "", junk)]


def junk_rows(groups: Sequence[QuestionGroup]) -> np.ndarray:
    """Pool rows (``pool_answers`` order) of the junk answers."""
    return np.asarray(
        [i for i, (aid, _) in enumerate(answer_pool(groups).keys) if aid.startswith(JUNK_AID)], dtype=np.int64
    )


def real_answers(groups: Sequence[QuestionGroup]) -> list[str]:
    """The pool's distinct answers without the junk (what a model may be fine-tuned on)."""
    return [text for aid, text in answer_pool(groups).keys if not aid.startswith(JUNK_AID)]


def pool_answers(groups: Sequence[QuestionGroup]) -> list[str]:
    """The pool's distinct answers in the order ``evaluate_pooled`` indexes them."""
    return answer_pool(groups).answers


def questions_and_relevant(groups: Sequence[QuestionGroup]) -> tuple[list[str], list[np.ndarray]]:
    """The pool's evaluated questions and, per question, the rows of its correct answers."""
    pool = answer_pool(groups)
    return pool.questions, pool.relevant


# ------------------------------------------------------------------------ systems


def junk_metrics(
    ranked: Sequence[Sequence[int]] | np.ndarray, relevant: Sequence[np.ndarray], junk: np.ndarray
) -> dict[str, Any]:
    """``pooled_metrics`` plus ``junk@10`` (share of questions with a junk answer in the top K)
    and ``junk_above_relevant`` (share with a junk answer ranked above the first correct hit,
    or anywhere in the top K when no correct answer is in it)."""
    out = pooled_metrics(ranked, relevant, K)
    junk_set = set(int(j) for j in junk)
    in_top, above = 0, 0
    for row, rel in zip(ranked, relevant, strict=True):
        top = [int(r) for r in row[:K] if int(r) >= 0]
        flags = [r in junk_set for r in top]
        in_top += any(flags)
        rel_set = set(int(r) for r in rel)
        first = next((i for i, r in enumerate(top) if r in rel_set), len(top))
        above += any(flags[:first])
    n = max(1, len(relevant))
    return {**out, "junk@10": in_top / n, "junk_above_relevant": above / n}


def eval_qaindex_model(
    model: Model, groups: Sequence[QuestionGroup], *, hybrid: bool = False, batch_size: int = 256
) -> dict[str, Any]:
    """Pooled metrics of one pool through the real Ranker path, as ``evaluate_pooled`` runs it
    (same plan, ids, FAISS recall and exact rerank), plus the junk shares. ``hybrid``: the
    index also holds its BM25 index and questions go through ``search_batch`` with the
    default fusion (what ``qaindex build`` + ``qaindex search`` do when PyStemmer is installed).
    ``batch_size``: texts per encoder call (a transformer's memory grows with it)."""
    plan = answer_pool(groups)
    records = plan.records()
    ranker = Ranker.build(records, model=model, index_kind="auto", batch_size=batch_size, hybrid=hybrid)
    depth = min(K, len(plan.keys))
    ranked: list[np.ndarray] = []
    if hybrid:
        questions = plan.questions
        for start in range(0, len(questions), 256):
            hits = ranker.search_batch(questions[start : start + 256], depth, hybrid=True)
            ranked.extend(np.asarray([h.row for h in row], dtype=np.int64) for row in hits)
    else:
        qv = model.encode(plan.questions, role="question", batch_size=batch_size)
        for start in range(0, len(qv), 256):
            _, _, rows = ranker.search_vectors(qv[start : start + 256], depth)
            ranked.extend(np.asarray(r, dtype=np.int64) for r in rows)
    relevant = plan.relevant
    skipped = plan.skipped - sum(1 for g in groups if not g.question)  # the junk group (and a corpus's pool group)
    return {**junk_metrics(ranked, relevant, junk_rows(groups)), "skipped": skipped, "answers": len(plan.keys)}


def eval_qaindex(
    model_dir: Path, pools: dict[str, list[QuestionGroup]], *, hybrid: bool = False, batch_size: int = 256
) -> dict[str, dict[str, Any]]:
    """Pooled metrics (with junk shares) of a qaindex model directory through the Ranker."""
    model = Model.load(model_dir, threads=None)
    return {
        label: eval_qaindex_model(model, groups, hybrid=hybrid, batch_size=batch_size)
        for label, groups in pools.items()
    }


def eval_dense(encode: Callable[[list[str]], np.ndarray], pools: dict[str, list[QuestionGroup]]) -> dict[str, Any]:
    """Exact cosine over every answer with an arbitrary text encoder."""
    out = {}
    for label, groups in pools.items():
        questions, relevant = questions_and_relevant(groups)
        a = encode(pool_answers(groups))
        q = encode(questions)
        a = a / np.maximum(np.linalg.norm(a, axis=1, keepdims=True), 1e-12)
        q = q / np.maximum(np.linalg.norm(q, axis=1, keepdims=True), 1e-12)
        sims = q @ a.T
        ranked = np.argsort(-sims, axis=1, kind="stable")[:, :K]
        out[label] = {**junk_metrics(ranked, relevant, junk_rows(groups)), "answers": a.shape[0]}
    return out


def eval_bm25(pools: dict[str, list[QuestionGroup]], *, stem: bool = False) -> dict[str, Any]:
    """BM25 (bm25s defaults, English stopwords) over every answer; ``stem=True`` adds the
    PyStemmer English (Snowball) stemmer to both sides, as the bm25s README does."""
    import bm25s

    stemmer = None
    if stem:
        import Stemmer

        stemmer = Stemmer.Stemmer("english").stemWords
    out = {}
    for label, groups in pools.items():
        questions, relevant = questions_and_relevant(groups)
        answers = pool_answers(groups)
        retriever = bm25s.BM25()
        retriever.index(
            bm25s.tokenize(answers, stopwords="en", stemmer=stemmer, show_progress=False), show_progress=False
        )
        tokens = bm25s.tokenize(questions, stopwords="en", stemmer=stemmer, show_progress=False)
        docs, scores = retriever.retrieve(tokens, k=min(K, len(answers)), show_progress=False, n_threads=1)
        # a question with no known word scores 0 everywhere: no hit
        ranked = np.where(scores > 0, docs, -1)
        out[label] = {**junk_metrics(ranked, relevant, junk_rows(groups)), "answers": len(answers)}
    return out


def minilm_encoder(threads: int | None = None) -> Callable[[list[str]], np.ndarray]:
    """all-MiniLM-L6-v2 sentence embeddings (offline package), normalised."""
    model = minilm(threads=threads)

    def encode(texts: list[str]) -> np.ndarray:
        return np.asarray(model.encode(texts, batch_size=64, normalize_embeddings=True), dtype=np.float32)

    return encode

"""Per-request bounds of search: a question's BM25 side costs its distinct terms (capped), not
its length; a huge ``k`` is clamped to the answers and scored in blocks within the budget."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from helpers.onnx_models import point_model, random_ball

import qaindex.text.lexical as lexical_module
from qaindex import Ranker
from qaindex.text.lexical import MAX_QUERY_TERMS, MAX_QUESTION_CHARS, LexicalIndex

pytest.importorskip("Stemmer")
bm25s = pytest.importorskip("bm25s")

ANSWERS = [
    "Reset your password from the login page.",
    "Refunds take five days; a refund of a password reset fee is possible.",
    "Passwords expire every ninety days.",
    "Export your notes as Markdown.",
]


def _spy_ranges(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Record how many postings each scoring gathers (lexical._ranges's total length)."""
    sizes: list[int] = []
    original = lexical_module._ranges

    def spy(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
        sizes.append(int(np.asarray(lengths).sum()))
        return original(starts, lengths)

    monkeypatch.setattr(lexical_module, "_ranges", spy)
    return sizes


def test_a_repeated_question_term_is_scored_once_with_its_count(monkeypatch: pytest.MonkeyPatch) -> None:
    lex = LexicalIndex.from_texts(ANSWERS)
    sizes = _spy_ranges(monkeypatch)
    question = "password refund " * 3_000 + "export"  # 48 KB, under the character cap
    scores = lex.scores(question)
    gathered = list(sizes)
    # postings gathered: each distinct term's once, however often the question repeats it
    postings = {t: int((lex.scores(t) > 0).sum()) for t in ("password", "refund", "export")}
    assert postings == {"password": 3, "refund": 1, "export": 1}
    assert gathered == [sum(postings.values())]
    # scores: bm25s's, where a repeated term counts once per occurrence
    stemmer = lexical_module._tokenizer()._stem.__self__  # type: ignore[attr-defined]
    retriever = bm25s.BM25()
    retriever.index(bm25s.tokenize(ANSWERS, stopwords="en", stemmer=stemmer, show_progress=False), show_progress=False)
    tokens = bm25s.tokenize([question], stopwords="en", stemmer=stemmer, show_progress=False, return_ids=False)[0]
    # (bm25s adds 6,001 float32 terms one by one: its rounding, not ours, sets the tolerance)
    np.testing.assert_allclose(scores, retriever.get_scores(tokens), rtol=1e-4)
    single = {t: lex.scores(t).astype(np.float64) for t in ("password", "refund", "export")}
    exact = 3_000 * single["password"] + 3_000 * single["refund"] + single["export"]
    np.testing.assert_allclose(scores, exact, rtol=1e-6)


def test_a_question_is_read_up_to_its_distinct_term_cap() -> None:
    lex = LexicalIndex.from_texts([*ANSWERS, " ".join(f"w{i}x" for i in range(MAX_QUERY_TERMS + 10))])
    filler = " ".join(f"w{i}x" for i in range(MAX_QUERY_TERMS))
    terms, length = lex.query(f"{filler} w0x w1x refund")  # repeats of read terms go on; a new one stops
    assert length == MAX_QUERY_TERMS + 2 and len(np.unique(terms)) == MAX_QUERY_TERMS
    assert lex.query(f"refund {filler}")[1] == MAX_QUERY_TERMS  # the cap's last distinct term is cut
    refund = lex.query("refund")[0]
    assert not np.isin(refund, lex.query(f"{filler} refund")[0]).any()


def test_a_question_is_read_up_to_its_character_cap() -> None:
    lex = LexicalIndex.from_texts(ANSWERS)
    head = "password " * (MAX_QUESTION_CHARS // 9)
    assert len(head) <= MAX_QUESTION_CHARS
    terms, length = lex.query(head + "z" * 20 + " refund" * 10)  # the cap falls inside the z's
    assert length == MAX_QUESTION_CHARS // 9 and len(np.unique(terms)) == 1  # "refund" lies past the cap
    assert lex.query("x" * (10 * MAX_QUESTION_CHARS))[1] <= 1  # one word: cut at the cap


def test_long_questions_in_search_batch_cost_their_distinct_terms(
    faq_model: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ranker = Ranker.build([{"id": i, "answer": a} for i, a in enumerate(ANSWERS)], model=faq_model, hybrid=True)
    sizes = _spy_ranges(monkeypatch)
    long = ["password refund " * 6_000] * 20  # 100 KB each
    hits = ranker.search_batch(long, k=2)
    short = ranker.search_batch(["password refund " * 2] * 20, k=2)
    assert [[h.id for h in row] for row in hits] == [[h.id for h in row] for row in short]
    assert sizes and max(sizes) <= len(ANSWERS) * 2  # two distinct terms: at most their postings


@pytest.fixture(scope="module")
def wide_hybrid(tmp_path_factory: pytest.TempPathFactory) -> Ranker:
    rng = np.random.default_rng(4)
    points = random_ball(rng, 1500, 128)
    mdir, words = point_model(tmp_path_factory.mktemp("m") / "wide", points)
    return Ranker.build([{"id": w, "answer": w} for w in words], model=mdir, index_kind="flat", hybrid=True)


def test_a_huge_k_is_clamped_and_scored_within_the_budget(wide_hybrid: Ranker, monkeypatch: pytest.MonkeyPatch) -> None:
    questions = [f"p{i}" for i in range(0, 1500, 300)]
    want = wide_hybrid.search_batch(questions, k=1500)
    model = wide_hybrid.model
    gathered: list[int] = []
    original = model.score_checked

    def spy(q: np.ndarray, c: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        gathered.append(c.nbytes)
        return original(q, c)

    monkeypatch.setattr(model, "score_checked", spy)
    budget = 16 << 20
    wide_hybrid.configure(memory_budget=budget)
    try:
        got = wide_hybrid.search_batch(questions, k=10**9)
    finally:
        wide_hybrid.configure(memory_budget=1 << 30)
    assert [len(row) for row in got] == [1500] * len(questions)  # k clamped to the answers
    assert [[h.id for h in row] for row in got] == [[h.id for h in row] for row in want]
    # every scorer call gathers at most a quarter of the budget, with the scorer's copies
    assert gathered and max(gathered) * 5 <= budget // 4

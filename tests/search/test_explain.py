"""Why this rank: ``search(..., explain=True)`` gives each hit its dense part (raw score and
rank), BM25 part (score, rank, matched terms), fused value and matching key, checked on a tiny
corpus whose BM25 scores are computed here by hand."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from qaindex import Ranker
from qaindex.cli import main
from qaindex.search.fusion import Fusion
from qaindex.search.hits import Explanation, Hit

pytest.importorskip("Stemmer")

# each answer has two BM25 terms (stopwords dropped, stemmed): every length equals the mean
ANSWERS = ["Cats purr.", "Dogs bark.", "Cats and dogs.", "Parrots talk."]
TERMS = [("cat", "purr"), ("dog", "bark"), ("cat", "dog"), ("parrot", "talk")]
QUESTION = "cats or dogs at home?"  # terms: cat, dog, home (no answer holds "home")
K1 = 1.5


def _bm25() -> list[float]:
    """BM25 by hand: idf(t) = ln(1 + (N - df + 0.5) / (df + 0.5)); every answer is as long as the
    mean, so each matched term weighs idf * 1 / (1 + k1)."""
    n = len(TERMS)
    out = []
    for terms in TERMS:
        score = 0.0
        for t in ("cat", "dog"):
            df = sum(t in d for d in TERMS)
            score += math.log(1 + (n - df + 0.5) / (df + 0.5)) / (1 + K1) if t in terms else 0.0
        out.append(score)
    return out


def _ranks(values: list[float]) -> list[int]:
    """1-based rank of each value, highest first, ties by row."""
    order = sorted(range(len(values)), key=lambda i: (-values[i], i))
    return [order.index(i) + 1 for i in range(len(values))]


@pytest.fixture(scope="module")
def tiny() -> Ranker:
    return Ranker.build([{"id": f"a{i}", "answer": a} for i, a in enumerate(ANSWERS)], hybrid=True, index_kind="flat")


def _dense(ranker: Ranker) -> list[float]:
    model = ranker.model
    scores, _ = model.score(model.encode([QUESTION], role="question"), model.encode(ANSWERS, role="answer")[None])
    return scores[0].astype(np.float64).tolist()


def test_bm25_by_hand_is_what_the_index_scores(tiny: Ranker) -> None:
    assert tiny._lexical is not None
    np.testing.assert_allclose(tiny._lexical.scores(QUESTION), _bm25(), rtol=1e-6)
    assert _bm25()[2] == pytest.approx(2 * math.log(2) / 2.5)


@pytest.mark.parametrize("weight", [0.0, 0.4, 1.0])
def test_a_convex_fusion_explained_exactly(tiny: Ranker, weight: float) -> None:
    dense, lex = _dense(tiny), _bm25()
    dn = [(s - min(dense)) / (max(dense) - min(dense)) for s in dense]
    fused = [weight * d + (1 - weight) * x / max(lex) for d, x in zip(dn, lex, strict=True)]
    order = sorted(range(4), key=lambda i: (-fused[i], -dense[i], i))
    hits = tiny.search(QUESTION, k=4, fusion=Fusion("convex", weight=weight), explain=True)
    assert [h.id for h in hits] == [f"a{i}" for i in order]
    rank_d, rank_l = _ranks(dense), _ranks(lex)
    matched = [("cat",), ("dog",), ("cat", "dog"), ()]
    for h, i in zip(hits, order, strict=True):
        e = h.explanation
        assert e is not None and e.key == "answer"
        assert e.dense_score == pytest.approx(dense[i], abs=1e-5) and e.dense_score == h.raw_score
        assert e.dense_rank == rank_d[i]
        assert e.bm25_score == pytest.approx(lex[i], rel=1e-6)
        assert e.bm25_rank == (rank_l[i] if lex[i] > 0 else None)
        assert e.matched_terms == matched[i]
        assert e.fused == pytest.approx(fused[i], abs=1e-5)
        assert e.dense_weight == weight
        # the question's features the hybrid score reads, whether or not this rule reads them:
        # BM25's best answer (a2) holds cat and dog, not home (idf ln 10, as no answer holds it)
        assert e.question_coverage == pytest.approx(2 * math.log(2) / (2 * math.log(2) + math.log(10)))
        assert e.question_match == pytest.approx(max(lex) / (2 * math.log(2) + math.log(10)))
        assert e.question_top == pytest.approx(max(dense), abs=1e-5)
    assert [h.explanation.bm25_rank for h in sorted(hits, key=lambda h: h.id)] == [2, 3, 1, None]  # type: ignore[union-attr]


def test_the_adaptive_weight_and_rrf_explained(tiny: Ranker) -> None:
    """adaptive: no measured ratio (4 answers), so the corpus part is ``weight``; the question's
    coverage is that of BM25's best answer (a2: cat and dog, not home, which weighs ln(1 + 4.5 / 0.5))."""
    rule = Fusion("adaptive", weight=0.5, a=0.0, b=2.0, terms=10.0, d=1.25, e=1.5)
    coverage = 2 * math.log(2) / (2 * math.log(2) + math.log(10))
    expected = 0.5 * min(1.0, max(0.0, 1.25 - 1.5 * coverage)) * min(1.0, 10 / 3)
    for h in tiny.search(QUESTION, k=4, fusion=rule, explain=True):
        assert h.explanation is not None and h.explanation.dense_weight == pytest.approx(expected)
    dense, lex = _dense(tiny), _bm25()
    rank_d, rank_l = _ranks(dense), _ranks(lex)
    rrf = [1 / (60 + rank_d[i]) + (1 / (60 + rank_l[i]) if lex[i] > 0 else 0.0) for i in range(4)]
    for h in tiny.search(QUESTION, k=4, fusion=Fusion("rrf", c=60), explain=True):
        i = int(str(h.id)[1:])
        assert h.explanation is not None and h.explanation.dense_weight is None
        assert h.explanation.fused == pytest.approx(rrf[i])


def test_dense_search_and_the_default_explain_nothing_more(tiny: Ranker) -> None:
    dense = tiny.search(QUESTION, k=3, hybrid=False, explain=True)
    expected = sorted(range(4), key=lambda i: (-_dense(tiny)[i], i))[:3]
    assert [h.id for h in dense] == [f"a{i}" for i in expected]
    assert [h.explanation for h in dense] == [
        Explanation(dense_score=h.raw_score, dense_rank=j) for j, h in enumerate(dense, start=1)
    ]
    assert all(h.explanation is None for h in tiny.search(QUESTION, k=3))
    assert "explanation" not in tiny.search(QUESTION, k=1)[0].to_json()
    # reranked or filtered hits keep the first stage's explanation; equality ignores it
    filtered = tiny.search(QUESTION, k=2, where={"id": ["a0", "a3"]}, explain=True)
    assert [h.explanation.matched_terms for h in filtered] == [("cat",), ()]  # type: ignore[union-attr]
    assert filtered == tiny.search(QUESTION, k=2, where={"id": ["a0", "a3"]})
    assert Hit("x", "y", 0.5, 0.1) == Hit("x", "y", 0.5, 0.1, explanation=Explanation(1.0, 1))


def test_explain_must_be_a_flag(tiny: Ranker) -> None:
    from qaindex import QueryError

    with pytest.raises(QueryError, match="explain"):
        tiny.search(QUESTION, explain="yes")  # type: ignore[arg-type]


def test_cli_search_explain_prints_the_parts(tiny: Ranker, tmp_path: Path) -> None:
    index = tiny.save(tmp_path / "ix")
    runner = CliRunner()
    res = runner.invoke(main, ["search", QUESTION, "--index", str(index), "-k", "4", "--json", "--explain"])
    assert res.exit_code == 0, res.output
    hits = json.loads(res.stdout)["hits"]
    api = tiny.search(QUESTION, k=4, explain=True)
    assert [h["explanation"] for h in hits] == [h.explanation.to_json() for h in api]  # type: ignore[union-attr]
    assert set(hits[0]["explanation"]) == {
        "key",
        "dense_score",
        "dense_rank",
        "bm25_score",
        "bm25_rank",
        "matched_terms",
        "fused",
        "dense_weight",
        "question_top",
        "question_coverage",
        "question_match",
    }
    table = runner.invoke(main, ["search", QUESTION, "--index", str(index), "-k", "4", "--explain"])
    assert table.exit_code == 0, table.output
    lines = table.stdout.splitlines()
    assert len(lines) == 1 + 2 * 4  # the header, then each hit and its explanation
    best = api[0].explanation
    assert best is not None
    assert lines[2].split() == [
        "dense",
        f"{best.dense_score:.4f}",
        f"(#{best.dense_rank})",
        "bm25",
        f"{best.bm25_score:.4f}",
        f"(#{best.bm25_rank}:",
        *[f"{t}," for t in best.matched_terms[:-1]],
        f"{best.matched_terms[-1]})",
        "fused",
        f"{best.fused:.4f}",
        "key",
        "answer",
    ]
    plain = runner.invoke(main, ["search", QUESTION, "--index", str(index), "-k", "4"])
    assert len(plain.stdout.splitlines()) == 5

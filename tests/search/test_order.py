"""One order: hits are ordered by the ``score`` they report in every mode (dense, hybrid, with a
filter, reranked, with or without a hybrid score calibration), the first hits do not depend on
``k``, and ``min_score`` keeps a prefix of the ranking. Checked on many questions over the
example FAQ and over a synthetic corpus larger than the candidate pool of ``k`` = 50."""

from __future__ import annotations

import itertools
import json
import re
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from qaindex import Ranker, Reranker
from qaindex.model import DEFAULT_MODEL_DIR
from qaindex.search.calibration import Calibration
from qaindex.search.fusion import fusion_from

pytest.importorskip("Stemmer")

ROOT = Path(__file__).resolve().parents[2]
FAQ_PATH = ROOT / "examples" / "faq.jsonl"
RECORDS = [json.loads(line) for line in FAQ_PATH.read_text(encoding="utf-8").splitlines() if line.strip()]
SENTENCES = [s.strip() for r in RECORDS for s in re.split(r"(?<=[.!?])\s+", r["answer"]) if len(s.split()) > 3]
WORDS = sorted({w.lower() for r in RECORDS for q in r["questions"] for w in re.findall(r"[A-Za-z]{3,}", q)})


def _questions(n: int, seed: int) -> list[str]:
    """Stored FAQ questions and questions of 2 to 6 random question words (typed as users type)."""
    rng = np.random.default_rng(seed)
    stored = [q for r in RECORDS for q in r["questions"]]
    picked = [stored[i] for i in rng.choice(len(stored), n // 2, replace=False)]
    typed = [" ".join(rng.choice(WORDS, int(rng.integers(2, 7)))) + "?" for _ in range(n - n // 2)]
    return picked + typed


def _synthetic(n: int = 700, seed: int = 0) -> list[dict[str, Any]]:
    """Answers of two or three FAQ sentences each, with a common and a rare category."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        text = " ".join(SENTENCES[j] for j in rng.choice(len(SENTENCES), int(rng.integers(2, 4)), replace=False))
        out.append({"id": f"s{i}", "answer": text, "category": "rare" if i % 23 == 0 else "common"})
    return out


class OverlapReranker(Reranker):
    """A reranker scoring by the question words an answer holds (ties are frequent), calibrated
    by Platt scaling with the distance below the best: the stage's logic without an ONNX model."""

    def __init__(self) -> None:  # no model directory: only what the reranking stage reads
        self.calibration = Calibration("platt", a=0.7, b=-2.0, c=0.5)

    def score(self, question: str, answers: list[str]) -> np.ndarray:  # type: ignore[override]
        words = set(re.findall(r"\w+", question.lower()))
        return np.asarray([len(words & set(re.findall(r"\w+", a.lower()))) for a in answers], np.float32)


def _without_hybrid_score(tmp_path: Path) -> Path:
    """The built-in model with its fusion rule but no hybrid score calibration."""
    target = tmp_path / "model"
    shutil.copytree(DEFAULT_MODEL_DIR, target)
    manifest = json.loads((target / "manifest.json").read_text())
    manifest["fusion"] = {k: v for k, v in manifest["fusion"].items() if k not in ("score", "fused_score")}
    (target / "manifest.json").write_text(json.dumps(manifest))
    return target


@pytest.fixture(scope="module")
def corpora(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Ranker]:
    plain = _without_hybrid_score(tmp_path_factory.mktemp("plain"))
    return {
        "faq": Ranker.build(FAQ_PATH, hybrid=True, index_kind="flat"),
        "synthetic": Ranker.build(_synthetic(), hybrid=True, index_kind="flat"),
        # answers only: each hit's own probability capped by the hits above (with stored questions
        # as keys, the answers' and the keys' lists are capped apart, then merged: test_keys.py)
        "faq, no hybrid calibration": Ranker.build(
            FAQ_PATH, model=plain, hybrid=True, index_kind="flat", question_keys=False
        ),
    }


MODES: dict[str, dict[str, Any]] = {
    "dense": {"hybrid": False},
    "hybrid": {"hybrid": True},
    "dense, filtered": {"hybrid": False, "where": {"category": ["billing", "rare"]}},
    "hybrid, filtered (few)": {"hybrid": True, "where": {"category": ["billing", "rare"]}},
    "hybrid, filtered (many)": {"hybrid": True, "where": {"category": ["editor", "common"]}},
    "hybrid, filtered by a function": {"hybrid": True, "where": lambda r: len(r.answer) % 3 != 0},
    "dense, reranked": {"hybrid": False, "rerank": OverlapReranker(), "depth": 60},
    "hybrid, reranked": {"hybrid": True, "rerank": OverlapReranker(), "depth": 60},
}
CORPORA = ["faq", "synthetic", "faq, no hybrid calibration"]


@pytest.mark.parametrize("corpus", CORPORA)
@pytest.mark.parametrize("mode", list(MODES))
def test_scores_never_rise_with_rank(corpora: dict[str, Ranker], corpus: str, mode: str) -> None:
    ranker = corpora[corpus]
    results = ranker.search_batch(_questions(60, seed=1), k=10, **MODES[mode])
    assert sum(len(hits) for hits in results) > 100
    for hits in results:
        scores = [h.score for h in hits]
        assert all(b <= a for a, b in itertools.pairwise(scores)), scores
        assert all(0.0 <= s <= 1.0 for s in scores)


@pytest.mark.parametrize("corpus", CORPORA)
@pytest.mark.parametrize("mode", ["dense", "hybrid", "hybrid, filtered (many)", "hybrid, reranked"])
def test_the_first_hits_do_not_depend_on_k(corpora: dict[str, Ranker], corpus: str, mode: str) -> None:
    """hits(k=1) and hits(k=10) are the first hits of hits(k=50): the candidate pool never shrinks
    with k (k = 1 and k = 10 share one pool, so their first hit is the same Hit, score included),
    and a larger pool only appends hits."""
    ranker = corpora[corpus]
    questions = _questions(40, seed=2)
    one, ten, wide = (ranker.search_batch(questions, k=k, **MODES[mode]) for k in (1, 10, 50))
    for question, a, b, c in zip(questions, one, ten, wide, strict=True):
        assert a == b[:1], question
        assert [h.id for h in b] == [h.id for h in c[:10]], question
        assert [h.score for h in b] == pytest.approx([h.score for h in c[:10]], abs=0.01), question


@pytest.mark.parametrize("corpus", CORPORA)
@pytest.mark.parametrize(
    "mode", ["dense", "hybrid", "hybrid, filtered (few)", "hybrid, filtered by a function", "dense, reranked"]
)
def test_min_score_keeps_a_prefix_of_the_ranking(corpora: dict[str, Ranker], corpus: str, mode: str) -> None:
    ranker = corpora[corpus]
    for question in _questions(16, seed=3):
        full = ranker.search(question, k=10, **MODES[mode])
        for threshold in sorted({h.score for h in full}):
            kept = ranker.search(question, k=10, min_score=threshold, **MODES[mode])
            assert [h.id for h in kept] == [h.id for h in full[: len(kept)]], (question, threshold)
            assert len(kept) == sum(h.score >= threshold for h in full)


def test_without_a_hybrid_calibration_the_score_is_the_model_probability_capped_by_the_hits_above(
    corpora: dict[str, Ranker],
) -> None:
    ranker = corpora["faq, no hybrid calibration"]
    assert fusion_from(None, ranker.model).score is None and fusion_from(None, ranker.model).fused_score is None
    risen = 0
    for question in _questions(30, seed=4):
        hits = ranker.search(question, k=10)
        best = ranker.search(question, k=1, hybrid=False)[0].raw_score  # the best model score among the candidates
        own = [float(ranker.model.calibration(h.raw_score, best)) for h in hits]
        assert [h.score for h in hits] == pytest.approx(np.minimum.accumulate(own).tolist(), rel=1e-9)
        risen += own != sorted(own, reverse=True)
    assert risen > 0  # the model's own probabilities rise with the fused rank for some questions

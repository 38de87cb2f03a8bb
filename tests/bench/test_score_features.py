"""The score-features study (benchmarks/quality/score_features.py): its fits are the shipped one's, its figures the searches'."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from benchmarks.quality import score_features
from benchmarks.quality.trust import THRESHOLD
from qaindex.model import Model


def test_the_fit_qaindex_writes_is_the_built_in_models_stored_one() -> None:
    """``coverage + length`` refitted on the example FAQ, as ``qaindex calibrate --hybrid-score``
    fits it, gives the built-in manifest's ``fusion.fused_score``; the fit before it reads the
    match and neither coverage nor length."""
    pytest.importorskip("Stemmer")
    model = Model.load()
    fitted = score_features.fits(model)
    stored = model.manifest["fusion"]["fused_score"]
    names = ("bias", "fused", "top", "match", "first", "coverage", "length")
    np.testing.assert_allclose(fitted["coverage + length"], [stored[k] for k in names], atol=2e-6)
    before = dict(zip(names, fitted["match (fitted before)"], strict=True))
    assert before["coverage"] == before["length"] == 0.0 and before["match"] > 0


def test_measure_counts_the_first_hits_the_search_scores(faq_model: Path) -> None:
    """Kept / refused of each choice equal the shares counted from searches scored by that choice."""
    pytest.importorskip("Stemmer")
    from dataclasses import replace

    from benchmarks.quality.pooled_eval import pool_answers, questions_and_relevant
    from qaindex import Ranker
    from qaindex.eval.datasets import Candidate, QuestionGroup
    from qaindex.ranker import Record
    from qaindex.search.fusion import fusion_from

    model = Model.load(faq_model)
    texts = ["Refunds are paid within 30 days.", "Reset your password from the sign-in page.", "Export notes as PDF."]
    asked = [("refund days", 0), ("reset password", 1), ("export notes to pdf", 2), ("refund password", 0)]
    groups = [
        QuestionGroup(str(i), q, tuple(Candidate(str(j), t, int(j == right)) for j, t in enumerate(texts)))
        for i, (q, right) in enumerate(asked)
    ]
    offtopic = ["what is the capital of france", "how tall is a giraffe"]
    got = score_features.measure(model, {"c": groups}, {"c": offtopic})
    answers = pool_answers(groups)
    questions, relevant = questions_and_relevant(groups)
    ranker = Ranker.build([Record(str(i), a) for i, a in enumerate(answers)], model=model, hybrid=True)
    for row in got.values():
        rule = replace(fusion_from(None, model), fused_score=tuple(row["weights"].values()))
        first = [ranker.search(q, k=1, fusion=rule)[0] for q in questions]
        kept = [h.score >= THRESHOLD for h, rows in zip(first, relevant, strict=True) if h.row in rows.tolist()]
        off = [ranker.search(q, k=1, fusion=rule) for q in offtopic]
        refused = [(hits[0].score if hits else 0.0) < THRESHOLD for hits in off]
        assert kept and row["c"] == {
            "kept": round(float(np.mean(kept)), 4),
            "refused": round(float(np.mean(refused)), 4),
        }
    body = score_features.readme_body({"models": {"m": got}})
    assert "| m | **coverage + length** |" in body and json.dumps(got)  # rendered, and JSON-serialisable

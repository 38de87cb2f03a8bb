"""tools.fit_default_fusion: the built-in model's hybrid score fitted on a collected pool, and
the fitted fusion written into a model manifest that then loads with it."""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from benchmarks.quality.hybrid import collect, faq_pool, half_a
from qaindex.model import DEFAULT_MODEL_DIR, Model
from qaindex.search.fusion import DEFAULT_FUSION, fusion_from
from tools import fit_default_fusion

pytest.importorskip("Stemmer")


def test_the_hybrid_score_is_fitted_on_half_a_and_falls_with_the_fused_value() -> None:
    model = Model.load(None, device="cpu")
    pool = faq_pool()
    pool = replace(pool, questions=pool.questions[:120], relevant=pool.relevant[:120])
    collected = {"faq": collect(model, pool)}
    x, y = fit_default_fusion.hit_features(collected["faq"], pool, DEFAULT_FUSION, model, half_a(120))
    assert x.shape == (60 * 10, 6) and set(np.unique(y)) == {0.0, 1.0}  # the top 10 of half A's 60 questions
    assert x[:, 3].tolist() == [1.0, *[0.0] * 9] * 60  # the first hit of each search
    # the question's coverage and ln(1 + n(q)): one value per question, as the collected pool has them
    c = collected["faq"]
    asked = np.flatnonzero(half_a(120))
    np.testing.assert_allclose(x[:, 4], np.repeat([c.coverage[i] for i in asked], 10), rtol=1e-12)
    np.testing.assert_allclose(x[:, 5], np.repeat(np.log1p([c.terms[i] for i in asked]), 10), rtol=1e-12)
    fitted = fit_default_fusion.fit_score(collected, {"faq": pool}, DEFAULT_FUSION, model)
    assert fitted.score is None and fitted.fused_score is not None and len(fitted.fused_score) == 7
    assert fitted.fused_score[1] >= 0 and fitted.fused_score[4] >= 0  # the score never rises down the ranking
    assert fitted.fused_score[3] == 0.0  # the match is not read
    assert replace(fitted, fused_score=None) == replace(DEFAULT_FUSION, score=None)  # the rule is kept


def test_the_fitted_fusion_is_written_into_the_manifest_and_loads(tmp_path: Path) -> None:
    model_dir = tmp_path / "model"
    shutil.copytree(DEFAULT_MODEL_DIR, model_dir)
    fitted = replace(DEFAULT_FUSION, a=0.25, fused_score=(-4.0, 6.0, 0.5, 1.0))
    entry = {**fitted.to_json(), "fitted_on": ["faq"], "half": "A (seed 0)"}
    fit_default_fusion.store_fusion(model_dir, entry)
    model = Model.load(model_dir, device="cpu")
    assert model.manifest["fusion"]["fitted_on"] == ["faq"]
    assert fusion_from(None, model) == fitted

"""The per-model fusion fit (qaindex.eval.fusion_fit): its objective against a brute-force
evaluation of every grid point on a synthetic pool, the safe fallback it starts from, and the
fallback a model without a fitted fusion gets."""

from __future__ import annotations

import itertools
import json
import math
import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from qaindex.eval.fusion_fit import EXAMPLE_FAQ, FitPool, fit_fusion
from qaindex.search.fusion import DEFAULT_FUSION, SAFE_FUSION, Fusion, fusion_from

GRID = {
    "a": [-0.5, 0.0, 0.5, 1.0],
    "b": [0.0, 1.0],
    "de": [(1.0, 0.0), (1.25, 1.0)],
    "terms": [3.0, math.inf],
}


def _pool(name: str, seed: int, ratio: float, lexical_good: float) -> FitPool:
    """Questions over 40 candidates: the relevant one is lifted in the dense scores, in the BM25
    scores, or both, with noise; ``lexical_good`` of them are lifted in BM25 more."""
    rng = np.random.default_rng(seed)
    pool = FitPool(name, ratio, [], [], [], [], [], [])
    for _ in range(60):
        n = 40
        rows = np.sort(rng.choice(1000, size=n, replace=False)).astype(np.int64)
        good = int(rng.integers(n))
        dense = rng.normal(size=n)
        lex = np.maximum(rng.normal(1.0, 1.0, size=n), 0.0)
        if rng.random() < lexical_good:
            lex[good] += rng.uniform(0.5, 3.0)
            dense[good] += rng.uniform(-0.5, 1.0)
        else:
            dense[good] += rng.uniform(0.5, 2.5)
            lex[good] += rng.uniform(-0.5, 0.5)
        lex = np.maximum(lex, 0.0)
        pool.rows.append(rows)
        pool.dense.append(dense)
        pool.lexical.append(lex)
        pool.terms.append(int(rng.integers(1, 8)))
        pool.coverage.append(float(rng.random()))
        pool.relevant.append({int(rows[good])})
    return pool


def _brute_rr(fusion: Fusion, pool: FitPool, i: int) -> float:
    """Reciprocal rank by the formulas written out: weight, min-max normalisation, sort."""
    corpus = min(1.0, max(0.0, fusion.a + fusion.b * pool.ratio))  # type: ignore[operator]
    question = min(1.0, max(0.0, fusion.d - fusion.e * pool.coverage[i]))
    w = corpus * question * min(1.0, fusion.terms / max(pool.terms[i], 1))
    d, lex, rows = pool.dense[i], pool.lexical[i], pool.rows[i]
    dn = (d - d.min()) / (d.max() - d.min())  # depth >= candidates: the lowest score is the reference
    fused = w * dn + (1 - w) * lex / lex.max()
    order = sorted(range(len(rows)), key=lambda j: (-fused[j], -d[j], rows[j]))
    for rank, j in enumerate(order[:10], start=1):
        if int(rows[j]) in pool.relevant[i]:
            return 1.0 / rank
    return 0.0


def _brute_parts(pool: FitPool) -> float:
    best = []
    for scores in (pool.dense, pool.lexical):
        rr = []
        for i, s in enumerate(scores):
            order = sorted(range(len(s)), key=lambda j, s=s, i=i: (-s[j], pool.rows[i][j]))
            order = [j for j in order if scores is pool.dense or s[j] > 0]
            rr.append(next((1 / r for r, j in enumerate(order[:10], 1) if pool.rows[i][j] in pool.relevant[i]), 0.0))
        best.append(float(np.mean(rr)))
    return max(best)


def test_fit_fusion_is_the_brute_force_best_of_the_grid() -> None:
    pools = [_pool("dense-leaning", 0, 1.2, 0.2), _pool("bm25-leaning", 1, 0.4, 0.7)]
    floors = [_brute_parts(p) for p in pools]
    best_key, best_rule = None, None
    for a, b, (d, e), terms in itertools.product(GRID["a"], GRID["b"], GRID["de"], GRID["terms"]):
        rule = Fusion("adaptive", weight=0.5, a=a, b=b, terms=terms, d=d, e=e)
        mrr = [float(np.mean([_brute_rr(rule, p, i) for i in range(len(p))])) for p in pools]
        key = (round(min(m - f for m, f in zip(mrr, floors, strict=True)), 4), float(np.mean(mrr)))
        if best_key is None or key > best_key:
            best_key, best_rule = key, rule
    assert best_key is not None
    fitted, info = fit_fusion(pools, grid=GRID, start=None)
    assert fitted == best_rule
    assert info["worst_margin"] == best_key[0] and info["mean_mrr"] == round(best_key[1], 4)
    assert not info["kept_start"]
    # the safe start is kept unless the grid's worst-case margin beats it by min_gain
    start = Fusion("adaptive", weight=0.8, a=0.0, b=1.0, terms=math.inf)
    start_mrr = [float(np.mean([_brute_rr(start, p, i) for i in range(len(p))])) for p in pools]
    start_margin = round(min(m - f for m, f in zip(start_mrr, floors, strict=True)), 4)
    kept, kept_info = fit_fusion(pools, grid=GRID, start=start, min_gain=best_key[0] - start_margin + 1e-6)
    assert kept == start and kept_info["kept_start"] and kept_info["worst_margin"] == start_margin
    if best_key[0] > start_margin:
        # the grid's rule, with the start's weight (that of an index without a measured ratio)
        assert fit_fusion(pools, grid=GRID, start=start, min_gain=0.0)[0] == replace(best_rule, weight=start.weight)


def test_a_single_ratio_keeps_the_starts_slope() -> None:
    pools = [_pool("one", 2, 0.8, 0.5)]
    fitted, _ = fit_fusion(pools, grid=GRID, start=SAFE_FUSION, min_gain=0.0)
    assert fitted.b == SAFE_FUSION.b


def test_a_model_without_a_fitted_fusion_gets_the_safe_fallback(tmp_path: Path) -> None:
    from qaindex import Model
    from qaindex.model import DEFAULT_MODEL_DIR

    target = tmp_path / "model"
    shutil.copytree(DEFAULT_MODEL_DIR, target)
    manifest = json.loads((target / "manifest.json").read_text())
    builtin = fusion_from(None, Model.load(target))
    assert builtin.rule == "adaptive" and builtin.a == manifest["fusion"]["a"]  # a fitted fusion is read
    del manifest["fusion"]
    (target / "manifest.json").write_text(json.dumps(manifest))
    assert fusion_from(None, Model.load(target)) == SAFE_FUSION != DEFAULT_FUSION
    # a score calibration alone (qaindex calibrate on such a model) goes with the safe rule
    manifest["fusion"] = {"fused_score": {"bias": -3.0, "fused": 4.0, "top": 0.5, "match": 1.0}}
    (target / "manifest.json").write_text(json.dumps(manifest))
    assert fusion_from(None, Model.load(target)) == replace(SAFE_FUSION, fused_score=(-3.0, 4.0, 0.5, 1.0))


@pytest.mark.parametrize("ratio", [0.5, 1.0, 1.7])
def test_the_safe_fallback_ranks_by_the_model_where_it_is_stronger_than_bm25(ratio: float) -> None:
    """A corpus ratio of 0.5 or more gives dense weight 1: the fused order is the dense order."""
    pool = _pool("p", 3, ratio, 0.5)
    from qaindex.eval.fusion_fit import ranked

    for i in range(len(pool)):
        rows, dense = pool.rows[i], pool.dense[i]
        assert ranked(SAFE_FUSION, pool, i) == rows[np.lexsort((rows, -dense))][:10].tolist()


def test_the_packaged_faq_is_the_example_faq() -> None:
    assert EXAMPLE_FAQ.read_bytes() == (Path(__file__).parents[2] / "examples" / "faq.jsonl").read_bytes()


def test_ties_go_to_the_grid_point_nearest_the_start() -> None:
    """With ratio 1, a = 1 and a = 0.5 both give corpus part 1: the fit keeps the start's a."""
    pool = _pool("p", 4, 1.0, 0.5)
    grid = {"a": [1.0, 0.5], "b": [1.0], "de": [(1.0, 0.0)], "terms": [math.inf]}
    start = Fusion("adaptive", weight=0.8, a=0.5, b=1.0, terms=math.inf)
    assert fit_fusion([pool], grid=grid, start=start, min_gain=0.0)[0].a == 0.5
    assert fit_fusion([pool], grid=grid, start=None)[0].a == 1.0  # no start: the first best

"""Fit the built-in model's fusion rule and its hybrid score, and write them into its manifest.

The ``adaptive`` rule (``qaindex.search.fusion``: a convex combination of min-max normalised
model and BM25 scores whose dense weight is ``clip(a + b * rho, 0, 1) * clip(d - e * cov(q), 0,
1) * min(1, terms / n(q))``, ``rho`` the corpus's label-free dense/BM25 ratio measured at build
time, ``cov(q)`` the question's lexical coverage, the IDF share of its terms that BM25's best
answer holds, ``n(q)`` the question's BM25 terms) has five constants, chosen on a grid
(``GRID_A`` x ``GRID_B`` x ``GRID_DE`` x ``GRID_TERMS`` of :mod:`benchmarks.quality.hybrid`) on
**half A** (a seeded half of the questions) of the *fit pools* only: the example FAQ
(``examples/faq.jsonl``), ``product-faq`` and ``aws-docs`` from ``--evaldata`` (permissive
licences) and held-out WordNet pairs of the training corpus (``--traindata``: pairs the default
model never trained on). Objective: the largest worst-case margin of the fused MRR@10 over the
better of its two parts across the fit pools, then the largest mean.

Then the calibration of hybrid hits' ``score`` on the fused value (``fused_score``,
``qaindex.search.scoring.fused_probability``): a logistic regression on the top-10 hybrid hits
of half A of the fit pools, and on those of the built-in off-topic questions' ``fit`` split
searched in each fit pool, as not relevant (``benchmarks.quality.offtopic``).

Both are written to the model manifest (``"fusion"``, with where they were fitted), atomically;
searches read them there. ``python -m benchmarks.quality.hybrid`` measures the rule as shipped
on every corpus, half B (never fitted on) included. Refit after replacing the model.

Usage::

    python -m tools.fit_default_fusion --evaldata DIR --traindata DIR [--model DIR]
"""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.common import argument_parser
from benchmarks.quality.hybrid import (
    GRID_DE,
    GRID_TERMS,
    Collected,
    K,
    Pool,
    collect,
    evaldata_pools,
    fit,
    fit_pools,
    half_a,
)
from benchmarks.quality.offtopic import OFFTOPIC_FIT, offtopic_collected
from qaindex.errors import ModelFormatError
from qaindex.eval.calibration_fit import FUSED_FEATURES, fit_fused_score, fused_features
from qaindex.model import DEFAULT_MODEL_DIR, Model
from qaindex.search.fusion import CANDIDATE_FLOOR, Fusion, dense_weight, fuse
from qaindex.store.atomic_files import read_json_object, write_json_atomic


def hit_features(
    c: Collected, pool: Pool, fusion: Fusion, model: Model, mask: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Features (``qaindex.eval.calibration_fit.FUSED_FEATURES``: the fused value, the calibrated
    logit of the question's best model score among its candidates, the question's BM25 match,
    whether the hit is the first, the question's lexical coverage and ln(1 + its BM25 terms))
    and labels of the top-``K`` hybrid hits of the questions in ``mask`` (as ``hybrid_arrays``)."""
    feats: list[np.ndarray] = []
    labels: list[int] = []
    for i in np.flatnonzero(mask):
        rows, s, lex = c.rows[i], c.dense[i], c.lexical[i]
        cov = c.coverage[i]
        fused = fuse(s, lex, Fusion("convex", weight=dense_weight(fusion, c.ratio, c.terms[i], cov)), CANDIDATE_FLOOR)
        order = np.lexsort((rows, -s.astype(np.float64), -fused))[:K]
        top = float(model.calibration(float(s.max())))
        best = float(lex.max())
        bound = c.ranker.state().lexical.score_bound(c.query_terms[i], c.terms[i])  # type: ignore[union-attr]
        feats.append(fused_features(fused[order], top, best / bound if bound > 0 else 0.0, cov, c.terms[i]))
        labels.extend(int(rows[row] in pool.relevant[i]) for row in order)
    return np.concatenate(feats) if feats else np.zeros((0, len(FUSED_FEATURES))), np.asarray(labels, np.float64)


def fit_score(
    collected: dict[str, Collected],
    pools: dict[str, Pool],
    fusion: Fusion,
    model: Model,
    offtopic: dict[str, tuple[Collected, Pool]] | None = None,
) -> Fusion:
    """``fusion`` with the calibration of its hits' ``score`` on the fused value
    (``fused_score``, :func:`qaindex.search.scoring.fused_probability`) fitted by logistic
    regression on the top-``K`` hits of the fit pools' half A, and on those of ``offtopic``
    questions searched in the same pools (all not relevant;
    ``benchmarks.quality.offtopic.offtopic_collected``). The fused value's weight is kept >= 0 (a fit
    against the order drops it), so the score falls with the rank."""
    parts_ = [hit_features(c, pools[n], fusion, model, half_a(len(pools[n].questions))) for n, c in collected.items()]
    for c, pool in (offtopic or {}).values():
        parts_.append(hit_features(c, pool, fusion, model, np.ones(len(pool.questions), dtype=bool)))
    x = np.concatenate([p[0] for p in parts_])
    y = np.concatenate([p[1] for p in parts_])
    return replace(fusion, score=None, fused_score=tuple(round(v, 6) for v in fit_fused_score(x, y)))


def store_fusion(model_dir: Path, entry: dict[str, Any]) -> None:
    """Write the fitted fusion ``entry`` (the rule and its provenance) into the model manifest, atomically."""
    path = model_dir / "manifest.json"
    manifest = read_json_object(path, error=ModelFormatError, what="model directory")
    manifest["fusion"] = entry
    write_json_atomic(path, manifest)


def main(argv: list[str] | None = None) -> int:
    parser = argument_parser(__doc__)
    parser.add_argument("--evaldata", type=Path, required=True, help="Folder of corpora (tools/corpora.py).")
    parser.add_argument("--traindata", type=Path, required=True, help="Training corpus (texts.jsonl + pairs.npy).")
    parser.add_argument(
        "--model", type=Path, default=DEFAULT_MODEL_DIR, help="Model directory (its manifest gets the fit)."
    )
    args = parser.parse_args(argv)
    model = Model.load(args.model)
    pools = fit_pools(evaldata_pools(args.evaldata), args.traindata)
    collected: dict[str, Collected] = {}
    for name, pool in pools.items():
        collected[name] = collect(model, pool)
        print(
            f"{name}: {len(pool.records)} answers, {len(pool.questions)} questions, ratio {collected[name].ratio}",
            flush=True,
        )
    fitted, info = fit(collected, pools, GRID_TERMS, GRID_DE)
    fitted = fit_score(collected, pools, fitted, model, offtopic_collected(model, pools, collected, collect))
    entry = {**fitted.to_json(), "fitted_on": list(pools), "half": "A (seed 0)", **info}
    entry["score_offtopic"] = OFFTOPIC_FIT
    store_fusion(args.model, entry)
    print("fitted", fitted, info, flush=True)
    print(f"wrote the fusion into {args.model / 'manifest.json'}; measure it with python -m benchmarks.quality.hybrid")
    return 0


if __name__ == "__main__":
    sys.exit(main())

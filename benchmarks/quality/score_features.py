"""Which question features carry a threshold from corpus to corpus: the hybrid score refitted on each choice.

The ``score`` of a hybrid hit (:func:`qaindex.search.scoring.fused_probability`) is a logistic
regression on the hit's fused value, whether it is the first hit, and features of its
question: the model's calibrated probability of its best score (``top``), its BM25 match
(the best BM25 score over the question's bound), its lexical coverage (the IDF share of its
terms that BM25's best answer holds) and ``ln(1 + n(q))``, its number of BM25 terms
(``length``). ``qaindex calibrate --hybrid-score`` (and ``export-model`` and ``train``) fit it on
the top-10 hybrid hits of the example FAQ's questions and of the built-in off-topic
questions' ``fit`` split (not relevant), :func:`qaindex.eval.calibration_fit.hybrid_pairs`.

This study fits it exactly so for each choice of features in :data:`CHOICES`, per model, and
measures each fit as ``benchmarks.quality.trust`` does, on every corpus built by
``tools/corpora.py`` (none of them fitted on): at the README's threshold
(:data:`~benchmarks.quality.trust.THRESHOLD`), the share of correct top hits kept and the
share of the corpus's off-topic questions (:data:`~benchmarks.quality.trust.OFFTOPIC_FROM`)
refused, and on how many corpora both targets hold. The fit named ``coverage + length`` is
the one qaindex writes; its row equals the trust table's for a model calibrated by this
version (the built-in one is).

Writes ``benchmarks/results/score_features.json`` and the ``score-features`` section of
``docs/scores.md``.

Usage::

    python -m benchmarks.quality.score_features --corpora DIR [--model NAME=DIR ...]
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.common import ROOT, argument_parser, markdown_table, write_results
from benchmarks.quality.pooled import load_corpora, model_label
from benchmarks.quality.pooled_eval import pool_answers, questions_and_relevant
from benchmarks.quality.trust import KEPT_TARGET, OFFTOPIC_FROM, OFFTOPIC_MAX, REFUSED_TARGET, THRESHOLD, kept_refused
from benchmarks.readme_markers import replace_section
from qaindex import Ranker
from qaindex.eval.calibration_fit import (
    DEFAULT_DEPTH,
    FITTED_FEATURES,
    FUSED_FEATURES,
    fit_fused_score,
    fused_scores,
    hybrid_features,
    hybrid_pairs,
)
from qaindex.eval.fusion_fit import faq_pool_groups
from qaindex.eval.offtopic import BUILTIN_OFFTOPIC, read_offtopic
from qaindex.model import DEFAULT_MODEL_DIR, Model
from qaindex.ranker import Record

RESULTS = ROOT / "benchmarks" / "results" / "score_features.json"
# name -> the features the fit reads (the others weigh 0)
CHOICES: dict[str, tuple[str, ...]] = {
    "match (fitted before)": ("fused", "top", "match", "first"),
    "coverage for the match": ("fused", "top", "first", "coverage"),
    "match + length": ("fused", "top", "match", "first", "length"),
    "coverage + length": FITTED_FEATURES,
    "all six": FUSED_FEATURES,
}


def fits(model: Model) -> dict[str, tuple[float, ...]]:
    """Each choice's fit on the example FAQ and the built-in off-topic ``fit`` split, as ``qaindex calibrate``."""
    negatives = read_offtopic(BUILTIN_OFFTOPIC, split="fit")
    x, y, sw = hybrid_pairs(model, faq_pool_groups(), model.calibration, depth=DEFAULT_DEPTH, offtopic=negatives)
    return {name: fit_fused_score(x, y, sw, reads=reads) for name, reads in CHOICES.items()}


def first_hits(ranker: Ranker, questions: list[str], relevant: list[set[int]]) -> tuple[np.ndarray, np.ndarray]:
    """The features of each question's first hybrid hit (a row of zeros and label 0 without one) and its label."""
    per_question = hybrid_features(ranker, questions, relevant, ranker.model.calibration, depth=1)
    x = np.zeros((len(questions), len(FUSED_FEATURES)))
    y = np.zeros(len(questions), np.int64)
    for i, (features, labels) in enumerate(per_question):
        if len(labels):
            x[i], y[i] = features[0], labels[0]
    return x, y


def measure(model: Model, corpora: dict[str, Any], offtopic: dict[str, list[str]]) -> dict[str, Any]:
    """Every choice's weights and its kept / refused at the threshold on every corpus
    (``offtopic``: each corpus's off-topic questions)."""
    fitted = fits(model)
    names = ("bias", *FUSED_FEATURES)
    out: dict[str, Any] = {name: {"weights": dict(zip(names, w, strict=True))} for name, w in fitted.items()}
    for label, groups in corpora.items():
        questions, relevant = questions_and_relevant(groups)
        records = [Record(str(i), text) for i, text in enumerate(pool_answers(groups))]
        ranker = Ranker.build(records, model=model, index_kind="auto", batch_size=256, hybrid=True)
        x_on, y_on = first_hits(ranker, questions, [set(r.tolist()) for r in relevant])
        x_off, _ = first_hits(ranker, offtopic[label], [set()] * len(offtopic[label]))
        for name, weights in fitted.items():
            correct = fused_scores(weights, x_on[y_on == 1])
            off = fused_scores(weights, x_off)
            kept, refused = kept_refused(correct.tolist(), off.tolist(), THRESHOLD)
            out[name][label] = {"kept": round(kept, 4), "refused": round(refused, 4)}
        print(label, {n: out[n][label] for n in fitted}, flush=True)
    return out


def readme_body(results: dict[str, Any]) -> str:
    """The generated section: per model and choice, kept / refused on each corpus."""
    models = results["models"]
    labels = [k for k in next(iter(next(iter(models.values())).values())) if k != "weights"]
    rows = []
    for model, choices in models.items():
        for name, row in choices.items():
            met = [row[c]["kept"] >= KEPT_TARGET and row[c]["refused"] >= REFUSED_TARGET for c in labels]
            cells = [
                f"{row[c]['kept']:.2f} / {row[c]['refused']:.2f}" + (" ✓" if ok else "")
                for c, ok in zip(labels, met, strict=True)
            ]
            shown = f"**{name}**" if name == "coverage + length" else name
            rows.append([model, shown, *cells, f"{sum(met)} of {len(met)}"])
    header = ["model", "features (besides the fused value)", *labels, "both targets met"]
    return (
        "<!-- generated by benchmarks/quality/score_features.py; do not edit by hand -->\n\n"
        f"Correct top hits kept / off-topic questions refused at {THRESHOLD}, the hybrid score fitted on "
        "the example FAQ with each choice of question features (✓: kept ≥ "
        f"{KEPT_TARGET} and refused ≥ {REFUSED_TARGET}); **bold**: the features qaindex fits.\n\n"
        + markdown_table(header, rows)
        + "\n\nGenerated by `python -m benchmarks.quality.score_features --corpora DIR"
        + "".join(f" --model '{name}=DIR'" for name in list(models)[1:])
        + "`.\n"
    )


def main() -> None:
    parser = argument_parser(__doc__, out=RESULTS)
    parser.add_argument("--corpora", type=Path, required=True, help="folder of corpora built by tools/corpora.py")
    parser.add_argument(
        "--model", action="append", default=[], metavar="NAME=DIR", help="a model beside the built-in one (repeatable)"
    )
    args = parser.parse_args()
    corpora = load_corpora(args.corpora)
    asked = {label: questions_and_relevant(groups)[0] for label, groups in corpora.items()}
    offtopic = {label: asked[OFFTOPIC_FROM[label]][:OFFTOPIC_MAX] for label in corpora}
    specs = [(f"built-in ({Model.read_manifest(DEFAULT_MODEL_DIR)['name']})", Path(DEFAULT_MODEL_DIR))]
    specs += [model_label(s) for s in args.model]
    models = {label: measure(Model.load(path, threads=None), corpora, offtopic) for label, path in specs}
    path = write_results(args.out, {"threshold": THRESHOLD, "models": models}, run=True, indent=1, ensure_ascii=False)
    if Path(args.out) == RESULTS:
        replace_section("score-features", readme_body(json.loads(path.read_text(encoding="utf-8"))))


if __name__ == "__main__":
    main()

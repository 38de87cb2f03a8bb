"""Can a user trust what a search returns? Fusion loss, one order, top-hit stability, thresholds.

For each model (the built-in default and every ``--model``; a model directory holding
``{corpus}`` is one model per corpus, such as ``qaindex train DIR/CORPUS/answers.jsonl --teacher
minilm --out MODELS/CORPUS`` writes for each) and each corpus built by ``tools/corpora.py``
(every answer of the corpus plus the junk answers indexed, as in
``benchmarks.quality.pooled --corpora``), in one run:

- **fusion loss**: MRR@10 of the default search (hybrid) against the better of its two halves,
  the same model alone (dense) and bm25s (PyStemmer English stemmer, English stopwords)::

      fusion_loss = max(mrr_dense, mrr_bm25) - mrr_hybrid      (target: <= 0.005)

- **order**: the share of questions whose hybrid hits have non-increasing ``score`` down the
  list (target: 1.0), and the same for dense search;
- **top hit vs k**: the share of questions whose first hybrid hit is the same with ``k=1``
  and ``k=10`` (target: 1.0);
- **first hit right**: the share of questions whose first hybrid hit is relevant (P@1), beside
  the mean ``score`` of those first hits: where the score is a calibrated probability, the two
  are close;
- **threshold**: at :data:`THRESHOLD` (the README's and the example support bot's), the
  share of correct top hits kept (``score >= THRESHOLD``; target >= 0.75) and the share of
  off-topic questions refused (top hit below it; target >= 0.90). The off-topic questions of
  a corpus are questions of another corpus on another subject (:data:`OFFTOPIC_FROM`, at
  most :data:`OFFTOPIC_MAX`), never the built-in off-topic set calibration fits on.
- **what any threshold could do**: how well the top-hit ``score`` separates the correct top
  hits from the off-topic questions' top hits (AUC: the chance that a correct top hit scores
  above an off-topic one), and the share of correct top hits the best threshold for this
  corpus would keep while refusing :data:`REFUSED_TARGET` of the off-topic questions. Where
  that share is below :data:`KEPT_TARGET`, no calibration can meet both targets on the
  corpus: the model's scores do not tell its answers from off-topic ones (a model miss, not a
  calibration miss).
- **calibrated on this corpus**: what ``qaindex calibrate MODEL_DIR QUESTIONS --hybrid-score``
  on a half of the corpus's own questions would give. The hybrid score is refitted
  (:func:`qaindex.eval.calibration_fit.fit_fused_score`, as that command does) on the top-10
  hybrid hits of half A of the questions (:func:`benchmarks.quality.hybrid.half_a`) and of the
  built-in off-topic questions' ``fit`` split (the command's default negatives, weighted as a
  quarter of the questions); at :data:`THRESHOLD`, the share of half B's correct top hits it
  keeps and the share of the corpus's off-topic questions (all of them; never fitted on) it
  refuses. A score is a probability of relevance: where the model's right and wrong top hits
  score alike (its first hit right about half the time or less), a calibrated score keeps
  right top hits below the threshold too, and only a better model raises this column.

Usage::

    python -m benchmarks.quality.trust --corpora DIR [--model [NAME=]DIR ...] [--only CORPUS ...]

Writes ``benchmarks/results/trust.json`` and ``docs/trust-table.md``.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.common import ROOT, argument_parser, result_path, write_atomic, write_results
from benchmarks.quality.hybrid import half_a
from benchmarks.quality.pooled import BM25_STEMMED, load_corpora, model_label
from benchmarks.quality.pooled_eval import K, eval_bm25, pool_answers, questions_and_relevant
from qaindex import Ranker
from qaindex.eval.calibration_fit import fit_fused_score, fused_scores, hybrid_features, stacked_pairs
from qaindex.eval.offtopic import BUILTIN_OFFTOPIC, read_offtopic
from qaindex.model import DEFAULT_MODEL_DIR, Model
from qaindex.ranker import Record

RESULTS = result_path("trust.json")
TABLE = ROOT / "docs" / "trust-table.md"
THRESHOLD = 0.35
FUSION_LOSS_TARGET = 0.005
KEPT_TARGET = 0.75
REFUSED_TARGET = 0.90
OFFTOPIC_MAX = 100
SWEEP = (0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.5)  # thresholds the second table tries
# corpus -> the corpus whose questions are off-topic for it (another subject entirely)
OFFTOPIC_FROM = {
    "product-faq": "wikiqa",
    "stackfaq": "semeval-cqa",
    "semeval-cqa": "aws-docs",
    "aws-docs": "product-faq",
    "wikiqa": "aws-docs",
    "trecqa-raw": "stackfaq",
    "trecqa-clean": "stackfaq",
}
BATCH = 128
CORPUS_FIELD = "{corpus}"  # in a --model directory: replaced by each corpus's name (a model per corpus)


def mrr_at_k(ranked: Sequence[Sequence[int]], relevant: Sequence[np.ndarray]) -> float:
    """Mean of 1 / rank of the first relevant row in the top :data:`K` (0 when none)."""
    total = 0.0
    for rows, rel in zip(ranked, relevant, strict=True):
        wanted = set(int(r) for r in rel)
        total += next((1.0 / (i + 1) for i, r in enumerate(rows[:K]) if int(r) in wanted), 0.0)
    return total / max(1, len(relevant))


def batched_search(ranker: Ranker, questions: Sequence[str], k: int, hybrid: bool) -> list[list[Any]]:
    out: list[list[Any]] = []
    for start in range(0, len(questions), BATCH):
        out.extend(ranker.search_batch(list(questions[start : start + BATCH]), k, hybrid=hybrid))
    return out


def _non_increasing(hits: Sequence[Any]) -> bool:
    scores = [h.score for h in hits]
    return all(a >= b for a, b in itertools.pairwise(scores))


def separation(correct: Sequence[float], offtopic: Sequence[float]) -> tuple[float, float]:
    """``(AUC, best kept)`` of top-hit scores: the chance that a correct top hit scores above an
    off-topic one (ties count half), and the largest share of correct top hits a threshold
    keeps (``score >= t``) while refusing at least :data:`REFUSED_TARGET` of the off-topic
    questions (``score < t``).

    Example
    -------
    >>> separation([0.9, 0.5, 0.2], [0.1, 0.3, 0.05, 0.4, 0.0, 0.1, 0.2, 0.1, 0.15, 0.25])
    (0.8833333333333334, 0.6666666666666666)
    """
    c, o = np.asarray(correct, dtype=np.float64), np.sort(np.asarray(offtopic, dtype=np.float64))
    if not c.size or not o.size:
        return float("nan"), float("nan")
    auc = float(np.mean(c[:, None] > o[None, :]) + 0.5 * np.mean(c[:, None] == o[None, :]))
    # at least one off-topic question must be refused (o is not empty): the smallest threshold
    # refusing ``must_refuse`` of them lies just above o[must_refuse - 1]
    must_refuse = int(np.ceil(REFUSED_TARGET * o.size - 1e-9))
    return auc, float(np.mean(c > o[must_refuse - 1]))


def kept_refused(correct: Sequence[float], offtopic: Sequence[float], threshold: float) -> tuple[float, float]:
    """``(kept, refused)`` at ``threshold``: the share of correct top hits scoring at least it
    and the share of off-topic questions whose top hit scores below it (NaN where there is none).

    Example
    -------
    >>> kept_refused([0.9, 0.3], [0.1, 0.4], 0.35)
    (0.5, 0.5)
    """
    c, o = np.asarray(correct, dtype=np.float64), np.asarray(offtopic, dtype=np.float64)
    kept = float(np.mean(c >= threshold)) if c.size else float("nan")
    refused = float(np.mean(o < threshold)) if o.size else float("nan")
    return kept, refused


def recalibrated(
    ranker: Ranker, questions: list[str], relevant: list[np.ndarray], offtopic: list[str]
) -> tuple[float, float]:
    """``(kept, refused)`` at :data:`THRESHOLD` after refitting the hybrid score on half A of
    the questions and the built-in off-topic questions' ``fit`` split (as ``qaindex calibrate
    --hybrid-score`` does): the share of half B's correct top hits kept and of ``offtopic``
    (never fitted on) refused."""
    calibration = ranker.model.calibration
    negatives = read_offtopic(BUILTIN_OFFTOPIC, split="fit")
    asked = [*questions, *negatives, *offtopic]
    good = [set(r.tolist()) for r in relevant] + [set()] * (len(negatives) + len(offtopic))
    per_question = hybrid_features(ranker, asked, good, calibration, depth=K)
    n = len(questions)
    fit_a = half_a(n)
    x, y, w = stacked_pairs([per_question[i] for i in range(n) if fit_a[i]], per_question[n : n + len(negatives)])
    fit = fit_fused_score(x, y, w)

    def top_score(i: int) -> float:
        feats = per_question[i][0]
        return float(fused_scores(fit, feats[:1])[0]) if len(feats) else 0.0

    correct = [i for i in range(n) if not fit_a[i] and len(per_question[i][1]) and per_question[i][1][0]]
    kept = float(np.mean([top_score(i) >= THRESHOLD for i in correct])) if correct else float("nan")
    off = range(n + len(negatives), len(asked))
    refused = float(np.mean([top_score(i) < THRESHOLD for i in off])) if offtopic else float("nan")
    return kept, refused


def measure(
    model: Model, answers: list[str], questions: list[str], relevant: list[np.ndarray], offtopic: list[str]
) -> dict[str, Any]:
    """Every trust figure of one model on one corpus (``answers`` in pool order)."""
    records = [Record(str(i), text) for i, text in enumerate(answers)]
    ranker = Ranker.build(records, model=model, index_kind="auto", batch_size=256, hybrid=True)
    kept_own, refused_own = recalibrated(ranker, questions, relevant, offtopic)
    dense = batched_search(ranker, questions, K, hybrid=False)
    hybrid = batched_search(ranker, questions, K, hybrid=True)
    first = batched_search(ranker, questions, 1, hybrid=True)
    off = batched_search(ranker, offtopic, 1, hybrid=True)
    ranked_dense = [[h.row for h in hits] for hits in dense]
    ranked_hybrid = [[h.row for h in hits] for hits in hybrid]
    correct_top = [
        hits[0] for hits, rel in zip(hybrid, relevant, strict=True) if hits and hits[0].row in set(rel.tolist())
    ]
    correct_scores = [h.score for h in correct_top]
    off_scores = [hits[0].score if hits else 0.0 for hits in off]
    auc, best_kept = separation(correct_scores, off_scores)
    kept, refused = kept_refused(correct_scores, off_scores, THRESHOLD)
    return {
        "mrr_dense": mrr_at_k(ranked_dense, relevant),
        "mrr_hybrid": mrr_at_k(ranked_hybrid, relevant),
        "order_hybrid": float(np.mean([_non_increasing(h) for h in hybrid])),
        "order_dense": float(np.mean([_non_increasing(h) for h in dense])),
        "top_hit_same_k1_k10": float(
            np.mean(
                [
                    (not a and not b) or (bool(a) and bool(b) and a[0].id == b[0].id)
                    for a, b in zip(first, hybrid, strict=True)
                ]
            )
        ),
        "correct_top_hits": len(correct_top),
        "first_hit_right": len(correct_top) / max(1, len(questions)),
        "first_hit_score": float(np.mean([hits[0].score if hits else 0.0 for hits in hybrid])),
        "kept": kept,
        "offtopic_questions": len(offtopic),
        "refused": refused,
        "sweep": {str(t): kept_refused(correct_scores, off_scores, t) for t in SWEEP},
        "auc": auc,
        "best_kept": best_kept,
        "kept_calibrated_here": kept_own,
        "refused_calibrated_here": refused_own,
    }


def run(corpora: Path, model_specs: Sequence[str], only: Sequence[str]) -> dict[str, Any]:
    """Measure every model on every corpus; returns the results-file content."""
    pools = load_corpora(corpora, only)
    all_questions = {label: questions_and_relevant(groups)[0] for label, groups in load_corpora(corpora).items()}
    bm25 = eval_bm25(pools, stem=True)
    models = {f"built-in ({Model.read_manifest(DEFAULT_MODEL_DIR)['name']})": Path(DEFAULT_MODEL_DIR)}
    models.update(model_label(spec) for spec in model_specs)
    results: dict[str, dict[str, Any]] = {}
    started = time.perf_counter()
    for system, path in models.items():
        per_corpus = CORPUS_FIELD in str(path)  # one model per corpus, e.g. `qaindex train --teacher` on its answers
        model = None if per_corpus else Model.load(path, threads=None)
        results[system] = {}
        for label, groups in pools.items():
            if per_corpus:
                model = Model.load(str(path).replace(CORPUS_FIELD, label), threads=None)
            assert model is not None
            questions, relevant = questions_and_relevant(groups)
            source = OFFTOPIC_FROM.get(label)
            offtopic = all_questions.get(source, [])[:OFFTOPIC_MAX] if source else []
            row = measure(model, pool_answers(groups), questions, relevant, offtopic)
            row["mrr_bm25"] = bm25[label]["mrr@10"]
            row["fusion_loss"] = max(row["mrr_dense"], row["mrr_bm25"]) - row["mrr_hybrid"]
            row["offtopic_from"] = source
            results[system][label] = row
            print(
                f"{system[:30]:30} {label:14} hybrid {row['mrr_hybrid']:.3f} dense {row['mrr_dense']:.3f} "
                f"bm25 {row['mrr_bm25']:.3f} loss {row['fusion_loss']:+.3f} order {row['order_hybrid']:.2f} "
                f"k1=k10 {row['top_hit_same_k1_k10']:.2f} kept {row['kept']:.2f} refused {row['refused']:.2f} "
                f"here {row['kept_calibrated_here']:.2f}/{row['refused_calibrated_here']:.2f}",
                flush=True,
            )
    command = "python -m benchmarks.quality.trust --corpora DIR" + "".join(f" --model {s}" for s in model_specs)
    return {
        "k": K,
        "threshold": THRESHOLD,
        "targets": {
            "fusion_loss": FUSION_LOSS_TARGET,
            "order": 1.0,
            "top_hit_same_k1_k10": 1.0,
            "kept": KEPT_TARGET,
            "refused": REFUSED_TARGET,
        },
        "bm25": BM25_STEMMED,
        "results": results,
        "seconds": time.perf_counter() - started,
        "command": command,
    }


def _cell(value: float, ok: bool) -> str:
    """The figure, marked ✗ when it misses its target; "–" when there is nothing to measure."""
    if value != value:  # NaN: no correct top hit, or no off-topic question
        return "–"
    return f"{value:.3f}" + ("" if ok else " ✗")


def _own(row: dict[str, Any], targets: dict[str, float]) -> str:
    """The kept / refused pair after calibrating on the corpus's own questions ("–" when not measured)."""
    if "kept_calibrated_here" not in row:
        return "–"
    kept, refused = row["kept_calibrated_here"], row["refused_calibrated_here"]
    return f"{_cell(kept, kept >= targets['kept'])} / {_cell(refused, refused >= targets['refused'])}"


def table_markdown(out: dict[str, Any]) -> str:
    """One row per (model, corpus); a ✗ marks a figure that misses its target."""
    t = out["targets"]
    lines = [
        f"| model | corpus | hybrid | dense | bm25s | fusion loss (≤ {t['fusion_loss']}) | order = score | "
        f"top hit k=1 = k=10 | first hit right | mean first-hit score | kept at {out['threshold']} (≥ {t['kept']}) | "
        f"off-topic refused (≥ {t['refused']}) | "
        f"AUC | best kept at {t['refused']} refused | calibrated on this corpus: kept / refused |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for system, rows in out["results"].items():
        for label, r in rows.items():
            lines.append(
                f"| {system} | {label} | {r['mrr_hybrid']:.3f} | {r['mrr_dense']:.3f} | {r['mrr_bm25']:.3f} | "
                f"{_cell(r['fusion_loss'], r['fusion_loss'] <= t['fusion_loss'])} | "
                f"{_cell(r['order_hybrid'], r['order_hybrid'] >= 1.0)} | "
                f"{_cell(r['top_hit_same_k1_k10'], r['top_hit_same_k1_k10'] >= 1.0)} | "
                f"{_cell(r.get('first_hit_right', float('nan')), True)} | "
                f"{_cell(r.get('first_hit_score', float('nan')), True)} | "
                f"{_cell(r['kept'], r['kept'] >= t['kept'])} | {_cell(r['refused'], r['refused'] >= t['refused'])} | "
                f"{_cell(r.get('auc', float('nan')), True)} | "
                f"{_cell(r.get('best_kept', float('nan')), r.get('best_kept', 1.0) >= t['kept'])} | "
                f"{_own(r, t)} |"
            )
    return "\n".join(lines) + "\n"


def sweep_markdown(out: dict[str, Any]) -> str:
    """Per model and threshold: kept / refused on each corpus, and on how many both targets hold."""
    t = out["targets"]
    labels = list(next(iter(out["results"].values())))
    lines = [
        "| model | min_score | " + " | ".join(labels) + " | both targets met |",
        "|---|---:|" + "---:|" * len(labels) + "---:|",
    ]
    for system, rows in out["results"].items():
        for threshold in (str(x) for x in SWEEP):
            pairs = [rows[label].get("sweep", {}).get(threshold) for label in labels]
            if not all(pairs):
                continue
            met = [k >= t["kept"] and r >= t["refused"] for k, r in pairs]
            cells = [f"{k:.2f} / {r:.2f}" + (" ✓" if ok else "") for (k, r), ok in zip(pairs, met, strict=True)]
            lines.append(f"| {system} | {threshold} | " + " | ".join(cells) + f" | {sum(met)} of {len(met)} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argument_parser(__doc__)
    parser.add_argument("--corpora", required=True, help="folder of corpora built by tools/corpora.py")
    parser.add_argument(
        "--model",
        action="append",
        default=[],
        help="extra qaindex model directory, [NAME=]DIR; a DIR holding {corpus} names one model per corpus",
    )
    parser.add_argument("--only", action="append", default=[], help="only these corpora (repeatable)")
    parser.add_argument("--out", help="results file (default: benchmarks/results/trust.json)")
    args = parser.parse_args()
    out = run(Path(args.corpora), args.model, args.only)
    target = Path(args.out) if args.out else RESULTS
    write_results(target, out, run=True)
    if target.resolve() == RESULTS.resolve():
        write_atomic(
            TABLE,
            "# Search results a user can trust\n\n<!-- generated by benchmarks/quality/trust.py; do not edit by "
            "hand -->\n\n"
            + (__doc__ or "").split("\n\n", 1)[1].split("Usage::")[0]
            + table_markdown(out)
            + "\n### Other thresholds\n\nCorrect top hits kept / off-topic questions refused at each `min_score`, "
            f"for the default search (hybrid); ✓: both targets (kept ≥ {out['targets']['kept']}, refused ≥ "
            f"{out['targets']['refused']}) met.\n\n"
            + sweep_markdown(out)
            + f"\nGenerated by `{out['command']}` in {out['seconds']:.0f} s.\n",
        )
    print(f"wrote {target}")


if __name__ == "__main__":
    main()

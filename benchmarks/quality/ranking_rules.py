"""Does the ball earn its place? The built-in model's own vectors ranked four ways on every user corpus.

The built-in model places texts in the Poincaré ball and serves the origin-relative distance
``f(q, a) = d(q, a) - d(0, a)`` (:func:`qaindex.geometry.hyperbolic.relative_distance`,
lower is better), which reads both the direction and the norm of an answer. The same vectors
are ranked here by three other rules, so that what the ball adds is measured on its own:

- ``cosine``: the directions only, ``<q, a> / (|q| |a|)``;
- ``inner product``: ``<q, a>`` (the Euclidean analogue of the relative rule:
  ``|q - a|^2 - |a|^2 = |q|^2 - 2 <q, a>``);
- ``Poincaré distance``: the plain ``d(q, a)`` of the paper's HyperQA.

For each corpus built by ``tools/corpora.py`` (every answer plus the junk answers of
``benchmarks.quality.pooled``, as the user-corpora table indexes them) every question ranks
all the answers by each rule, exactly (no coarse index); MRR@10 of its first correct answer
(ties count against it). ``gain`` is the relative rule's MRR@10 minus the better of cosine
and the inner product: the ball earns its place on a corpus where it is at least 0.01.

Writes ``benchmarks/results/ranking_rules.json`` and the ``ranking-rules`` section of
``docs/default-model.md``.

Usage::

    python -m benchmarks.quality.ranking_rules [--corpora /work/evaldata] [--model DIR]
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.common import ROOT, argument_parser, markdown_table, write_results
from benchmarks.quality.pooled import load_corpora
from benchmarks.quality.pooled_eval import pool_answers, questions_and_relevant
from benchmarks.readme_markers import replace_section
from qaindex.geometry.hyperbolic import distance, relative_distance
from qaindex.model import DEFAULT_MODEL_DIR, Model

RESULTS = ROOT / "benchmarks" / "results" / "ranking_rules.json"
K = 10
MARGIN = 0.01  # what the relative rule must add over the better Euclidean rule

# rule -> higher-is-better scores of every answer (n, d) for a block of questions (m, d): (m, n)
RULES: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "relative (served)": lambda q, a: -relative_distance(q[:, None, :], a[None, :, :]),
    "cosine": lambda q, a: _unit(q) @ _unit(a).T,
    "inner product": lambda q, a: q @ a.T,
    "Poincaré distance": lambda q, a: -distance(q[:, None, :], a[None, :, :]),
}


def _unit(x: np.ndarray) -> np.ndarray:
    return np.asarray(x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12))


def reciprocal_ranks(scores: np.ndarray, relevant: list[np.ndarray], k: int = K) -> np.ndarray:
    """Per question (row of ``scores``), 1 / rank of its best-scored correct answer, 0 beyond
    ``k``; every other answer scoring at least as high ranks above it.

    Example
    -------
    >>> reciprocal_ranks(np.array([[0.1, 0.9, 0.5], [0.3, 0.3, 0.2]]), [np.array([2]), np.array([0])]).tolist()
    [0.5, 0.5]
    """
    out = np.zeros(len(scores))
    for i, (row, rel) in enumerate(zip(scores, relevant, strict=True)):
        best = row[rel].max()
        others = np.ones(len(row), dtype=bool)
        others[rel] = False
        rank = 1 + int((row[others] >= best).sum())
        out[i] = 1.0 / rank if rank <= k else 0.0
    return out


def measure(model: Model, answers: list[str], questions: list[str], relevant: list[np.ndarray]) -> dict[str, Any]:
    """MRR@10 of every rule on one corpus, and the relative rule's gain over the Euclidean ones."""
    a = np.asarray(model.encode(answers, role="answer"), dtype=np.float64)
    q = np.asarray(model.encode(questions, role="question"), dtype=np.float64)
    block = max(1, (1 << 24) // max(1, a.size))  # about 128 MB of float64 pair terms at a time
    mrr = {}
    for name, rule in RULES.items():
        rr = np.concatenate(
            [reciprocal_ranks(rule(q[s : s + block], a), relevant[s : s + block]) for s in range(0, len(q), block)]
        )
        mrr[name] = round(float(rr.mean()), 4)
    gain = mrr["relative (served)"] - max(mrr["cosine"], mrr["inner product"])
    return {"answers": len(answers), "questions": len(questions), "mrr@10": mrr, "gain": round(gain, 4)}


def readme_body(results: dict[str, Any]) -> str:
    """The ``ranking-rules`` section: one row per corpus, then how often each rule was best."""
    rows, best_counts = [], dict.fromkeys(RULES, 0)
    for corpus, r in results["corpora"].items():
        m = r["mrr@10"]
        best = max(RULES, key=lambda name: m[name])
        best_counts[best] += 1
        rows.append(
            [corpus, r["answers"], r["questions"], *(f"{m[name]:.3f}" for name in RULES), f"{r['gain']:+.3f}", best]
        )
    earned = sum(r["gain"] >= MARGIN for r in results["corpora"].values())
    header = ["corpus", "answers", "questions", *RULES, "gain", "best rule"]
    counts = ", ".join(f"{name} on {n}" for name, n in best_counts.items() if n)
    return (
        f"Model `{results['model']}`, whole corpus, exact ranking, MRR@10 (ties count against the correct "
        "answer); *gain*: the relative rule minus the better of cosine and the inner product.\n\n"
        + markdown_table(header, rows)
        + f"\n\nThe relative rule gains at least {MARGIN} over both Euclidean rules on {earned} of "
        f"{len(rows)} corpora; the best rule is {counts}.\n\nGenerated by `{results['run']['command']}`.\n"
    )


def main() -> None:
    parser = argument_parser(__doc__, out=RESULTS)
    parser.add_argument("--corpora", type=Path, default=Path("/work/evaldata"), help="tools/corpora.py output folder")
    parser.add_argument("--model", type=Path, default=DEFAULT_MODEL_DIR, help="model directory (default: built-in)")
    args = parser.parse_args()
    model = Model.load(args.model)
    corpora = {}
    for name, groups in load_corpora(args.corpora).items():
        questions, relevant = questions_and_relevant(groups)
        corpora[name] = measure(model, pool_answers(groups), questions, relevant)
        print(name, corpora[name], flush=True)
    results = {"model": model.manifest["name"], "corpora": corpora}
    path = write_results(args.out, results, run=True, indent=1, ensure_ascii=False)
    if Path(args.out) == RESULTS:
        import json

        replace_section("ranking-rules", readme_body(json.loads(path.read_text(encoding="utf-8"))))


if __name__ == "__main__":
    main()

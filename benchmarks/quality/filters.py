"""Filtered search (``where``) latency at every selectivity, against brute force, in one run.

Builds an index (``auto`` kind: ``pq`` above 20,000 answers) of synthetic answers (word
sequences sampled from ``examples/faq.jsonl``, encoded by the built-in model unless
``--model``) with metadata fields of known selectivity: ``id`` one answer; ``shard`` 0.1 %;
``pct`` 1 %; ``decile`` 10 %; ``half`` 50 %; and no filter. For each, single questions
(``k = 10``):

- **dense** (``hybrid=False``): ``Ranker.search`` wall time (p50, p99) and CPU time
  (``time.process_time``, p50: less sensitive to other jobs on the machine); the plan the
  planner chose; brute force in the same run (every answer scored by the model's ONNX scorer,
  the matching ones kept, top 10) and the share of questions whose top 10 equals it;
- **per plan**: the CPU time of the filtered search alone (``qaindex.search.pipeline.filtered_vectors`` on
  encoded questions, p50) under each plan forced — ``exact`` (the screening pass, then the
  scorer on the short list), ``post`` (post-filter of an ANN search) and ``scored`` (the
  scorer on every match, the previous pre-filter) — the costs the planner chooses between,
  with each one's agreement with brute force;
- **hybrid** (the default ``Ranker.search`` when PyStemmer is installed: BM25 fused with the
  dense scores): wall and CPU p50 (fused scores have no brute-force reference here).

The field index and the squared norms are built by the first filtered search; its time is
reported apart.

Usage::

    python -m benchmarks.quality.filters [--answers 50000] [--questions 100] [--quick] [--out FILE]

``--quick``: 5,000 answers and 30 questions, written to ``filters-quick.json`` unless
``--out`` is given. Prints a table and writes JSON (default ``benchmarks/results/filters.json``).
"""

from __future__ import annotations

import os
import platform
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.common import ROOT, argument_parser, synthetic, write_results
from benchmarks.readme_markers import replace_section
from qaindex import Ranker
from qaindex.corpus import read_corpus
from qaindex.search import exact, filters, pipeline
from qaindex.search.filters import compile_where, matching_rows

RESULTS = ROOT / "benchmarks" / "results" / "filters.json"
K = 10


def brute(ranker: Ranker, qv: np.ndarray, rows: np.ndarray, vectors: np.ndarray, k: int) -> list[Any]:
    """Every answer scored by the model's scorer, the matching rows kept, best k (ids)."""
    score, dist = ranker.model.score_checked(qv, vectors[None])
    keep = np.zeros(len(vectors), bool)
    keep[rows] = True
    s = np.where(keep, score[0], -np.inf)
    order = np.lexsort((np.arange(len(s)), dist[0], -s))[: min(k, len(rows))]
    return [ranker.state().records.get(int(r)).id for r in order]


def _p50(values: list[float]) -> float:
    return float(np.percentile(values, 50) * 1e3)


def _timed(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[float, float, Any]:
    """(wall seconds, CPU seconds, value) of one call ``fn(*args, **kwargs)``."""
    wall, cpu = time.perf_counter(), time.process_time()
    value = fn(*args, **kwargs)
    return time.perf_counter() - wall, time.process_time() - cpu, value


def _plan(ranker: Ranker, qv: np.ndarray, flt: filters.Filter) -> list[Any]:
    """The filtered search alone, as Ranker.search runs it (qaindex.search.pipeline)."""
    return pipeline.filtered_vectors(ranker.state(), qv, K, flt)


def _forced(name: str) -> Callable[[], None]:
    """Force one plan of qaindex.search.filters; returns the function that undoes it."""
    saved = filters.choose_plan, exact.screened_among
    filters.choose_plan = lambda *a: "post" if name == "post" else "exact"  # type: ignore[assignment]
    if name == "scored":
        exact.screened_among = lambda q, v, rows, k, scorer, space: exact.exact_among(q, v, rows, k, scorer)  # type: ignore[assignment]

    def undo() -> None:
        filters.choose_plan, exact.screened_among = saved

    return undo


def _chosen(ranker: Ranker, rows: np.ndarray) -> str:
    if len(rows) == len(ranker):
        return "none"
    return filters.choose_plan(len(rows), len(ranker), ranker.dimension, K, ranker.overfetch)


def main() -> None:
    parser = argument_parser(__doc__)
    parser.add_argument("--answers", type=int, default=None, help="answers in the index (default 50,000)")
    parser.add_argument("--questions", type=int, default=None, help="questions timed per filter (default 100)")
    parser.add_argument("--quick", action="store_true", help="5,000 answers, 30 questions, filters-quick.json")
    parser.add_argument("--model", default=None, help="model directory (default: the built-in model)")
    parser.add_argument("--out", type=Path, default=None, help="results file")
    args = parser.parse_args()
    n_answers = args.answers or (5_000 if args.quick else 50_000)
    n_questions = args.questions or (30 if args.quick else 100)
    out = args.out or RESULTS.with_name("filters-quick.json" if args.quick else "filters.json")

    rng = np.random.default_rng(0)
    words = sorted({w for r in read_corpus(ROOT / "examples" / "faq.jsonl") for w in r.answer.lower().split()})
    texts = synthetic(n_answers, rng, words, 8, 40)
    records = [
        {"id": f"doc-{i}", "answer": t, "half": i % 2, "decile": i % 10, "pct": i % 100, "shard": i % 1000}
        for i, t in enumerate(texts)
    ]
    started = time.perf_counter()
    ranker = Ranker.build(records, model=args.model, device="cpu")
    build_s = time.perf_counter() - started
    questions = synthetic(n_questions, rng, words, 4, 12)
    qvs = [ranker.model.encode([q], role="question") for q in questions]
    vectors = np.ascontiguousarray(np.asarray(ranker.state().vectors), dtype=np.float32)

    # first filtered search: builds the field index and the squared norms (one pass each)
    first_ms = _timed(ranker.search, questions[0], K, where={"half": 1}, hybrid=False)[0] * 1e3

    target = n_answers // 2 + 1  # one answer, in the middle of the corpus
    cases: list[tuple[str, dict[str, Any] | None]] = [
        ("none", None),
        ("1 answer (id)", {"id": f"doc-{target}"}),
        ("0.1% (shard)", {"shard": 7}),
        ("1% (pct)", {"pct": 7}),
        ("10% (decile)", {"decile": 7}),
        ("50% (half)", {"half": 1}),
    ]
    runs = []
    for label, where in cases:
        flt = compile_where(where)
        rows = matching_rows(ranker.state().records, flt) if flt is not None else np.arange(len(ranker))
        wants = [brute(ranker, qv, rows, vectors, K) for qv in qvs]
        brute_times = [_timed(brute, ranker, qv, rows, vectors, K)[0] for qv in qvs[:20]]
        for q in questions[:5]:  # warm-up
            ranker.search(q, K, where=where, hybrid=False)
        walls, cpus, agree = [], [], 0
        for q, want in zip(questions, wants, strict=True):
            wall, cpu, hits = _timed(ranker.search, q, K, where=where, hybrid=False)
            walls.append(wall)
            cpus.append(cpu)
            agree += [h.id for h in hits] == want
        run: dict[str, Any] = {
            "filter": label,
            "matches": len(rows),
            "plan": _chosen(ranker, rows),
            "p50_ms": _p50(walls),
            "p99_ms": float(np.percentile(walls, 99) * 1e3),
            "cpu_p50_ms": _p50(cpus),
            "brute_force_p50_ms": _p50(brute_times),
            "same_top10_as_brute_force": agree / len(questions),
        }
        if flt is not None:
            plans = {}
            for name in ("exact", "post", "scored"):
                undo = _forced(name)
                try:
                    for qv in qvs[:3]:
                        _plan(ranker, qv, flt)
                    cpu_times, same = [], 0
                    for qv, want in zip(qvs, wants, strict=True):
                        _, cpu, found = _timed(_plan, ranker, qv, flt)
                        cpu_times.append(cpu)
                        same += [ranker.state().records.get(int(r)).id for r in found[0][2]] == want
                finally:
                    undo()
                plans[name] = {"cpu_p50_ms": _p50(cpu_times), "same_top10_as_brute_force": same / len(qvs)}
            run["plans"] = plans
        if ranker.has_hybrid:
            for q in questions[:5]:
                ranker.search(q, K, where=where)
            timed = [_timed(ranker.search, q, K, where=where) for q in questions]
            run["hybrid"] = {"p50_ms": _p50([t[0] for t in timed]), "cpu_p50_ms": _p50([t[1] for t in timed])}
        runs.append(run)
        line = (
            f"{label:>14} {len(rows):>6} {run['plan']:>5}  p50 {run['p50_ms']:7.2f} ms  "
            f"cpu {run['cpu_p50_ms']:7.2f} ms  brute {run['brute_force_p50_ms']:7.2f} ms  "
            f"same {run['same_top10_as_brute_force']:.2f}"
        )
        if "plans" in run:
            line += "  | cpu " + "  ".join(
                f"{n} {p['cpu_p50_ms']:.2f} ({p['same_top10_as_brute_force']:.2f})" for n, p in run["plans"].items()
            )
        if "hybrid" in run:
            line += f"  | hybrid p50 {run['hybrid']['p50_ms']:.2f} cpu {run['hybrid']['cpu_p50_ms']:.2f}"
        print(line, flush=True)
    command = "python -m benchmarks.quality.filters" + (" --quick" if args.quick else "")
    if args.answers or args.questions:
        command += f" --answers {n_answers} --questions {n_questions}"
    results = {
        "answers": n_answers,
        "questions": n_questions,
        "k": K,
        "index": ranker.info()["index"],
        "model": ranker.model.name,
        "build_s": build_s,
        "first_filtered_search_ms": first_ms,
        "runs": runs,
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "load": os.getloadavg()},
        "command": command,
    }
    print(f"first filtered search (builds the field index): {first_ms:.0f} ms; index {results['index']['kind']}")
    write_results(out, results, run=True)
    if out == RESULTS:
        replace_section("filters-table", readme_body(results))
    print(f"wrote {out}")


def readme_body(results: dict[str, Any]) -> str:
    """The generated section of ``docs/filters.md`` (checked by ``tests/docs/test_claims.py``)."""
    lines = [
        "| filter | matching answers | plan | p50 ms | p99 ms | CPU p50 ms | brute force p50 ms | same top 10 as brute "
        "force | filtered search alone, CPU p50 ms: exact / post / scored | hybrid p50 ms (CPU) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results["runs"]:
        plans = r.get("plans")
        alone = " / ".join(f"{plans[p]['cpu_p50_ms']:.2f}" for p in ("exact", "post", "scored")) if plans else "—"
        plan = "no filter" if r["plan"] == "none" else r["plan"]
        lines.append(
            f"| {r['filter']} | {r['matches']:,} | {plan} | {r['p50_ms']:.2f} | {r['p99_ms']:.2f} | "
            f"{r['cpu_p50_ms']:.2f} | {r['brute_force_p50_ms']:.1f} | {r['same_top10_as_brute_force']:.2f} | {alone} | "
            f"{r['hybrid']['p50_ms']:.2f} ({r['hybrid']['cpu_p50_ms']:.2f}) |"
        )
    index, load = results["index"], results["machine"]["load"]
    params = ", ".join(f"{k}={v}" for k, v in index["params"].items())
    agree = all(p["same_top10_as_brute_force"] == 1.0 for r in results["runs"] for p in (r.get("plans") or {}).values())
    lines += [
        "",
        f"{results['answers']:,} answers, index `{index['kind']}` ({params}, overfetch {index['overfetch']}), model "
        f"`{results['model']}`, {results['questions']} questions, `k = {results['k']}`, 2 cores (load average "
        f"{load[0]:.1f} at the end of the run). "
        + ("Every forced plan agreed with brute force on every question of every filter in this run. " if agree else "")
        + f"First filtered search (builds the field index and the squared norms): "
        f"{results['first_filtered_search_ms']:.0f} ms. Generated by `{results['command']}`.",
    ]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()

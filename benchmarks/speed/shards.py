"""A shard set against one index of the same corpus: the same hits, and what the merge costs.

The corpus is ``benchmarks.speed.scale``'s (real WikiQA + TrecQA answers, then seeded joins
of two). In one run:

- ``one index``: ``Ranker.build`` of the whole corpus, saved and loaded;
- ``shards S``: ``build_shards`` of the same records into ``S`` shards (``--shards``), opened
  with :class:`qaindex.ShardedRanker` in this process (each shard searched in a thread) and,
  with ``--ray``, on a Ray instance started on this machine for the run (one actor per shard).

For every question it compares the shard set's hits with the one index's (hybrid and dense,
``k`` 10): the share of questions whose hits are the same records in the same order, and the
largest difference of a hit's ``score``. It times single questions (p50/p99, 1 thread per
shard) and the builds. Writes ``benchmarks/results/shards.json`` and the table between the
``shards`` markers of docs/large-corpora.md.

Usage::

    python -m benchmarks.speed.shards [--size 100000] [--shards 2,4] [--kind flat] [--questions 300] [--ray]
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.common import (
    ROOT,
    argument_parser,
    make_corpus,
    per_call_ms,
    percentiles,
    pick_questions,
    read_texts,
    write_results,
)
from benchmarks.readme_markers import replace_section
from qaindex import Ranker, ShardedRanker
from qaindex.indexing.sharding import build_shards

RESULTS = ROOT / "benchmarks" / "results" / "shards.json"
K = 10


def agreement(got: list[list[Any]], want: list[list[Any]]) -> dict[str, float]:
    """Share of questions with the same hits (records and order), and the largest score gap."""
    same = sum([h.id for h in a] == [h.id for h in b] for a, b in zip(got, want, strict=True))
    gap = max(
        (abs(x.score - y.score) for a, b in zip(got, want, strict=True) for x, y in zip(a, b, strict=False)),
        default=0.0,
    )
    return {"same_hits": round(same / max(1, len(want)), 4), "largest_score_gap": float(gap)}


def measure(searcher: Any, questions: list[str], reference: dict[str, list[list[Any]]] | None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for mode, hybrid in (("hybrid", True), ("dense", False)):
        hits = searcher.search_batch(questions, K, hybrid=hybrid)
        out[mode] = percentiles(per_call_ms(lambda q, h=hybrid: searcher.search(q, K, hybrid=h), questions))
        if reference is not None:
            out[mode].update(agreement(hits, reference[mode]))
        else:
            out[f"{mode}_hits"] = hits
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argument_parser(__doc__, data=True, out=RESULTS)
    parser.add_argument("--size", type=int, default=100_000, help="answers")
    parser.add_argument("--shards", default="2,4", help="shard counts, comma-separated")
    parser.add_argument("--kind", default="flat", help="index kind of the index and of every shard")
    parser.add_argument("--questions", type=int, default=300)
    parser.add_argument("--ray", action="store_true", help="also search each shard set through Ray actors")
    args = parser.parse_args(argv)
    sentences, all_questions = read_texts(args.data)
    texts, _ = make_corpus(sentences, args.size)
    questions = pick_questions(all_questions, args.questions)
    records = [{"id": i, "answer": t} for i, t in enumerate(texts)]
    results: dict[str, Any] = {
        "command": "python -m benchmarks.speed.shards " + " ".join(argv if argv is not None else sys.argv[1:]),
        "machine": {"platform": platform.platform(), "cpus": os.cpu_count()},
        "answers": args.size,
        "kind": args.kind,
        "questions": len(questions),
        "k": K,
        "load_average_before": list(os.getloadavg()),
        "rows": [],
    }
    work = Path(tempfile.mkdtemp(prefix="qaindex-shards-"))
    ray = None
    try:
        t = time.perf_counter()
        Ranker.build(records, index_kind=args.kind).save(work / "one")
        build_s = time.perf_counter() - t
        one = Ranker.load(work / "one", threads=1)
        measured = measure(one, questions, None)
        reference = {mode: measured.pop(f"{mode}_hits") for mode in ("hybrid", "dense")}
        results["rows"].append({"system": "one index", "build_s": round(build_s, 1), **measured})
        print(json.dumps(results["rows"][-1]), flush=True)
        if args.ray:
            import ray

            ray.init(num_cpus=os.cpu_count(), include_dashboard=False, log_to_driver=False, logging_level="ERROR")
        for count in [int(c) for c in args.shards.split(",")]:
            target = work / f"set-{count}"
            t = time.perf_counter()
            build_shards(records, target, shards=count, index_kind=args.kind)
            build_s = time.perf_counter() - t
            for where in ["threads", "ray"] if args.ray else ["threads"]:
                sharded = ShardedRanker.load(target, ray="local" if where == "ray" else None)
                row = {"system": f"{count} shards ({where})", "build_s": round(build_s, 1)}
                row.update(measure(sharded, questions, reference))
                sharded.close()
                results["rows"].append(row)
                print(json.dumps(row), flush=True)
            shutil.rmtree(target)
    finally:
        if ray is not None:
            ray.shutdown()
        shutil.rmtree(work, ignore_errors=True)
    results["load_average_after"] = list(os.getloadavg())
    write_results(args.out, results)
    if args.out == RESULTS:
        replace_section("shards", readme_body(results))
    return results


def readme_body(results: dict[str, Any]) -> str:
    """The markdown table of a run (between the ``shards`` markers of docs/large-corpora.md)."""
    lines = [
        f"`{results['command']}`: {results['answers']:,} answers, `{results['kind']}` indexes, "
        f"{results['questions']} questions, k {results['k']}, 1 thread per shard, load average "
        f"{results['load_average_before'][0]:.1f} before and {results['load_average_after'][0]:.1f} after.",
        "",
        "| system | build s | hybrid p50 ms | hybrid p99 ms | dense p50 ms | same hits as one index "
        "(hybrid / dense) | largest score gap |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in results["rows"]:
        h, d = row["hybrid"], row["dense"]
        same = f"{h['same_hits']:.1%} / {d['same_hits']:.1%}" if "same_hits" in h else "(the reference)"
        gap = f"{max(h['largest_score_gap'], d['largest_score_gap']):.1e}" if "same_hits" in h else "-"
        lines.append(
            f"| {row['system']} | {row['build_s']} | {h['p50_ms']:.2f} | {h['p99_ms']:.2f} | {d['p50_ms']:.2f} | "
            f"{same} | {gap} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    main()

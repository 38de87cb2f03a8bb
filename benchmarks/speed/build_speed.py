"""Build speed: answers per second of each build stage and of whole builds.

For each corpus size, every stage is timed twice in the same run: with the fast paths
(what qaindex does) and with :func:`qaindex.fast_path_switch.generic_only` (the generic code they
shortcut, i.e. the build before the fast paths), and the ratio is reported:

- ``validate``: ``records_from_dicts`` on ``{"id", "answer"}`` dicts;
- ``read_validate_file``: ``read_corpus`` of the same corpus as a JSONL file;
- ``tokenize``: the answers' token ids as ``Model.encode`` gets them (128 tokens at most;
  a fresh tokenizer cache);
- ``encode``: ``Model.encode(..., role="answer")``: tokenize, pad, onnxruntime;
- ``store_records``: ``RecordStore.from_records`` (the stored JSON lines);
- ``build_dicts``: ``Ranker.build(list_of_dicts, index_kind="flat")``;
- ``build_file``: ``Ranker.build("corpus.jsonl", index_kind="flat")`` (what ``qaindex
  build`` does: streamed in chunks of 8,192 answers, onnxruntime overlapped with the next
  chunk's Python work, the BM25 analysis in a child process:
  :mod:`qaindex.indexing.lexical_worker`);
- ``build_file_bm25_here``: the same with the BM25 analysis in the building process (as
  before the child process), to compare with ``build_file``.

Whole builds load the built-in default model as ``Ranker.build`` does (the generic baseline
as before: onnxruntime on all cores; now: one onnxruntime thread, overlapped with Python
work on the other core); the stage timings share one model loaded with one onnxruntime
thread. The corpus is ``benchmarks.speed.scale``'s: the
distinct WikiQA + TrecQA answers of ``--data`` (shuffled, seed 0), then seeded joins of
two of them. Wall-clock seconds and the process's CPU seconds are both recorded, with the
load average before and after (other processes share the machine's cores). Results
(answers/s = size / wall seconds) are printed and written to ``--out``.

Usage::

    nice -n 10 python -m benchmarks.speed.build_speed [--sizes 100000,1000000]
        [--data ../shared/datasets] [--out benchmarks/results/build_speed.json]
    python -m benchmarks.speed.build_speed --report    # the README table of the results file
"""

from __future__ import annotations

import json
import os
import platform
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import qaindex
from benchmarks.common import ROOT, argument_parser, make_corpus, read_texts, wall_and_cpu, write_results
from qaindex import fast_path_switch
from qaindex.corpus import read_corpus, records_from_dicts
from qaindex.indexing import lexical_worker
from qaindex.model import Model
from qaindex.store.records import RecordStore

STAGES = (
    "validate",
    "read_validate_file",
    "tokenize",
    "encode",
    "store_records",
    "build_dicts",
    "build_file",
    "build_file_bm25_here",
)


def run_size(size: int, sentences: list[str], model: Model, workdir: Path) -> dict[str, Any]:
    texts, _ = make_corpus(sentences, size)
    dicts = [{"id": i, "answer": text} for i, text in enumerate(texts)]
    path = workdir / f"corpus-{size}.jsonl"
    with open(path, "w", encoding="utf-8") as handle:
        handle.writelines(json.dumps(d, ensure_ascii=False) + "\n" for d in dicts)
    records = records_from_dicts(dicts)
    tokenizer = model.tokenizer
    limit = model.max_tokens["answer"]

    def tokenize() -> None:
        # What Model.encode does before padding: before, one encode() per text; now, the
        # batched fast path. A build starts with a fresh tokenizer (empty caches).
        tokenizer.clear_cache()
        if fast_path_switch.enabled():
            tokenizer.encode_ragged(texts, limit)
        else:
            [tokenizer.encode(text, limit) for text in texts]

    calls: dict[str, Callable[[], Any]] = {
        "validate": lambda: records_from_dicts(dicts),
        "read_validate_file": lambda: read_corpus(path),
        "tokenize": tokenize,
        "encode": lambda: model.encode(texts, role="answer"),
        "store_records": lambda: RecordStore.from_records(records),
        "build_dicts": lambda: qaindex.Ranker.build(dicts, index_kind="flat"),
        "build_file": lambda: qaindex.Ranker.build(path, index_kind="flat"),
        "build_file_bm25_here": lambda: bm25_in_process(lambda: qaindex.Ranker.build(path, index_kind="flat")),
    }
    out: dict[str, Any] = {"answers": size, "corpus_mib": round(path.stat().st_size / 2**20, 1), "stages": {}}
    for stage in STAGES:
        row: dict[str, Any] = {}
        for mode in ("generic", "fast"):
            if mode == "generic":
                with fast_path_switch.generic_only():
                    wall, cpu = wall_and_cpu(calls[stage])
            else:
                wall, cpu = wall_and_cpu(calls[stage])
            row[mode] = {"seconds": round(wall, 3), "cpu_seconds": round(cpu, 3), "answers_per_s": round(size / wall)}
        row["speedup"] = round(row["generic"]["seconds"] / row["fast"]["seconds"], 2)
        out["stages"][stage] = row
        print(
            f"{size:>9,} {stage:<19} generic {row['generic']['answers_per_s']:>9,}/s   "
            f"fast {row['fast']['answers_per_s']:>9,}/s   x{row['speedup']:.2f}   "
            f"(load {os.getloadavg()[0]:.2f})",
            flush=True,
        )
    path.unlink()
    return out


def bm25_in_process(call: Callable[[], Any]) -> Any:
    """``call()`` with every build's BM25 analysis in this process (no child process)."""
    before = lexical_worker.IN_PROCESS_TEXTS
    lexical_worker.IN_PROCESS_TEXTS = sys.maxsize
    try:
        return call()
    finally:
        lexical_worker.IN_PROCESS_TEXTS = before


def report(results: dict[str, Any]) -> str:
    """The README table of a results file: answers/s per stage, generic vs fast, and the ratio."""
    lines = [
        "| answers | stage | before (generic) answers/s | now answers/s | speed-up |",
        "|---:|---|---:|---:|---:|",
    ]
    for entry in results["sizes"]:
        for stage, row in entry["stages"].items():
            lines.append(
                f"| {entry['answers']:,} | {stage} | {row['generic']['answers_per_s']:,} | "
                f"{row['fast']['answers_per_s']:,} | {row['speedup']:.2f}x |"
            )
    start, end = results["loadavg_start"][0], results["loadavg_end"][0]
    lines.append("")
    lines.append(f"Load average {start} at the start, {end} at the end (2 cores shared with other processes).")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argument_parser(__doc__, data=True, out=ROOT / "benchmarks" / "results" / "build_speed.json")
    parser.add_argument("--sizes", default="100000,1000000", help="comma-separated corpus sizes")
    parser.add_argument("--report", action="store_true", help="print the table of an existing --out file and exit")
    args = parser.parse_args(argv)
    if args.report:
        print(report(json.loads(args.out.read_text(encoding="utf-8"))))
        return
    sizes = [int(s) for s in args.sizes.split(",")]
    load_start = os.getloadavg()
    sentences, _ = read_texts(args.data)
    model = Model.load(None)
    results: dict[str, Any] = {
        "benchmark": "build speed, fast paths vs generic code in the same run",
        "command": "python -m benchmarks.speed.build_speed " + " ".join(argv if argv is not None else sys.argv[1:]),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()},
        "model": model.name,
        "target_answers_per_s": 50_000,
        "loadavg_start": [round(x, 2) for x in load_start],
        "sizes": [],
    }
    with tempfile.TemporaryDirectory(prefix="qaindex-build-speed-") as tmp:
        for size in sizes:
            results["sizes"].append(run_size(size, sentences, model, Path(tmp)))
    results["loadavg_end"] = [round(x, 2) for x in os.getloadavg()]
    write_results(args.out, results, run=True)
    print(f"load average {results['loadavg_start']} -> {results['loadavg_end']}; wrote {args.out}")


if __name__ == "__main__":
    main()

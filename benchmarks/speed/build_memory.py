"""Peak memory of ``qaindex build``: streamed from the file vs. all records in memory.

For each corpus it runs, each in a fresh subprocess whose peak RSS (``ru_maxrss`` from
``os.wait4``) is recorded:

- ``streamed``: ``Ranker.build(path)`` (what ``qaindex build`` does): the corpus is read a
  line at a time and encoded in chunks of 8,192 answers (:mod:`qaindex.indexing.streaming`);
- ``in_memory``: ``Ranker.build(read_corpus(path))``: every record held as a Python object
  first (the path for in-memory records, and what a file build did before streaming);
- ``floor``: the built-in model loaded and nothing built (the process's fixed cost).

Both builds use the built-in default model on one onnxruntime thread, ``--index-kind flat``
(the memory story is about text; HNSW adds its graph, about 2·M·4 bytes per answer), and
save the index. Corpora are real answer sentences from ``../shared/datasets`` (WikiQA and
TrecQA answers, deduplicated), recombined: answer ``i`` joins ``sentences`` sentences drawn
with a fixed seed, so a corpus of any size has realistic words and lengths. Two series:
sizes (20K, 100K, 400K answers of 3 sentences) and text length at a fixed count (100K
answers of 1 and 8 sentences), which shows what grows with the text.

Usage::

    nice -n 10 python -m benchmarks.speed.build_memory [--sizes 20000,100000,400000]
        [--lengths 1,8] [--length-count 100000] [--out FILE]

Prints a table and writes JSON (default ``benchmarks/results/build_memory.json``) with the
load average of the machine at start and end (other processes share its 2 cores).
``--report`` prints the README table of an existing results file (no benchmark run).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from benchmarks.common import DATA_DIR, ROOT, argument_parser, save_results

DATASETS = DATA_DIR
MODES = ("streamed", "in_memory")
SOURCES = ["wikiqa/train.jsonl", "wikiqa/dev.jsonl", "wikiqa/test.jsonl", "trecqa_clean/train.jsonl"]


def sentences() -> list[str]:
    """Unique answer sentences of the shared datasets, in a fixed order."""
    seen: dict[str, None] = {}
    for name in SOURCES:
        with open(DATASETS / name, encoding="utf-8") as handle:
            for line in handle:
                text = " ".join(json.loads(line)["answer"].split())
                if text:
                    seen.setdefault(text, None)
    return list(seen)


def write_corpus(path: Path, pool: list[str], count: int, per_answer: int, seed: int = 0) -> int:
    """Answer i: ``per_answer`` pooled sentences drawn with a fixed seed. Returns the bytes written."""
    rng = np.random.default_rng(seed)
    with open(path, "w", encoding="utf-8") as handle:
        for start in range(0, count, 10_000):
            picks = rng.integers(0, len(pool), size=(min(10_000, count - start), per_answer))
            handle.writelines(
                json.dumps({"id": start + i, "answer": " ".join(pool[j] for j in row)}) + "\n"
                for i, row in enumerate(picks)
            )
    return path.stat().st_size


def child(mode: str, corpus: str, index: str, kind: str = "flat", hybrid: str = "auto") -> None:
    """Run one build (in a subprocess) and print its timings as JSON."""
    from qaindex import Model, Ranker
    from qaindex.corpus import read_corpus

    start = time.perf_counter()
    model = Model.load(None, device="cpu", threads=1)
    if mode == "floor":
        print(json.dumps({"seconds": time.perf_counter() - start}))
        return
    source = corpus if mode == "streamed" else read_corpus(corpus)
    built = time.perf_counter()
    use = None if hybrid == "auto" else hybrid == "on"  # auto: a BM25 index where PyStemmer is installed
    ranker = Ranker.build(source, model=model, device="cpu", index_kind=kind, hybrid=use)  # type: ignore[arg-type]
    encoded = time.perf_counter()
    ranker.save(index)
    done = time.perf_counter()
    print(json.dumps({"seconds": done - start, "build_seconds": encoded - built, "answers": len(ranker)}))


def measure(mode: str, corpus: Path, index: Path, kind: str = "flat", hybrid: str = "auto") -> dict[str, float]:
    """Run :func:`child` in a fresh process; its result plus peak RSS in MiB."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "benchmarks.speed.build_memory", "--child", mode, str(corpus), str(index), kind, hybrid],
        stdout=subprocess.PIPE,
        env=env,
        cwd=ROOT,
    )
    assert proc.stdout is not None
    output = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"{mode} build of {corpus} failed with exit code {proc.returncode}")
    result: dict[str, float] = json.loads(output)
    result["peak_rss_mib"] = usage.ru_maxrss / 1024  # Linux: KiB
    return result


def run_case(
    pool: list[str],
    count: int,
    per_answer: int,
    scratch: Path,
    kind: str = "flat",
    modes: tuple[str, ...] = MODES,
    hybrid: str = "auto",
) -> dict[str, object]:
    from qaindex import Model

    dim = Model.load(None, device="cpu").dimension
    corpus = scratch / f"corpus-{count}-{per_answer}.jsonl"
    size = write_corpus(corpus, pool, count, per_answer)
    row: dict[str, object] = {
        "answers": count,
        "sentences_per_answer": per_answer,
        "corpus_mib": size / 2**20,
        "vectors_mib": count * dim * 4 / 2**20,
        "flat_index_mib": count * (dim + 2) * 4 / 2**20 if kind == "flat" else 0.0,  # lifted vectors, dim + 2
    }
    row["index_kind"] = kind
    row["hybrid"] = hybrid
    for mode in modes:
        index = scratch / f"ix-{mode}"
        result = measure(mode, corpus, index, kind, hybrid)
        row[mode] = result
        print(
            f"  {mode:>9}: peak RSS {result['peak_rss_mib']:7.0f} MiB, build {result['build_seconds']:6.1f} s "
            f"({count / result['build_seconds']:,.0f} answers/s)",
            flush=True,
        )
        subprocess.run(["rm", "-rf", str(index)], check=True)
    corpus.unlink()
    return row


def report(path: Path) -> str:
    """The README table of a results file, with the memory each extra answer costs."""
    data = json.loads(path.read_text(encoding="utf-8"))
    lines = [
        "| answers | sentences each | corpus MiB | vectors + flat index MiB | peak RSS streamed MiB | "
        "peak RSS records in memory MiB | build answers/s (streamed) |",
        "|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in data["sizes"] + data["text_lengths"]:
        in_memory = f"{row['in_memory']['peak_rss_mib']:.0f}" if "in_memory" in row else "-"
        lines.append(
            f"| {row['answers']:,} | {row['sentences_per_answer']} | {row['corpus_mib']:.0f} | "
            f"{row['vectors_mib'] + row['flat_index_mib']:.0f} | {row['streamed']['peak_rss_mib']:.0f} | "
            f"{in_memory} | {row['answers'] / row['streamed']['build_seconds']:,.0f} |"
        )
    sizes = data["sizes"]
    if len(sizes) >= 2:
        first, last = sizes[0], sizes[-1]
        extra = last["answers"] - first["answers"]
        lines.append("")
        for mode in (m for m in MODES if m in first and m in last):
            slope = (last[mode]["peak_rss_mib"] - first[mode]["peak_rss_mib"]) * 2**20 / extra
            lines.append(f"{mode}: {slope:,.0f} bytes of peak RSS per extra answer")
        per_answer = (last["vectors_mib"] + last["flat_index_mib"]) * 2**20 / last["answers"]
        lines.append(f"vectors + flat index: {per_answer:,.0f} bytes per answer")
    lines.append(f"\nload average at start/end: {data['loadavg_start']} / {data['loadavg_end']}")
    return "\n".join(lines)


def main() -> None:
    parser = argument_parser(__doc__, out=ROOT / "benchmarks" / "results" / "build_memory.json", variant=True)
    parser.add_argument(
        "--child", nargs=5, metavar=("MODE", "CORPUS", "INDEX", "KIND", "HYBRID"), help=argparse.SUPPRESS
    )
    parser.add_argument("--hybrid", choices=("auto", "on", "off"), default="auto", help="the builds' BM25 index")
    parser.add_argument("--index-kind", default="flat", help="index kind of every build (the default table: flat)")
    parser.add_argument("--modes", default=",".join(MODES), help="builds measured per corpus: streamed, in_memory")
    parser.add_argument("--sizes", default="20000,100000,400000")
    parser.add_argument("--lengths", default="1,8", help="sentences per answer for the text-length series")
    parser.add_argument("--length-count", type=int, default=100_000)
    parser.add_argument("--report", action="store_true", help="print the table of --out (no benchmark run)")
    args = parser.parse_args()
    if args.report:
        print(report(args.out))
        return
    if args.child:
        child(*args.child)
        return
    load_start = os.getloadavg()
    pool = sentences()
    print(f"{len(pool):,} unique answer sentences from {', '.join(SOURCES)}", flush=True)
    with tempfile.TemporaryDirectory(prefix="qaindex-bench-") as tmp:
        scratch = Path(tmp)
        floor = measure("floor", scratch / "none", scratch / "none")
        print(f"floor (model loaded, nothing built): peak RSS {floor['peak_rss_mib']:.0f} MiB", flush=True)
        sizes, lengths = [], []
        for count in [int(s) for s in args.sizes.split(",") if s]:
            print(f"{count:,} answers of 3 sentences:", flush=True)
            sizes.append(run_case(pool, count, 3, scratch, args.index_kind, tuple(args.modes.split(",")), args.hybrid))
        for per_answer in [int(s) for s in args.lengths.split(",") if s]:
            print(f"{args.length_count:,} answers of {per_answer} sentences:", flush=True)
            lengths.append(
                run_case(
                    pool,
                    args.length_count,
                    per_answer,
                    scratch,
                    args.index_kind,
                    tuple(args.modes.split(",")),
                    args.hybrid,
                )
            )
    out = {
        "benchmark": "build_memory",
        "command": "nice -n 10 python -m benchmarks.speed.build_memory " + " ".join(sys.argv[1:]),
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version()},
        "loadavg_start": load_start,
        "loadavg_end": os.getloadavg(),
        "model": "built-in default (dimension 300), onnxruntime on 1 thread, flat index",
        "chunk_size": 8192,
        "sentence_pool": len(pool),
        "floor_peak_rss_mib": floor["peak_rss_mib"],
        "sizes": sizes,
        "text_lengths": lengths,
    }
    print(f"wrote {save_results(args.out, out, args.variant, run=True)}")


if __name__ == "__main__":
    main()

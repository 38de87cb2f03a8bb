"""The resource run of :mod:`tests.robustness.fuzz`: the largest requests, each in its own process, with its peak memory."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.common import ROOT
from qaindex import Ranker
from tests.robustness.fuzz_inputs import (
    WORDS,
    make_world,
)

_REQUEST_API = """
import sys, numpy as np
from qaindex import QAIndexError, Ranker
r = Ranker.load(sys.argv[1], device="cpu")
questions = [" ".join(sys.argv[3:5])] * int(sys.argv[5])
try:
    if sys.argv[2] == "search_batch":
        out = r.search_batch(questions, k=10**9)
        print(sum(map(len, out)), "hits")
    else:
        out = r.search_vectors(r.model.encode(questions, role="question"), 10**9)
        print(out[2].shape, "arrays")
except QAIndexError as exc:
    print("QAIndexError:", exc)
    sys.exit(1)
"""


def _peak_rss(argv: list[str], stdin: bytes, env: dict[str, str]) -> dict[str, Any]:
    """Run ``argv`` in its own process; its exit code, peak RSS (``wait4``), seconds and output."""
    started = time.perf_counter()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err, tempfile.TemporaryFile() as feed:
        feed.write(stdin)
        feed.seek(0)
        proc = subprocess.Popen(argv, stdin=feed, stdout=out, stderr=err, env=env)
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        size = os.fstat(out.fileno()).st_size
        first = (out.read(300) + err.read(2000)).decode("utf-8", "replace").strip().splitlines()
    return {
        "exit_code": proc.returncode,
        "peak_rss_mb": round(usage.ru_maxrss / 1024, 1),  # Linux: KiB
        "seconds": round(time.perf_counter() - started, 1),
        "stdout_mb": round(size / 2**20, 1),
        "output": first[-1][:300] if first else "",
    }


def measure_resources(
    tmp: Path, answers: int = 62_000, questions: int = 300, cli_questions: int = 20, budget: str | None = None
) -> dict[str, Any]:
    """The largest requests on an ``answers``-answer index, each in its own process (peak RSS),
    under the default memory budget (or ``budget``, as ``QAINDEX_MEMORY_BUDGET``).

    The CLI search prints every hit of ``cli_questions`` questions (``-k 1e9``: every answer
    each, in chunks of questions that fit the budget); its memory does not grow with the
    number of questions, only its run time and output do."""
    model_dir = tmp / "model"
    if not (model_dir / "manifest.json").is_file():
        make_world(tmp)
    rng = np.random.default_rng(0)
    corpus = tmp / "big.jsonl"
    with corpus.open("w", encoding="utf-8") as f:
        for i in range(answers):
            words = rng.choice(WORDS, size=6)
            f.write(json.dumps({"id": f"a{i}", "answer": " ".join(words), "questions": [" ".join(words[:2])]}) + "\n")
    index = tmp / "big-index"
    Ranker.build(corpus, model=model_dir, device="cpu", index_kind="flat").save(index)
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    env.pop("QAINDEX_MEMORY_BUDGET", None)
    if budget is not None:
        env["QAINDEX_MEMORY_BUDGET"] = budget
    py = sys.executable
    lines = [f"{WORDS[i % len(WORDS)]} {WORDS[(i * 7) % len(WORDS)]}" for i in range(questions)]
    stdin = ("\n".join(lines[:cli_questions]) + "\n").encode()
    api = [py, "-c", _REQUEST_API, str(index)]
    cli = [py, "-m", "qaindex.cli"]
    ix = ["--index", str(index), "--device", "cpu"]
    huge = "1000000000"
    words = ["reset", "password", str(questions)]
    requests = {
        f"search_batch: {questions} questions x k=10**9 (API)": [*api, "search_batch", *words],
        f"search_vectors: {questions} questions x k=10**9 (API)": [*api, "search_vectors", *words],
        f"qaindex search - -k 1e9 --json, {cli_questions} questions on stdin": [
            *cli,
            "search",
            "-",
            *ix,
            "-k",
            huge,
            "--json",
        ],
        "qaindex info --recall --sample 1e9 -k 1e9": [*cli, "info", *ix, "--recall", "--sample", huge, "-k", huge],
        "qaindex info --recall (defaults: 200 questions, k=10)": [*cli, "info", *ix, "--recall"],
    }
    runs = {}
    for name, argv in requests.items():
        runs[name] = _peak_rss(argv, stdin, env)
        print(f"  {name}: exit {runs[name]['exit_code']}, peak RSS {runs[name]['peak_rss_mb']:.0f} MB, "
              f"{runs[name]['seconds']} s, {runs[name]['output'][:120]}")  # fmt: skip
    return {
        "answers": answers,
        "questions": questions,
        "cli_questions": cli_questions,
        "budget": budget or "1 GiB (default)",
        "requests": runs,
        "max_peak_rss_mb": max(r["peak_rss_mb"] for r in runs.values()),
    }

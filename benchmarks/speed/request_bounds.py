"""Per-request memory of the largest requests (long questions, a huge ``k``, long corpus lines),
each in its own process with its peak RSS, against the built-in default model.

- **long questions** on a hybrid index of the FAQ: one question of 225 KB of repeated words,
  and 100 questions of 100 KB each through ``search_batch`` (BM25 reads a question's first
  65,536 characters and scores its distinct terms once, with their counts);
- **a huge k**: ``qaindex search - -k 1000000000 --json`` on a hybrid index of ``answers``
  synthetic answers, 20 questions on stdin, under the default 1 GiB budget;
- **a long line**: ``qaindex build`` of a corpus holding one ``line_mb`` MB answer (hybrid and
  dense only), its peak RSS above that of loading the model, as a multiple of the line;
- **an endless input**: ``qaindex build /dev/zero`` (its first line passes the 64 MiB maximum).

Usage::

    python -m benchmarks.speed.request_bounds [--answers 62000] [--line-mb 20]

Writes ``benchmarks/results/request_bounds.json``.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.common import ROOT, argument_parser, result_path, write_results

TIME = "/usr/bin/time"  # GNU time: the peak RSS of a process started from a small one

_LOAD = "from qaindex.model import Model; Model.load(None, device='cpu')"
_QUESTIONS = """
import sys, time
from qaindex import Ranker
r = Ranker.load(sys.argv[1], device="cpu")
questions = [("password refund " * 15_000)[: int(sys.argv[2])]] * int(sys.argv[3])
started = time.perf_counter()
hits = r.search_batch(questions, k=10)
print(f"{len(hits)} questions, {time.perf_counter() - started:.2f} s")
"""
_WORDS = "reset password login email refund order shipping account settings export notes markdown sync".split()


def _peak_rss(argv: list[str], stdin: bytes, env: dict[str, str]) -> dict[str, Any]:
    """Run ``argv`` under GNU time; its exit code, peak RSS, seconds and last output line.

    Not ``os.wait4`` on a child of this process: Linux keeps ``ru_maxrss`` across ``execve``,
    so a child forked from a large parent would report the parent's size.
    """
    started = time.perf_counter()
    with tempfile.TemporaryFile() as feed:
        feed.write(stdin)
        feed.seek(0)
        proc = subprocess.run([TIME, "-f", "%M", *argv], stdin=feed, capture_output=True, env=env, check=False)
    err = [
        line
        for line in proc.stderr.decode("utf-8", "replace").strip().splitlines()
        if not line.startswith(("Command exited", "Command terminated"))  # GNU time's own
    ]
    out = (proc.stdout[:300].decode("utf-8", "replace").strip().splitlines() or [""])[0]
    return {
        "exit_code": proc.returncode,
        "peak_rss_mb": round(int(err[-1]) / 1024, 1),  # KiB
        "seconds": round(time.perf_counter() - started, 1),
        "stdout_mb": round(len(proc.stdout) / 2**20, 1),
        "output": (out or (err[-2] if len(err) > 1 else ""))[:300],
    }


def _answers_file(path: Path, n: int, seed: int = 0) -> Path:
    rng = np.random.default_rng(seed)
    with path.open("w", encoding="utf-8") as f:
        for i in range(n):
            f.write(json.dumps({"id": f"a{i}", "answer": " ".join(rng.choice(_WORDS, size=8))}) + "\n")
    return path


def _long_line_file(path: Path, megabytes: int) -> Path:
    rng = np.random.default_rng(1)
    with path.open("w", encoding="utf-8") as f:
        f.write('{"id": "long", "answer": "')
        for _ in range(megabytes):  # about 1 MB of words at a time
            f.write(" ".join(rng.choice(_WORDS, size=135_000).tolist())[:999_999] + " ")
        f.write('end"}\n' + json.dumps({"answer": "short"}) + "\n")
    return path


def measure(tmp: Path, answers: int, line_mb: int, cli_questions: int = 20) -> dict[str, Any]:
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    env.pop("QAINDEX_MEMORY_BUDGET", None)
    py = sys.executable
    cli = [py, "-m", "qaindex.cli"]
    out: dict[str, Any] = {"model_load": _peak_rss([py, "-c", _LOAD], b"", env)}
    base = out["model_load"]["peak_rss_mb"]

    faq = tmp / "faq-index"
    run = _peak_rss([*cli, "build", str(ROOT / "examples" / "faq.jsonl"), "--index", str(faq), "--hybrid"], b"", env)
    assert run["exit_code"] == 0, run
    questions = {
        "1 question of 225 KB (hybrid)": ["225000", "1"],
        "100 questions of 100 KB (hybrid search_batch)": ["100000", "100"],
        "100 questions of 30 characters (hybrid search_batch)": ["30", "100"],
    }
    out["long_questions"] = {
        name: _peak_rss([py, "-c", _QUESTIONS, str(faq), *argv], b"", env) for name, argv in questions.items()
    }

    big = tmp / "big-index"
    corpus = _answers_file(tmp / "big.jsonl", answers)
    run = _peak_rss([*cli, "build", str(corpus), "--index", str(big), "--hybrid", "--device", "cpu"], b"", env)
    assert run["exit_code"] == 0, run
    stdin = "".join(f"{_WORDS[i % 13]} {_WORDS[(i * 5) % 13]}\n" for i in range(cli_questions)).encode()
    huge = [*cli, "search", "-", "--index", str(big), "--device", "cpu", "-k", "1000000000", "--json"]
    small = [*huge[:-2], "10", "--json"]  # the same questions with -k 10: the process's own size
    out["huge_k_baseline"] = _peak_rss(small, stdin, env)
    out["huge_k"] = {
        "answers": answers,
        "questions": cli_questions,
        "budget_mb": 1024,
        "run": _peak_rss(huge, stdin, env),
    }

    line = _long_line_file(tmp / "line.jsonl", line_mb)
    out["long_line"] = {"line_mb": round(line.stat().st_size / 1e6, 1)}
    for mode in ("--hybrid", "--no-hybrid"):
        argv = [*cli, "build", str(line), "--index", str(tmp / f"line{mode}"), mode, "--device", "cpu"]
        run = _peak_rss(argv, b"", env)
        run["above_model_load_per_line_byte"] = round((run["peak_rss_mb"] - base) / out["long_line"]["line_mb"], 1)
        out["long_line"][mode.lstrip("-")] = run
    out["dev_zero"] = _peak_rss([*cli, "build", "/dev/zero", "--index", str(tmp / "zero")], b"", env)
    return out


def main() -> None:
    parser = argument_parser(__doc__)
    parser.add_argument("--answers", type=int, default=62_000)
    parser.add_argument("--line-mb", type=int, default=20)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        results = measure(Path(tmp), args.answers, args.line_mb)
    results["machine"] = {"python": platform.python_version(), "cpus": os.cpu_count(), "platform": platform.platform()}
    results["command"] = f"python -m benchmarks.speed.request_bounds --answers {args.answers} --line-mb {args.line_mb}"
    print(json.dumps(results, indent=1))
    write_results(result_path("request_bounds.json"), results, run=True, indent=1)


if __name__ == "__main__":
    main()

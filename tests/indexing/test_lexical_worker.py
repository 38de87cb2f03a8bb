"""A large build's BM25 analysis in a child process (qaindex.indexing.lexical_worker)."""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from qaindex import QAIndexError, Ranker
from qaindex.indexing import lexical_worker
from qaindex.indexing.lexical_worker import LexicalWorker
from qaindex.text.lexical import LexicalBuilder, LexicalIndex

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "faq.jsonl"


def _texts() -> list[str]:
    answers = [json.loads(line)["answer"] for line in EXAMPLES.read_text(encoding="utf-8").splitlines()]
    # every answer, then pairs of them joined: terms first seen in later chunks too, and a long one
    return [*answers, *(f"{a} {b}" for a, b in itertools.pairwise(answers)), " ".join(answers) * 3]


def _same(got: LexicalIndex, want: LexicalIndex) -> None:
    assert got.vocab == want.vocab
    for name in ("_terms", "_counts", "_offsets"):
        a, b = np.asarray(getattr(got, name)), np.asarray(getattr(want, name))
        assert a.dtype == b.dtype and np.array_equal(a, b), name


@pytest.mark.parametrize("in_process", [0, 37, 10**9])
def test_the_worker_gives_the_in_process_index(in_process: int) -> None:
    texts = _texts()
    worker, builder = LexicalWorker(in_process=in_process), LexicalBuilder()
    for start in range(0, len(texts), 23):  # chunks as a build hands them over, an empty one among them
        for chunk in (texts[start : start + 23], []) if start == 46 else (texts[start : start + 23],):
            worker.add(chunk)
            builder.add(chunk)
    child = worker._child
    assert (child is not None) == (in_process < len(texts))
    _same(worker.finish(), builder.finish())
    assert child is None or child.returncode == 0


def test_a_killed_worker_is_a_clear_error() -> None:
    worker = LexicalWorker(in_process=0)
    worker.add(["cats purr"])
    assert worker._child is not None
    os.kill(worker._child.pid, signal.SIGKILL)
    worker._child.wait(timeout=30)
    with pytest.raises(QAIndexError) as err:
        worker.add(["dogs bark"] * 1000)
    assert str(err.value) == (
        "the BM25 worker process of this build exited with code -9 (killed by signal 9); if memory ran out, build "
        "with --no-hybrid or on a machine with more memory"
    )


def test_an_error_in_the_worker_is_reported() -> None:
    worker = LexicalWorker(in_process=0)
    worker.add(["cats purr", 17])  # type: ignore[list-item]
    with pytest.raises(
        QAIndexError,
        match=r"^the BM25 analysis failed in its worker process: TypeError: object of type .int. has no len\(\)$",
    ):
        worker.finish()


def test_the_worker_does_not_run_the_building_script_again(tmp_path: Path) -> None:
    """The child is a new interpreter running the worker module: a script that builds at its
    top level, without a ``__main__`` guard, runs once."""
    script = tmp_path / "build.py"
    script.write_text(
        "from qaindex.indexing.lexical_worker import LexicalWorker\n"
        "print('script ran')\n"
        "worker = LexicalWorker(in_process=0)\n"
        "worker.add(['cats purr', 'dogs bark'])\n"
        "print(len(worker.finish()))\n",
        encoding="utf-8",
    )
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120, check=True)
    assert done.stdout.splitlines() == ["script ran", "2"]
    assert done.stderr == ""  # no warning either


def test_a_build_through_the_worker_is_the_same_index(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    in_process = Ranker.build(EXAMPLES, hybrid=True)
    monkeypatch.setattr(lexical_worker, "IN_PROCESS_TEXTS", 10)  # the examples' 60-odd answers: a child
    spawned: list[LexicalWorker] = []
    real = LexicalWorker._start

    def start(self: LexicalWorker) -> None:
        spawned.append(self)
        real(self)

    monkeypatch.setattr(LexicalWorker, "_start", start)
    through = Ranker.build(EXAMPLES, hybrid=True)
    assert len(spawned) == 1
    a, b = in_process.state().lexical, through.state().lexical
    assert a is not None and b is not None
    _same(b, a)
    questions = ["How do I share a notebook?", "reset password", "refund"]
    assert through.search_batch(questions, k=5) == in_process.search_batch(questions, k=5)
    through.save(tmp_path / "ix")
    assert Ranker.load(tmp_path / "ix").search_batch(questions, k=5) == in_process.search_batch(questions, k=5)

"""The folder format of an evaluation corpus: what ``tools/corpora.py`` writes and the quality studies read.

A corpus is a folder of three files:

- ``answers.jsonl``: one ``{"id": str, "answer": str}`` per line, every record of the corpus;
- ``questions.jsonl``: one ``{"question": str, "answers": [id, ...]}`` per line, a question and
  the ids of the answers that answer it (at least one);
- ``meta.json``: where it comes from (source, commit, licence) and its counts.

Example
-------
>>> import tempfile
>>> corpus = Corpus("tiny", [("a1", "Refunds take 14 days.")], [("how long do refunds take", ["a1"])])
>>> with tempfile.TemporaryDirectory() as tmp:
...     back = read_corpus_dir(write_corpus(corpus, Path(tmp)))
>>> back.answers == corpus.answers, back.questions == corpus.questions, back.meta["answers"]
(True, True, 1)
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.common import write_atomic

__all__ = ["Corpus", "CorpusBuildError", "read_corpus_dir", "write_corpus"]


class CorpusBuildError(Exception):
    """A source is missing or malformed (names the file and what to do)."""


@dataclass
class Corpus:
    """One evaluation corpus: every answer, and questions with their relevant answer ids."""

    name: str
    answers: list[tuple[str, str]]  # (id, text)
    questions: list[tuple[str, list[str]]]  # (question, relevant ids)
    meta: dict[str, Any] = field(default_factory=dict)

    def validate(self) -> None:
        """Raise ``CorpusBuildError`` unless ids are unique, texts non-empty, every question has
        at least one relevant id and every relevant id is an answer of the corpus."""
        ids = [aid for aid, _ in self.answers]
        if len(set(ids)) != len(ids):
            dup = next(i for i in ids if ids.count(i) > 1)
            raise CorpusBuildError(f"{self.name}: answer id {dup!r} appears twice")
        known = set(ids)
        for aid, text in self.answers:
            if not text.strip():
                raise CorpusBuildError(f"{self.name}: answer {aid!r} is empty")
        for q, rel in self.questions:
            if not q.strip():
                raise CorpusBuildError(f"{self.name}: empty question")
            if not rel:
                raise CorpusBuildError(f"{self.name}: question {q[:60]!r} has no relevant answer")
            missing = [r for r in rel if r not in known]
            if missing:
                raise CorpusBuildError(f"{self.name}: question {q[:60]!r} names unknown answer id {missing[0]!r}")


def write_corpus(corpus: Corpus, out: Path) -> Path:
    """Write ``answers.jsonl``, ``questions.jsonl`` and ``meta.json`` under ``out/<name>/``
    (each file written to a temporary name first, then renamed)."""
    corpus.validate()
    folder = out / corpus.name
    folder.mkdir(parents=True, exist_ok=True)
    meta = {
        **corpus.meta,
        "answers": len(corpus.answers),
        "questions": len(corpus.questions),
        "relevant_per_question": round(sum(len(r) for _, r in corpus.questions) / max(1, len(corpus.questions)), 2),
    }
    write_atomic(
        folder / "answers.jsonl", "".join(json.dumps({"id": a, "answer": t}) + "\n" for a, t in corpus.answers)
    )
    write_atomic(
        folder / "questions.jsonl",
        "".join(json.dumps({"question": q, "answers": rel}) + "\n" for q, rel in corpus.questions),
    )
    write_atomic(folder / "meta.json", json.dumps(meta, indent=2) + "\n")
    return folder


def read_corpus_dir(folder: Path) -> Corpus:
    """Read a corpus folder written by :func:`write_corpus` (validated)."""
    answers: list[tuple[str, str]] = []
    questions: list[tuple[str, list[str]]] = []
    for name, sink in (("answers.jsonl", answers), ("questions.jsonl", questions)):
        path = folder / name
        if not path.is_file():
            raise CorpusBuildError(f"{path}: missing; build the corpus with python -m tools.corpora")
        for line_no, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
                if name == "answers.jsonl":
                    sink.append((str(rec["id"]), str(rec["answer"])))  # type: ignore[arg-type]
                else:
                    sink.append((str(rec["question"]), [str(r) for r in rec["answers"]]))  # type: ignore[arg-type]
            except (json.JSONDecodeError, KeyError, TypeError) as exc:
                raise CorpusBuildError(f"{path}:{line_no}: bad record ({exc}); expected the corpus format") from exc
    meta_path = folder / "meta.json"
    meta = json.loads(meta_path.read_text()) if meta_path.is_file() else {}
    corpus = Corpus(folder.name, answers, questions, meta)
    corpus.validate()
    return corpus

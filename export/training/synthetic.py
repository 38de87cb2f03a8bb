"""Small synthetic answer-selection data for tests and smoke runs (no downloads).

Each question contains one *planted* topic word and a few filler words; its correct answer
contains the same topic word, its wrong candidates other topic words, all padded with random
fillers. A bag-of-words model learns it by weighting topic words above fillers.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

from qaindex.eval.datasets import Candidate, QuestionGroup

__all__ = ["planted_word_groups", "write_benchmark", "write_corpus"]


def planted_word_groups(
    n_questions: int,
    *,
    topics: int = 40,
    fillers: int = 60,
    candidates: int = 6,
    seed: int = 0,
    prefix: str = "q",
) -> list[QuestionGroup]:
    """Question groups with one correct candidate sharing the question's topic word.

    Parameters
    ----------
    n_questions : int
    topics, fillers : int
        Sizes of the topic and filler vocabularies (words ``topicN`` and ``fillN``).
    candidates : int
        Candidates per question (one correct), listed correct-first to catch metrics that
        break ties by file order.
    seed : int
    prefix : str
        Prefix of question ids.

    Returns
    -------
    list of QuestionGroup

    Example
    -------
    >>> g = planted_word_groups(2, seed=1)
    >>> len(g), len(g[0].candidates), g[0].candidates[0].label
    (2, 6, 1)
    """
    rng = np.random.default_rng(seed)

    def filler(k: int) -> list[str]:
        return [f"fill{int(i)}" for i in rng.integers(0, fillers, size=k)]

    groups = []
    for i in range(n_questions):
        topic = int(rng.integers(0, topics))
        question = " ".join(["what", "about", f"topic{topic}", *filler(3)])
        others = rng.choice([t for t in range(topics) if t != topic], size=candidates - 1, replace=False)
        cands = [Candidate(f"{prefix}{i}-0", " ".join(rng.permutation([f"topic{topic}", *filler(5)])), 1)]
        for j, other in enumerate(others, start=1):
            words = rng.permutation([f"topic{int(other)}", *filler(5)])
            cands.append(Candidate(f"{prefix}{i}-{j}", " ".join(words), 0))
        groups.append(QuestionGroup(f"{prefix}{i}", question, tuple(cands)))
    return groups


def write_benchmark(groups: list[QuestionGroup], path: str | os.PathLike[str]) -> Path:
    """Write groups as benchmark-format JSONL (``qid, question, aid, answer, label``).

    Example
    -------
    >>> import tempfile
    >>> p = write_benchmark(planted_word_groups(1), Path(tempfile.mkdtemp()) / "b.jsonl")
    >>> len(p.read_text().splitlines())
    6
    """
    target = Path(path)
    with open(target, "w", encoding="utf-8") as handle:
        for g in groups:
            for c in g.candidates:
                row = {"qid": g.qid, "question": g.question, "aid": c.aid, "answer": c.answer, "label": c.label}
                handle.write(json.dumps(row) + "\n")
    return target


def write_corpus(groups: list[QuestionGroup], path: str | os.PathLike[str]) -> Path:
    """Write each group's correct answer with its question in the corpus format.

    Example
    -------
    >>> import tempfile
    >>> p = write_corpus(planted_word_groups(3), Path(tempfile.mkdtemp()) / "c.jsonl")
    >>> sorted(json.loads(p.read_text().splitlines()[0]))
    ['answer', 'id', 'questions']
    """
    target = Path(path)
    with open(target, "w", encoding="utf-8") as handle:
        for g in groups:
            answer = next(c for c in g.candidates if c.label == 1)
            handle.write(json.dumps({"id": answer.aid, "answer": answer.answer, "questions": [g.question]}) + "\n")
    return target

"""Labelled question/candidate data for training and evaluation.

Two input formats are accepted:

- the answer-selection benchmark format, one (question, candidate) pair per line:
  ``{"qid", "question", "aid", "answer", "label"}`` (label 1 = correct);
- the corpus format (``answer`` plus ``question``/``questions``): each distinct question text
  is one question whose correct candidates are the answers listing it; there are no listed wrong candidates
  (training samples negatives from other answers; evaluation ranks every answer of the file).

Candidate order is kept as in the file; never use it to break ties (in TrecQA every correct
candidate is listed first).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from ..checks import path_arg
from ..corpus import benchmark_row, check_json_values, read_corpus, read_json_lines
from ..errors import CorpusError

__all__ = ["Candidate", "QuestionGroup", "read_labelled"]


@dataclass(frozen=True)
class Candidate:
    """One candidate answer of a question."""

    aid: str
    answer: str
    label: int


@dataclass(frozen=True)
class QuestionGroup:
    """A question with its candidate answers (in file order)."""

    qid: str
    question: str
    candidates: tuple[Candidate, ...]

    @property
    def has_positive(self) -> bool:
        return any(c.label == 1 for c in self.candidates)


def read_labelled(path: str | os.PathLike[str]) -> list[QuestionGroup]:
    """Read benchmark-format or corpus-format JSONL into question groups.

    Parameters
    ----------
    path : path-like

    Returns
    -------
    list of QuestionGroup
        In order of first appearance. For the corpus format every question's candidates are
        all answers of the file, labelled 1 under each answer that lists the question: a
        question text listed under several answers is one question with several relevant
        answers.

    Raises
    ------
    CorpusError
        Naming the file and line of the first bad record.

    Example
    -------
    >>> import tempfile, pathlib
    >>> p = pathlib.Path(tempfile.mkdtemp()) / "d.jsonl"
    >>> _ = p.write_text('{"qid": "q1", "question": "who?", "aid": "a1", "answer": "me", "label": 1}\\n')
    >>> read_labelled(p)[0].candidates[0].label
    1
    """
    source = os.fspath(path_arg(path, "path", what="a data file path"))
    first = next(iter(read_json_lines(path)), (0, None))[1]
    if isinstance(first, dict) and "qid" in first and "label" in first:
        return _read_benchmark(Path(path))
    records = read_corpus(path)
    candidates = tuple(Candidate(str(r.id), r.answer, 0) for r in records)
    # one group per distinct question text: a question listed under several answers is one
    # question with several relevant answers, never counted once per answer
    qids: dict[str, str] = {}
    relevant: dict[str, list[int]] = {}
    for i, rec in enumerate(records):
        for j, q in enumerate(rec.questions):
            if q not in qids:
                qids[q], relevant[q] = f"{rec.id}#{j}", []
            if i not in relevant[q]:
                relevant[q].append(i)
    groups = []
    shared: dict[tuple[int, ...], tuple[Candidate, ...]] = {}  # one tuple per set of relevant answers
    for q, qid in qids.items():
        key = tuple(relevant[q])
        if key not in shared:
            cands = list(candidates)  # the wrong candidates are shared objects
            for i in key:
                cands[i] = Candidate(candidates[i].aid, candidates[i].answer, 1)
            shared[key] = tuple(cands)
        groups.append(QuestionGroup(qid, q, shared[key]))
    if not groups:
        raise CorpusError(
            f'{source}: no questions found; labelled data needs "question"/"questions" fields '
            "or the benchmark format (qid, question, aid, answer, label)"
        )
    return groups


def _read_benchmark(path: Path) -> list[QuestionGroup]:
    source = os.fspath(path)
    order: list[str] = []
    questions: dict[str, str] = {}
    cands: dict[str, list[Candidate]] = {}
    for number, obj in read_json_lines(path):
        at = f"{source}:{number}"
        if not isinstance(obj, dict):
            raise CorpusError(f"{at}: expected a JSON object, got {type(obj).__name__}")
        check_json_values(obj, at)
        qid_value, question, aid, answer, label = benchmark_row(obj, at)
        qid = str(qid_value)
        if qid not in questions:
            order.append(qid)
            questions[qid] = question
            cands[qid] = []
        cands[qid].append(Candidate(str(aid), answer, label))
    if not order:
        raise CorpusError(f"{source}: no lines found")
    return [QuestionGroup(q, questions[q], tuple(cands[q])) for q in order]

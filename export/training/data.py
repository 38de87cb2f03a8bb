"""Training data: labelled files to question groups, texts tokenized once, training pairs.

- :func:`load_groups` reads a labelled file (or takes groups) and describes it (path,
  SHA-256, counts) for the manifest;
- :class:`TextTable` holds every distinct (role, text) once, tokenized, as one ragged id array;
- :func:`split_groups` maps question groups to table rows; :func:`training_pairs` lists the
  (question, correct answer) pairs and the pools negatives are drawn from (:mod:`.negatives`).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from qaindex.eval.datasets import QuestionGroup, read_labelled
from qaindex.store.atomic_files import sha256_file
from qaindex.text.tokenizer import Tokenizer

__all__ = ["Pairs", "Split", "TextTable", "hold_out_dev", "load_groups", "split_groups", "training_pairs"]


def load_groups(data: str | os.PathLike[str] | Sequence[QuestionGroup]) -> tuple[list[QuestionGroup], dict[str, Any]]:
    if isinstance(data, str | os.PathLike):
        groups = read_labelled(data)
        info: dict[str, Any] = {"path": os.path.abspath(data), "sha256": sha256_file(data)}
    else:
        groups = list(data)
        info = {"path": None, "sha256": None}
    info["questions"] = len(groups)
    info["pairs"] = sum(len(g.candidates) for g in groups)
    info["positives"] = sum(c.label for g in groups for c in g.candidates)
    return groups, info


# ------------------------------------------------------------------------ training


def hold_out_dev(
    groups: list[QuestionGroup], fraction: float, seed: int
) -> tuple[list[QuestionGroup], list[QuestionGroup]]:
    """``(train, dev)``: ``fraction`` of the questions with a correct answer held out (chosen with ``seed``).

    Example
    -------
    >>> from qaindex.eval.datasets import Candidate
    >>> gs = [QuestionGroup(str(i), f"q{i}", (Candidate("a", "x", 1),)) for i in range(10)]
    >>> [len(part) for part in hold_out_dev(gs, 0.2, seed=0)]
    [8, 2]
    """
    rng = np.random.default_rng(seed)
    with_pos = [i for i, g in enumerate(groups) if g.has_positive]
    n_dev = max(1, round(len(with_pos) * fraction))
    if len(with_pos) < 2:
        raise ValueError("too few training questions with a correct answer to hold out a dev set; pass a dev file")
    held = set(rng.choice(with_pos, size=n_dev, replace=False).tolist())
    return [g for i, g in enumerate(groups) if i not in held], [g for i, g in enumerate(groups) if i in held]


class TextTable:
    """Distinct (role, text) pairs, tokenized once, stored as one ragged id array.

    Parameters
    ----------
    tokenizer : Tokenizer
    max_tokens : dict
        ``{"question": int, "answer": int}`` truncation.

    Example
    -------
    >>> tok = Tokenizer(["[PAD]", "[UNK]", "a", "b"], kind="word")
    >>> table = TextTable(tok, {"question": 4, "answer": 4})
    >>> table.add("a b", "question"), table.add("b", "answer"), table.add("a b", "question")
    (0, 1, 0)
    >>> flat, offsets = table.gather(np.array([1, 0]))
    >>> flat.tolist(), offsets.tolist()
    ([3, 2, 3], [0, 1])
    """

    def __init__(self, tokenizer: Tokenizer, max_tokens: dict[str, int]) -> None:
        self.tokenizer = tokenizer
        self.max_tokens = dict(max_tokens)
        self._index: dict[tuple[str, str], int] = {}
        self._rows: list[list[int]] = []
        self._answer: list[bool] = []  # each row's role (asymmetric encoders need it)
        self._ids = np.zeros(0, dtype=np.int64)
        self._starts = np.zeros(0, dtype=np.int64)
        self._lengths = np.zeros(0, dtype=np.int64)
        self._frozen = 0

    def __len__(self) -> int:
        return len(self._index)

    def add(self, text: str, role: str) -> int:
        """Index of ``text`` in ``role`` (tokenized on first sight)."""
        key = (role, text)
        found = self._index.get(key)
        if found is None:
            found = len(self._index)
            self._index[key] = found
            self._rows.append(self.tokenizer.encode(text, self.max_tokens[role]))
            self._answer.append(role == "answer")
        return found

    def is_answer(self, rows: np.ndarray) -> np.ndarray:
        """Whether each of ``rows`` was added as an answer (else as a question)."""
        return np.asarray(self._answer, dtype=bool)[np.asarray(rows, dtype=np.int64)]

    def _pack(self) -> None:
        if self._frozen == len(self._rows):
            return
        lengths = np.array([len(r) for r in self._rows], dtype=np.int64)
        self._ids = np.fromiter((i for r in self._rows for i in r), dtype=np.int64, count=int(lengths.sum()))
        self._lengths = lengths
        self._starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
        self._frozen = len(self._rows)

    def gather(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Concatenated token ids of ``rows`` and each row's start offset (for ``embedding_bag``)."""
        self._pack()
        rows = np.asarray(rows, dtype=np.int64)
        lengths = self._lengths[rows]
        offsets = np.zeros(len(rows), dtype=np.int64)
        if len(rows):
            np.cumsum(lengths[:-1], out=offsets[1:])
        total = int(lengths.sum())
        position = (
            np.arange(total, dtype=np.int64) - np.repeat(offsets, lengths) + np.repeat(self._starts[rows], lengths)
        )
        return self._ids[position], offsets

    def all_token_ids(self) -> np.ndarray:
        """Every distinct token id used by the table's texts."""
        self._pack()
        return np.unique(self._ids)


@dataclass
class Split:
    """Question groups mapped to text rows."""

    groups: list[QuestionGroup]
    question: np.ndarray  # (G,) question text row
    candidates: list[np.ndarray]  # per group: answer text rows
    labels: list[np.ndarray]


def split_groups(groups: Sequence[QuestionGroup], table: TextTable) -> Split:
    questions = np.array([table.add(g.question, "question") for g in groups], dtype=np.int64)
    cands = [np.array([table.add(c.answer, "answer") for c in g.candidates], dtype=np.int64) for g in groups]
    labels = [np.array([c.label for c in g.candidates], dtype=np.int64) for g in groups]
    return Split(list(groups), questions, cands, labels)


@dataclass
class Pairs:
    """Training pairs and the pools negatives are drawn from."""

    group: np.ndarray  # (P,) group of each (question, positive) pair
    question: np.ndarray  # (P,) question text row
    positive: np.ndarray  # (P,) answer text row
    own_start: np.ndarray  # (G,) start of each group's wrong candidates in own_rows
    own_count: np.ndarray  # (G,)
    own_rows: np.ndarray
    pool: np.ndarray  # all answer rows
    positive_keys: np.ndarray  # sorted group * T + row of every positive


def training_pairs(split: Split, n_texts: int) -> Pairs:
    group, question, positive, own, counts, keys = [], [], [], [], [], []
    for g, (rows, labels) in enumerate(zip(split.candidates, split.labels, strict=True)):
        pos_rows = np.unique(rows[labels == 1])
        wrong = np.unique(rows[labels == 0])
        wrong = wrong[~np.isin(wrong, pos_rows)]
        own.append(wrong)
        counts.append(len(wrong))
        keys.append(g * n_texts + pos_rows)
        for r in pos_rows:
            group.append(g)
            question.append(split.question[g])
            positive.append(r)
    own_count = np.array(counts, dtype=np.int64)
    own_start = np.concatenate([[0], np.cumsum(own_count)[:-1]]).astype(np.int64)
    pool = np.unique(np.concatenate(split.candidates)) if split.candidates else np.zeros(0, np.int64)
    return Pairs(
        np.array(group, dtype=np.int64),
        np.array(question, dtype=np.int64),
        np.array(positive, dtype=np.int64),
        own_start,
        own_count,
        np.concatenate(own) if own else np.zeros(0, np.int64),
        pool,
        np.sort(np.concatenate(keys)) if keys else np.zeros(0, np.int64),
    )

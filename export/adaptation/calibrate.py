"""Label-free calibration data: the teacher's judgements on pseudo-questions cut from answers.

``qaindex calibrate MODEL_DIR CORPUS.jsonl --teacher minilm`` calibrates a model without any
labelled question: from each answer of the corpus a few pseudo-questions are cut
(:func:`qaindex_export.training.train.pseudo_questions`, with a seed of its own so that they are not
those a model trained by ``qaindex train --teacher`` saw), and the teacher (all-MiniLM-L6-v2)
judges which answer is relevant: its top-1 answer by cosine for the pseudo-question. The
teacher also judges the off-topic questions fitted as not relevant
(:func:`teacher_calibration_data`): one as close to an answer as the median pseudo-question is
to its best answer may well be answered by the corpus, and is left out.

Example
-------
>>> fake = lambda texts: np.eye(3, dtype=np.float32)[[len(t) % 3 for t in texts]]
>>> groups = teacher_groups(["one two three four", "five six seven eight"], fake, per_answer=1)
>>> len(groups), sum(c.label for c in groups[0].candidates)
(2, 1)
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from qaindex.eval.datasets import Candidate, QuestionGroup, read_labelled
from qaindex.eval.fusion_fit import faq_pool_groups, fit_written_model
from qaindex.eval.offtopic import BUILTIN_OFFTOPIC, read_offtopic

from ..training.data import hold_out_dev
from ..training.unlabelled import answer_sample, pseudo_questions

__all__ = ["CALIBRATION_SEED", "calibrate_trained", "held_out_groups", "teacher_calibration_data", "teacher_groups"]

CALIBRATION_SEED = 20_251_125  # not the training seeds: held-out pseudo-questions
CALIBRATION_ANSWERS = 1000  # label-free: the teacher labels pseudo-questions of a sample of this many answers


def teacher_groups(
    answers: Sequence[str],
    teacher: Callable[[Sequence[str]], np.ndarray],
    *,
    per_answer: int = 2,
    seed: int = CALIBRATION_SEED,
) -> list[QuestionGroup]:
    """Question groups labelled by a teacher: every answer is a candidate of every pseudo-question,
    the teacher's top-1 answer (highest cosine of L2-normalised embeddings) is the relevant one.

    Parameters
    ----------
    answers : list of str
    teacher : callable
        Texts -> L2-normalised embeddings (n, d).
    per_answer : int
        Pseudo-questions cut from each answer.
    seed : int
    """
    return teacher_calibration_data(answers, teacher, per_answer=per_answer, seed=seed)[0]


def teacher_calibration_data(
    answers: Sequence[str],
    teacher: Callable[[Sequence[str]], np.ndarray],
    offtopic: Sequence[str] = (),
    *,
    per_answer: int = 2,
    seed: int = CALIBRATION_SEED,
) -> tuple[list[QuestionGroup], list[str]]:
    """:func:`teacher_groups`, and the ``offtopic`` questions the teacher does not find answered.

    An off-topic question whose best cosine to the answers is at least the median of the
    pseudo-questions' best cosines is as close to an answer as a typical answerable question:
    it is left out of the negatives (a general off-topic set may hold a question the corpus
    answers).

    Example
    -------
    >>> fake = lambda texts: np.eye(2, dtype=np.float32)[[int("zebra" in t) for t in texts]]  # zebras apart
    >>> answers = ["one two three four", "five six seven eight"]
    >>> groups, kept = teacher_calibration_data(answers, fake, ["a zebra?", "five six"], per_answer=1)
    >>> len(groups), kept
    (2, ['a zebra?'])
    """
    rng = np.random.default_rng(seed)
    questions = [q for a in answers for q in pseudo_questions(a, rng, per_answer)]
    a_vec = np.asarray(teacher(list(answers)), dtype=np.float32)
    q_cos = np.asarray(teacher(questions), dtype=np.float32) @ a_vec.T
    best = q_cos.argmax(axis=1)
    groups = []
    for i, (question, top) in enumerate(zip(questions, best.tolist(), strict=True)):
        cands = tuple(Candidate(f"a{j}", text, int(j == top)) for j, text in enumerate(answers))
        groups.append(QuestionGroup(f"pseudo-{i}", question, cands))
    if not offtopic:
        return groups, []
    bar = float(np.median(q_cos.max(axis=1)))
    o_best = (np.asarray(teacher(list(offtopic)), dtype=np.float32) @ a_vec.T).max(axis=1)
    return groups, [q for q, cos in zip(offtopic, o_best.tolist(), strict=True) if cos < bar]


def held_out_groups(
    train_data: str | os.PathLike[str] | Sequence[QuestionGroup], seed: int, dev_fraction: float
) -> list[QuestionGroup]:
    """The questions :func:`qaindex_export.training.train.train` held out of ``train_data`` (a labelled
    file, or its question groups) for model selection when it had no dev file: the same draw,
    :func:`qaindex_export.training.data.hold_out_dev` with ``seed`` and ``dev_fraction``."""
    groups = read_labelled(train_data) if isinstance(train_data, (str, os.PathLike)) else list(train_data)
    if sum(g.has_positive for g in groups) < 2:
        return []
    return hold_out_dev(groups, dev_fraction, seed)[1]


def calibrate_trained(
    model_dir: str | os.PathLike[str],
    *,
    train_data: str | os.PathLike[str] | Sequence[QuestionGroup],
    dev_data: str | os.PathLike[str] | None,
    answers: Sequence[str] | None,
    teacher: Callable[[Sequence[str]], np.ndarray] | None,
    seed: int,
    dev_fraction: float,
    held_out: Sequence[QuestionGroup] | None = None,
) -> dict[str, Any]:
    """Calibrate a model ``qaindex train`` just exported, on data it was not trained on.

    - label-free training (``answers`` and ``teacher``): the teacher's judgements of
      pseudo-questions cut with :data:`CALIBRATION_SEED` (not the training draw) from a sample
      of at most :data:`CALIBRATION_ANSWERS` answers, every one a candidate of each;
    - with a dev file: its questions;
    - with ``held_out`` (what the trainer says it held out, ``TrainResult.dev_groups``): those
      questions; when it is empty (k-fold selection, then training on every labelled
      question), the example FAQ's questions that are not among the training questions;
    - otherwise: the questions training held out of ``train_data`` (:func:`held_out_groups`);

    with the ``fit`` split of the built-in off-topic questions as not relevant, as
    ``qaindex calibrate`` does by default (:mod:`qaindex.eval.offtopic`). Before it, the
    model's fusion rule is fitted (:func:`qaindex.eval.fusion_fit.fit_written_model`) on the
    example FAQ and, when labelled, on the same held-out questions; the calibration then
    fits the hybrid score on that rule's fused value.
    """
    offtopic = read_offtopic(BUILTIN_OFFTOPIC, split="fit")
    off_source = "built-in off-topic questions (fit split)"
    if answers is not None and teacher is not None:
        groups, kept = teacher_calibration_data(answer_sample(answers, CALIBRATION_ANSWERS, seed), teacher, offtopic)
        if len(kept) < len(offtopic):
            left_out = len(offtopic) - len(kept)
            off_source += f"; {left_out} of {len(offtopic)} left out, close to an answer for the teacher"
        offtopic = kept
        source, labels = _name(train_data) + " answers", "teacher: all-MiniLM-L6-v2 top-1 on pseudo-questions"
    elif dev_data is not None:
        groups, source, labels = read_labelled(dev_data), Path(dev_data).name, "labelled"
    elif held_out is not None and not held_out:
        return _calibrate_after_k_fold(model_dir, train_data, offtopic, off_source)
    elif held_out is not None:
        groups, source, labels = list(held_out), _name(train_data) + " (questions held out of training)", "labelled"
    else:
        groups = held_out_groups(train_data, seed, dev_fraction)
        source, labels = _name(train_data) + " (questions held out of training)", "labelled"
    held_out = groups if labels == "labelled" else []
    return fit_written_model(
        model_dir,
        held_out=held_out,
        held_out_source=source,
        calibration_groups=groups if any(g.has_positive for g in groups) else None,
        calibration_source=source,
        labels=labels,
        offtopic=offtopic,
        offtopic_source=off_source,
    )["calibration"]


def _calibrate_after_k_fold(
    model_dir: str | os.PathLike[str],
    train_data: str | os.PathLike[str] | Sequence[QuestionGroup],
    offtopic: Sequence[str],
    off_source: str,
) -> dict[str, Any]:
    """Every labelled question was trained on: calibrate on the example FAQ's questions that are
    not among them (none left, as when training on the example FAQ itself: on the training
    questions, said in the source, since its probabilities are then optimistic)."""
    trained = read_labelled(train_data) if isinstance(train_data, (str, os.PathLike)) else list(train_data)
    seen = {" ".join(g.question.lower().split()) for g in trained}
    unseen = [g for g in faq_pool_groups() if " ".join(g.question.lower().split()) not in seen]
    if any(g.has_positive for g in unseen):
        groups, source = unseen, "example FAQ (qaindex/eval/data/faq.jsonl), its questions not trained on"
    else:
        groups = [g for g in trained if g.has_positive]
        source = _name(train_data) + " (its questions were all trained on: optimistic)"
    return fit_written_model(
        model_dir,
        calibration_groups=groups,
        calibration_source=source,
        offtopic=offtopic,
        offtopic_source=off_source,
    )["calibration"]


def _name(train_data: str | os.PathLike[str] | Sequence[QuestionGroup]) -> str:
    return Path(train_data).name if isinstance(train_data, (str, os.PathLike)) else "the training questions"

"""The joint (attentive) models on rows of a :class:`~.data.TextTable`: a step's scores with
gradients, and scores without for evaluation and max-of-K negatives.

AP-CNN and AP-biLSTM (:mod:`qaindex_export.networks.attentive`) score (question, answer) pairs
together, so training scores pairs of table rows instead of encoding each text once.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from torch import Tensor

from ..networks.attentive import AttentiveQA
from ..networks.encoders import pad_ragged
from .data import TextTable

__all__ = ["joint_max_of_pool", "joint_pair_scores", "joint_split_scores"]

_PAIR_CHUNK = 512  # (question, answer) pairs per no-grad scoring call


def _padded(table: TextTable, rows: np.ndarray, device: torch.device) -> tuple[Tensor, Tensor]:
    flat, offsets = table.gather(rows)
    return pad_ragged(torch.from_numpy(flat).to(device), torch.from_numpy(offsets).to(device))


def joint_pair_scores(
    model: AttentiveQA, table: TextTable, questions: np.ndarray, answers: np.ndarray, device: torch.device
) -> Tensor:
    """Scores (b, n) of question rows ``questions`` (b,) with answer rows ``answers`` (b, n), with gradients.

    Each distinct question text's features are computed once and repeated for its answers.
    """
    b, n = answers.shape
    q_ids, q_mask = _padded(table, questions, device)
    a_ids, a_mask = _padded(table, answers.reshape(-1), device)
    q, qm = model.features(q_ids, q_mask)
    a, am = model.features(a_ids, a_mask)
    q = q.repeat_interleave(n, dim=0)
    qm = qm.repeat_interleave(n, dim=0)
    return model.attention(q, qm, a, am).view(b, n)


def _scores_no_grad(
    model: AttentiveQA, table: TextTable, questions: np.ndarray, answers: np.ndarray, device: torch.device
) -> np.ndarray:
    """Scores of pairs (``questions[i]``, ``answers[i]``) (flat arrays), no gradient, in length-sorted chunks."""
    table._pack()
    order = np.lexsort((table._lengths[questions], table._lengths[answers]))
    out = np.zeros(len(answers), dtype=np.float64)
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            for start in range(0, len(order), _PAIR_CHUNK):
                idx = order[start : start + _PAIR_CHUNK]
                q_ids, q_mask = _padded(table, questions[idx], device)
                a_ids, a_mask = _padded(table, answers[idx], device)
                out[idx] = model(q_ids, q_mask, a_ids, a_mask).double().cpu().numpy()
    finally:
        model.train(was_training)
    return out


def joint_max_of_pool(
    model: AttentiveQA, table: TextTable, questions: np.ndarray, pool: np.ndarray, k: int, device: torch.device
) -> np.ndarray:
    """(b, k) highest-scoring rows of each question's sampled ``pool`` (b, K) under the current model."""
    b, width = pool.shape
    scores = _scores_no_grad(model, table, np.repeat(questions, width), pool.reshape(-1), device).reshape(b, width)
    top = np.argsort(-scores, axis=1, kind="stable")[:, :k]
    return np.take_along_axis(pool, top, axis=1)


def joint_split_scores(
    model: AttentiveQA, questions: np.ndarray, candidates: Sequence[np.ndarray], table: TextTable, device: torch.device
) -> list[np.ndarray]:
    """Each question's candidate scores (float64), as the dual encoders' evaluation returns them."""
    counts = [len(c) for c in candidates]
    if not sum(counts):
        return [np.zeros(0) for _ in candidates]
    flat_q = np.repeat(np.asarray(questions, dtype=np.int64), counts)
    flat_a = np.concatenate([np.asarray(c, dtype=np.int64) for c in candidates])
    scores = _scores_no_grad(model, table, flat_q, flat_a, device)
    return list(np.split(scores, np.cumsum(counts)[:-1]))

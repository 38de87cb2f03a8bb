"""Negatives for the pairwise loss: random, hard (mined under the current model), max-of-pool.

See :mod:`.train` for how ``sampling``, ``hard_fraction`` and ``negative_pool`` choose among them.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from ..networks.attentive import is_joint
from ..networks.models import DualEncoderQA
from .data import Pairs, TextTable
from .evaluation import encode_texts
from .joint import joint_max_of_pool

__all__ = ["hard_negatives", "max_of_pool", "random_negatives"]


def random_negatives(pairs: Pairs, n: int, own_prob: float, n_texts: int, rng: np.random.Generator) -> np.ndarray:
    """(P, n) negative rows: own wrong candidates with probability ``own_prob``, else random answers."""
    p = len(pairs.group)
    g = pairs.group
    counts = pairs.own_count[g][:, None]
    use_own = (rng.random((p, n)) < own_prob) & (counts > 0)
    own_pick = np.zeros((p, n), np.int64)
    if len(pairs.own_rows):
        drawn = pairs.own_start[g][:, None] + (rng.random((p, n)) * counts).astype(np.int64)
        own_pick = pairs.own_rows[np.minimum(drawn, len(pairs.own_rows) - 1)]
    rand_pick = pairs.pool[rng.integers(0, len(pairs.pool), size=(p, n))]
    # never a correct answer of the same question: redraw the few collisions
    for _ in range(20):
        bad = ~use_own & np.isin(g[:, None] * n_texts + rand_pick, pairs.positive_keys)
        if not bad.any():
            break
        rand_pick[bad] = pairs.pool[rng.integers(0, len(pairs.pool), size=int(bad.sum()))]
    return np.where(use_own, own_pick, rand_pick)


def hard_negatives(
    model: DualEncoderQA,
    table: TextTable,
    pairs: Pairs,
    k: int,
    pool_size: int,
    n_texts: int,
    rng: np.random.Generator,
    device: torch.device,
) -> tuple[np.ndarray, np.ndarray]:
    """(P, k) highest-scoring wrong answers per pair under the current model, and a mask of
    the slots where no valid one was found."""
    p = len(pairs.group)
    g = pairs.group
    # pool per pair: its own wrong candidates (all of them, or pool_size drawn at random),
    # then pool_size random answers of the file
    counts = pairs.own_count[g][:, None]
    own_cols = min(pool_size, int(counts.max()) if p else 0)
    cols = np.arange(own_cols, dtype=np.int64)[None, :]
    drawn = (rng.random((p, own_cols)) * counts).astype(np.int64)
    position = np.where(counts <= own_cols, cols, drawn)
    valid_own = position < counts
    src = np.minimum(pairs.own_start[g][:, None] + position, max(0, len(pairs.own_rows) - 1))
    own = np.where(valid_own, pairs.own_rows[src] if len(pairs.own_rows) else 0, -1)
    rand = pairs.pool[rng.integers(0, len(pairs.pool), size=(p, pool_size))]
    cand = np.concatenate([own, rand], axis=1)
    invalid = (cand < 0) | np.isin(g[:, None] * n_texts + np.maximum(cand, 0), pairs.positive_keys)
    cand = np.maximum(cand, 0)
    needed = np.unique(np.concatenate([pairs.question, cand.ravel()]))
    vectors = encode_texts(model, table, needed, device)
    assert isinstance(vectors, torch.Tensor)
    where = np.zeros(n_texts, dtype=np.int64)
    where[needed] = np.arange(len(needed))
    qv = vectors[torch.from_numpy(where[pairs.question]).to(device)]
    cv = vectors[torch.from_numpy(where[cand]).to(device)]
    with torch.no_grad():
        score, _ = model.score(qv[:, None, :], cv)
        # a tiny random jitter breaks exact ties randomly, never by pool order
        score = score + torch.from_numpy(rng.random(score.shape) * 1e-6).to(score)
        score[torch.from_numpy(invalid).to(device)] = -math.inf
        top = torch.topk(score, k=min(k, cand.shape[1]), dim=1).indices.cpu().numpy()
    chosen = np.take_along_axis(cand, top, axis=1)
    bad = np.take_along_axis(invalid, top, axis=1)
    if chosen.shape[1] < k:  # fewer pool slots than hard negatives asked for
        pad = k - chosen.shape[1]
        chosen = np.concatenate([chosen, np.zeros((p, pad), np.int64)], axis=1)
        bad = np.concatenate([bad, np.ones((p, pad), bool)], axis=1)
    return chosen, bad


def max_of_pool(
    model: DualEncoderQA,
    table: TextTable,
    questions: np.ndarray,
    pool: np.ndarray,
    k: int,
    n_texts: int,
    device: torch.device,
) -> np.ndarray:
    """(b, k) highest-scoring rows of each question's sampled ``pool`` (b, K) under the current model.

    The QA-CNN paper's sampling: score K random negatives, train on the best-scoring one(s).
    """
    if is_joint(model):  # AP-CNN / AP-biLSTM: score each (question, negative) pair jointly
        return joint_max_of_pool(model, table, questions, pool, k, device)  # type: ignore[arg-type]
    needed = np.unique(np.concatenate([questions, pool.ravel()]))
    was_training = model.training
    model.eval()
    vectors = encode_texts(model, table, needed, device)
    assert isinstance(vectors, torch.Tensor)
    model.train(was_training)
    where = np.zeros(n_texts, dtype=np.int64)
    where[needed] = np.arange(len(needed))
    with torch.no_grad():
        qv = vectors[torch.from_numpy(where[questions]).to(device)]
        cv = vectors[torch.from_numpy(where[pool]).to(device)]
        score, _ = model.score(qv[:, None, :], cv)
        top = torch.topk(score, k=k, dim=1).indices.cpu().numpy()
    return np.take_along_axis(pool, top, axis=1)

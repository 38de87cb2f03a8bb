"""Adaptation's teachers (:mod:`.adapt`): MiniLM's or the start model's judgements over
a step's candidates, and the alignment of MiniLM's sentence vectors with the start model's sums."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from ..networks.models import DualEncoderQA
from ..training.data import TextTable
from ..training.evaluation import encode_texts
from ..training.loop import Log
from ..training.unlabelled import unit_rows as _unit

TEACHER_TEMPERATURE = 0.05


class Teacher:
    """Soft targets ``softmax(logits(q, c))`` over a step's candidates, from fixed text vectors."""

    def __init__(self, vectors: Tensor, scorer: Callable[[Tensor, Tensor], Tensor], describe: str) -> None:
        self.vectors = vectors  # (n_texts, D), indexed by text row
        self.scorer = scorer
        self.describe = describe

    def logits(self, q_rows: Tensor, c_rows: Tensor) -> Tensor:
        return self.scorer(self.vectors[q_rows][:, None, :], self.vectors[c_rows][None, :, :])

    def specificity(self, rows: np.ndarray) -> np.ndarray:
        """``-mean cos`` of each text to the others (standardised): high is specific, low generic."""
        v = F.normalize(self.vectors[torch.from_numpy(rows)], dim=-1)
        sims = []
        for start in range(0, len(rows), 2048):
            sims.append((v[start : start + 2048] @ v.T).mean(dim=1))
        s = -torch.cat(sims).double().cpu().numpy()
        return (s - s.mean()) / max(float(s.std()), 1e-12)


def remembering(teacher: Callable[[Sequence[str]], np.ndarray]) -> Callable[[Sequence[str]], np.ndarray]:
    """``teacher`` remembering every text's vector, so a text is embedded once however many
    stages or systems ask for it.

    Example
    -------
    >>> calls = []
    >>> t = remembering(lambda texts: calls.append(list(texts)) or np.eye(3)[: len(texts)])
    >>> t(["a", "b"]).shape, t(["b", "c"]).shape, calls
    ((2, 3), (2, 3), [['a', 'b'], ['c']])
    """
    memory: dict[str, np.ndarray] = {}

    def run(texts: Sequence[str]) -> np.ndarray:
        new = [t for t in dict.fromkeys(texts) if t not in memory]
        if new:
            memory.update(zip(new, teacher(new), strict=True))
        return np.stack([memory[t] for t in texts])

    return run


def sentence_teacher(
    teacher: Callable[[Sequence[str]], np.ndarray], table: TextTable, rows: np.ndarray, say: Log
) -> Teacher:
    texts = [text_of(table, r) for r in rows]
    say(f"[adapt] the teacher embeds {len(texts)} texts")
    vecs = _unit(teacher(texts))
    full = torch.zeros(len(table), vecs.shape[1])
    full[torch.from_numpy(rows)] = torch.from_numpy(vecs)
    return Teacher(full, lambda q, c: (q * c).sum(-1) / TEACHER_TEMPERATURE, "sentence teacher, softmax(cos / 0.05)")


def self_teacher(start: DualEncoderQA, table: TextTable, rows: np.ndarray, device: torch.device) -> Teacher:
    vectors = encode_texts(start, table, rows, device)
    assert isinstance(vectors, Tensor)
    full = torch.zeros(len(table), vectors.shape[1], device=device)
    full[torch.from_numpy(rows).to(device)] = vectors

    def scores(q: Tensor, c: Tensor) -> Tensor:
        with torch.no_grad():
            return start.score(q, c)[0]

    return Teacher(full, scores, "the start model's own softmax(score)")


def text_of(table: TextTable, row: int) -> str:
    if not hasattr(table, "_texts"):
        texts: dict[int, str] = {i: text for (_, text), i in table._index.items()}
        table._texts = texts  # type: ignore[attr-defined]
    return str(table._texts[int(row)])  # type: ignore[attr-defined]


def teacher_alignment(sums: np.ndarray, teacher: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The teacher's space as the start model sees it: mean ``mu`` (D,) and map ``Q`` (dim, D).

    The built-in model was trained so that its summed vector ``s`` of a text points where
    ``P (t - mu)`` points (``t`` the teacher's sentence vector, ``mu`` and ``P`` the mean and
    principal directions of its training corpus; :mod:`qaindex_export.training.tokenlearn`). The model
    directory does not keep ``P``, so it is recovered on the user's texts: ``mu`` is their
    teacher mean, and ``Q`` the orthogonal Procrustes solution
    ``argmax_Q Σ_i <s_i/|s_i|, Q (t_i - mu)>`` (``Q = U Vᵀ`` from the SVD of
    ``Σ_i ŝ_i (t_i - mu)ᵀ``), a rotation, so the targets ``Q (t - mu)`` keep the teacher's
    geometry while sitting where the start model's vectors already are.

    Example
    -------
    >>> rng = np.random.default_rng(0)
    >>> t = rng.normal(size=(200, 6)); q0 = np.linalg.qr(rng.normal(size=(6, 6)))[0]
    >>> mu, q = teacher_alignment((t - t.mean(0)) @ q0.T, t)
    >>> bool(np.allclose(q, q0, atol=1e-6))
    True
    """
    s = np.asarray(sums, np.float64)
    s = s / np.maximum(np.linalg.norm(s, axis=1, keepdims=True), 1e-12)
    t = np.asarray(teacher, np.float64)
    mu = t.mean(axis=0)
    u, _, vt = np.linalg.svd(s.T @ (t - mu), full_matrices=False)
    return mu.astype(np.float32), (u @ vt).astype(np.float32)

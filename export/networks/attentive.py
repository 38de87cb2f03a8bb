"""AP-CNN and AP-biLSTM (dos Santos et al., 2016, section 3): attentive pooling, a joint scorer.

The feature extractors are QA-CNN's and QA-biLSTM's (:mod:`.encoders`); what
changes is the pooling, which looks at both texts of the pair::

    Q = features(q)  (M × c),   A = features(a)  (L × c)   columns before pooling
    G   = tanh(Q U Aᵀ)          (M × L), U (c × c) learned
    g_q = max over the row  j of G   (M),  g_a = max over the column of G   (L)
    σ_q = softmax(g_q),  σ_a = softmax(g_a)     over real tokens only (padding gets 0)
    r_q = Qᵀ σ_q,        r_a = Aᵀ σ_a
    score = cos(r_q, r_a)

Because the question's representation depends on the answer (and vice versa), answers cannot
be encoded once and indexed: the model scores (question, candidate) pairs and is served as a
**reranker** over the first stage's candidates (a ``kind: "reranker"`` model directory with one
two-input ONNX graph, see :mod:`qaindex_export.exporting.attentive_export` and :mod:`qaindex.reranker`).

Training uses the same loop, loss and max-of-K negative sampling as QA-CNN
(:mod:`qaindex_export.training.train` dispatches to :mod:`qaindex_export.training.joint` for
models with ``joint = True``): every score goes through :meth:`AttentiveQA.forward` on padded
token ids. Masking is by hand: the padded positions of ``G`` are set below any real value
before the max-poolings, and the softmax multiplies by the mask (``G`` lies in [-1, 1], so
``exp(g - 1)`` never overflows and needs no max-subtraction). An empty question or answer has ``r = 0`` and scores 0.

Example
-------
>>> model = build_attentive_model("ap-cnn", 10, dim=6, embed_dim=4, window=3)
>>> q, qm = torch.tensor([[2, 3, 0]]), torch.tensor([[1, 1, 0]])
>>> a, am = torch.tensor([[4, 5], [6, 0]]), torch.tensor([[1, 1], [1, 0]])
>>> s = model(q.expand(2, -1), qm.expand(2, -1), a, am)
>>> tuple(s.shape), bool((s.abs() <= 1).all())
((2,), True)
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .encoders import BiLSTMEncoder, CNNEncoder, SequenceEncoder
from .models import BallMap

__all__ = [
    "ATTENTIVE_MODELS",
    "AttentivePooling",
    "AttentiveQA",
    "build_attentive_model",
    "is_joint",
]

ATTENTIVE_MODELS = ("ap-cnn", "ap-bilstm")


def is_joint(model: Any) -> bool:
    """Whether ``model`` scores (question, answer) pairs jointly (AP-CNN / AP-biLSTM).

    Example
    -------
    >>> is_joint(build_attentive_model("ap-cnn", 10, dim=4, embed_dim=3)), is_joint(object())
    (True, False)
    """
    return bool(getattr(model, "joint", False))


class AttentivePooling(nn.Module):
    """Two-way attentive pooling and cosine of the pooled vectors.

    Parameters
    ----------
    dim : int
        Feature width ``c``; ``U`` is ``c × c``, initialised ``N(0, 1/c)``.

    Example
    -------
    >>> ap = AttentivePooling(3)
    >>> q, a = torch.randn(2, 4, 3), torch.randn(2, 5, 3)
    >>> qm, am = torch.ones(2, 4, dtype=torch.bool), torch.ones(2, 5, dtype=torch.bool)
    >>> ap(q, qm, a, am).shape
    torch.Size([2])
    """

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.U = nn.Parameter(torch.randn(dim, dim) / math.sqrt(dim))

    def pooled(self, q: Tensor, q_mask: Tensor, a: Tensor, a_mask: Tensor) -> tuple[Tensor, Tensor]:
        """``(r_q, r_a)`` (n, c) of feature columns ``q`` (n, M, c) and ``a`` (n, L, c) with bool masks."""
        g = torch.tanh(torch.matmul(torch.matmul(q, self.U), a.transpose(1, 2)))  # (n, M, L)
        valid = q_mask.unsqueeze(2) & a_mask.unsqueeze(1)
        g = torch.where(valid, g, torch.full_like(g, -2.0))  # below tanh's range: never a max
        sigma_q = _masked_softmax(g.max(dim=2).values, q_mask)
        sigma_a = _masked_softmax(g.max(dim=1).values, a_mask)
        r_q = (q * sigma_q.unsqueeze(-1)).sum(dim=1)
        r_a = (a * sigma_a.unsqueeze(-1)).sum(dim=1)
        return r_q, r_a

    def forward(self, q: Tensor, q_mask: Tensor, a: Tensor, a_mask: Tensor) -> Tensor:
        """``cos(r_q, r_a)`` (n,); 0 when either text is empty."""
        r_q, r_a = self.pooled(q, q_mask, a, a_mask)
        dot = (r_q * r_a).sum(dim=-1)
        norms = (r_q * r_q).sum(dim=-1) * (r_a * r_a).sum(dim=-1)
        return dot * torch.rsqrt(torch.clamp(norms, min=1e-24))


def _masked_softmax(g: Tensor, mask: Tensor) -> Tensor:
    """Softmax of ``g`` (values ≤ 1 where ``mask``) over the masked positions; all zeros if none."""
    e = torch.exp(torch.clamp(g, max=1.0) - 1.0) * mask.to(g.dtype)
    return e / torch.clamp(e.sum(dim=-1, keepdim=True), min=1e-30)


class AttentiveQA(nn.Module):
    """AP-CNN / AP-biLSTM: a sequence encoder's feature columns and :class:`AttentivePooling`.

    ``forward(q_ids, q_mask, a_ids, a_mask)`` scores row ``i`` of the questions with row ``i``
    of the answers (the same ``n`` rows; different padded lengths ``M`` and ``L``).

    Attributes
    ----------
    joint : True
        Tells the training loop to score pairs through this model.
    ball : BallMap("none")
        Present for the checkpoint format (which records a ball map); unused.

    Example
    -------
    >>> m = build_attentive_model("ap-bilstm", 10, dim=4, embed_dim=3)
    >>> m.kind, m.geometry
    ('ap-bilstm', 'joint')
    """

    joint = True
    geometry = "joint"

    def __init__(self, encoder: SequenceEncoder, kind: str) -> None:
        super().__init__()
        self.encoder = encoder
        self.attention = AttentivePooling(encoder.dim)
        self.ball = BallMap("none")
        self.kind = kind

    @property
    def w_f(self) -> Tensor:
        """The cosine's scale, fixed at 1 (reported in the training history like QA-CNN's)."""
        return torch.ones(())

    def features(self, ids: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
        """Padded ids (n, S) → feature columns (n, S, c) and the bool mask (n, S)."""
        m = mask.to(torch.bool)
        z = F.embedding(ids, self.encoder.embedding) * m.unsqueeze(-1).to(torch.float32)
        return self.encoder.features(z, m), m

    def forward(self, q_ids: Tensor, q_mask: Tensor, a_ids: Tensor, a_mask: Tensor) -> Tensor:
        q, qm = self.features(q_ids, q_mask)
        a, am = self.features(a_ids, a_mask)
        return self.attention(q, qm, a, am)

    def score_definition(self) -> dict[str, Any]:
        return {"formula": "cos(Q softmax(rowmax G), A softmax(colmax G)), G = tanh(Q U A^T)", "higher_is_better": True}

    def describe(self) -> dict[str, Any]:
        """Manifest description of the network."""
        return {
            "model": self.kind,
            **self.encoder.spec(),
            "embedding_width": self.encoder.embed_width,
            "pooling": "attentive pooling: G = tanh(Q U A^T), softmax of row/column max over real tokens",
        }

    def parameter_counts(self) -> dict[str, int]:
        """Trainable and total parameters (the embedding table counts when it is trained)."""
        total = sum(p.numel() for p in self.parameters())
        trainable = sum(p.numel() for p in self.parameters() if p.requires_grad)
        return {"trainable": int(trainable), "total": int(total), "embedding": int(self.encoder.embedding.numel())}


def build_attentive_model(
    kind: str,
    vocab_size: int,
    *,
    dim: int = 400,
    embeddings: np.ndarray | None = None,
    train_embeddings: bool | None = None,
    embed_dim: int = 300,
    window: int = 4,
    **_ignored: Any,
) -> AttentiveQA:
    """Create an AP-CNN (``dim`` filters, context ``window``) or AP-biLSTM (``dim // 2`` units per direction).

    Other keyword arguments (the dual encoders' ball settings) are accepted and ignored, so
    the training loop builds every model kind with one call.

    Example
    -------
    >>> build_attentive_model("ap-cnn", 10, dim=4, embed_dim=3, ball="clip").describe()["window"]
    4
    """
    common: dict[str, Any] = {"embeddings": embeddings, "train_embeddings": train_embeddings, "embed_dim": embed_dim}
    encoder: SequenceEncoder
    if kind == "ap-cnn":
        encoder = CNNEncoder(vocab_size, dim, window=window, **common)
    elif kind == "ap-bilstm":
        encoder = BiLSTMEncoder(vocab_size, dim, **common)
    else:
        raise ValueError(f"unknown attentive model {kind!r}; choose one of {ATTENTIVE_MODELS}")
    return AttentiveQA(encoder, kind)

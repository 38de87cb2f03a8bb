"""The modules traced to ONNX for the bag-of-words family: a folded encoder and frozen scorers.

:class:`FoldedEncoder` is a trained :class:`~qaindex_export.networks.models.BagOfWords` encoder as one
per-token table + masked sum + ball map (the same function); :class:`PoincareScorer` and
:class:`CosineScorer` are the scorers with the trained ``w_f``, ``b_f`` frozen in, calling
:mod:`qaindex.geometry.hyperbolic` (one formula for training, export and runtime).
"""

from __future__ import annotations

import copy

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from qaindex.geometry import hyperbolic

from ..networks.models import RANKINGS, BallMap

__all__ = ["CosineScorer", "FoldedEncoder", "PoincareScorer"]


class FoldedEncoder(nn.Module):
    """Export form of the encoder: per-token table gather → masked sum → ball map.

    Parameters
    ----------
    table : Tensor (vocab_size, width)
        ``BagOfWords.folded_table()``, float32 or float16 (cast to float32 in the graph);
        ``dim + 1`` columns for the ``weighted`` map (the last is the per-token depth weight).
    ball : BallMap
        The trained model's map (its ``α`` is frozen into the graph).

    Example
    -------
    >>> from qaindex_export.networks.models import BagOfWords, HyperQA
    >>> model = HyperQA(BagOfWords(10, 4, embed_dim=3), BallMap("clip"))
    >>> enc = FoldedEncoder(model.encoder.folded_table(), model.ball)
    >>> ids, mask = torch.tensor([[2, 3]]), torch.tensor([[1, 1]])
    >>> bool(torch.allclose(enc(ids, mask), model(ids, mask), atol=1e-6))
    True
    """

    def __init__(self, table: Tensor, ball: BallMap) -> None:
        super().__init__()
        self.table: Tensor
        self.register_buffer("table", table.detach().clone())
        self.ball = copy.deepcopy(ball).cpu().float().requires_grad_(False)

    def forward(self, input_ids: Tensor, attention_mask: Tensor) -> Tensor:
        x = F.embedding(input_ids, self.table).to(torch.float32)
        y = (x * attention_mask.unsqueeze(-1).to(torch.float32)).sum(dim=1)
        return self.ball(y)


class PoincareScorer(nn.Module):
    """Export form of HyperQA's scorer: ``(query (n,d), candidates (n,m,d)) → (score, distance)``.

    Calls ``qaindex.geometry.hyperbolic.pairwise_distance``; ``score = -(w_f f + b_f)`` with ``f = d``
    (``ranking="distance"``) or ``f = d(q, a) - d(0, a)`` (``"relative"``); the ``distance``
    output is the plain Poincaré distance ``d`` in both cases.

    Example
    -------
    >>> s, d = PoincareScorer(2.0, 1.0)(torch.zeros(1, 2), torch.tensor([[[0.0, 0.0], [0.5, 0.0]]]))
    >>> [round(x, 4) for x in s[0].tolist()], [round(x, 4) for x in d[0].tolist()]
    ([-1.0, -3.1972], [0.0, 1.0986])
    >>> centre_and_q = torch.tensor([[[0.0, 0.0], [0.5, 0.0]]])
    >>> s, d = PoincareScorer(2.0, 1.0, ranking="relative")(torch.tensor([[0.5, 0.0]]), centre_and_q)
    >>> [round(x, 4) for x in s[0].tolist()]   # the centre scores worst
    [-3.1972, 1.1972]
    """

    def __init__(self, w_f: float, b_f: float, ranking: str = "distance") -> None:
        super().__init__()
        if ranking not in RANKINGS:
            raise ValueError(f"ranking must be one of {RANKINGS}, got {ranking!r}")
        self.ranking = ranking
        self.register_buffer("w_f", torch.tensor(float(w_f), dtype=torch.float32))
        self.register_buffer("b_f", torch.tensor(float(b_f), dtype=torch.float32))

    def forward(self, query: Tensor, candidates: Tensor) -> tuple[Tensor, Tensor]:
        distance = hyperbolic.pairwise_distance(query, candidates)
        f = distance - hyperbolic.origin_distance(candidates) if self.ranking == "relative" else distance
        return -(self.w_f * f + self.b_f), distance


class CosineScorer(nn.Module):
    """Export form of CosineQA's scorer: ``score = w_f cos + b_f``, ``distance = 1 - cos``.

    Example
    -------
    >>> s, d = CosineScorer(1.0, 0.0)(torch.tensor([[1.0, 0.0]]), torch.tensor([[[1.0, 0.0], [0.0, 1.0]]]))
    >>> s.tolist(), d.tolist()
    ([[1.0, 0.0]], [[0.0, 1.0]])
    """

    def __init__(self, w_f: float, b_f: float) -> None:
        super().__init__()
        self.register_buffer("w_f", torch.tensor(float(w_f), dtype=torch.float32))
        self.register_buffer("b_f", torch.tensor(float(b_f), dtype=torch.float32))

    def forward(self, query: Tensor, candidates: Tensor) -> tuple[Tensor, Tensor]:
        cos = hyperbolic.cosine_similarity(query.unsqueeze(-2), candidates)
        return self.w_f * cos + self.b_f, 1.0 - cos

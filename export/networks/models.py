"""HyperQA and CosineQA (Tay et al., 2017) as PyTorch modules, and their export forms.

The network, as the paper defines it (sections 3.1-3.5)::

    z_t   = E[token_t]                        word embeddings (frozen pretrained, or trainable)
    x_t   = ReLU(W_p z_t + b_p)               per-word projection, shared by question and answer
    y     = sum_t mask_t x_t                  neural bag of words
    v     = ball(y)                           into the Poincaré ball (see BallMap)
    d     = poincare_distance(v_q, v_a)       qaindex.geometry.hyperbolic.distance
    f     = d - d(0, v_a)                     ranking "relative" (default); "distance": f = d
    s     = w_f f + b_f                       lower is better (the paper's loss ranks by it)

The paper's loss is ``max(0, s(q, a) + λ - s(q, a'))``. To make the ranking direction
unambiguous, ``w_f = softplus(w_raw) > 0`` and every score this module returns is
**higher-is-better**: ``score = -(w_f d + b_f)``, so the loss is
``max(0, λ - score(q, a) + score(q, a'))`` (:func:`hinge_loss`) — the same function.

Ranking rules (``ranking``): ``distance`` is the paper's ``d``; ``relative`` (the default)
scores the origin-relative distance ``f = d(q, a) - d(0, a)``
(:func:`qaindex.geometry.hyperbolic.relative_distance`). With plain ``d``, a point near the centre is
about ``d(0, q)`` from every question while two boundary points are much further apart, so a
short, punctuation-only or out-of-vocabulary answer (whose sum is short) is every question's
nearest neighbour — a hub. Under ``f`` the centre is the *worst* place (``f(q, 0) = d(0, q)``
is the maximum), depth amplifies agreement, and when all answers share one norm ``f = d -
const`` ranks exactly as ``d``. ``distance`` is kept as the paper's ablation.

Ball maps (:class:`BallMap`):

``clip``
    The paper's ``y / |y|`` when ``|y|`` exceeds the radius, with the radius
    ``max_norm = 0.999`` instead of 1 (at norm 1 the distance is infinite, and float32 loses
    ``1 - |y|^2`` there; 1e-3 keeps its relative error at 0.004%). Bag-of-words sums are
    usually far longer than 1, so almost every vector lands *on* the clip and the Poincaré
    distance becomes a monotone function of the cosine (see the calibration note).
``radius``
    The sum's direction ``ŷ = y/|y|`` placed at a learned, direction-dependent radius
    ``max_norm · sigmoid(w_r·ŷ + b_r)`` (all points start at ``init_norm``). Norms stay
    strictly inside the clip and vary by content, not by text length; near the boundary
    ``d(q, a) ≈ 2 log|q - a| + t_q + t_a + const`` with depth ``t = -log(1 - |v|)``, so an
    answer's norm acts as a learned prior on it. On WikiQA (frozen MiniLM) it matched the
    clip (test MAP 0.706 for both, mean of 2 seeds) with 0% of points on the clip, and
    ranking the same vectors by cosine instead lost 0.007-0.021 MAP: the norms are used.
``expmap``
    The exponential map at the origin with a scale: ``tanh(α |y|) y / |y|`` (then clipped to
    ``max_norm`` for the rare saturated vector); ``α`` is learned (``exp`` of a raw
    parameter) or fixed. Norms stay varied, but they grow with the sum's length, i.e. with
    the number of tokens: on WikiQA the model shrank every vector towards the origin (the
    hinge loss then sits at the margin) and reached only dev MAP 0.52-0.59.
``weighted``
    Direction from the summed projected vectors, depth from learned per-token weights:
    ``max_norm · tanh(s · Σ_t mask_t softplus(u_t)) · ŷ`` with ``u_t = w_u·z_t + b_u`` (a linear
    function of the token's embedding, so unseen tokens get a weight too) and a learned scale
    ``s``. Stop words and junk can learn little depth, informative words much; the weight is
    one extra column of the folded per-token table, so the encoder stays a gather, a masked
    sum and the map.

CosineQA (the paper's ablation) is the same network with cosine similarity:
``score = w_f cos + b_f`` (``w_f > 0``) and ``distance = 1 - cos``.

For export, a frozen-embedding (or any) bag-of-words model folds ``ReLU(W_p z + b_p)`` into
one per-token table (:meth:`BagOfWords.folded_table`): the encoder is then a gather, a masked
sum and the ball map (:class:`qaindex_export.exporting.export_forms.FoldedEncoder`) — exactly the same
function. Model builders by name are in :mod:`.families`.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from qaindex.geometry import hyperbolic

from ..config import BALL_MAPS, MODEL_KINDS

__all__ = [
    "BALL_MAPS",
    "MODEL_KINDS",
    "RANKINGS",
    "BagOfWords",
    "BallMap",
    "CosineQA",
    "DualEncoderQA",
    "HyperQA",
    "cosine_score",
    "hinge_loss",
    "norm_statistics",
    "poincare_score",
    "riemannian_hook",
    "riemannian_rescale",
]

RANKINGS = hyperbolic.RANKINGS


def _inverse_softplus(value: float) -> float:
    return float(value + math.log(-math.expm1(-value)))


# ------------------------------------------------------------------------ scoring formulas


def poincare_score(
    query: Tensor, candidates: Tensor, w_f: Tensor, b_f: Tensor, *, ranking: str = "distance"
) -> tuple[Tensor, Tensor]:
    """HyperQA's score, higher is better: ``-(w_f f + b_f)``.

    ``f = d`` (``ranking="distance"``, the paper) or ``f = d(q, a) - d(0, a)``
    (``ranking="relative"``, :func:`qaindex.geometry.hyperbolic.relative_distance`); ``d`` is the
    Poincaré distance, returned as the second output in both cases.

    Parameters
    ----------
    query, candidates : Tensor (..., dim)
        Ball points, broadcastable (e.g. ``(n, 1, dim)`` against ``(n, m, dim)``).
    w_f, b_f : Tensor (scalar)
        Final-layer weight (positive) and bias.
    ranking : {"distance", "relative"}, keyword-only

    Returns
    -------
    score, distance : Tensor (...)

    Example
    -------
    >>> q = torch.zeros(1, 2); a = torch.tensor([[0.5, 0.0]])
    >>> s, d = poincare_score(q, a, torch.tensor(1.0), torch.tensor(0.0))
    >>> round(float(d), 4), round(float(s), 4)
    (1.0986, -1.0986)
    >>> s, d = poincare_score(q, a, torch.tensor(1.0), torch.tensor(0.0), ranking="relative")
    >>> round(float(d), 4), abs(round(float(s), 4))   # from the origin, f = 0 for every answer
    (1.0986, 0.0)
    """
    if ranking not in RANKINGS:
        raise ValueError(f"ranking must be one of {RANKINGS}, got {ranking!r}")
    distance = hyperbolic.distance(query, candidates)
    f = distance - hyperbolic.origin_distance(candidates) if ranking == "relative" else distance
    return -(w_f * f + b_f), distance


def cosine_score(query: Tensor, candidates: Tensor, w_f: Tensor, b_f: Tensor) -> tuple[Tensor, Tensor]:
    """CosineQA's score, higher is better: ``w_f cos + b_f``; distance ``1 - cos``.

    Example
    -------
    >>> s, d = cosine_score(torch.tensor([1.0, 0.0]), torch.tensor([2.0, 0.0]), torch.tensor(2.0), torch.tensor(0.5))
    >>> float(s), float(d)
    (2.5, 0.0)
    """
    cos = hyperbolic.cosine_similarity(query, candidates)
    return w_f * cos + b_f, 1.0 - cos


def hinge_loss(positive: Tensor, negative: Tensor, margin: float) -> Tensor:
    """Mean pairwise hinge loss ``max(0, margin - score(q, a) + score(q, a'))``.

    With ``score = -s`` this is the paper's ``max(0, s(q, a) + λ - s(q, a'))``.

    Parameters
    ----------
    positive : Tensor (p, 1) or (p,)
        Scores of (question, correct answer) pairs (higher is better).
    negative : Tensor (p, n)
        Scores of the same questions with ``n`` wrong answers each.
    margin : float
        λ.

    Example
    -------
    >>> float(hinge_loss(torch.tensor([[2.0]]), torch.tensor([[0.5, 1.5]]), 1.0))
    0.25
    """
    if positive.dim() == 1:
        positive = positive[:, None]
    return F.relu(margin - positive + negative).mean()


# ------------------------------------------------------------------------ Riemannian gradient


def riemannian_rescale(grad: Tensor, point: Tensor) -> Tensor:
    """The paper's eq. 8: ``∇_R = ((1 - |θ|²)² / 4) ∇_E``, with θ the ball *point*.

    Parameters
    ----------
    grad : Tensor (..., dim)
        Euclidean gradient of the loss with respect to the ball points.
    point : Tensor (..., dim)
        The ball points themselves (not the gradient: the public reference code scales by
        the gradient's norm, which is not the inverse metric).

    Returns
    -------
    Tensor (..., dim)

    Example
    -------
    >>> g = torch.ones(1, 2); x = torch.tensor([[0.6, 0.0]])
    >>> riemannian_rescale(g, x)  # (1 - 0.36)^2 / 4 = 0.1024
    tensor([[0.1024, 0.1024]])
    """
    factor = hyperbolic.one_minus_sqnorm(point.detach()) ** 2 / 4.0
    return grad * factor


def riemannian_hook(points: Tensor) -> Tensor:
    """Register :func:`riemannian_rescale` as a gradient hook on ``points``; returns them.

    Every gradient that flows back through ``points`` (and on to the projection weights)
    is rescaled by the inverse Poincaré metric at those points.

    Example
    -------
    >>> y = torch.tensor([[3.0, 0.0]], requires_grad=True)
    >>> v = riemannian_hook(y * 0.2)        # the point (0.6, 0)
    >>> v.sum().backward(); y.grad           # 0.1024 * 0.2
    tensor([[0.0205, 0.0205]])
    """
    if points.requires_grad:
        snapshot = points.detach()
        points.register_hook(lambda grad: riemannian_rescale(grad, snapshot))
    return points


# ------------------------------------------------------------------------ modules


def embedding_parameter(
    vocab_size: int, embeddings: np.ndarray | None, train_embeddings: bool | None, embed_dim: int
) -> nn.Parameter:
    """The word-embedding table of every encoder: pretrained ``embeddings`` (frozen unless
    ``train_embeddings``), or a random ``(vocab_size, embed_dim)`` table (trainable unless
    ``train_embeddings`` is False).

    Example
    -------
    >>> embedding_parameter(3, None, None, 4).shape, embedding_parameter(3, None, None, 4).requires_grad
    (torch.Size([3, 4]), True)
    """
    if embeddings is not None:
        weight = torch.as_tensor(np.asarray(embeddings, dtype=np.float32)).clone()
        if weight.shape[0] != vocab_size:
            raise ValueError(f"embeddings have {weight.shape[0]} rows, the vocabulary {vocab_size} tokens")
    else:
        weight = torch.randn(vocab_size, embed_dim) / math.sqrt(embed_dim)
    trainable = embeddings is None if train_embeddings is None else bool(train_embeddings)
    return nn.Parameter(weight, requires_grad=trainable)


class BagOfWords(nn.Module):
    """Word embeddings → ``ReLU(W_p z + b_p)`` per token → masked sum.

    Parameters
    ----------
    vocab_size : int
        Number of token ids.
    dim : int
        Output dimension ``d`` of the projection.
    embeddings : numpy.ndarray (vocab_size, n), optional
        Pretrained embeddings; None initialises ``N(0, 1/n)`` rows of width ``embed_dim``.
    train_embeddings : bool, optional
        Update the embeddings (default: only when none are given, as in the paper).
    embed_dim : int
        Width of random embeddings (ignored when ``embeddings`` is given).
    depth : bool
        Append one column ``softplus(w_u·z_t + b_u)`` per token (the ``weighted`` ball map's
        per-token depth weight); the sums are then ``dim + 1`` wide.

    Example
    -------
    >>> bow = BagOfWords(10, 4, embed_dim=3)
    >>> bow(torch.tensor([[2, 3, 0]]), torch.tensor([[1, 1, 0]])).shape
    torch.Size([1, 4])
    """

    def __init__(
        self,
        vocab_size: int,
        dim: int,
        *,
        embeddings: np.ndarray | None = None,
        train_embeddings: bool | None = None,
        embed_dim: int = 300,
        depth: bool = False,
        depth_init: float = 0.1,
    ) -> None:
        super().__init__()
        self.embedding = embedding_parameter(vocab_size, embeddings, train_embeddings, embed_dim)
        self.proj = nn.Linear(self.embedding.shape[1], dim)
        self.dim = dim
        self.depth: nn.Linear | None = None
        if depth:
            self.depth = nn.Linear(self.embedding.shape[1], 1)
            with torch.no_grad():
                self.depth.weight.zero_()
                self.depth.bias.fill_(_inverse_softplus(depth_init))

    @property
    def width(self) -> int:
        """Columns of a token vector / sum: ``dim``, plus 1 with the depth column."""
        return self.dim + (1 if self.depth is not None else 0)

    @property
    def trainable_embeddings(self) -> bool:
        return bool(self.embedding.requires_grad)

    def token_vectors(self, ids: Tensor) -> Tensor:
        """``ReLU(W_p E[ids] + b_p)`` (then the depth weight), shape ``ids.shape + (width,)``."""
        z = F.embedding(ids, self.embedding)
        x = F.relu(self.proj(z))
        if self.depth is None:
            return x
        return torch.cat([x, F.softplus(self.depth(z))], dim=-1)

    def forward(self, input_ids: Tensor, attention_mask: Tensor) -> Tensor:
        """Masked sums of token vectors for padded ids (batch, seq) → (batch, dim)."""
        x = self.token_vectors(input_ids)
        return (x * attention_mask.unsqueeze(-1).to(x.dtype)).sum(dim=1)

    def bags(self, flat_ids: Tensor, offsets: Tensor) -> Tensor:
        """Sums for ragged texts: ``flat_ids`` concatenated, text ``i`` from ``offsets[i]``.

        Each distinct token of the batch is projected once (``torch.unique``), then summed
        per text with ``embedding_bag`` — the same function as :meth:`forward`, much
        cheaper when texts share tokens. Empty texts give zero vectors.
        """
        if flat_ids.numel() == 0:
            return self.proj.weight.new_zeros((offsets.numel(), self.width))
        unique, inverse = torch.unique(flat_ids, return_inverse=True)
        table = self.token_vectors(unique)
        return F.embedding_bag(inverse, table, offsets, mode="sum")

    @torch.no_grad()
    def folded_table(self, chunk: int = 8192) -> Tensor:
        """Per-token vectors ``ReLU(W_p E[v] + b_p)`` (and depth weight) for every id: (vocab_size, width)."""
        ids = torch.arange(self.embedding.shape[0], device=self.embedding.device)
        return torch.cat([self.token_vectors(ids[i : i + chunk]) for i in range(0, len(ids), chunk)])


class BallMap(nn.Module):
    """Maps bag-of-words sums into the Poincaré ball of radius ``max_norm``.

    Parameters
    ----------
    kind : {"clip", "expmap", "radius", "none"}
        ``clip``: ``hyperbolic.project(y, max_norm)`` (the paper's rescaling to the sphere);
        ``expmap``: ``tanh(α|y|) y/|y|``, then ``project``;
        ``radius``: ``max_norm · sigmoid(w_r·ŷ + b_r) · ŷ`` with ``ŷ = y/|y|`` — the sum's
        direction at a learned, direction-dependent radius;
        ``weighted``: input ``(y, w)`` (the sum and the summed per-token depth weights, see
        :class:`BagOfWords` ``depth``) → ``max_norm · tanh(s w) · ŷ``, ``s`` learned;
        ``lognorm``: input ``(y, w)`` as for ``weighted`` → ``max_norm · sigmoid(a log w + b) · ŷ``
        with ``a = exp(log_a)`` and ``b`` (:func:`qaindex.geometry.hyperbolic.lognorm_map`): the radius
        grows with the log of the summed per-token evidence, so texts without evidence sit
        at the centre;
        ``none``: identity (CosineQA).
    max_norm : float
        Radius below 1.
    alpha : float
        Initial (or fixed) ``α`` for ``expmap``.
    learn_alpha : bool
        Learn ``log α``.
    dim : int
        Vector size (``radius`` only: the size of ``w_r``).
    init_norm : float
        ``radius``: every point starts at this norm (``w_r = 0``).

    Example
    -------
    >>> m = BallMap("expmap", max_norm=0.999, alpha=0.5)
    >>> round(m(torch.tensor([[4.0, 0.0]])).norm().item(), 4)   # tanh(2)
    0.964
    """

    def __init__(
        self,
        kind: str,
        *,
        max_norm: float = 0.999,
        alpha: float = 1.0,
        learn_alpha: bool = True,
        dim: int = 1,
        init_norm: float = 0.9,
        lognorm: tuple[float, float] = (1.0, 0.0),
    ) -> None:
        super().__init__()
        if kind not in (*BALL_MAPS, "none"):
            raise ValueError(f"unknown ball map {kind!r}; choose one of {BALL_MAPS}")
        if not 0.0 < max_norm < 1.0:
            raise ValueError(f"max_norm must be in (0, 1), got {max_norm}")
        if not alpha > 0.0:
            raise ValueError(f"alpha must be positive, got {alpha}")
        self.kind = kind
        self.max_norm = float(max_norm)
        if not 0.0 < init_norm < max_norm:
            raise ValueError(f"init_norm must be in (0, max_norm), got {init_norm}")
        if kind == "expmap":
            self.log_alpha = nn.Parameter(torch.tensor(math.log(alpha)), requires_grad=learn_alpha)
        if kind == "weighted":
            self.log_scale = nn.Parameter(torch.tensor(0.0))
        if kind == "radius":
            p = init_norm / max_norm
            self.radius_w = nn.Parameter(torch.zeros(dim))
            self.radius_b = nn.Parameter(torch.tensor(math.log(p / (1.0 - p))))
        if kind == "lognorm":
            if not lognorm[0] > 0.0:
                raise ValueError(f"the lognorm slope a must be positive, got {lognorm[0]}")
            self.log_a = nn.Parameter(torch.tensor(math.log(lognorm[0])))
            self.lognorm_b = nn.Parameter(torch.tensor(float(lognorm[1])))

    @property
    def alpha(self) -> Tensor:
        """``α`` of ``expmap`` (1 for the other maps)."""
        if self.kind != "expmap":
            return torch.tensor(1.0)
        return self.log_alpha.exp()

    def forward(self, y: Tensor) -> Tensor:
        if self.kind == "none":
            return y
        if self.kind == "expmap":
            norm = hyperbolic.sqnorm(y).clamp(min=float(np.finfo(np.float32).tiny)).sqrt()
            y = torch.tanh(self.alpha.to(y.dtype) * norm) / norm * y
        elif self.kind == "radius":
            norm = hyperbolic.sqnorm(y).clamp(min=float(np.finfo(np.float32).tiny)).sqrt()
            unit = y / norm
            logit = (unit * self.radius_w.to(y.dtype)).sum(dim=-1, keepdim=True) + self.radius_b.to(y.dtype)
            y = unit * (self.max_norm * torch.sigmoid(logit))
        elif self.kind == "weighted":
            v, w = y[..., :-1], y[..., -1:]
            norm = hyperbolic.sqnorm(v).clamp(min=float(np.finfo(np.float32).tiny)).sqrt()
            depth = torch.tanh(self.log_scale.exp().to(y.dtype) * w)
            y = v / norm * (self.max_norm * depth)
        elif self.kind == "lognorm":
            a, b = self.log_a.exp().to(y.dtype), self.lognorm_b.to(y.dtype)
            y = hyperbolic.lognorm_map(y[..., :-1], y[..., -1:], a, b, max_norm=self.max_norm)
        return hyperbolic.project(y, max_norm=self.max_norm)

    def describe(self) -> dict[str, Any]:
        """Manifest fields for this map."""
        if self.kind == "none":
            return {}
        out: dict[str, Any] = {"ball_map": self.kind, "max_norm": self.max_norm, "boundary_margin": 1.0 - self.max_norm}
        if self.kind == "expmap":
            out["alpha"] = self.alpha.item()
            out["alpha_learned"] = bool(self.log_alpha.requires_grad)
            out["formula"] = "project(tanh(alpha*|y|) * y/|y|, max_norm)"
        elif self.kind == "weighted":
            out["formula"] = "max_norm * tanh(s * sum_t softplus(u_t)) * y/|y| (u_t: last table column)"
            out["scale"] = self.log_scale.exp().item()
        elif self.kind == "radius":
            out["formula"] = "max_norm * sigmoid(w_r . y/|y| + b_r) * y/|y|"
            out["radius_b"] = self.radius_b.item()
            out["radius_w_norm"] = self.radius_w.detach().norm().item()
        elif self.kind == "lognorm":
            out["formula"] = "max_norm * sigmoid(a * log(w) + b) * y/|y| (w: sum of the table's last column)"
            out["a"] = self.log_a.exp().item()
            out["b"] = self.lognorm_b.item()
        else:
            out["formula"] = "project(y, max_norm) = y * min(1, max_norm/|y|)"
        return out


class DualEncoderQA(nn.Module):
    """Shared machinery of :class:`HyperQA` and :class:`CosineQA`; use those.

    Attributes
    ----------
    encoder : BagOfWords
    ball : BallMap
    w_raw, b_f : Parameter
        ``w_f = softplus(w_raw)`` (starts at 1) and ``b_f`` (starts at 0).
    """

    geometry = ""
    kind = ""

    def __init__(self, encoder: BagOfWords, ball: BallMap) -> None:
        super().__init__()
        self.encoder = encoder
        self.ball = ball
        self.w_raw = nn.Parameter(torch.tensor(_inverse_softplus(1.0)))
        self.b_f = nn.Parameter(torch.tensor(0.0))

    @property
    def w_f(self) -> Tensor:
        return F.softplus(self.w_raw)

    def embed(self, sums: Tensor) -> Tensor:
        """Bag-of-words sums → the vectors the geometry compares."""
        return self.ball(sums)

    def forward(self, input_ids: Tensor, attention_mask: Tensor) -> Tensor:
        """Encode padded token ids (batch, seq) → vectors (batch, dim)."""
        return self.embed(self.encoder(input_ids, attention_mask))

    def encode_bags(self, flat_ids: Tensor, offsets: Tensor) -> Tensor:
        """Encode ragged texts (see :meth:`BagOfWords.bags`) → vectors."""
        return self.embed(self.encoder.bags(flat_ids, offsets))

    def score(self, query: Tensor, candidates: Tensor) -> tuple[Tensor, Tensor]:  # pragma: no cover - abstract
        raise NotImplementedError

    def score_definition(self) -> dict[str, Any]:  # pragma: no cover - abstract
        raise NotImplementedError

    def geometry_info(self) -> dict[str, Any]:
        """The manifest's ``geometry`` field."""
        return {"name": self.geometry, **self.ball.describe()}

    def parameter_counts(self) -> dict[str, int]:
        """``{"trainable", "total", "frozen"}`` parameter counts."""
        trainable = sum(p.numel() for p in self.parameters() if p.requires_grad)
        total = sum(p.numel() for p in self.parameters())
        return {"trainable": trainable, "total": total, "frozen": total - trainable}


class HyperQA(DualEncoderQA):
    """HyperQA: bag of projected words in the Poincaré ball; score ``-(w_f d + b_f)``.

    Example
    -------
    >>> model = HyperQA(BagOfWords(10, 4, embed_dim=3), BallMap("clip"))
    >>> v = model(torch.tensor([[2, 3], [4, 0]]), torch.tensor([[1, 1], [1, 0]]))
    >>> bool((v.norm(dim=-1) <= 0.999 + 1e-6).all())
    True
    >>> model.score(v[:1], v[1:])[0].shape
    torch.Size([1])
    """

    geometry = "poincare"
    kind = "hyperqa"

    def __init__(self, encoder: BagOfWords, ball: BallMap, *, ranking: str = "relative") -> None:
        super().__init__(encoder, ball)
        if ranking not in RANKINGS:
            raise ValueError(f"ranking must be one of {RANKINGS}, got {ranking!r}")
        self.ranking = ranking

    def distance(self, query: Tensor, candidates: Tensor) -> Tensor:
        """Poincaré distance (``qaindex.geometry.hyperbolic.distance``), broadcasting."""
        return hyperbolic.distance(query, candidates)

    def score(self, query: Tensor, candidates: Tensor) -> tuple[Tensor, Tensor]:
        """``(-(w_f f + b_f), d)``, broadcasting over leading axes; higher score is better."""
        return poincare_score(query, candidates, self.w_f, self.b_f, ranking=self.ranking)

    def geometry_info(self) -> dict[str, Any]:
        return {**super().geometry_info(), "ranking": self.ranking}

    def score_definition(self) -> dict[str, Any]:
        relative = self.ranking == "relative"
        return {
            "formula": "-(w_f * f + b_f), f = d(q, a) - d(0, a)" if relative else "-(w_f * d + b_f)",
            "distance_output": "d(q, a), the plain Poincaré distance",
            "higher_is_better": True,
            "parameters": {"w_f": self.w_f.item(), "b_f": self.b_f.item()},
        }


class CosineQA(DualEncoderQA):
    """CosineQA, the paper's ablation: same network, score ``w_f cos + b_f``.

    Example
    -------
    >>> model = CosineQA(BagOfWords(10, 4, embed_dim=3), BallMap("none"))
    >>> model.geometry_info()
    {'name': 'cosine'}
    """

    geometry = "cosine"
    kind = "cosineqa"

    def score(self, query: Tensor, candidates: Tensor) -> tuple[Tensor, Tensor]:
        """``(w_f cos + b_f, 1 - cos)``, broadcasting; higher score is better."""
        return cosine_score(query, candidates, self.w_f, self.b_f)

    def score_definition(self) -> dict[str, Any]:
        return {
            "formula": "w_f * cos + b_f",
            "higher_is_better": True,
            "parameters": {"w_f": self.w_f.item(), "b_f": self.b_f.item()},
        }


# ------------------------------------------------------------------------ diagnostics


def norm_statistics(sums: Tensor, vectors: Tensor, max_norm: float | None) -> dict[str, Any]:
    """Norms before and after the ball map, and the share of vectors on the clip.

    Parameters
    ----------
    sums : Tensor (n, dim)
        Bag-of-words sums (before the ball map).
    vectors : Tensor (n, dim)
        Ball points.
    max_norm : float or None
        The radius (None for CosineQA: only the pre-map norms are reported).

    Returns
    -------
    dict
        ``{"count", "pre": {quantiles}, "ball": {quantiles}, "at_clip"}`` where ``at_clip``
        is the fraction with ball norm ≥ ``max_norm - 1e-6``.

    Example
    -------
    >>> y = torch.tensor([[3.0, 0.0], [0.1, 0.0]])
    >>> norm_statistics(y, BallMap("clip")(y), 0.999)["at_clip"]
    0.5
    """
    qs = (0.0, 0.1, 0.5, 0.9, 1.0)
    names = ("min", "p10", "median", "p90", "max")

    def quantiles(x: Tensor) -> dict[str, float]:
        values = np.quantile(x.detach().double().cpu().numpy(), qs) if x.numel() else [float("nan")] * len(qs)
        return {k: float(v) for k, v in zip(names, values, strict=True)}

    pre = sums.detach().norm(dim=-1)
    out: dict[str, Any] = {"count": int(pre.numel()), "pre": quantiles(pre)}
    if max_norm is not None:
        post = vectors.detach().norm(dim=-1)
        out["ball"] = quantiles(post)
        out["at_clip"] = float((post >= max_norm - 1e-6).double().mean()) if post.numel() else float("nan")
        out["ball_std"] = float(post.double().std()) if post.numel() > 1 else 0.0
    return out

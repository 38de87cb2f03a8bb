"""Sentence-level distillation of a static token table (tokenlearn style), and its ball.

The Model2Vec table (:mod:`.distill`) only ever saw single tokens. Here the
table is fitted so that the *sum* of a text's token rows points where the teacher's
sentence embedding of that text points, over a large general corpus::

    s(text)  = (sum_t T[token_t]) M                     student sum: table T (V, dim), mix M (dim, dim)
    tau(text) = P (teacher(text) - mu)                  centred teacher embedding, PCA to dim
    loss      = mean(1 - cos(s, tau))                   direction of every text with a teacher vector
              + pair_weight * InfoNCE(s(q), s(a))       question -> answer pairs, in-batch negatives

``mu`` and ``P`` (the teacher's corpus mean and top ``dim`` principal directions) remove the
teacher's common direction, so the student's vectors spread over the whole sphere instead
of a narrow cone (no ReLU anywhere: a text vector is a plain sum). Pair batches are drawn
from one k-means cluster of the answers at a time (clusters of the initial student's
vectors), so the in-batch negatives are the pairs' near neighbours: hard negatives.

The ball (:func:`fit_ball`): ``x = max_norm · sigmoid(a log|s| + b) · s/|s|``
(:func:`qaindex.geometry.hyperbolic.lognorm_map`), ``a`` and ``b`` chosen on held-out pairs for the
origin-relative ranking ``f = d(q, a) - d(0, a)``, among the settings whose answer norms
vary (std ≥ ``min_norm_std``). Short sums (stop words, punctuation, junk) land near the
centre, which that ranking scores worst.

Everything runs on the CPU with torch, on the one training loop (:func:`.loop.run`);
:func:`qaindex_export.exporting.table_export.export_tokenlearn_model` folds ``T M`` into one
float16 table and writes a model directory through the usual ONNX export and parity check.

Example
-------
>>> rng = np.random.default_rng(0)
>>> texts = TokenizedTexts.from_lists([[2, 3], [3, 4], [2, 4, 5]])
>>> teacher = rng.normal(size=(3, 6)).astype(np.float32)
>>> result = train_tokenlearn(TokenlearnConfig(dim=2, epochs=1, batch_size=2), texts, teacher,
...                           init_table=rng.normal(size=(6, 2)).astype(np.float32))
>>> result.table.shape
(6, 2)
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from qaindex.geometry import hyperbolic
from qaindex.text.tokenizer import Tokenizer

from .loop import LoopConfig, Verdict, run, seeded, torch_settings

__all__ = [
    "BallFit",
    "StaticStudent",
    "TokenizedTexts",
    "TokenlearnConfig",
    "TokenlearnResult",
    "evidence_weights",
    "fit_ball",
    "info_nce",
    "init_from_token_outputs",
    "teacher_readout",
    "teacher_space",
    "train_tokenlearn",
]


@dataclass
class TokenlearnConfig:
    """Settings of :func:`train_tokenlearn` (defaults: the built-in model's recipe)."""

    dim: int = 256
    epochs: int = 3
    batch_size: int = 256  # texts with a teacher vector per step
    pair_batch: int = 128  # question -> answer pairs per step
    lr: float = 3e-3
    temperature: float = 0.05  # InfoNCE
    pair_weight: float = 1.0
    teacher_weight: float = 1.0  # weight of the cosine term towards the teacher's sentence vectors
    clusters: int = 64  # k-means clusters of the answers (pair batches drawn from one at a time)
    dev_pairs: int = 2000  # held-out pairs (never trained on): dev MRR and the ball fit
    max_tokens: int = 128
    seed: int = 0
    threads: int = 2
    train_mix: bool = True  # False: only the table's rows move (continuing from a shipped table)


@dataclass
class TokenizedTexts:
    """Ragged token ids: text ``i`` is ``flat[offsets[i]:offsets[i + 1]]``.

    Example
    -------
    >>> t = TokenizedTexts.from_lists([[5, 6], [], [7]])
    >>> t.offsets.tolist(), len(t)
    ([0, 2, 2, 3], 3)
    """

    flat: np.ndarray
    offsets: np.ndarray

    @classmethod
    def from_lists(cls, ids: Sequence[Sequence[int]]) -> TokenizedTexts:
        lengths = np.fromiter((len(x) for x in ids), dtype=np.int64, count=len(ids))
        offsets = np.zeros(len(ids) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        flat = np.fromiter((t for x in ids for t in x), dtype=np.int64, count=int(offsets[-1]))
        return cls(flat, offsets)

    @classmethod
    def encode(cls, texts: Sequence[str], tokenizer: Tokenizer, max_tokens: int) -> TokenizedTexts:
        """Tokenize ``texts`` as the runtime does (at most ``max_tokens`` ids each)."""
        return cls.from_lists(tokenizer.encode_many(texts, max_tokens))

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)

    def batch(self, rows: np.ndarray) -> tuple[Tensor, Tensor]:
        """``(flat ids, offsets)`` tensors of ``rows`` for ``embedding_bag``."""
        starts, ends = self.offsets[rows], self.offsets[rows + 1]
        lengths = ends - starts
        offsets = np.zeros(len(rows), dtype=np.int64)
        np.cumsum(lengths[:-1], out=offsets[1:])
        flat: Any = np.concatenate([self.flat[s:e] for s, e in zip(starts, ends, strict=True)]) if len(rows) else []
        return torch.as_tensor(np.asarray(flat, dtype=np.int64)), torch.from_numpy(offsets)


def teacher_space(teacher: np.ndarray, dim: int, sample: int = 50_000) -> tuple[np.ndarray, np.ndarray]:
    """The teacher's mean ``mu`` (D,) and top ``dim`` principal directions ``P`` (dim, D)
    (eigenvectors of the covariance of at most ``sample`` rows).

    Example
    -------
    >>> x = np.random.default_rng(0).normal(size=(50, 4)) * [3.0, 1.0, 0.1, 0.1] + 5.0
    >>> mu, p = teacher_space(x, 2)
    >>> np.round(np.abs(p), 1).tolist()   # the two widest axes
    [[1.0, 0.0, 0.0, 0.0], [0.0, 1.0, 0.0, 0.0]]
    """
    x = np.asarray(teacher, dtype=np.float32)
    if len(x) > sample:  # the directions from a seeded sample (the mean from every row)
        x = x[np.random.default_rng(0).choice(len(x), sample, replace=False)]
    mu = np.asarray(teacher, dtype=np.float64).mean(axis=0)
    centred = x.astype(np.float64) - mu
    _, vectors = np.linalg.eigh(centred.T @ centred)
    return mu.astype(np.float32), vectors[:, ::-1][:, :dim].T.astype(np.float32)


def init_from_token_outputs(token_outputs: np.ndarray, weights: np.ndarray, components: np.ndarray) -> np.ndarray:
    """Model2Vec start: each token's teacher output, centred, in the teacher's PCA space, times
    its weight; rows scaled to median norm 1 (row 0, ``[PAD]``, zero).

    Example
    -------
    >>> init_from_token_outputs(np.eye(3, dtype=np.float32), np.ones(3), np.eye(2, 3)).shape
    (3, 2)
    """
    x = np.asarray(token_outputs, dtype=np.float64)
    table = ((x - x.mean(axis=0)) @ components.T.astype(np.float64)) * np.asarray(weights, np.float64)[:, None]
    norms = np.linalg.norm(table[1:], axis=1)
    table /= max(float(np.median(norms[norms > 0])) if (norms > 0).any() else 1.0, 1e-12)
    table[0] = 0.0
    return table.astype(np.float32)


def teacher_readout(sums: np.ndarray, teacher: np.ndarray, ridge: float = 1e-2) -> np.ndarray:
    """The teacher's vectors mapped into a start table's space: ``(teacher - mean) W``, with ``W``
    the ridge least-squares fit of the table's centred unit sums of the same texts.

    Continuing from a table trained on another corpus, the targets must live in *its* space
    (the image of the teacher that it already matches as far as a linear map can), not in this
    corpus's principal directions: then training moves rows only where the table disagrees
    with the teacher, and the rest of the vocabulary keeps its meaning. Both sides are centred
    (no intercept), as the teacher is in :func:`teacher_space`: a fitted intercept would be
    the corpus's common direction, larger in the targets than in the sums (a regression's
    predictions shrink towards their mean), and the cosine term would pull every text
    towards it.

    Example
    -------
    >>> rng = np.random.default_rng(0)
    >>> teacher = rng.normal(size=(200, 6))
    >>> sums = teacher @ rng.normal(size=(6, 3))
    >>> out = teacher_readout(sums, teacher, ridge=1e-6)
    >>> cos = (out * sums).sum(axis=1) / np.linalg.norm(out, axis=1) / np.linalg.norm(sums, axis=1)
    >>> bool(np.median(cos) > 0.95), out.shape, bool(np.abs(out.mean(axis=0)).max() < 1e-6)
    (True, (200, 3), True)
    """
    x = np.asarray(teacher, np.float64)
    x = x - x.mean(axis=0)
    y = np.asarray(sums, np.float64)
    y = y / np.maximum(np.linalg.norm(y, axis=1, keepdims=True), 1e-12)
    y = y - y.mean(axis=0)
    w = np.linalg.solve(x.T @ x + ridge * len(x) * np.eye(x.shape[1]), x.T @ y)
    return (x @ w).astype(np.float32)


class StaticStudent(nn.Module):
    """``s = (sum_t T[token_t]) M``: a trainable table and a mix matrix (starts at the identity).

    Example
    -------
    >>> m = StaticStudent(np.ones((4, 2), np.float32))
    >>> m(torch.tensor([1, 2, 3]), torch.tensor([0, 2])).tolist()
    [[2.0, 2.0], [1.0, 1.0]]
    """

    def __init__(self, table: np.ndarray) -> None:
        super().__init__()
        self.table = nn.Parameter(torch.as_tensor(np.asarray(table, dtype=np.float32)).clone())
        self.mix = nn.Parameter(torch.eye(self.table.shape[1]))

    def forward(self, flat_ids: Tensor, offsets: Tensor) -> Tensor:
        # sparse gradients: a step touches only the rows of its batch's tokens
        return F.embedding_bag(flat_ids, self.table, offsets, mode="sum", sparse=True) @ self.mix

    @torch.no_grad()
    def folded(self) -> np.ndarray:
        """``T M`` as one float32 table, the one that is exported."""
        return (self.table @ self.mix).numpy().astype(np.float32)


def info_nce(queries: Tensor, answers: Tensor, temperature: float, same: Tensor | None = None) -> Tensor:
    """InfoNCE of ``queries[i]`` against every ``answers[j]`` (cosine / temperature), target ``i``.

    ``same[i, j]`` True masks answer ``j`` out of question ``i``'s negatives (a duplicate of
    its own answer).

    Example
    -------
    >>> q = torch.eye(3); round(info_nce(q, q, 0.05).item(), 4)
    0.0
    """
    logits = F.normalize(queries, dim=-1) @ F.normalize(answers, dim=-1).T / temperature
    if same is not None:
        logits = logits.masked_fill(same & ~torch.eye(len(queries), dtype=torch.bool), float("-inf"))
    return F.cross_entropy(logits, torch.arange(len(queries)))


def _kmeans(x: np.ndarray, k: int, rng: np.random.Generator, iterations: int = 8) -> np.ndarray:
    """Cluster ids of the rows of ``x`` (cosine k-means, a few Lloyd iterations)."""
    x = x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)
    k = max(1, min(k, len(x)))
    centres = x[rng.choice(len(x), size=k, replace=False)]
    labels = np.zeros(len(x), dtype=np.int64)
    for _ in range(iterations):
        labels = np.concatenate([np.argmax(x[i : i + 8192] @ centres.T, axis=1) for i in range(0, len(x), 8192)])
        for c in range(k):
            members = x[labels == c]
            if len(members):
                centre = members.sum(axis=0)
                centres[c] = centre / max(float(np.linalg.norm(centre)), 1e-12)
    return labels


def _cluster_batches(labels: np.ndarray, batch: int, rng: np.random.Generator) -> list[np.ndarray]:
    """Index batches that each come from as few clusters as possible, in a random order."""
    order = np.concatenate([rng.permutation(np.flatnonzero(labels == c)) for c in rng.permutation(labels.max() + 1)])
    batches = [order[i : i + batch] for i in range(0, len(order), batch)]
    return [batches[i] for i in rng.permutation(len(batches)) if len(batches[i]) > 1]


@torch.no_grad()
def encode_sums(model: StaticStudent, texts: TokenizedTexts, rows: np.ndarray, chunk: int = 4096) -> np.ndarray:
    """Student sums of ``rows`` (float32)."""
    parts = [model(*texts.batch(rows[i : i + chunk])).numpy() for i in range(0, len(rows), chunk)]
    return np.concatenate(parts) if parts else np.zeros((0, model.table.shape[1]), np.float32)


def _mrr(scores: np.ndarray, k: int = 10) -> float:
    """MRR@k of a square score matrix whose diagonal holds the right answers."""
    right = np.diag(scores)[:, None]
    rank = (scores > right).sum(axis=1) + 1
    return float(np.where(rank <= k, 1.0 / rank, 0.0).mean())


def _cosine_mrr(q: np.ndarray, a: np.ndarray) -> float:
    qn = q / np.maximum(np.linalg.norm(q, axis=1, keepdims=True), 1e-12)
    an = a / np.maximum(np.linalg.norm(a, axis=1, keepdims=True), 1e-12)
    return _mrr(qn @ an.T)


@dataclass
class TokenlearnResult:
    """What :func:`train_tokenlearn` returns."""

    model: StaticStudent
    config: TokenlearnConfig
    mean: np.ndarray
    components: np.ndarray
    dev_rows: np.ndarray  # (m, 2) held-out pairs
    history: list[dict[str, Any]] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def table(self) -> np.ndarray:
        return self.model.folded()


def train_tokenlearn(
    config: TokenlearnConfig,
    texts: TokenizedTexts,
    teacher: np.ndarray,
    *,
    init_table: np.ndarray,
    teacher_rows: np.ndarray | None = None,
    pairs: np.ndarray | None = None,
    space: tuple[np.ndarray, np.ndarray] | None = None,
    log: Callable[[str], None] | None = None,
) -> TokenlearnResult:
    """Fit the table so that pooled token rows reproduce the teacher (and rank pairs).

    Parameters
    ----------
    config : TokenlearnConfig
    texts : TokenizedTexts
        Every text of the corpus.
    teacher : numpy.ndarray (len(teacher_rows), D)
        The teacher's sentence embeddings of ``teacher_rows`` (any scale).
    init_table : numpy.ndarray (V, dim)
        Starting table (e.g. :func:`init_from_token_outputs`).
    teacher_rows : numpy.ndarray, optional
        Text indices the teacher rows belong to (default: ``0 .. len(teacher)-1``).
    pairs : numpy.ndarray (m, 2), optional
        ``(question, answer)`` text indices.
    space : (mean, components), optional
        The target space: ``(teacher - mean) components^T``; default :func:`teacher_space` of
        ``teacher`` (``(zeros, identity)`` for targets already in the table's space, e.g. from
        :func:`teacher_readout`).
    log : callable, optional

    Returns
    -------
    TokenlearnResult
    """
    started = time.perf_counter()
    with torch_settings(config.threads):
        rng = seeded(config.seed)
        rows = np.arange(len(teacher)) if teacher_rows is None else np.asarray(teacher_rows, dtype=np.int64)
        pairs = np.zeros((0, 2), np.int64) if pairs is None else np.asarray(pairs, dtype=np.int64)
        mean, components = teacher_space(teacher, config.dim) if space is None else space
        target_all = (np.asarray(teacher, np.float32) - mean) @ components.T
        # held-out pairs: neither their pair nor their texts' teacher vectors are trained on
        order = rng.permutation(len(pairs))
        dev = pairs[order[: min(config.dev_pairs, len(pairs) // 5)]]
        train_pairs = pairs[order[len(dev) :]]
        held = np.zeros(len(texts), dtype=bool)
        held[dev.ravel()] = True
        keep = ~held[rows]
        rows, target_all = rows[keep], target_all[keep]
        if len(train_pairs):
            held_pair = held[train_pairs[:, 0]] | held[train_pairs[:, 1]]
            train_pairs = train_pairs[~held_pair]
        job = _TableJob(config, StaticStudent(init_table), texts, rows, target_all, train_pairs, dev, rng)
        loop = LoopConfig(
            epochs=config.epochs,
            tag="tokenlearn",
            evaluate_start=True,
            start_label="the initial table",
            keep_best=False,
        )
        outcome = run(loop, job, log=log)
    return TokenlearnResult(
        model=job.model,
        config=config,
        mean=mean,
        components=components,
        dev_rows=dev,
        history=outcome.history,
        seconds=time.perf_counter() - started,
    )


class _TableJob:
    """The table fit for :func:`qaindex_export.training.loop.run`: a step takes a batch of texts
    with a teacher vector (the cosine term) and a batch of pairs from one cluster (InfoNCE); the
    smaller stream cycles, so an epoch sees every teacher vector and every training pair."""

    def __init__(
        self,
        config: TokenlearnConfig,
        model: StaticStudent,
        texts: TokenizedTexts,
        rows: np.ndarray,
        targets: np.ndarray,
        train_pairs: np.ndarray,
        dev: np.ndarray,
        rng: np.random.Generator,
    ) -> None:
        self.config, self.model, self.texts, self.rows, self.targets = config, model, texts, rows, targets
        self.train_pairs, self.dev, self.rng = train_pairs, dev, rng
        self.optimizers: list[torch.optim.Optimizer] = [torch.optim.SparseAdam([model.table], lr=config.lr)]
        if config.train_mix:
            self.optimizers.append(torch.optim.Adam([model.mix], lr=config.lr / 10))
        else:  # the mix stays the identity: tokens absent from this corpus keep their rows exactly
            model.mix.requires_grad_(False)
        self.pairing = bool(len(train_pairs)) and config.pair_weight > 0
        self.labels = np.zeros(0, dtype=np.int64)
        if self.pairing and config.epochs > 0:  # clusters of the initial student's answer vectors
            self.labels = _kmeans(encode_sums(model, texts, train_pairs[:, 1]), config.clusters, rng)
        self.text_steps = max(1, math.ceil(len(rows) / config.batch_size))
        self.perm = np.zeros(0, dtype=np.int64)
        self.pair_batches: list[np.ndarray] = []

    def begin_epoch(self, epoch: int) -> tuple[range, dict[str, Any]]:
        self.perm = self.rng.permutation(len(self.rows))
        self.pair_batches = _cluster_batches(self.labels, self.config.pair_batch, self.rng) if self.pairing else []
        return range(max(self.text_steps, len(self.pair_batches))), {}

    def loss(self, step: int) -> Tensor | None:
        config, model, texts = self.config, self.model, self.texts
        first = (step % self.text_steps) * config.batch_size
        chosen = self.perm[first : first + config.batch_size]
        loss = torch.zeros(())
        if len(chosen) and config.teacher_weight > 0:
            student = model(*texts.batch(self.rows[chosen]))
            target = torch.from_numpy(self.targets[chosen])
            loss = config.teacher_weight * (1.0 - F.cosine_similarity(student, target, dim=-1)).mean()
        if self.pair_batches:  # the smaller of the two streams cycles
            batch = self.train_pairs[self.pair_batches[step % len(self.pair_batches)]]
            both = model(*texts.batch(np.concatenate([batch[:, 0], batch[:, 1]])))
            q, a = both[: len(batch)], both[len(batch) :]
            same = torch.from_numpy(batch[:, 1][:, None] == batch[:, 1][None, :])
            loss = loss + config.pair_weight * info_nce(q, a, config.temperature, same)
        return loss if loss.requires_grad else None

    def evaluate(self, epoch: int) -> Verdict:
        if not len(self.dev):
            return Verdict(0.0, {}, "no held-out pairs")
        q, a = (encode_sums(self.model, self.texts, self.dev[:, i]) for i in (0, 1))
        mrr = _cosine_mrr(q, a)
        return Verdict(mrr, {"dev_mrr": mrr}, f"dev MRR@10 {mrr:.4f}")


# ------------------------------------------------------------------------ the ball


@dataclass
class BallFit:
    """The ``lognorm`` map's ``a`` and ``b`` and what they gave on the held-out pairs."""

    a: float
    b: float
    max_norm: float
    dev_mrr: float
    answer_norm_std: float
    answer_norm_median: float
    grid: list[dict[str, float]] = field(default_factory=list)


def _relative_mrr(q: np.ndarray, a: np.ndarray, chunk: int = 32) -> float:
    """MRR@10 of ``q[i] -> a[i]`` under the origin-relative ranking (queries in chunks: the
    distance works on element differences, ``chunk x len(a) x dim`` at a time)."""
    scores = np.concatenate(
        [-hyperbolic.pairwise_relative_distance(q[i : i + chunk], a) for i in range(0, len(q), chunk)]
    )
    return _mrr(scores)


def evidence_weights(vocab: Sequence[str], a: float = 1e-4) -> np.ndarray:
    """Per-token evidence (the ball's last table column), float32 ``(len(vocab),)``.

    0 for tokens with fewer than two letters (punctuation, digits, numbers, single letters,
    symbols, single characters of any script, with or without the ``##`` prefix), for
    special tokens and for ``[UNK]``; for every other token, the SIF weight ``a / (a + p)``
    with ``p`` the Zipf probability of its rank among the words (BERT's WordPiece vocabulary
    lists words by frequency from ``the``, rank 1), so frequent words weigh almost nothing
    and rare words about 1.

    Example
    -------
    >>> w = evidence_weights(["[PAD]", "[UNK]", "!", "the", "of", "2024", "##ж", "zebra"])
    >>> [round(float(x), 3) for x in w]
    [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.001]
    """
    first = vocab.index("the") if "the" in vocab else 0
    rank = np.maximum(np.arange(len(vocab), dtype=np.float64) - first + 1, 1.0)
    p = 1.0 / (rank * np.sum(1.0 / np.arange(1, max(len(vocab) - first, 1) + 1)))
    w = a / (a + p)
    letters = np.array([sum(c.isalpha() for c in t.removeprefix("##")) for t in vocab])
    special = np.array([t.startswith("[") and t.endswith("]") for t in vocab])
    w[(letters < 2) | special | (np.arange(len(vocab)) < first)] = 0.0
    return w.astype(np.float32)


def fit_ball(
    question_sums: np.ndarray,
    question_evidence: np.ndarray,
    answer_sums: np.ndarray,
    answer_evidence: np.ndarray,
    *,
    max_norm: float = 0.999,
    slopes: Sequence[float] = (0.5, 1.0, 2.0, 3.0),
    medians: Sequence[float] = (0.7, 0.85, 0.95),
    min_norm_std: float = 0.05,
) -> BallFit:
    """Choose the ``lognorm`` map's ``(a, b)`` by the relative ranking's MRR@10 on held-out pairs.

    ``b`` is set so that the median answer lands at radius ``median · max_norm``; among the
    settings whose answer norms have std ≥ ``min_norm_std`` the best MRR wins (all settings
    when none qualifies).

    Example
    -------
    >>> rng = np.random.default_rng(0)
    >>> a = rng.normal(size=(40, 8)); q = a + 0.3 * rng.normal(size=(40, 8))
    >>> w = rng.uniform(1.0, 20.0, size=(40, 1))
    >>> fit = fit_ball(q, w, a, w)
    >>> fit.dev_mrr > 0.9 and fit.answer_norm_std >= 0.05
    True
    """
    qw = np.asarray(question_evidence, np.float32).reshape(-1, 1)
    aw = np.asarray(answer_evidence, np.float32).reshape(-1, 1)
    log_median = float(np.median(np.log(np.maximum(aw, 1e-12))))
    grid = []
    for slope in slopes:
        for median in medians:
            b = math.log(median / (1.0 - median)) - slope * log_median
            q = hyperbolic.lognorm_map(question_sums.astype(np.float32), qw, slope, b, max_norm=max_norm)
            a = hyperbolic.lognorm_map(answer_sums.astype(np.float32), aw, slope, b, max_norm=max_norm)
            norms = np.linalg.norm(a, axis=1)
            grid.append(
                {
                    "a": slope,
                    "b": b,
                    "median": median,
                    "mrr": _relative_mrr(q, a),
                    "std": float(norms.std()),
                    "answer_median": float(np.median(norms)),
                }
            )
    ok = [g for g in grid if g["std"] >= min_norm_std] or grid
    best = max(ok, key=lambda g: g["mrr"])
    return BallFit(best["a"], best["b"], max_norm, best["mrr"], best["std"], best["answer_median"], grid)

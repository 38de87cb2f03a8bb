"""Adaptation: fine-tune an existing model directory on a user's corpus without ending worse.

Both training modes of ``qaindex train`` start from a model directory (the built-in default
unless told otherwise) instead of from random weights:

- **label-free** (:func:`adapt_unlabelled`): a corpus's answers and a sentence teacher. Each
  answer gets pseudo-questions (:func:`qaindex_export.train.pseudo_questions`); the loss is
  the cross-entropy between the teacher's ``softmax(cos / τ)`` over a step's candidate
  answers and the student's ``softmax(score)``;
- **supervised** (:func:`adapt_supervised`): labelled questions. The loss mixes the labels'
  cross-entropy (``1 - teacher_weight``) with the same distillation loss
  (``teacher_weight``), the teacher being MiniLM when given, else the start model itself
  (its own scores as soft targets: a few hundred labels then move the model only as far as
  they agree with what it already knew).

What keeps the result from ending worse than the start:

1. **a held-out split of the same corpus**: a share of the labelled questions, or (without
   labels) the pseudo-questions of a share of the answers, whose correct answer is the
   teacher's top answer over the whole corpus (the teacher's ranking is the target);
2. **epoch 0 is the start model**: it is evaluated on that split before any step, every
   epoch after it is compared with it, and the best one is kept (ties keep the earlier, so
   the start model wins unless training beats it); training stops after ``adapt_patience``
   epochs without a better MRR@10;
3. **an L2 pull towards the start point**: ``anchor · Σ_p |θ_p - θ_p⁰|²`` over every adapted
   weight.

What is adapted: the start model's per-token table ``T`` (read from its ``encoder.onnx``),
as ``x_t = (I + M)(T_t + Δ_t)`` with a shared linear map ``M`` (generalises to words that
training never saw) and per-row changes ``Δ`` for the tokens of the training texts; the ball
map's own weights; and the score's ``w_f``, ``b_f``. At the start ``M = 0`` and ``Δ = 0``, so
the model is exactly the start model; the export folds ``M`` and ``Δ`` back into one table.

Norms (Poincaré models): with ``norm_spread > 0`` a term asks the answer norms to spread
around the start model's mean norm by the teacher's judgement of each answer's specificity
(``-mean cos`` to the other answers, standardised): generic answers move towards the centre,
specific ones outwards, so the radius stays informative instead of saturating at the clip.

Example
-------
>>> from qaindex_export.adapt import adapt_unlabelled
>>> from qaindex_export.adapt_config import AdaptConfig
>>> from qaindex_export.distill import minilm_sentence_teacher
>>> result = adapt_unlabelled(TrainConfig(), AdaptConfig(), answers, minilm_sentence_teacher())  # doctest: +SKIP
>>> result.diagnostics["adaptation"]["kept_epoch"]  # doctest: +SKIP
3
"""

from __future__ import annotations

import copy
import math
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, cast

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from qaindex.errors import QAIndexError
from qaindex.eval.datasets import QuestionGroup
from qaindex.eval.evaluate import pooled_metrics
from qaindex.text.tokenizer import Tokenizer

from .adapt_config import AdaptConfig
from .config import TrainConfig
from .data import TextTable
from .data import load_groups as _load
from .evaluation import encode_texts
from .models import BagOfWords, BallMap, CosineQA, DualEncoderQA, HyperQA, _inverse_softplus, norm_statistics
from .result import TrainResult, resolve_device
from .unlabelled import pseudo_questions
from .unlabelled import unit_rows as _unit

__all__ = [
    "AdaptedTable",
    "StartPoint",
    "adapt_supervised",
    "adapt_unlabelled",
    "load_start",
    "paired_gain_test",
    "teacher_alignment",
]

Log = Callable[[str], None]
K = 10
TEACHER_TEMPERATURE = 0.05


class StartError(QAIndexError):
    """The start model directory cannot be adapted (unreadable, or an encoder of another form)."""


# ------------------------------------------------------------------------ the adapted encoder


class AdaptedTable(nn.Module):
    """A start model's per-token table, adapted: ``x_t = (I + M)(T_t + Δ_t)``, then a masked sum.

    Parameters
    ----------
    base : Tensor (vocab_size, width)
        The start model's table ``T`` (a buffer: never trained).
    trainable_ids : array of int
        Tokens that get a row change ``Δ_t`` (the tokens of the training texts); others keep
        ``T_t`` (still through ``M``). Empty: no row changes.
    depth : bool
        The last column is the ``weighted`` ball map's per-token depth weight: it gets ``Δ``
        but not ``M``, and stays non-negative (``ReLU``; the start values are positive).

    Example
    -------
    >>> enc = AdaptedTable(torch.eye(4), np.array([2]), depth=False)
    >>> enc(torch.tensor([[1, 2, 0]]), torch.tensor([[1, 1, 0]])).tolist()   # rows 1 + 2 (M = 0, Δ = 0)
    [[0.0, 1.0, 1.0, 0.0]]
    """

    def __init__(self, base: Tensor, trainable_ids: np.ndarray, *, depth: bool = False) -> None:
        super().__init__()
        base = base.detach().to(torch.float32).clone()
        vocab, width = base.shape
        ids = np.unique(np.asarray(trainable_ids, dtype=np.int64))
        if len(ids) and (ids.min() < 0 or ids.max() >= vocab):
            raise ValueError(f"trainable token ids must be in [0, {vocab}), got {ids.min()}..{ids.max()}")
        slot = torch.full((vocab,), len(ids), dtype=torch.int64)
        slot[torch.from_numpy(ids)] = torch.arange(len(ids))
        self.base: Tensor
        self.slot: Tensor
        self.register_buffer("base", base)
        self.register_buffer("slot", slot)
        self.delta = nn.Parameter(torch.zeros(len(ids), width))
        self.depth_column = bool(depth)
        self.dim = width - (1 if depth else 0)
        self.mix = nn.Parameter(torch.zeros(self.dim, self.dim))

    @property
    def embedding(self) -> Tensor:
        """The start table (what the exporter reads the vocabulary size from)."""
        return self.base

    @property
    def width(self) -> int:
        return int(self.base.shape[1])

    def _rows(self, ids: Tensor) -> Tensor:
        """``T + Δ`` of ``ids`` (the depth column kept non-negative)."""
        padded = torch.cat([self.delta, self.delta.new_zeros(1, self.width)])
        x = F.embedding(ids, self.base) + F.embedding(self.slot[ids], padded)
        if self.depth_column:
            return torch.cat([x[..., :-1], F.relu(x[..., -1:])], dim=-1)
        return x

    def _mix(self, x: Tensor) -> Tensor:
        """``(I + M)`` on the direction columns (linear: the same on a token row or on a sum of rows)."""
        if self.depth_column:
            v = x[..., :-1]
            return torch.cat([v + v @ self.mix.T, x[..., -1:]], dim=-1)
        return x + x @ self.mix.T

    def token_vectors(self, ids: Tensor) -> Tensor:
        """``(I + M)(T + Δ)`` of ``ids``, shape ``ids.shape + (width,)``."""
        return self._mix(self._rows(ids))

    def forward(self, input_ids: Tensor, attention_mask: Tensor) -> Tensor:
        x = self._rows(input_ids)
        return self._mix((x * attention_mask.unsqueeze(-1).to(x.dtype)).sum(dim=1))

    def bags(self, flat_ids: Tensor, offsets: Tensor) -> Tensor:
        """Sums of ragged texts (as :meth:`qaindex_export.models.BagOfWords.bags`); ``M`` applied to the sums."""
        if flat_ids.numel() == 0:
            return self.base.new_zeros((offsets.numel(), self.width))
        unique, inverse = torch.unique(flat_ids, return_inverse=True)
        return self._mix(F.embedding_bag(inverse, self._rows(unique), offsets, mode="sum"))

    @torch.no_grad()
    def folded_table(self, chunk: int = 8192) -> Tensor:
        """The adapted table for every token id: what the export writes."""
        ids = torch.arange(self.base.shape[0], device=self.base.device)
        return torch.cat([self.token_vectors(ids[i : i + chunk]) for i in range(0, len(ids), chunk)])


# ------------------------------------------------------------------------ the start point


@dataclass
class StartPoint:
    """A model directory read back as a trainable torch model."""

    directory: Path
    manifest: dict[str, Any]
    tokenizer: Tokenizer
    model: DualEncoderQA
    max_tokens: dict[str, int]

    @property
    def config(self) -> TrainConfig:
        """The :class:`TrainConfig` fields the start model fixes (model kind, width, truncation, ball)."""
        geo = self.manifest["geometry"]
        return TrainConfig(
            model="hyperqa" if geo["name"] == "poincare" else "cosineqa",
            embeddings=f"start:{self.manifest.get('name', self.directory.name)}",
            dim=int(self.manifest["dimension"]),
            ball=geo.get("ball_map", "clip") if geo["name"] == "poincare" else "clip",
            ranking=geo.get("ranking", "distance") if geo["name"] == "poincare" else "relative",
            max_norm=float(geo.get("max_norm", 0.999)),
            max_question_tokens=self.max_tokens["question"],
            max_answer_tokens=self.max_tokens["answer"],
        )


def _initializers(path: Path) -> dict[str, np.ndarray]:
    import onnx
    from onnx import numpy_helper

    try:
        proto = onnx.load(os.fspath(path))
    except Exception as exc:  # noqa: BLE001 - any unreadable graph is the same user-facing problem
        raise StartError(f"{path}: cannot be read as an ONNX graph ({exc}); pass another --start directory") from None
    return {init.name: numpy_helper.to_array(init) for init in proto.graph.initializer}


def load_start(
    directory: str | os.PathLike[str] | None = None,
    trainable_ids: np.ndarray | None = None,
    *,
    check: bool = True,
) -> StartPoint:
    """Read a qaindex model directory (per-token table + masked sum + ball map) as a torch model.

    Parameters
    ----------
    directory : path-like, optional
        A model directory written by ``qaindex train`` / the exporter (any version whose
        encoder is a per-token table, a masked sum and a ball map); default: the built-in model.
    trainable_ids : array of int, optional
        Tokens that get a row change (see :class:`AdaptedTable`).
    check : bool, keyword-only
        Compare the torch model with the directory's ``encoder.onnx`` (onnxruntime) on random
        token ids and refuse a model they disagree on.

    Raises
    ------
    StartError
        Not a dual encoder with one shared per-token-table encoder this version can read back.

    Example
    -------
    >>> start = load_start()  # doctest: +SKIP
    >>> start.model.encoder.base.shape  # doctest: +SKIP
    torch.Size([30522, 300])
    """
    from qaindex.model import DEFAULT_MODEL_DIR, Model

    root = Path(directory) if directory is not None else DEFAULT_MODEL_DIR
    manifest = Model.read_manifest(root)
    hint = "train with --from-scratch, or pass another --start directory"
    graphs = manifest.get("graphs", {})
    if manifest.get("kind") != "dual_encoder" or graphs.get("question_encoder") != graphs.get("answer_encoder"):
        raise StartError(f"{root}: only a dual encoder with one shared encoder can be adapted; {hint}")
    if manifest.get("chunking"):
        raise StartError(f"{root}: a chunking (hierarchical) encoder cannot be adapted; {hint}")
    geo = manifest["geometry"]
    if geo["name"] not in ("poincare", "cosine"):
        raise StartError(f"{root}: geometry {geo['name']!r} cannot be adapted; {hint}")
    tokenizer = Tokenizer.from_config(manifest["tokenizer"], root)
    encoder_path = root / graphs["answer_encoder"]
    weights = _initializers(encoder_path)
    table = weights.get("table")
    if table is None or table.ndim != 2 or table.shape[0] != len(tokenizer.vocab):
        raise StartError(
            f"{encoder_path}: no per-token table ('table', {len(tokenizer.vocab)} rows) among the graph's "
            f"weights; {hint}"
        )
    kind = geo.get("ball_map", "clip") if geo["name"] == "poincare" else "none"
    depth = kind in ("weighted", "lognorm")  # the table's last column is the per-token depth/evidence
    width = int(table.shape[1])
    ball = BallMap(kind, max_norm=float(geo.get("max_norm", 0.999)), dim=width - (1 if depth else 0))
    # weights the exporter may fold into constants, and where the manifest records them
    from_manifest: dict[tuple[str, str], tuple[str, Callable[[float], float]]] = {
        ("lognorm", "log_a"): ("a", math.log),
        ("lognorm", "lognorm_b"): ("b", float),
    }
    state = {}
    for name, value in ball.state_dict().items():
        found = weights.get(f"ball.{name}")
        if found is None and (kind, name) in from_manifest and from_manifest[kind, name][0] in geo:
            field, convert = from_manifest[kind, name]
            found = np.asarray(convert(float(geo[field])), dtype=np.float32)
        if found is None or tuple(found.shape) != tuple(value.shape):
            raise StartError(f"{encoder_path}: the {kind} ball map's weight {name!r} is missing; {hint}")
        state[name] = torch.from_numpy(np.asarray(found, dtype=np.float32).copy())
    ball.load_state_dict(state)
    encoder = AdaptedTable(
        torch.from_numpy(np.array(table, dtype=np.float32)),
        np.zeros(0, np.int64) if trainable_ids is None else trainable_ids,
        depth=depth,
    )
    bag = cast(BagOfWords, encoder)  # duck-typed: the models only use the bag-of-words interface
    model: DualEncoderQA
    if geo["name"] == "poincare":
        model = HyperQA(bag, ball, ranking=geo.get("ranking", "distance"))
    else:
        model = CosineQA(bag, ball)
    params = manifest["score"]["parameters"]
    with torch.no_grad():
        model.w_raw.fill_(_inverse_softplus(float(params["w_f"])))
        model.b_f.fill_(float(params["b_f"]))
    model.eval()
    if check:
        _check_against_onnx(model, encoder_path, len(tokenizer.vocab), hint)
    max_tokens = {role: int(manifest["max_tokens"][role]) for role in ("question", "answer")}
    return StartPoint(root, manifest, tokenizer, model, max_tokens)


def _check_against_onnx(model: DualEncoderQA, path: Path, vocab: int, hint: str) -> None:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(os.fspath(path), options, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    ids = rng.integers(1, vocab, size=(6, 9)).astype(np.int64)
    mask = (np.arange(9)[None, :] < np.array([9, 1, 4, 7, 2, 5])[:, None]).astype(np.int64)
    ids = np.where(mask == 1, ids, 0)
    (got,) = session.run(None, {"input_ids": ids, "attention_mask": mask})[:1]
    with torch.no_grad():
        want = model(torch.from_numpy(ids), torch.from_numpy(mask)).numpy()
    diff = float(np.abs(got - want).max()) if got.shape == want.shape else math.inf
    if not diff <= 1e-4:
        raise StartError(
            f"{path}: the encoder read back as table + masked sum + ball map differs from the graph by {diff:.3g}; "
            f"this model's encoder has another form; {hint}"
        )


# ------------------------------------------------------------------------ teachers


class _Teacher:
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


def _sentence_teacher(
    teacher: Callable[[Sequence[str]], np.ndarray], table: TextTable, rows: np.ndarray, say: Log
) -> _Teacher:
    texts = [_text_of(table, r) for r in rows]
    say(f"[adapt] the teacher embeds {len(texts)} texts")
    vecs = _unit(teacher(texts))
    full = torch.zeros(len(table), vecs.shape[1])
    full[torch.from_numpy(rows)] = torch.from_numpy(vecs)
    return _Teacher(full, lambda q, c: (q * c).sum(-1) / TEACHER_TEMPERATURE, "sentence teacher, softmax(cos / 0.05)")


def _self_teacher(start: DualEncoderQA, table: TextTable, rows: np.ndarray, device: torch.device) -> _Teacher:
    vectors = encode_texts(start, table, rows, device)
    assert isinstance(vectors, Tensor)
    full = torch.zeros(len(table), vectors.shape[1], device=device)
    full[torch.from_numpy(rows).to(device)] = vectors

    def scores(q: Tensor, c: Tensor) -> Tensor:
        with torch.no_grad():
            return start.score(q, c)[0]

    return _Teacher(full, scores, "the start model's own softmax(score)")


def _text_of(table: TextTable, row: int) -> str:
    if not hasattr(table, "_texts"):
        texts: dict[int, str] = {i: text for (_, text), i in table._index.items()}
        table._texts = texts  # type: ignore[attr-defined]
    return str(table._texts[int(row)])  # type: ignore[attr-defined]


# ------------------------------------------------------------------------ the task and its loop


@dataclass
class _Task:
    """Training items (query row, its positive answer rows) and the held-out split, as text rows."""

    table: TextTable
    pool: np.ndarray  # answer rows every query competes over
    query: np.ndarray  # (P,) training query rows
    positives: list[np.ndarray]  # per training item: correct answer rows (label-free: the source answer)
    dev_query: np.ndarray
    dev_relevant: list[np.ndarray]  # per dev query: positions in ``pool`` that are correct
    dev_candidates: list[np.ndarray] | None  # per dev query: positions in ``pool`` it ranks (None: all)
    teacher: _Teacher
    teacher_weight: float
    mode: str
    data: dict[str, Any]
    targets: Tensor | None = None  # (len(table), dim): the teacher's aligned sentence targets (cosine term)
    cos_rows: np.ndarray | None = None  # text rows the cosine term fits (never a held-out query)
    alignment: dict[str, Any] | None = None


def teacher_alignment(sums: np.ndarray, teacher: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The teacher's space as the start model sees it: mean ``mu`` (D,) and map ``Q`` (dim, D).

    The built-in model was trained so that its summed vector ``s`` of a text points where
    ``P (t - mu)`` points (``t`` the teacher's sentence vector, ``mu`` and ``P`` the mean and
    principal directions of its training corpus; :mod:`qaindex_export.tokenlearn`). The model
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


@torch.no_grad()
def _student_sums(model: DualEncoderQA, table: TextTable, rows: np.ndarray, device: torch.device) -> Tensor:
    """The encoder's summed vectors of ``rows`` (direction columns only), in chunks."""
    encoder = cast(AdaptedTable, model.encoder)
    parts = []
    for i in range(0, len(rows), 1024):
        flat, offsets = table.gather(rows[i : i + 1024])
        parts.append(encoder.bags(torch.from_numpy(flat).to(device), torch.from_numpy(offsets).to(device)))
    return torch.cat(parts)[:, : encoder.dim]


def _with_targets(task: _Task, model: DualEncoderQA, rows: np.ndarray, device: torch.device) -> _Task:
    """``task`` with the cosine term's targets: the teacher's vectors of ``rows``, centred and
    aligned to the start model (:func:`teacher_alignment`)."""
    sums = _student_sums(model, task.table, rows, cast(AdaptedTable, model.encoder).base.device)
    teacher = task.teacher.vectors[torch.from_numpy(rows)].cpu().numpy()
    mu, q = teacher_alignment(sums.cpu().numpy(), teacher)
    aligned = torch.from_numpy((teacher - mu) @ q.T).float()
    targets = torch.zeros(len(task.table), aligned.shape[1])
    targets[torch.from_numpy(rows)] = aligned
    start_cos = float(F.cosine_similarity(sums.cpu(), aligned, dim=-1).mean())
    info = {
        "space": "the teacher's vectors of the user's texts, centred on their mean and rotated onto the start "
        "model's summed vectors (orthogonal Procrustes)",
        "texts": len(rows),
        "start_cosine": round(start_cos, 4),
    }
    return replace(task, targets=targets.to(device), cos_rows=np.asarray(rows, np.int64), alignment=info)


def _reciprocal_ranks(ranked: list[np.ndarray], relevant: list[np.ndarray]) -> np.ndarray:
    out = np.zeros(len(ranked))
    for i, (ids, rel) in enumerate(zip(ranked, relevant, strict=True)):
        hits = np.flatnonzero(np.isin(ids, rel))
        out[i] = 1.0 / (hits[0] + 1) if len(hits) else 0.0
    return out


def paired_gain_test(start: np.ndarray, epoch: np.ndarray, *, resamples: int = 2000, seed: int = 0) -> dict[str, Any]:
    """Is ``epoch``'s per-question score above ``start``'s beyond noise? (paired, one-sided)

    Returns the mean gain, how many questions got better / worse, the sign test's p-value
    (``P(Bin(better + worse, 1/2) >= better)``, ties dropped) and the paired bootstrap's
    (share of resamples of the questions whose mean gain is ``<= 0``).

    Example
    -------
    >>> t = paired_gain_test(np.zeros(6), np.array([1.0, 1.0, 1.0, 1.0, 0.0, -0.5]))
    >>> t["better"], t["worse"], round(t["sign_p"], 4)
    (4, 1, 0.1875)
    """
    diff = np.asarray(epoch, np.float64) - np.asarray(start, np.float64)
    better, worse = int((diff > 1e-12).sum()), int((diff < -1e-12).sum())
    n = better + worse
    sign_p = sum(math.comb(n, k) for k in range(better, n + 1)) / 2.0**n if n else 1.0
    if len(diff):
        draws = np.random.default_rng(seed).integers(0, len(diff), size=(resamples, len(diff)))
        boot_p = float((diff[draws].mean(axis=1) <= 0.0).mean())
    else:
        boot_p = 1.0
    return {"gain": float(diff.mean()) if len(diff) else 0.0, "better": better, "worse": worse,
            "sign_p": float(sign_p), "bootstrap_p": boot_p}  # fmt: skip


def _held_out_metrics(model: DualEncoderQA, task: _Task, device: torch.device) -> dict[str, Any]:
    """MRR@10, recall@10 and P@1 of the held-out queries over the pool (or their own candidates);
    ``"rr"``: each query's reciprocal rank (0 outside the top 10)."""
    model.eval()
    rows = np.unique(np.concatenate([task.pool, task.dev_query]))
    vectors = encode_texts(model, task.table, rows, device)
    assert isinstance(vectors, Tensor)
    where = np.zeros(len(task.table), dtype=np.int64)
    where[rows] = np.arange(len(rows))
    pv = vectors[torch.from_numpy(where[task.pool]).to(device)]
    qv = vectors[torch.from_numpy(where[task.dev_query]).to(device)]
    ranked: list[np.ndarray] = []
    with torch.no_grad():
        for start in range(0, len(qv), 64):
            q = qv[start : start + 64]
            s = model.score(q[:, None, :], pv[None, :, :].expand(len(q), -1, -1))[0]
            if task.dev_candidates is not None:
                allowed = torch.zeros_like(s, dtype=torch.bool)
                for i, cand in enumerate(task.dev_candidates[start : start + 64]):
                    allowed[i, torch.from_numpy(cand).to(device)] = True
                s = s.masked_fill(~allowed, -math.inf)
            top = torch.topk(s, k=min(K, s.shape[1]), dim=1)
            ids = top.indices.cpu().numpy()
            ranked.extend(np.where(np.isfinite(top.values.cpu().numpy()), ids, -1))
    return {**pooled_metrics(ranked, task.dev_relevant, K), "rr": _reciprocal_ranks(ranked, task.dev_relevant)}


def _answer_norms(model: DualEncoderQA, task: _Task, device: torch.device) -> dict[str, Any] | None:
    if model.geometry != "poincare":
        return None
    vectors, sums = encode_texts(model, task.table, task.pool, device, with_sums=True)
    return norm_statistics(sums, vectors, model.ball.max_norm)


def _norm_term(points: Tensor, specificity: Tensor, spread: float) -> Tensor:
    """``(relu(spread - std|v|) / spread)² + (1 - corr(|v|, specificity)) / 10`` over a step's answers.

    The first part keeps the answer norms from collapsing onto one radius (or saturating at
    the clip, where every norm is the same); the second decides *which* answers move
    outwards: the specific ones (low mean similarity to the corpus under the teacher).
    """
    norms = points.norm(dim=-1)
    std = norms.std()
    centred, z = norms - norms.mean(), specificity - specificity.mean()
    corr = (centred * z).sum() / (centred.norm() * z.norm()).clamp(min=1e-12)
    return (F.relu(spread - std) / spread) ** 2 + (1.0 - corr) / 10.0


def _selection_why(best_epoch: int, tests: dict[int, dict[str, Any]], start_mrr: float, final_mrr: float,
                   alpha: float) -> str:  # fmt: skip
    """The report's ``why``: which epoch was kept, and the held-out evidence for it."""

    def evidence(t: dict[str, Any]) -> str:
        return (
            f"{t['better']} of {t['questions']} held-out questions better, {t['worse']} worse, "
            f"sign-test p {t['sign_p']:.3g}, bootstrap p {t['bootstrap_p']:.3g}"
        )

    if best_epoch > 0:
        return (
            f"epoch {best_epoch} had the best held-out MRR@10 beyond noise ({final_mrr:.4f} against the start "
            f"model's {start_mrr:.4f}; {evidence(tests[best_epoch])})"
        )
    gaining = {e: t for e, t in tests.items() if t["gain"] > 0}
    if not gaining:
        return "no epoch beat the start model on the held-out split, so the start model is kept unchanged"
    e = max(gaining, key=lambda k: (gaining[k]["gain"], -k))
    t = gaining[e]
    return (
        f"no epoch beat the start model on the held-out split beyond noise (best: epoch {e}, MRR@10 "
        f"{start_mrr + t['gain']:.4f} against {start_mrr:.4f}; {evidence(t)}; needed both p <= {alpha:g}), "
        "so the start model is kept unchanged"
    )


def _fit(
    start: StartPoint,
    task: _Task,
    config: TrainConfig,
    settings: AdaptConfig,
    device: torch.device,
    say: Log,
) -> TrainResult:
    rng = np.random.default_rng(config.seed)
    torch.manual_seed(config.seed)
    model = start.model.to(device)
    initial = {name: p.detach().clone() for name, p in model.named_parameters()}
    for p in model.parameters():
        p.requires_grad_(True)
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = (
        torch.optim.Adam(params, lr=config.lr) if config.optimizer == "adam" else torch.optim.SGD(params, lr=config.lr)
    )
    # the norm term: per text, the teacher's specificity (standardised -mean cos to the corpus)
    specificity: Tensor | None = None
    if model.geometry == "poincare" and settings.norm_spread > 0 and settings.norm_weight > 0:
        specificity = torch.zeros(len(task.table), device=device)
        z = torch.from_numpy(task.teacher.specificity(task.pool)).float().to(device)
        specificity[torch.from_numpy(task.pool).to(device)] = z
    positive_sets = [set(p.tolist()) for p in task.positives]
    per_question: dict[int, np.ndarray] = {}

    def evaluate(epoch: int, loss: float | None, seconds: float) -> dict[str, Any]:
        metrics = _held_out_metrics(model, task, device)
        per_question[epoch] = metrics.pop("rr")
        norms = _answer_norms(model, task, device)
        row = {"epoch": epoch, "loss": loss, "held_out": metrics, "seconds": seconds}
        if norms is not None:
            row["answer_norm_mean"] = norms["ball"]["median"]
            row["answer_norm_std"] = norms["ball_std"]
        return row

    history = [evaluate(0, None, 0.0)]
    start_metrics = history[0]["held_out"]
    start_score = start_metrics["mrr@10"]
    best_score, best_epoch, top_score = start_score, 0, start_score
    best_state = copy.deepcopy(model.state_dict())
    tests: dict[int, dict[str, Any]] = {}
    say(
        f"[adapt/{task.mode}] epoch 0 (the start model)  held-out MRR@10 {start_score:.4f}  "
        f"P@1 {start_metrics['p@1']:.4f}  ({start_metrics['questions']} queries)"
    )
    since_top, stop = 0, "every epoch ran"
    # the ranking terms: label-free, the teacher's soft targets weighted by pair_weight; supervised, labels + teacher
    beta = task.teacher_weight
    rank_weight = settings.pair_weight if task.mode == "teacher" else 1.0
    cosine = task.targets is not None and task.cos_rows is not None and settings.cosine_weight > 0
    cos_rows = task.cos_rows if task.cos_rows is not None else np.zeros(0, np.int64)
    encoder = cast(AdaptedTable, model.encoder)
    n_items = len(task.query)
    item_steps = math.ceil(n_items / config.batch_size) if rank_weight > 0 else 0
    cos_steps = math.ceil(len(cos_rows) / config.batch_size) if cosine else 0
    for epoch in range(1, config.epochs + 1):
        t0 = time.perf_counter()
        model.train()
        order, cos_order = rng.permutation(n_items), rng.permutation(len(cos_rows))
        total, steps = 0.0, 0
        for step in range(max(item_steps, cos_steps)):  # the shorter stream cycles
            loss = torch.zeros((), device=device)
            if item_steps:
                begin = (step % item_steps) * config.batch_size
                idx = order[begin : begin + config.batch_size]
                if len(idx) >= 2:
                    q = task.query[idx]
                    own = np.concatenate([task.positives[i] for i in idx])
                    size = min(config.negatives, len(task.pool))
                    extra = task.pool[rng.integers(0, len(task.pool), size=size)]
                    cands = np.unique(np.concatenate([own, extra]))
                    rows, inverse = np.unique(np.concatenate([q, cands]), return_inverse=True)
                    flat, offsets = task.table.gather(rows)
                    vectors = model.encode_bags(torch.from_numpy(flat).to(device), torch.from_numpy(offsets).to(device))
                    inv = torch.from_numpy(inverse).to(device)
                    b = len(idx)
                    qv, cv = vectors[inv[:b]], vectors[inv[b:]]
                    logits = model.score(qv[:, None, :], cv[None, :, :].expand(b, -1, -1))[0]
                    log_p = torch.log_softmax(logits, dim=1)
                    if beta < 1.0:
                        mask = np.array([[c in positive_sets[i] for c in cands.tolist()] for i in idx], dtype=bool)
                        mask_t = torch.from_numpy(mask).to(device)
                        supervised = -torch.logsumexp(log_p.masked_fill(~mask_t, -math.inf), dim=1).mean()
                        loss = loss + rank_weight * (1.0 - beta) * supervised
                    if beta > 0.0:
                        q_t, c_t = torch.from_numpy(q).to(device), torch.from_numpy(cands).to(device)
                        target = torch.softmax(task.teacher.logits(q_t, c_t), dim=1)
                        loss = loss + rank_weight * beta * -(target * log_p).sum(dim=1).mean()
                    if specificity is not None:
                        z = specificity[torch.from_numpy(cands).to(device)]
                        loss = loss + settings.norm_weight * _norm_term(cv, z, settings.norm_spread)
            if cos_steps:
                begin = (step % cos_steps) * config.batch_size
                chosen = cos_rows[cos_order[begin : begin + config.batch_size]]
                flat, offsets = task.table.gather(chosen)
                sums = encoder.bags(torch.from_numpy(flat).to(device), torch.from_numpy(offsets).to(device))
                target_t = cast(Tensor, task.targets)[torch.from_numpy(chosen).to(device)]
                fit = (1.0 - F.cosine_similarity(sums[:, : encoder.dim], target_t, dim=-1)).mean()
                loss = loss + settings.cosine_weight * fit
            if not loss.requires_grad:
                continue
            if settings.anchor > 0:
                pull = sum(((p - initial[name]) ** 2).sum() for name, p in model.named_parameters())
                loss = loss + settings.anchor * cast(Tensor, pull)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            total += float(loss.item())
            steps += 1
        row = evaluate(epoch, total / max(1, steps), time.perf_counter() - t0)
        history.append(row)
        score = row["held_out"]["mrr@10"]
        test = paired_gain_test(per_question[0], per_question[epoch], seed=config.seed + epoch)
        test["questions"] = len(per_question[epoch])
        alpha = settings.significance
        test["significant"] = bool(test["gain"] > 0 and test["sign_p"] <= alpha and test["bootstrap_p"] <= alpha)
        tests[epoch] = test
        row["versus_start"] = test
        kept = test["significant"] and score > best_score
        if kept:
            best_score, best_epoch = score, epoch
            best_state = copy.deepcopy(model.state_dict())
        if score > top_score:
            top_score, since_top = score, 0
        else:
            since_top += 1
        norm_note = f"  answer-norm std {row['answer_norm_std']:.3f}" if "answer_norm_std" in row else ""
        say(
            f"[adapt/{task.mode}] epoch {epoch}/{config.epochs}  loss {row['loss']:.4f}  held-out MRR@10 "
            f"{score:.4f} ({test['better']} better, {test['worse']} worse, sign p {test['sign_p']:.3g}, bootstrap "
            f"p {test['bootstrap_p']:.3g}){norm_note}  {row['seconds']:.1f}s{'  *kept' if kept else ''}"
        )
        if since_top >= settings.adapt_patience:
            stop = f"stopped early: no better held-out MRR@10 for {settings.adapt_patience} epochs"
            break
    model.load_state_dict(best_state)
    model.eval()
    final = history[best_epoch]["held_out"]
    why = _selection_why(best_epoch, tests, start_score, final["mrr@10"], settings.significance)
    say(f"[adapt/{task.mode}] kept epoch {best_epoch}: {why}; {stop}")
    norms = _answer_norms(model, task, device)
    report = {
        "mode": task.mode,
        "start": {"directory": str(start.directory), "name": start.manifest.get("name")},
        "held_out": task.data["held_out"],
        "start_metrics": start_metrics,
        "final_metrics": final,
        "kept_epoch": best_epoch,
        "why": why,
        "selection": {
            "rule": "keep the best epoch whose held-out gain over the start model passes a one-sided sign test and "
            f"a paired bootstrap at p <= {settings.significance:g}; else keep the start model",
            "epochs": [{"epoch": e, **t} for e, t in tests.items()],
        },
        "stopping": stop,
        "teacher": task.teacher.describe,
        "teacher_weight": beta,
        "cosine_term": task.alignment if cosine else None,
        "settings": settings.to_dict(),
        "answer_norms": {
            "start_std": history[0].get("answer_norm_std"),
            "final_std": norms["ball_std"] if norms else None,
            "final_median": norms["ball"]["median"] if norms else None,
        },
    }
    dev = dict(final)  # held-out MRR@10, recall@10, P@1 of the kept epoch
    return TrainResult(
        model=model,
        tokenizer=start.tokenizer,
        config=config,
        best_epoch=best_epoch,
        dev=dev,
        history=history,
        norms=norms,
        data=task.data,
        embeddings={"source": f"start model {start.manifest.get('name')}", "kind": start.tokenizer.kind},
        seconds=0.0,
        selection={"by": "held-out MRR@10, epoch 0 (the start model) included", "adaptation": report},
        diagnostics={"adaptation": report},
        device=device.type,
    )


def _prepare(
    config: TrainConfig, settings: AdaptConfig, start: StartPoint | str | os.PathLike[str] | None
) -> tuple[TrainConfig, AdaptConfig, StartPoint]:
    settings = settings.validate()
    if not isinstance(start, StartPoint):
        start = load_start(start if start is not None else settings.start)
    fixed = start.config
    config = replace(
        config,
        model=fixed.model,
        embeddings=fixed.embeddings,
        dim=fixed.dim,
        ball=fixed.ball,
        ranking=fixed.ranking,
        max_norm=fixed.max_norm,
        max_question_tokens=fixed.max_question_tokens,
        max_answer_tokens=fixed.max_answer_tokens,
    ).validate()
    return config, settings, start


def _with_rows(start: StartPoint, table: TextTable) -> StartPoint:
    """``start`` whose encoder gets a row change for every token of the table's texts."""
    ids = table.all_token_ids()
    old = cast(AdaptedTable, start.model.encoder)
    encoder = AdaptedTable(old.base, ids, depth=old.depth_column)
    model = copy.deepcopy(start.model)
    model.encoder = cast(BagOfWords, encoder)
    return replace(start, model=model)


def _run(
    config: TrainConfig,
    settings: AdaptConfig,
    build: Callable[[torch.device], tuple[StartPoint, _Task]],
    say: Log,
) -> TrainResult:
    started = time.perf_counter()
    device = resolve_device(config.device)
    old_threads = torch.get_num_threads()
    if config.threads > 0:
        torch.set_num_threads(config.threads)
    try:
        start, task = build(device)
        result = _fit(start, task, config, settings, device, say)
    finally:
        torch.set_num_threads(old_threads)
    result.seconds = time.perf_counter() - started
    return result


def adapt_unlabelled(
    config: TrainConfig,
    settings: AdaptConfig,
    answers: Sequence[str],
    teacher: Callable[[Sequence[str]], np.ndarray],
    *,
    start: StartPoint | str | os.PathLike[str] | None = None,
    log: Log | None = None,
    pseudo_per_answer: int = 4,
    dev_per_answer: int = 2,
    max_dev: int = 400,
    neighbours: bool = True,
) -> TrainResult:
    """Adapt a start model to a corpus's answers against a sentence teacher (no labels).

    The answers are split: the pseudo-questions of ``settings.holdout`` of them (``dev_per_answer``
    each, at most ``max_dev``) are the held-out split, each one's correct answer being the
    teacher's top answer among the *other* answers (``neighbours``; the answer it was cut from
    is left out of its pool, so a lexical copy cannot score and the split measures whether the
    model ranks like the teacher), else over the whole corpus; the others'
    ``pseudo_per_answer`` pseudo-questions train. With ``settings.cosine_weight > 0`` every
    answer and training pseudo-question is also fitted by the cosine term (the teacher's
    sentence vector, centred and aligned to the start: :func:`teacher_alignment`); with
    ``settings.pair_weight > 0`` the pseudo-questions also train the ranking term.

    Parameters
    ----------
    config : TrainConfig
        ``lr``, ``optimizer``, ``batch_size``, ``epochs``, ``negatives`` (random extra candidates
        per step), ``seed``, ``device``, ``threads``; the model's form comes from the start.
    settings : AdaptConfig
    answers : sequence of str
    teacher : callable
        Texts → sentence embeddings (e.g. :func:`qaindex_export.distill.minilm_sentence_teacher`).
    start : StartPoint or path, keyword-only, optional
        Default: ``settings.start``, else the built-in model.
    log : callable, keyword-only, optional

    Returns
    -------
    TrainResult
        At the kept epoch; ``diagnostics["adaptation"]`` has start vs final on the held-out
        split, the kept epoch and why.

    Example
    -------
    >>> r = adapt_unlabelled(TrainConfig(), AdaptConfig(), answers, teacher)  # doctest: +SKIP
    """
    say: Log = log if log is not None else (lambda _m: None)
    texts = list(dict.fromkeys(a for a in answers if a.strip()))
    if len(texts) < 4:
        raise ValueError("adapting without labels needs at least four distinct non-empty answers")
    config, settings, start_point = _prepare(config, settings, start)

    def build(device: torch.device) -> tuple[StartPoint, _Task]:
        rng = np.random.default_rng(config.seed)
        table = TextTable(start_point.tokenizer, start_point.max_tokens)
        pool = np.array([table.add(t, "answer") for t in texts], dtype=np.int64)
        n = len(texts)
        n_dev = min(n - 2, max(2, round(n * settings.holdout)))
        held = np.zeros(n, dtype=bool)
        held[rng.choice(n, size=n_dev, replace=False)] = True
        query, positives = [], []
        for i in np.flatnonzero(~held):
            for pq in pseudo_questions(texts[i], rng, pseudo_per_answer):
                query.append(table.add(pq, "question"))
                positives.append(pool[i : i + 1])
        dev_rng = np.random.default_rng(config.seed + 1)
        source_of: dict[int, int] = {}  # held-out pseudo-question row -> position of the answer it was cut from
        for i in np.flatnonzero(held):
            for pq in pseudo_questions(texts[i], dev_rng, dev_per_answer):
                source_of.setdefault(table.add(pq, "question"), int(i))
        dev_query = list(source_of)[:max_dev]
        all_rows = np.unique(np.concatenate([pool, np.array(query), np.array(dev_query)]))
        teach = _sentence_teacher(teacher, table, all_rows, say)
        dev_q = np.array(dev_query, dtype=np.int64)
        t_pool = teach.vectors[torch.from_numpy(pool)]
        sims = teach.vectors[torch.from_numpy(dev_q)] @ t_pool.T
        candidates: list[np.ndarray] | None = None
        if neighbours:  # the source answer is out of the query's pool: the teacher's nearest *other* answer is right
            sources = np.array([source_of[r] for r in dev_query], dtype=np.int64)
            sims[torch.arange(len(dev_q)), torch.from_numpy(sources)] = -math.inf
            everyone = np.arange(n)
            candidates = [everyone[everyone != s] for s in sources]
        best = sims.argmax(dim=1).numpy()
        task = _Task(
            table=table,
            pool=pool,
            query=np.array(query, dtype=np.int64),
            positives=positives,
            dev_query=dev_q,
            dev_relevant=[np.array([b]) for b in best],
            dev_candidates=candidates,
            teacher=teach,
            teacher_weight=1.0,
            mode="teacher",
            data={
                "train": {"answers": n, "pseudo_questions": len(query), "labels": None},
                "held_out": {
                    "answers": int(n_dev),
                    "pseudo_questions": len(dev_query),
                    "correct": "the teacher's top answer among the corpus's other answers (the source answer "
                    "left out of the query's pool)"
                    if neighbours
                    else "the teacher's top answer over the whole corpus",
                },
            },
        )
        adapted = _with_rows(start_point, table)
        if settings.cosine_weight > 0:  # answers and training pseudo-questions; never a held-out query
            task = _with_targets(task, adapted.model, np.unique(np.concatenate([pool, task.query])), device)
        return adapted, task

    return _run(config, settings, build, say)


def adapt_supervised(
    config: TrainConfig,
    settings: AdaptConfig,
    train_data: str | os.PathLike[str] | Sequence[QuestionGroup],
    dev_data: str | os.PathLike[str] | Sequence[QuestionGroup] | None = None,
    *,
    teacher: Callable[[Sequence[str]], np.ndarray] | None = None,
    start: StartPoint | str | os.PathLike[str] | None = None,
    log: Log | None = None,
) -> TrainResult:
    """Adapt a start model to labelled questions, mixing in a teacher's soft targets.

    ``settings.holdout`` of the questions with a correct answer (chosen with the seed) are
    held out to choose the epoch, unless ``dev_data`` is given. The loss is ``(1 - w)`` times
    the labels' cross-entropy over each step's candidates (the batch's correct answers and
    ``config.negatives`` random answers of the pool) plus ``w = settings.teacher_weight`` times
    the cross-entropy to the teacher's soft targets over the same candidates (``teacher``,
    else the start model itself).

    Parameters
    ----------
    config, settings
        As :func:`adapt_unlabelled`.
    train_data, dev_data : path or sequence of QuestionGroup
        Corpus- or benchmark-format labelled data (``qaindex.eval.datasets.read_labelled``).
    teacher : callable, keyword-only, optional
    start : StartPoint or path, keyword-only, optional
    log : callable, keyword-only, optional

    Returns
    -------
    TrainResult

    Example
    -------
    >>> r = adapt_supervised(TrainConfig(), AdaptConfig(), "faq.jsonl")  # doctest: +SKIP
    >>> r.diagnostics["adaptation"]["why"]  # doctest: +SKIP
    'epoch 2 had the best held-out MRR@10 (0.71 against the start model's 0.66)'
    """
    say: Log = log if log is not None else (lambda _m: None)
    groups, info = _load(train_data)
    groups = [g for g in groups if g.has_positive]
    if dev_data is None:
        if len(groups) < 4:
            raise ValueError("too few labelled questions to hold out a split (need at least 4); pass a dev file")
        rng = np.random.default_rng(config.seed)
        n_dev = min(len(groups) - 2, max(2, round(len(groups) * settings.holdout)))
        held = set(rng.choice(len(groups), size=n_dev, replace=False).tolist())
        dev_groups = [g for i, g in enumerate(groups) if i in held]
        train_groups = [g for i, g in enumerate(groups) if i not in held]
        dev_info: dict[str, Any] = {"held_out_from_train": True, "questions": len(dev_groups)}
    else:
        dev_groups, dev_info = _load(dev_data)
        dev_groups = [g for g in dev_groups if g.has_positive]
        train_groups = groups
    if not train_groups or not dev_groups:
        raise ValueError("adaptation needs labelled questions to train on and to hold out")
    config, settings, start_point = _prepare(config, settings, start)

    def build(device: torch.device) -> tuple[StartPoint, _Task]:
        table = TextTable(start_point.tokenizer, start_point.max_tokens)
        answers: dict[tuple[str, str], int] = {}
        for g in [*train_groups, *dev_groups]:
            for c in g.candidates:
                answers.setdefault((c.aid, c.answer), table.add(c.answer, "answer"))
        pool = np.array(sorted(set(answers.values())), dtype=np.int64)
        position = {int(r): i for i, r in enumerate(pool)}
        shared = all(len(g.candidates) == len(pool) for g in dev_groups)  # corpus format: every answer
        query, positives = [], []
        for g in train_groups:
            query.append(table.add(g.question, "question"))
            positives.append(np.array(sorted({answers[(c.aid, c.answer)] for c in g.candidates if c.label})))
        dev_query = np.array([table.add(g.question, "question") for g in dev_groups], dtype=np.int64)
        relevant = [
            np.array(sorted({position[answers[(c.aid, c.answer)]] for c in g.candidates if c.label}))
            for g in dev_groups
        ]
        candidates = None if shared else [
            np.array(sorted({position[answers[(c.aid, c.answer)]] for c in g.candidates})) for g in dev_groups
        ]  # fmt: skip
        rows = np.unique(np.concatenate([pool, np.array(query, dtype=np.int64), dev_query]))
        adapted = _with_rows(start_point, table)
        if teacher is not None:
            teach = _sentence_teacher(teacher, table, rows, say)
        else:
            teach = _self_teacher(copy.deepcopy(start_point.model).to(device), table, rows, device)
        task = _Task(
            table=table,
            pool=pool,
            query=np.array(query, dtype=np.int64),
            positives=positives,
            dev_query=dev_query,
            dev_relevant=relevant,
            dev_candidates=candidates,
            teacher=teach,
            teacher_weight=settings.teacher_weight,
            mode="supervised",
            data={"train": {**info, "questions": len(train_groups)}, "dev": dev_info, "held_out": dev_info},
        )  # fmt: skip
        if teacher is not None and settings.cosine_weight > 0:  # answers and training questions
            cos_rows = np.unique(np.concatenate([pool, np.array(query, dtype=np.int64)]))
            task = _with_targets(task, adapted.model, cos_rows, device)
        return adapted, task

    return _run(config, settings, build, say)

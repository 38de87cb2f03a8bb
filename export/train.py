"""Train HyperQA / CosineQA on answer-selection data: one readable loop.

Usage::

    from qaindex_export.train import TrainConfig, train
    result = train(TrainConfig(epochs=25, seed=1), "train.jsonl", "dev.jsonl")
    result.dev["map"], result.best_epoch

Data: the benchmark format (``qid, question, aid, answer, label``) or the corpus format
(questions paired with their answers; negatives then come from the other answers), both read
with :func:`qaindex.eval.datasets.read_labelled` (bad files raise its ``CorpusError``).

One epoch = every (question, correct answer) pair of the training file once, each with
``negatives`` wrong answers, giving (question, positive, negative) triples and the paper's
pairwise hinge loss ``max(0, λ - score(q, a) + score(q, a'))`` (``score = -(w_f d + b_f)``).
Negatives (``sampling``):

``random``
    each negative is, with probability ``own_negative_prob``, one of the question's own wrong
    candidates, else a random answer from the whole training file (never one of the
    question's correct answers);
``mix``
    as Rao et al. (the paper's choice): ``round(hard_fraction * negatives)`` of them are the
    highest-scoring wrong answers under the current model (re-mined at the start of every
    epoch from the question's own wrong candidates plus ``hard_pool`` random answers), the rest
    random as above.

Every text is tokenized once. A step projects each distinct token of its batch once
(``torch.unique`` + ``embedding_bag``), which is the whole cost of a frozen-embedding model.
The best epoch by dev MAP is kept (ties of candidate scores counted as random orderings, see
:mod:`qaindex_export.ranking`). Runs are reproducible: ``torch.manual_seed``, one
``numpy.random.Generator`` for sampling, and deterministic algorithms.
"""

from __future__ import annotations

import copy
import math
import os
import re
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from qaindex.errors import QAIndexError
from qaindex.eval.datasets import Candidate, QuestionGroup, read_labelled
from qaindex.eval.metrics import evaluate_groups as evaluate_scores
from qaindex.store.storage import sha256_file
from qaindex.text.tokenizer import Tokenizer

from .attentive import (
    ATTENTIVE_MODELS,
    build_attentive_model,
    is_joint,
    joint_max_of_pool,
    joint_pair_scores,
    joint_split_scores,
)
from .config import OPTIMIZERS, RECURRENT_KINDS, SAMPLINGS, TrainConfig
from .embeddings import Embeddings, build_embeddings
from .models import (
    DualEncoderQA,
    build_model,
    hinge_loss,
    norm_statistics,
    riemannian_hook,
)
from .recurrent import RecurrentQA, cross_entropy_loss

__all__ = [
    "AUTO_BALL_MAPS",
    "OPTIMIZERS",
    "SAMPLINGS",
    "TextTable",
    "TrainConfig",
    "TrainResult",
    "encode_texts",
    "evaluate",
    "evaluate_data",
    "load_checkpoint",
    "pseudo_questions",
    "resolve_device",
    "save_checkpoint",
    "sha256_file",
    "train",
    "train_unlabelled",
]

AUTO_BALL_MAPS = ("clip", "radius")
Log = Callable[[str], None]


def _stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


@dataclass
class TrainResult:
    """A trained model (at its best dev epoch) with everything the exporter records."""

    model: DualEncoderQA
    tokenizer: Tokenizer
    config: TrainConfig
    best_epoch: int
    dev: dict[str, Any]
    history: list[dict[str, Any]]
    norms: dict[str, Any] | None
    data: dict[str, Any]
    embeddings: dict[str, Any]
    seconds: float
    selection: dict[str, Any] | None = None
    diagnostics: dict[str, Any] = field(default_factory=dict)
    device: str = "cpu"
    # The dev questions held out of the training data when no dev file was given (not saved in
    # checkpoints): the exporter evaluates the ONNX model on them too (``metrics.dev_onnx``).
    dev_groups: list[QuestionGroup] | None = None

    def provenance(self, **extra: Any) -> dict[str, Any]:
        """The manifest's ``training`` record: config, data, embeddings, epochs, then ``extra``."""
        return {
            "config": self.config.to_dict(),
            "data": self.data,
            "embeddings": self.embeddings,
            "best_epoch": self.best_epoch,
            "epochs_run": len(self.history),
            "history": self.history,
            "seconds": self.seconds,
            **extra,
        }

    @property
    def max_tokens(self) -> dict[str, int]:
        return {"question": self.config.max_question_tokens, "answer": self.config.max_answer_tokens}


# ------------------------------------------------------------------------ helpers


def resolve_device(device: str) -> torch.device:
    """``"auto"`` → cuda when ``torch.cuda.is_available()``, else cpu.

    Example
    -------
    >>> resolve_device("cpu").type
    'cpu'
    """
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        raise QAIndexError("device 'cuda' was requested but torch sees no CUDA device; use --device cpu or auto")
    return torch.device(device)


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


def encode_texts(
    model: DualEncoderQA,
    table: TextTable,
    rows: np.ndarray,
    device: torch.device,
    *,
    chunk: int = 8192,
    with_sums: bool = False,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Vectors of texts ``rows`` of ``table`` (no gradient), in chunks.

    Returns
    -------
    Tensor (len(rows), dim), or (vectors, sums) with ``with_sums``.
    """
    if isinstance(model, RecurrentQA):  # RDE family: questions and answers encode differently
        with torch.no_grad():
            v = model.encode_rows(table, rows, device)
        return (v, v) if with_sums else v
    vecs: list[torch.Tensor] = []
    sums: list[torch.Tensor] = []
    order: np.ndarray | None = None
    if getattr(model.encoder, "padded", False):  # sequence encoders: similar lengths per chunk
        table._pack()
        order = np.argsort(table._lengths[rows], kind="stable")
        rows, chunk = rows[order], min(chunk, 256)
    with torch.no_grad():
        for start in range(0, len(rows), chunk):
            flat, offsets = table.gather(rows[start : start + chunk])
            s = model.encoder.bags(torch.from_numpy(flat).to(device), torch.from_numpy(offsets).to(device))
            sums.append(s)
            vecs.append(model.embed(s))
    dim = model.encoder.dim
    v = torch.cat(vecs) if vecs else torch.zeros(0, dim, device=device)
    if order is not None:  # back to the callers' row order
        inverse = torch.from_numpy(np.argsort(order)).to(v.device)
        v = v[inverse]
        if with_sums:
            return v, torch.cat(sums)[inverse] if sums else v
    if with_sums:
        return v, (torch.cat(sums) if sums else torch.zeros(0, dim, device=device))
    return v


@dataclass
class _Split:
    """Question groups mapped to text rows."""

    groups: list[QuestionGroup]
    question: np.ndarray  # (G,) question text row
    candidates: list[np.ndarray]  # per group: answer text rows
    labels: list[np.ndarray]


def _split(groups: Sequence[QuestionGroup], table: TextTable) -> _Split:
    questions = np.array([table.add(g.question, "question") for g in groups], dtype=np.int64)
    cands = [np.array([table.add(c.answer, "answer") for c in g.candidates], dtype=np.int64) for g in groups]
    labels = [np.array([c.label for c in g.candidates], dtype=np.int64) for g in groups]
    return _Split(list(groups), questions, cands, labels)


@dataclass
class _Pairs:
    """Training pairs and the pools negatives are drawn from."""

    group: np.ndarray  # (P,) group of each (question, positive) pair
    question: np.ndarray  # (P,) question text row
    positive: np.ndarray  # (P,) answer text row
    own_start: np.ndarray  # (G,) start of each group's wrong candidates in own_rows
    own_count: np.ndarray  # (G,)
    own_rows: np.ndarray
    pool: np.ndarray  # all answer rows
    positive_keys: np.ndarray  # sorted group * T + row of every positive


def _pairs(split: _Split, n_texts: int) -> _Pairs:
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
    return _Pairs(
        np.array(group, dtype=np.int64),
        np.array(question, dtype=np.int64),
        np.array(positive, dtype=np.int64),
        own_start,
        own_count,
        np.concatenate(own) if own else np.zeros(0, np.int64),
        pool,
        np.sort(np.concatenate(keys)) if keys else np.zeros(0, np.int64),
    )


def _random_negatives(pairs: _Pairs, n: int, own_prob: float, n_texts: int, rng: np.random.Generator) -> np.ndarray:
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


def _hard_negatives(
    model: DualEncoderQA,
    table: TextTable,
    pairs: _Pairs,
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


def _max_of_pool(
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


def _scores_for(
    model: DualEncoderQA, split: _Split, table: TextTable, device: torch.device
) -> tuple[list[np.ndarray], torch.Tensor, torch.Tensor, np.ndarray]:
    rows = np.unique(np.concatenate([split.question, *split.candidates]))
    vectors, sums = encode_texts(model, table, rows, device, with_sums=True)
    position = np.full(int(rows.max()) + 1 if len(rows) else 0, -1, dtype=np.int64)
    position[rows] = np.arange(len(rows))
    scores: list[np.ndarray] = []
    with torch.no_grad():
        for q, cands in zip(split.question, split.candidates, strict=True):
            qv = vectors[int(position[q])]
            cv = vectors[torch.from_numpy(position[cands]).to(device)]
            s, _ = model.score(qv[None, :], cv)
            scores.append(s.double().cpu().numpy())
    return scores, vectors, sums, rows


def evaluate(model: DualEncoderQA, split: _Split, table: TextTable, device: torch.device) -> dict[str, Any]:
    """Dev metrics (MAP, MRR, P@1; expected values under random tie-breaking)."""
    model.eval()
    if is_joint(model):  # AP-CNN / AP-biLSTM: each question's candidates by the joint score
        joint = joint_split_scores(model, split.question, split.candidates, table, device)  # type: ignore[arg-type]
        return evaluate_scores(split.groups, joint)
    scores, _, _, _ = _scores_for(model, split, table, device)
    return evaluate_scores(split.groups, scores)


def evaluate_data(
    result: TrainResult,
    data: str | os.PathLike[str] | Sequence[QuestionGroup],
    *,
    device: str = "cpu",
    with_norms: bool = False,
) -> dict[str, Any]:
    """Evaluate a trained model on another labelled file (e.g. the test split).

    Parameters
    ----------
    result : TrainResult
    data : path or sequence of QuestionGroup
    device : str, keyword-only
    with_norms : bool, keyword-only
        Also return norm statistics (``"norms"``) and, for HyperQA, the MAP of the same
        vectors ranked by cosine (``"cosine_of_same_vectors"``).

    Returns
    -------
    dict
        ``{"map", "mrr", "p@1", "questions", ...}``.

    Example
    -------
    >>> evaluate_data(result, "test.jsonl")["map"]  # doctest: +SKIP
    0.70
    """
    groups, _ = _load(data)
    table = TextTable(result.tokenizer, result.max_tokens)
    split = _split(groups, table)
    dev = resolve_device(device)
    model = result.model.to(dev)
    out = evaluate(model, split, table, dev)
    if with_norms:
        norms, extra = _diagnostics(model, split, table, dev)
        out["norms"] = norms
        if "dev_cosine_of_same_vectors" in extra:
            out["cosine_of_same_vectors"] = extra["dev_cosine_of_same_vectors"]
    return out


def _diagnostics(
    model: DualEncoderQA, split: _Split, table: TextTable, device: torch.device
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Norm statistics of the dev texts, and dev MAP when ranking the same vectors by cosine."""
    if is_joint(model):  # no vectors to describe
        return {}, {}
    model.eval()
    _, vectors, sums, rows = _scores_for(model, split, table, device)
    norms = norm_statistics(sums, vectors, model.ball.max_norm if model.geometry == "poincare" else None)
    extra: dict[str, Any] = {}
    if model.geometry == "poincare":
        position = np.full(int(rows.max()) + 1, -1, dtype=np.int64)
        position[rows] = np.arange(len(rows))
        cos_scores = []
        from qaindex.geometry.hyperbolic import cosine_similarity

        with torch.no_grad():
            for q, cands in zip(split.question, split.candidates, strict=True):
                cv = vectors[torch.from_numpy(position[cands]).to(device)]
                cos_scores.append(cosine_similarity(vectors[int(position[q])][None, :], cv).double().cpu().numpy())
        extra["dev_cosine_of_same_vectors"] = evaluate_scores(split.groups, cos_scores)
    return norms, extra


def _optimizer(model: DualEncoderQA, config: TrainConfig) -> torch.optim.Optimizer:
    decay: list[torch.nn.Parameter] = []
    plain: list[torch.nn.Parameter] = []
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        (decay if p.dim() >= 2 else plain).append(p)
        del name
    groups = [{"params": decay, "weight_decay": config.l2}, {"params": plain, "weight_decay": 0.0}]
    if config.optimizer == "adagrad":
        return torch.optim.Adagrad(groups, lr=config.lr, initial_accumulator_value=config.adagrad_init)
    if config.optimizer == "adam":
        return torch.optim.Adam(groups, lr=config.lr)
    return torch.optim.SGD(groups, lr=config.lr)


def _auto_alpha(
    model: DualEncoderQA,
    table: TextTable,
    rows: np.ndarray,
    device: torch.device,
    rng: np.random.Generator,
    init_norm: float,
) -> float:
    """α with ``tanh(α · median |y|) = init_norm`` over (a sample of) the training texts."""
    sample = rows if len(rows) <= 4000 else np.sort(rng.choice(rows, size=4000, replace=False))
    with torch.no_grad():
        flat, offsets = table.gather(sample)
        sums = model.encoder.bags(torch.from_numpy(flat).to(device), torch.from_numpy(offsets).to(device))
        norms = sums.norm(dim=-1)
        median = float(norms[norms > 0].median()) if bool((norms > 0).any()) else 1.0
    return math.atanh(init_norm) / median


def _build_model(kind: str, vocab_size: int, **settings: Any) -> DualEncoderQA:
    """:func:`build_model`, or for AP-CNN / AP-biLSTM their builder (the loop dispatches on ``is_joint``)."""
    if kind in ATTENTIVE_MODELS:
        return build_attentive_model(kind, vocab_size, **settings)  # type: ignore[return-value]
    return build_model(kind, vocab_size, **settings)


def _load(data: str | os.PathLike[str] | Sequence[QuestionGroup]) -> tuple[list[QuestionGroup], dict[str, Any]]:
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


def train(
    config: TrainConfig,
    train_data: str | os.PathLike[str] | Sequence[QuestionGroup],
    dev_data: str | os.PathLike[str] | Sequence[QuestionGroup] | None = None,
    *,
    log: Log | None = _stderr,
    embeddings: Embeddings | None = None,
) -> TrainResult:
    """Train a model and return it at its best dev-MAP epoch.

    Parameters
    ----------
    config : TrainConfig
    train_data : path or sequence of QuestionGroup
        Benchmark- or corpus-format JSONL (read with ``qaindex.eval.datasets.read_labelled``).
    dev_data : path or sequence of QuestionGroup, optional
        Model selection data; None holds out ``config.dev_fraction`` of the training
        questions (chosen with the seed).
    log : callable or None, keyword-only
        Receives one progress line per epoch (default: stderr); None is silent.
    embeddings : Embeddings, keyword-only, optional
        Pre-built embeddings (skips ``config.embeddings``; handy in tests and sweeps).

    Returns
    -------
    TrainResult

    Raises
    ------
    qaindex.errors.CorpusError
        Unreadable or malformed data files.
    ValueError
        Invalid settings, or no training pair with a correct answer.

    Example
    -------
    >>> result = train(TrainConfig(embeddings="none", epochs=2), "train.jsonl", "dev.jsonl")  # doctest: +SKIP
    >>> result.best_epoch, round(result.dev["map"], 3)  # doctest: +SKIP
    (2, 0.71)
    """
    config.validate()
    started = time.perf_counter()
    say: Log = log if log is not None else (lambda _m: None)
    train_groups, train_info = _load(train_data)
    if dev_data is None:
        rng = np.random.default_rng(config.seed)
        with_pos = [i for i, g in enumerate(train_groups) if g.has_positive]
        n_dev = max(1, round(len(with_pos) * config.dev_fraction))
        if len(with_pos) < 2:
            raise ValueError("too few training questions with a correct answer to hold out a dev set; pass a dev file")
        held = set(rng.choice(with_pos, size=n_dev, replace=False).tolist())
        dev_groups = [g for i, g in enumerate(train_groups) if i in held]
        train_groups = [g for i, g in enumerate(train_groups) if i not in held]
        dev_info: dict[str, Any] = {"held_out_from_train": True, "questions": len(dev_groups)}
    else:
        dev_groups, dev_info = _load(dev_data)
    if not any(g.has_positive for g in train_groups):
        raise ValueError("the training data has no question with a correct answer (label 1)")

    if embeddings is None:
        texts = [g.question for g in train_groups] + [c.answer for g in train_groups for c in g.candidates]
        texts += [g.question for g in dev_groups] + [c.answer for g in dev_groups for c in g.candidates]
        embeddings = build_embeddings(config.embeddings, texts, max_vocab=config.max_vocab)
    tokenizer = embeddings.tokenizer()
    max_tokens = {"question": config.max_question_tokens, "answer": config.max_answer_tokens}
    table = TextTable(tokenizer, max_tokens)
    train_split = _split(train_groups, table)
    dev_split = _split(dev_groups, table)
    emb_info = {
        "source": embeddings.source,
        "kind": embeddings.kind,
        "vocab_size": len(embeddings.vocab),
        "dim": embeddings.dim if embeddings.dim is not None else config.embed_dim,
        "pretrained_rows": embeddings.found,
    }

    balls = list(AUTO_BALL_MAPS) if (config.ball == "auto" and config.model == "hyperqa") else [config.ball]
    runs: dict[str, TrainResult] = {}
    for ball in balls:
        run_config = replace(config, ball=ball if config.model == "hyperqa" else config.ball)
        runs[ball] = _train_one(run_config, embeddings, tokenizer, table, train_split, dev_split, say)
    best_ball = max(balls, key=lambda b: (runs[b].dev["map"], -balls.index(b)))
    result = runs[best_ball]
    if len(balls) > 1:
        result.selection = {
            "by": "dev MAP",
            "chosen": best_ball,
            "candidates": {
                b: {"dev": runs[b].dev, "best_epoch": runs[b].best_epoch, "norms": runs[b].norms} for b in balls
            },
        }
        result.config = replace(result.config, ball="auto")
        scores = ", ".join(f"{b} {runs[b].dev['map']:.4f}" for b in balls)
        say(f"ball map by dev MAP: {best_ball} ({scores})")
    result.data = {"train": train_info, "dev": dev_info}
    if dev_data is None:
        result.dev_groups = dev_groups
    result.embeddings = emb_info
    result.seconds = time.perf_counter() - started
    return result


def _train_one(
    config: TrainConfig,
    embeddings: Embeddings,
    tokenizer: Tokenizer,
    table: TextTable,
    train_split: _Split,
    dev_split: _Split,
    say: Log,
) -> TrainResult:
    device = resolve_device(config.device)
    old_threads = torch.get_num_threads()
    old_deterministic = torch.are_deterministic_algorithms_enabled()
    if config.threads > 0:
        torch.set_num_threads(config.threads)
    torch.use_deterministic_algorithms(True, warn_only=True)
    try:
        torch.manual_seed(config.seed)
        rng = np.random.default_rng(config.seed)
        model = (
            _recurrent_model(config, tokenizer, embeddings.vectors)
            if config.model in RECURRENT_KINDS
            else _build_model(
                config.model,
                len(tokenizer.vocab),
                dim=config.dim,
                embeddings=embeddings.vectors,
                train_embeddings=config.train_embeddings,
                embed_dim=config.embed_dim,
                ball="clip" if config.ball == "auto" else config.ball,
                max_norm=config.max_norm,
                alpha=1.0,
                learn_alpha=config.learn_alpha,
                init_norm=config.init_norm,
                ranking=config.ranking,
                window=config.window,
            )
        ).to(device)
        n_texts = len(table)
        pairs = _pairs(train_split, n_texts)
        if config.model == "hyperqa" and model.ball.kind == "expmap":
            alpha = config.alpha
            if alpha is None:
                alpha = _auto_alpha(model, table, pairs.pool, device, rng, config.init_norm)
            with torch.no_grad():
                model.ball.log_alpha.fill_(math.log(alpha))
        optimizer = _optimizer(model, config)
        n_hard = round(config.hard_fraction * config.negatives) if config.sampling == "mix" else 0
        pool_size = config.effective_negative_pool  # max-of-K sampling replaces --sampling
        if pool_size:
            n_hard = 0
        tag = f"{config.model}/{model.ball.kind}" if config.model == "hyperqa" else config.model
        best_map = -math.inf
        best_state: dict[str, torch.Tensor] | None = None
        best_epoch = 0
        best_dev: dict[str, Any] = {}
        history: list[dict[str, Any]] = []
        since_best = 0
        for epoch in range(1, config.epochs + 1):
            t0 = time.perf_counter()
            # -- sample this epoch's negatives
            negs = _random_negatives(
                pairs, pool_size or config.negatives, config.own_negative_prob, n_texts, rng
            )  # fmt: skip
            if n_hard:
                model.eval()
                hard, bad = _hard_negatives(model, table, pairs, n_hard, config.hard_pool, n_texts, rng, device)
                negs[:, :n_hard] = np.where(bad, negs[:, :n_hard], hard)
            # -- one pass over the (question, positive) pairs in random order
            model.train()
            order = rng.permutation(len(pairs.group))
            total, steps = 0.0, 0
            for start in range(0, len(order), config.batch_size):
                idx = order[start : start + config.batch_size]
                q, pos, neg = pairs.question[idx], pairs.positive[idx], negs[idx]
                if pool_size:
                    neg = _max_of_pool(model, table, q, neg, config.negatives, n_texts, device)
                if is_joint(model):  # AP-CNN / AP-biLSTM: (question, answer) pairs through the joint model
                    answers = np.concatenate([pos[:, None], neg], axis=1)
                    s = joint_pair_scores(model, table, q, answers, device)  # type: ignore[arg-type]
                    loss = hinge_loss(s[:, 0], s[:, 1:], config.margin)
                    optimizer.zero_grad(set_to_none=True)
                    loss.backward()
                    optimizer.step()
                    total += loss.item()
                    steps += 1
                    continue
                rows, inverse = np.unique(np.concatenate([q, pos, neg.ravel()]), return_inverse=True)
                if isinstance(model, RecurrentQA):  # questions and answers encode differently
                    vectors = model.encode_rows(table, rows, device)
                else:
                    flat, offsets = table.gather(rows)
                    vectors = model.encode_bags(torch.from_numpy(flat).to(device), torch.from_numpy(offsets).to(device))
                if config.riemannian and model.geometry == "poincare":
                    vectors = riemannian_hook(vectors)
                b = len(idx)
                inv = torch.from_numpy(inverse).to(device)
                qv, pv, nv = (
                    vectors[inv[:b]],
                    vectors[inv[b : 2 * b]],
                    vectors[inv[2 * b :]].view(b, config.negatives, -1),
                )
                s_pos, _ = model.score(qv, pv)
                s_neg, _ = model.score(qv[:, None, :], nv)
                if config.effective_loss == "cross-entropy":  # scores are logits (the RDE family's q.Ma + b)
                    loss = cross_entropy_loss(s_pos, s_neg)
                else:
                    loss = hinge_loss(s_pos, s_neg, config.margin)
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                if config.model in RECURRENT_KINDS:  # the paper clips gradients at norm 1
                    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                optimizer.step()
                total += loss.item()
                steps += 1
            train_seconds = time.perf_counter() - t0
            dev = evaluate(model, dev_split, table, device)
            seconds = time.perf_counter() - t0
            improved = dev["map"] > best_map
            if improved:
                best_map, best_epoch, best_dev = dev["map"], epoch, dev
                best_state = copy.deepcopy(model.state_dict())
                since_best = 0
            else:
                since_best += 1
            row = {
                "epoch": epoch,
                "loss": total / max(1, steps),
                "dev_map": dev["map"],
                "dev_mrr": dev["mrr"],
                "train_seconds": train_seconds,
                "seconds": seconds,
                "w_f": model.w_f.item(),
            }
            if model.geometry == "poincare" and model.ball.kind == "expmap":
                row["alpha"] = model.ball.alpha.item()
            history.append(row)
            say(
                f"[{tag}] epoch {epoch}/{config.epochs}  loss {row['loss']:.4f}  dev MAP {dev['map']:.4f}  "
                f"MRR {dev['mrr']:.4f}  {seconds:.2f}s (train {train_seconds:.2f}s){'  *best' if improved else ''}"
            )
            if config.patience is not None and since_best >= config.patience:
                say(f"[{tag}] no better dev MAP for {config.patience} epochs; stopping")
                break
        assert best_state is not None
        model.load_state_dict(best_state)
        model.eval()
        norms, extra = _diagnostics(model, dev_split, table, device)
        return TrainResult(
            model=model,
            tokenizer=tokenizer,
            config=config,
            best_epoch=best_epoch,
            dev=best_dev,
            history=history,
            norms=norms,
            data={},
            embeddings={},
            seconds=0.0,
            diagnostics=extra,
            device=device.type,
        )
    finally:
        torch.set_num_threads(old_threads)
        torch.use_deterministic_algorithms(old_deterministic)


def _recurrent_model(config: TrainConfig, tokenizer: Tokenizer, vectors: np.ndarray | None) -> DualEncoderQA:
    """RDE / RDE-LTC / HRDE / HRDE-LTC (:mod:`qaindex_export.recurrent`) from the settings."""
    from .recurrent import build_recurrent_model

    model = build_recurrent_model(
        config.model,
        tokenizer,
        hidden=config.dim,
        embeddings=vectors,
        train_embeddings=config.train_embeddings,
        embed_dim=config.embed_dim,
        topics=config.topics,
        chunking=config.chunking,
        max_chunks=config.max_chunks,
        max_chunk_tokens=config.max_chunk_tokens,
    )
    return model  # type: ignore[return-value]  # duck-typed: the loop's interface


# ------------------------------------------------------------------------ training without labels

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


def pseudo_questions(answer: str, rng: np.random.Generator, count: int) -> list[str]:
    """``count`` pseudo-questions cut from ``answer``: a random sentence, or a random span of words.

    Half of them (on average) are one of the answer's sentences (when it has several), the
    rest a span of 3-12 consecutive words; an answer of at most 3 words is its own
    pseudo-question.

    Example
    -------
    >>> rng = np.random.default_rng(0)
    >>> text = "Open Settings. Choose Reset password and follow the link."
    >>> qs = pseudo_questions(text, rng, 3)
    >>> len(qs), all(q and set(q.split()) <= set(text.split()) for q in qs)
    (3, True)
    """
    words = answer.split()
    sentences = [s for s in _SENTENCE_END.split(answer.strip()) if len(s.split()) >= 3]
    out: list[str] = []
    for _ in range(count):
        if len(words) <= 3:
            out.append(answer.strip())
            continue
        if len(sentences) > 1 and rng.random() < 0.5:
            out.append(sentences[int(rng.integers(len(sentences)))])
            continue
        length = int(rng.integers(3, min(12, len(words)) + 1))
        start = int(rng.integers(0, len(words) - length + 1))
        out.append(" ".join(words[start : start + length]))
    return out


def _unit(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float32)
    return x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)


def _init_identity_head(model: DualEncoderQA, scale: float) -> None:
    """``W_p = scale·[I; −I]`` on the table's first ``h = min(width, dim // 2)`` components, ``b_p = 0``.

    ``ReLU`` then keeps the positive and the negative half of each of those components, so
    the untrained head is the (leading part of the) table itself; other weights start at 0.
    """
    proj = model.encoder.proj
    dim, width = proj.weight.shape
    h = min(width, dim // 2)
    with torch.no_grad():
        proj.weight.zero_()
        eye = torch.eye(h, dtype=proj.weight.dtype) * scale
        proj.weight[:h, :h] = eye
        proj.weight[h : 2 * h, :h] = -eye
        proj.bias.zero_()


def train_unlabelled(
    config: TrainConfig,
    answers: Sequence[str],
    teacher: Callable[[Sequence[str]], np.ndarray],
    *,
    embeddings: Embeddings | None = None,
    log: Log | None = _stderr,
    pseudo_per_answer: int = 4,
    temperature: float = 0.05,
    dev_questions: int = 300,
    dev_candidates: int = 100,
    init_scale: float = 4.0,
    hyperqa_scale: float | None = 0.5,
) -> TrainResult:
    """Fine-tune the HyperQA / CosineQA head on answers alone, against a sentence teacher.

    No question is needed. Each answer gets ``pseudo_per_answer`` pseudo-questions
    (:func:`pseudo_questions`); the teacher embeds answers and pseudo-questions. A step
    takes ``batch_size`` answers and one pseudo-question of each, and minimises the
    cross-entropy between the teacher's distribution over the batch's answers
    (``softmax(cos / temperature)``: the teacher decides which answers are positives) and
    the student's ``softmax(score)``. The embedding table stays frozen; the head starts as
    ``scale·[I; −I]`` on the table's leading ``dim // 2`` components (PCA order), i.e. from
    the table itself.

    Model selection: held-out pseudo-questions (cut with another seed), each ranking up to
    ``dev_candidates`` answers of which the teacher's top answer is the correct one; the best
    epoch by that MAP is kept, epoch 0 (the untrained head) included.

    Parameters
    ----------
    config : TrainConfig
        ``model``, ``ball`` (``auto`` means ``weighted``: norms from learned per-token depth, so
        with the ``relative`` ranking low-information answers sit near the centre and score
        worst), ``ranking``, ``embeddings`` (default
        ``"distilled"``), ``lr``, ``optimizer``, ``batch_size``, ``epochs``, ``seed``,
        ``device``, ``threads``, ``dim`` and truncation are used.
    answers : sequence of str
        The user's answers (duplicates are dropped).
    teacher : callable
        Texts → sentence embeddings (e.g. :func:`qaindex_export.distill.minilm_sentence_teacher`).
    embeddings : Embeddings, optional
        The frozen table (default: built from ``config.embeddings``).
    log : callable or None
    pseudo_per_answer, temperature, dev_questions, dev_candidates, init_scale
        See above.
    hyperqa_scale : float or None
        HyperQA starts at ``w_f = hyperqa_scale / temperature`` (None: ``w_f = 1``). Near the
        boundary an answer's relative score is about ``-log|ξ - q|²`` (``ξ`` its direction), a
        spread of a few units: ``w_f = 1`` starts far softer than the teacher's distribution
        (on the FAQ answers, 0.5 trained for all 10 epochs instead of peaking at epoch 1).

    Returns
    -------
    TrainResult

    Example
    -------
    >>> from qaindex_export.distill import minilm_sentence_teacher
    >>> cfg = TrainConfig(embeddings="distilled", epochs=5)
    >>> result = train_unlabelled(cfg, answers, minilm_sentence_teacher())  # doctest: +SKIP
    """
    started = time.perf_counter()
    say: Log = log if log is not None else (lambda _m: None)
    texts = list(dict.fromkeys(a for a in answers if a.strip()))
    if len(texts) < 2:
        raise ValueError("training without labels needs at least two distinct non-empty answers")
    if embeddings is None:
        embeddings = build_embeddings(config.embeddings, texts, max_vocab=config.max_vocab)
    if embeddings.vectors is None:
        raise ValueError("training without labels needs a pretrained table (--embeddings distilled or minilm)")
    width = int(embeddings.vectors.shape[1])
    ball = "weighted" if config.ball == "auto" else config.ball
    config = replace(config, ball=ball, train_embeddings=False).validate()
    device = resolve_device(config.device)
    old_threads = torch.get_num_threads()
    if config.threads > 0:
        torch.set_num_threads(config.threads)
    try:
        torch.manual_seed(config.seed)
        rng = np.random.default_rng(config.seed)
        tokenizer = embeddings.tokenizer()
        table = TextTable(tokenizer, {"question": config.max_question_tokens, "answer": config.max_answer_tokens})
        n = len(texts)
        pseudo = [pseudo_questions(t, rng, pseudo_per_answer) for t in texts]
        dev_rng = np.random.default_rng(config.seed + 1)
        dev_owner = np.sort(dev_rng.choice(n, size=min(n, dev_questions), replace=False))
        dev_texts = [pseudo_questions(texts[i], dev_rng, 1)[0] for i in dev_owner]
        say(f"[teacher] embedding {n} answers and {n * pseudo_per_answer + len(dev_texts)} pseudo-questions")
        t_answers = _unit(teacher(texts))
        t_pseudo = _unit(teacher([q for qs in pseudo for q in qs])).reshape(n, pseudo_per_answer, -1)
        t_dev = _unit(teacher(dev_texts))
        answer_rows = np.array([table.add(t, "answer") for t in texts], dtype=np.int64)
        pseudo_rows = np.array([[table.add(q, "question") for q in qs] for qs in pseudo], dtype=np.int64)
        # dev groups: the teacher's best answer is the correct one among dev_candidates answers
        groups = []
        for j, text in enumerate(dev_texts):
            sims = t_answers @ t_dev[j]
            best = int(np.argmax(sims))
            others = np.delete(np.arange(n), best)
            if len(others) > dev_candidates - 1:
                others = dev_rng.choice(others, size=dev_candidates - 1, replace=False)
            cands = [Candidate(str(best), texts[best], 1)] + [Candidate(str(i), texts[i], 0) for i in others]
            groups.append(QuestionGroup(f"pseudo#{j}", text, tuple(cands)))
        dev_split = _split(groups, table)

        model = build_model(
            config.model,
            len(tokenizer.vocab),
            dim=config.dim,
            embeddings=embeddings.vectors,
            train_embeddings=False,
            ball=ball if config.model == "hyperqa" else "clip",
            max_norm=config.max_norm,
            init_norm=config.init_norm,
            ranking=config.ranking,
        ).to(device)
        _init_identity_head(model, init_scale)
        if config.model == "cosineqa":  # cosines live in [-1, 1]: start at the teacher's temperature
            with torch.no_grad():
                model.w_raw.fill_(math.log(math.expm1(1.0 / temperature)))
        elif hyperqa_scale is not None:  # start w_f at hyperqa_scale / temperature
            with torch.no_grad():
                model.w_raw.fill_(math.log(math.expm1(hyperqa_scale / temperature)))
        optimizer = _optimizer(model, config)
        tag = f"{config.model}/{model.ball.kind}/teacher" if config.model == "hyperqa" else f"{config.model}/teacher"
        dev = evaluate(model, dev_split, table, device)
        best_map, best_epoch, best_dev = dev["map"], 0, dev
        best_state = copy.deepcopy(model.state_dict())
        history: list[dict[str, Any]] = [{"epoch": 0, "loss": None, "dev_map": dev["map"], "dev_mrr": dev["mrr"]}]
        say(f"[{tag}] epoch 0 (untrained head)  dev MAP {dev['map']:.4f}  MRR {dev['mrr']:.4f}")
        t_answers_dev = torch.from_numpy(t_answers).to(device)
        t_pseudo_dev = torch.from_numpy(t_pseudo).to(device)
        for epoch in range(1, config.epochs + 1):
            t0 = time.perf_counter()
            model.train()
            order = rng.permutation(n)
            pick = rng.integers(0, pseudo_per_answer, size=n)
            total, steps = 0.0, 0
            for start in range(0, n, config.batch_size):
                idx = order[start : start + config.batch_size]
                if len(idx) < 2:
                    continue
                q_rows = pseudo_rows[idx, pick[idx]]
                rows, inverse = np.unique(np.concatenate([q_rows, answer_rows[idx]]), return_inverse=True)
                flat, offsets = table.gather(rows)
                vectors = model.encode_bags(torch.from_numpy(flat).to(device), torch.from_numpy(offsets).to(device))
                inv = torch.from_numpy(inverse).to(device)
                b = len(idx)
                qv, av = vectors[inv[:b]], vectors[inv[b:]]
                student, _ = model.score(qv[:, None, :], av[None, :, :].expand(b, b, -1))
                idx_t = torch.from_numpy(idx).to(device)
                pick_t = torch.from_numpy(pick[idx]).to(device)
                tq = t_pseudo_dev[idx_t, pick_t]
                target = torch.softmax(tq @ t_answers_dev[idx_t].T / temperature, dim=1)
                loss = -(target * torch.log_softmax(student, dim=1)).sum(dim=1).mean()
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()
                total += loss.item()
                steps += 1
            dev = evaluate(model, dev_split, table, device)
            seconds = time.perf_counter() - t0
            improved = dev["map"] > best_map
            if improved:
                best_map, best_epoch, best_dev = dev["map"], epoch, dev
                best_state = copy.deepcopy(model.state_dict())
            history.append(
                {"epoch": epoch, "loss": total / max(1, steps), "dev_map": dev["map"], "dev_mrr": dev["mrr"],
                 "seconds": seconds, "w_f": model.w_f.item()}
            )  # fmt: skip
            say(
                f"[{tag}] epoch {epoch}/{config.epochs}  loss {total / max(1, steps):.4f}  dev MAP {dev['map']:.4f}  "
                f"MRR {dev['mrr']:.4f}  {seconds:.2f}s{'  *best' if improved else ''}"
            )
        model.load_state_dict(best_state)
        model.eval()
        norms, extra = _diagnostics(model, dev_split, table, device)
        return TrainResult(
            model=model,
            tokenizer=tokenizer,
            config=config,
            best_epoch=best_epoch,
            dev=best_dev,
            history=history,
            norms=norms,
            data={
                "train": {"answers": n, "pseudo_questions": n * pseudo_per_answer, "labels": None},
                "dev": {"pseudo_questions": len(dev_texts), "candidates": dev_candidates, "positive": "teacher top-1"},
            },
            embeddings={
                "source": embeddings.source,
                "kind": embeddings.kind,
                "vocab_size": len(embeddings.vocab),
                "dim": width,
                "pretrained_rows": embeddings.found,
            },
            seconds=time.perf_counter() - started,
            selection={
                "by": "dev MAP on held-out pseudo-questions (teacher top-1 is correct)",
                "method": "unlabelled: cross-entropy to the teacher's softmax over in-batch answers",
                "temperature": temperature,
                "pseudo_per_answer": pseudo_per_answer,
                "head_init": f"{init_scale}·[I; -I]",
            },
            diagnostics=extra,
            device=device.type,
            dev_groups=groups,
        )
    finally:
        torch.set_num_threads(old_threads)


# ------------------------------------------------------------------------ checkpoints


CHECKPOINT_FORMAT = "qaindex-train-checkpoint"
CHECKPOINT_VERSION = 2
_CKPT_JSON = "checkpoint.json"
_CKPT_WEIGHTS = "weights.safetensors"


def _strict_json(value: Any) -> Any:
    """``value`` with numpy scalars as Python numbers and NaN/Infinity as None (strict JSON)."""
    if isinstance(value, dict):
        return {str(k): _strict_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_strict_json(v) for v in value]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def save_checkpoint(result: TrainResult, path: str | os.PathLike[str]) -> Path:
    """Save a trained model (best epoch) as a checkpoint directory: no pickle.

    ``path`` becomes a directory holding ``weights.safetensors`` (the model's tensors) and
    ``checkpoint.json`` (format, version, config, ball map, vocabulary, tokenizer settings,
    provenance and metrics, and the SHA-256 of the weights file). It is written to a sibling
    temporary directory and renamed into place, so an interrupted save leaves any previous
    checkpoint at ``path`` intact. NaN/Infinity metrics are stored as ``null``.

    Example
    -------
    >>> save_checkpoint(result, "hyperqa.ckpt")  # doctest: +SKIP
    PosixPath('hyperqa.ckpt')
    """
    import json
    import shutil

    from safetensors.torch import save_file

    target = Path(path)
    if target.exists() and not (target.is_dir() and (target / _CKPT_JSON).is_file()):
        raise QAIndexError(
            f"{target}: exists and is not a qaindex checkpoint directory; choose another --checkpoint path"
        )
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.parent / f".{target.name}.tmp-{os.getpid()}"
    old = target.parent / f".{target.name}.old-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        tensors = {k: v.detach().cpu().contiguous().clone() for k, v in result.model.state_dict().items()}
        save_file(tensors, str(tmp / _CKPT_WEIGHTS), metadata={"format": CHECKPOINT_FORMAT})
        meta = {
            "format": CHECKPOINT_FORMAT,
            "version": CHECKPOINT_VERSION,
            "weights": {"file": _CKPT_WEIGHTS, "sha256": sha256_file(tmp / _CKPT_WEIGHTS)},
            "config": result.config.to_dict(),
            "ball": result.model.ball.kind,
            "vocab": list(result.tokenizer.vocab),
            "tokenizer": result.tokenizer.config(),
            "best_epoch": result.best_epoch,
            "dev": result.dev,
            "history": result.history,
            "norms": result.norms,
            "data": result.data,
            "embeddings": result.embeddings,
            "seconds": result.seconds,
            "selection": result.selection,
            "diagnostics": result.diagnostics,
        }
        with open(tmp / _CKPT_JSON, "w", encoding="utf-8") as handle:
            json.dump(_strict_json(meta), handle, ensure_ascii=False, allow_nan=False, indent=1)
            handle.flush()
            os.fsync(handle.fileno())
        if target.exists():
            os.replace(target, old)
        os.replace(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        if old.exists() and not target.exists():
            os.replace(old, target)
        raise
    shutil.rmtree(old, ignore_errors=True)
    return target


def _checkpoint_error(path: Path, what: str) -> QAIndexError:
    return QAIndexError(f"{path}: {what}; save the checkpoint again with `qaindex train --checkpoint`")


def load_checkpoint(path: str | os.PathLike[str], *, device: str = "cpu") -> TrainResult:
    """Load a checkpoint written by :func:`save_checkpoint` (the model at its best epoch).

    Validates the format, version, fields, the weights file's SHA-256 and every tensor's
    name and shape; any problem is a :class:`~qaindex.QAIndexError` naming the file.
    Nothing is unpickled: tensors come from safetensors, the rest from JSON.

    Example
    -------
    >>> result = load_checkpoint("hyperqa.ckpt")  # doctest: +SKIP
    """
    import json

    from safetensors import SafetensorError
    from safetensors.torch import load_file

    root = Path(path)
    meta_path = root / _CKPT_JSON
    if not root.is_dir() or not meta_path.is_file():
        raise QAIndexError(
            f"{root}: not a qaindex training checkpoint (a directory with {_CKPT_JSON} and {_CKPT_WEIGHTS})"
        )
    try:
        state = json.loads(meta_path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise _checkpoint_error(meta_path, f"cannot be read as JSON ({exc})") from None
    if not isinstance(state, dict) or state.get("format") != CHECKPOINT_FORMAT:
        raise _checkpoint_error(meta_path, "not a qaindex training checkpoint")
    if state.get("version") != CHECKPOINT_VERSION:
        raise _checkpoint_error(
            meta_path,
            f"checkpoint version {state.get('version')!r} is not supported (this code reads {CHECKPOINT_VERSION})",
        )
    expect = {
        "config": dict, "ball": str, "vocab": list, "tokenizer": dict, "best_epoch": int, "weights": dict,
        "history": list,
    }  # fmt: skip
    for key, kind in expect.items():
        if not isinstance(state.get(key), kind):
            raise _checkpoint_error(meta_path, f'field "{key}" is missing or not a {kind.__name__}')
    weights_path = root / _CKPT_WEIGHTS
    if not weights_path.is_file():
        raise _checkpoint_error(weights_path, "missing")
    if sha256_file(weights_path) != state["weights"].get("sha256"):
        raise _checkpoint_error(weights_path, "checksum does not match checkpoint.json (corrupted or replaced)")
    try:
        # checkpoints from before the ranking setting were trained with the plain distance
        config = TrainConfig.from_dict({"ranking": "distance", **state["config"]})
        tok_cfg = state["tokenizer"]
        tokenizer = Tokenizer(
            state["vocab"],
            kind=tok_cfg["kind"],
            lowercase=tok_cfg["lowercase"],
            strip_accents=tok_cfg["strip_accents"],
            unk_token=tok_cfg["unk_token"],
            pad_token=tok_cfg["pad_token"],
            max_chars_per_word=tok_cfg["max_chars_per_word"],
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise _checkpoint_error(meta_path, f"invalid config or tokenizer ({exc})") from None
    try:
        weights = load_file(str(weights_path), device=str(device))
    except (SafetensorError, OSError, RuntimeError, ValueError) as exc:
        raise _checkpoint_error(weights_path, f"cannot be read ({exc})") from None
    recurrent: DualEncoderQA | None = None
    if config.model in RECURRENT_KINDS:  # the RDE family: its own tensors and builder
        try:
            recurrent = _recurrent_model(config, tokenizer, weights["embedding"].cpu().numpy())
        except (RuntimeError, ValueError, KeyError) as exc:
            raise _checkpoint_error(
                weights_path, f"tensors do not match the model ({' '.join(str(exc).split())[:300]})"
            ) from None
    sequence = config.model in ("qa-cnn", "qa-bilstm", *ATTENTIVE_MODELS)
    required = ("embedding",) if recurrent is not None else ("encoder.embedding",)
    for name in required if sequence or recurrent is not None else (*required, "encoder.proj.weight"):
        if name not in weights or weights[name].ndim != 2:
            raise _checkpoint_error(weights_path, f"tensor {name!r} is missing or not a matrix")
    emb = weights["embedding" if recurrent is not None else "encoder.embedding"]
    try:
        model = recurrent if recurrent is not None else _build_model(
            config.model,
            emb.shape[0],
            dim=config.dim if sequence else weights["encoder.proj.weight"].shape[0],
            embeddings=emb.cpu().numpy(),
            train_embeddings=config.train_embeddings
            if config.train_embeddings is not None
            else config.embeddings == "none",
            ball=state["ball"] if state["ball"] != "none" else "clip",
            max_norm=config.max_norm,
            learn_alpha=config.learn_alpha,
            init_norm=config.init_norm,
            ranking=config.ranking,
            window=config.window,
        )
        model.load_state_dict(weights)
    except (RuntimeError, ValueError, KeyError) as exc:
        raise _checkpoint_error(
            weights_path, f"tensors do not match the model ({' '.join(str(exc).split())[:300]})"
        ) from None
    model.eval()
    return TrainResult(
        model=model,
        tokenizer=tokenizer,
        config=config,
        best_epoch=state["best_epoch"],
        dev=state["dev"],
        history=state["history"],
        norms=state["norms"],
        data=state["data"],
        embeddings=state["embeddings"],
        seconds=state["seconds"],
        selection=state["selection"],
        diagnostics=state.get("diagnostics", {}),
    )

"""Train a model on answer-selection data: the pairwise task on the one training loop.

Usage::

    from qaindex_export.training.train import TrainConfig, train
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
:func:`qaindex.eval.metrics.evaluate_groups`). Runs are reproducible: ``torch.manual_seed``, one
``numpy.random.Generator`` for sampling, and deterministic algorithms.

Read top to bottom: :func:`train` loads the data and embeddings, then :func:`_train_one` builds
the model for one ball map (``ball="auto"`` tries two and keeps the better) and hands the
pairwise task (:class:`_PairJob`: an epoch's negatives and order, a batch's loss, dev MAP) to
the loop every trainer runs (:func:`qaindex_export.training.loop.run`). The parts live in
their own modules: data and pairs (:mod:`.data`), negatives (:mod:`.negatives`), evaluation
(:mod:`.evaluation`), model building (:mod:`qaindex_export.networks.families`), the result
(:mod:`.result`), checkpoints (:mod:`.checkpoints`) and training without labels
(:mod:`.unlabelled`); their public names are importable from here too.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np
import torch

from qaindex.eval.datasets import QuestionGroup
from qaindex.store.atomic_files import sha256_file
from qaindex.text.tokenizer import Tokenizer

from ..config import OPTIMIZERS, RECURRENT_KINDS, SAMPLINGS, TrainConfig
from ..embeddings.spec import Embeddings, build_embeddings
from ..networks.attentive import is_joint
from ..networks.families import from_config, make_optimizer, start_epoch
from ..networks.models import DualEncoderQA, hinge_loss, riemannian_hook
from ..networks.recurrent import RecurrentQA, cross_entropy_loss
from .checkpoints import load_checkpoint, save_checkpoint
from .data import Pairs, Split, TextTable, hold_out_dev, load_groups, split_groups, training_pairs
from .evaluation import best_result, encode_texts, evaluate, evaluate_data
from .joint import joint_pair_scores
from .loop import Log, LoopConfig, Verdict, resolve_device, run, seeded, stderr_log, torch_settings
from .negatives import hard_negatives, max_of_pool, random_negatives
from .result import TrainResult
from .unlabelled import pseudo_questions, train_unlabelled

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


def train(
    config: TrainConfig,
    train_data: str | os.PathLike[str] | Sequence[QuestionGroup],
    dev_data: str | os.PathLike[str] | Sequence[QuestionGroup] | None = None,
    *,
    log: Log | None = stderr_log,
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
    train_groups, train_info = load_groups(train_data)
    if dev_data is None:
        train_groups, dev_groups = hold_out_dev(train_groups, config.dev_fraction, config.seed)
        dev_info: dict[str, Any] = {"held_out_from_train": True, "questions": len(dev_groups)}
    else:
        dev_groups, dev_info = load_groups(dev_data)
    if not any(g.has_positive for g in train_groups):
        raise ValueError("the training data has no question with a correct answer (label 1)")

    if embeddings is None:
        texts = [g.question for g in train_groups] + [c.answer for g in train_groups for c in g.candidates]
        texts += [g.question for g in dev_groups] + [c.answer for g in dev_groups for c in g.candidates]
        embeddings = build_embeddings(config.embeddings, texts, max_vocab=config.max_vocab)
    tokenizer = embeddings.tokenizer()
    max_tokens = {"question": config.max_question_tokens, "answer": config.max_answer_tokens}
    table = TextTable(tokenizer, max_tokens)
    train_split = split_groups(train_groups, table)
    dev_split = split_groups(dev_groups, table)
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
    train_split: Split,
    dev_split: Split,
    say: Log,
) -> TrainResult:
    """One ball map through :func:`.loop.run`: build the model, then the loop keeps the best epoch."""
    device = resolve_device(config.device)
    with torch_settings(config.threads, deterministic=True):
        rng = seeded(config.seed)
        model = from_config(config, tokenizer, embeddings.vectors).to(device)
        pairs = training_pairs(train_split, len(table))
        if config.model == "hyperqa" and model.ball.kind == "expmap":
            alpha = config.alpha
            if alpha is None:
                alpha = _auto_alpha(model, table, pairs.pool, device, rng, config.init_norm)
            with torch.no_grad():
                model.ball.log_alpha.fill_(math.log(alpha))
        job = _PairJob(config, model, table, pairs, dev_split, device, rng)
        tag = f"{config.model}/{model.ball.kind}" if config.model == "hyperqa" else config.model
        loop = LoopConfig(
            epochs=config.epochs,
            tag=tag,
            patience=config.patience,
            measure="dev MAP",
            clip_norm=1.0 if config.model in RECURRENT_KINDS else None,  # the paper clips gradients at norm 1
        )
        outcome = run(loop, job, log=say)
        assert outcome.best_state is not None and outcome.best is not None
        return best_result(
            model,
            outcome.best_state,
            dev_split,
            table,
            device,
            tokenizer=tokenizer,
            config=config,
            best_epoch=outcome.best_epoch,
            dev=outcome.best.detail,
            history=outcome.history,
            data={},
            embeddings={},
            seconds=0.0,
        )


class _PairJob:
    """The pairwise task for :func:`.loop.run`: each epoch samples negatives for every (question,
    correct answer) pair, then steps through the pairs in random order; dev MAP chooses the epoch."""

    def __init__(
        self,
        config: TrainConfig,
        model: DualEncoderQA,
        table: TextTable,
        pairs: Pairs,
        dev_split: Split,
        device: torch.device,
        rng: np.random.Generator,
    ) -> None:
        self.config, self.model, self.table, self.pairs = config, model, table, pairs
        self.dev_split, self.device, self.rng = dev_split, device, rng
        self.optimizer = make_optimizer(model, config)
        self.optimizers = [self.optimizer]
        self.n_hard = round(config.hard_fraction * config.negatives) if config.sampling == "mix" else 0
        self.pool_size = config.effective_negative_pool  # max-of-K sampling replaces --sampling
        if self.pool_size:
            self.n_hard = 0
        self.negs = np.zeros((0, 0), dtype=np.int64)

    def begin_epoch(self, epoch: int) -> tuple[list[np.ndarray], dict[str, Any]]:
        config, pairs, n_texts = self.config, self.pairs, len(self.table)
        lr = start_epoch(self.optimizer, config, epoch)
        # this epoch's negatives: random, with the hard ones mined under the current model
        negs = random_negatives(pairs, self.pool_size or config.negatives, config.own_negative_prob, n_texts, self.rng)
        if self.n_hard:
            self.model.eval()
            hard, bad = hard_negatives(
                self.model, self.table, pairs, self.n_hard, config.hard_pool, n_texts, self.rng, self.device
            )
            negs[:, : self.n_hard] = np.where(bad, negs[:, : self.n_hard], hard)
        self.negs = negs
        order = self.rng.permutation(len(pairs.group))  # the pairs in random order
        return [order[start : start + config.batch_size] for start in range(0, len(order), config.batch_size)], {
            "lr": lr
        }

    def loss(self, idx: np.ndarray) -> torch.Tensor:
        q, pos, neg = self.pairs.question[idx], self.pairs.positive[idx], self.negs[idx]
        if self.pool_size:
            neg = max_of_pool(self.model, self.table, q, neg, self.config.negatives, len(self.table), self.device)
        return _batch_loss(self.model, self.table, q, pos, neg, self.config, self.device)

    def evaluate(self, epoch: int) -> Verdict:
        dev = evaluate(self.model, self.dev_split, self.table, self.device)
        row: dict[str, Any] = {"dev_map": dev["map"], "dev_mrr": dev["mrr"], "w_f": self.model.w_f.item()}
        if self.model.geometry == "poincare" and self.model.ball.kind == "expmap":
            row["alpha"] = self.model.ball.alpha.item()
        summary = f"dev MAP {dev['map']:.4f}  MRR {dev['mrr']:.4f}"
        return Verdict(score=dev["map"], row=row, summary=summary, detail=dev)


def _batch_loss(
    model: DualEncoderQA,
    table: TextTable,
    q: np.ndarray,
    pos: np.ndarray,
    neg: np.ndarray,
    config: TrainConfig,
    device: torch.device,
) -> torch.Tensor:
    """The loss of one batch: questions ``q`` (b,), correct answers ``pos`` (b,), negatives ``neg`` (b, k)."""
    if is_joint(model):  # AP-CNN / AP-biLSTM: (question, answer) pairs through the joint model
        answers = np.concatenate([pos[:, None], neg], axis=1)
        s = joint_pair_scores(model, table, q, answers, device)  # type: ignore[arg-type]
        return hinge_loss(s[:, 0], s[:, 1:], config.margin)
    # each distinct text of the batch is encoded once
    rows, inverse = np.unique(np.concatenate([q, pos, neg.ravel()]), return_inverse=True)
    if isinstance(model, RecurrentQA):  # questions and answers encode differently
        vectors = model.encode_rows(table, rows, device)
    else:
        flat, offsets = table.gather(rows)
        vectors = model.encode_bags(torch.from_numpy(flat).to(device), torch.from_numpy(offsets).to(device))
    if config.riemannian and model.geometry == "poincare":
        vectors = riemannian_hook(vectors)
    b = len(q)
    inv = torch.from_numpy(inverse).to(device)
    qv, pv, nv = vectors[inv[:b]], vectors[inv[b : 2 * b]], vectors[inv[2 * b :]].view(b, neg.shape[1], -1)
    s_pos, _ = model.score(qv, pv)
    s_neg, _ = model.score(qv[:, None, :], nv)
    if config.effective_loss == "cross-entropy":  # scores are logits (the RDE family's q.Ma + b)
        return cross_entropy_loss(s_pos, s_neg)
    return hinge_loss(s_pos, s_neg, config.margin)


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

"""Model families: which module builds each model kind, from its name or a :class:`TrainConfig`.

=============  ======================================  ===================================
family         kinds                                   module (network / export)
=============  ======================================  ===================================
``dual``       ``hyperqa``, ``cosineqa``               :mod:`.models` / ``exporting.dual_export``
``sequence``   ``qa-cnn``, ``qa-bilstm``               :mod:`.encoders` / ``exporting.dual_export``
``attentive``  ``ap-cnn``, ``ap-bilstm``               :mod:`.attentive` / ``exporting.attentive_export``
``recurrent``  ``rde``, ``rde-ltc``, ``hrde``, ...     :mod:`.recurrent` / ``exporting.recurrent_export``
=============  ======================================  ===================================

The training loop, checkpoints and the exporter table (:data:`qaindex_export.exporting.onnx_export.EXPORTERS`)
dispatch on :func:`family`; nothing else needs to know which module a kind lives in.

Example
-------
>>> family("hrde"), family("qa-cnn")
('recurrent', 'sequence')
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from qaindex.text.tokenizer import Tokenizer

from ..config import MODEL_KINDS, RECURRENT_KINDS, TrainConfig
from .attentive import ATTENTIVE_MODELS, build_attentive_model
from .encoders import SEQUENCE_MODELS, build_sequence_model
from .models import BagOfWords, BallMap, CosineQA, DualEncoderQA, HyperQA
from .recurrent import build_recurrent_model

__all__ = ["FAMILIES", "build_model", "epoch_lr", "family", "from_config", "make_optimizer", "start_epoch"]

FAMILIES = ("dual", "sequence", "attentive", "recurrent")


def family(kind: str) -> str:
    """The family of model ``kind`` (one of :data:`FAMILIES`)."""
    if kind in RECURRENT_KINDS:
        return "recurrent"
    if kind in ATTENTIVE_MODELS:
        return "attentive"
    if kind in SEQUENCE_MODELS:
        return "sequence"
    if kind in ("hyperqa", "cosineqa"):
        return "dual"
    raise ValueError(f"unknown model {kind!r}; choose one of {MODEL_KINDS}")


def build_model(
    kind: str,
    vocab_size: int,
    *,
    dim: int = 300,
    embeddings: np.ndarray | None = None,
    train_embeddings: bool | None = None,
    embed_dim: int = 300,
    ball: str = "clip",
    max_norm: float = 0.999,
    alpha: float = 1.0,
    learn_alpha: bool = True,
    init_norm: float = 0.9,
    ranking: str = "relative",
    window: int = 4,
) -> DualEncoderQA:
    """Create a HyperQA, CosineQA, QA-CNN, QA-biLSTM, AP-CNN or AP-biLSTM model.

    The RDE family needs the tokenizer (for its chunking): see :func:`from_config`.

    Parameters
    ----------
    kind : {"hyperqa", "cosineqa", "qa-cnn", "qa-bilstm", "ap-cnn", "ap-bilstm"}
    vocab_size, dim, embeddings, train_embeddings, embed_dim
        See :class:`BagOfWords`.
    ball, max_norm, alpha, learn_alpha, init_norm
        See :class:`BallMap` (ignored for CosineQA); ``weighted`` adds the depth column.
    ranking : {"relative", "distance"}
        HyperQA's ranking rule (see :func:`poincare_score`).
    window : int
        QA-CNN's context window (the sequence and attentive models: see
        :func:`.encoders.build_sequence_model`; ``dim`` is their output size).

    Example
    -------
    >>> build_model("hyperqa", 10, dim=4, embed_dim=3, ball="expmap").geometry_info()["ball_map"]
    'expmap'
    """
    if kind in ATTENTIVE_MODELS:
        return build_attentive_model(
            kind,
            vocab_size,
            dim=dim,
            embeddings=embeddings,  # type: ignore[return-value]
            train_embeddings=train_embeddings,
            embed_dim=embed_dim,
            window=window,
        )
    if kind in SEQUENCE_MODELS:
        return build_sequence_model(
            kind,
            vocab_size,
            dim=dim,
            embeddings=embeddings,
            train_embeddings=train_embeddings,
            embed_dim=embed_dim,
            window=window,
        )
    depth = kind == "hyperqa" and ball in ("weighted", "lognorm")
    encoder = BagOfWords(
        vocab_size, dim, embeddings=embeddings, train_embeddings=train_embeddings, embed_dim=embed_dim, depth=depth
    )
    if kind == "hyperqa":
        ball_map = BallMap(ball, max_norm=max_norm, alpha=alpha, learn_alpha=learn_alpha, dim=dim, init_norm=init_norm)
        return HyperQA(encoder, ball_map, ranking=ranking)
    if kind == "cosineqa":
        return CosineQA(encoder, BallMap("none"))
    raise ValueError(f"unknown model {kind!r}; choose one of {MODEL_KINDS}")


def from_config(
    config: TrainConfig,
    tokenizer: Tokenizer,
    vectors: np.ndarray | None,
    **overrides: Any,
) -> DualEncoderQA:
    """The untrained model ``config`` describes, over ``tokenizer``'s vocabulary.

    ``vectors`` is the embedding table (None: trainable random rows); ``overrides`` replace
    :func:`build_model` settings (a checkpoint's ball map and dimension, for example). The
    RDE family is built by :func:`.recurrent.build_recurrent_model`.

    Example
    -------
    >>> tok = Tokenizer(["[PAD]", "[UNK]", "a", "b"], kind="word")
    >>> type(from_config(TrainConfig(model="cosineqa", dim=4, embed_dim=3), tok, None)).__name__
    'CosineQA'
    """
    if config.model in RECURRENT_KINDS:
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
    settings: dict[str, Any] = {
        "dim": config.dim,
        "embeddings": vectors,
        "train_embeddings": config.train_embeddings,
        "embed_dim": config.embed_dim,
        "ball": "clip" if config.ball == "auto" else config.ball,
        "max_norm": config.max_norm,
        "alpha": 1.0,
        "learn_alpha": config.learn_alpha,
        "init_norm": config.init_norm,
        "ranking": config.ranking,
        "window": config.window,
    }
    return build_model(config.model, len(tokenizer.vocab), **{**settings, **overrides})


def make_optimizer(model: DualEncoderQA, config: TrainConfig) -> torch.optim.Optimizer:
    """``config.optimizer`` over the trainable parameters; L2 ``config.l2`` on matrices only."""
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


def epoch_lr(config: TrainConfig, epoch: int) -> float:
    """The learning rate of ``epoch`` (1-based) under ``config.lr_schedule``.

    ``constant``: ``lr``. ``inverse-epoch``: ``lr_t = lr / t``, the schedule of the
    attentive-pooling paper (dos Santos et al., 2016, after dos Santos & Zadrozny, 2014).

    Example
    -------
    >>> cfg = TrainConfig(lr=0.3, lr_schedule="inverse-epoch")
    >>> [round(epoch_lr(cfg, t), 3) for t in (1, 2, 3)]
    [0.3, 0.15, 0.1]
    >>> epoch_lr(TrainConfig(lr=0.3), 3)
    0.3
    """
    if epoch < 1:
        raise ValueError(f"epochs count from 1, got {epoch}")
    return config.lr / epoch if config.lr_schedule == "inverse-epoch" else config.lr


def start_epoch(optimizer: torch.optim.Optimizer, config: TrainConfig, epoch: int) -> float:
    """Set every parameter group of ``optimizer`` to :func:`epoch_lr` before ``epoch`` trains; return it."""
    lr = epoch_lr(config, epoch)
    for group in optimizer.param_groups:
        group["lr"] = lr
    return lr

"""Evaluation during training: texts to vectors, dev metrics, norm diagnostics.

Metrics are :func:`qaindex.eval.metrics.evaluate_groups` (MAP, MRR, P@1; expected values under
random tie-breaking), the same function the runtime's evaluation uses.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from qaindex.eval.datasets import QuestionGroup
from qaindex.eval.metrics import evaluate_groups as evaluate_scores
from qaindex.geometry.hyperbolic import cosine_similarity

from ..networks.attentive import is_joint
from ..networks.models import DualEncoderQA, norm_statistics
from ..networks.recurrent import RecurrentQA
from .data import Split, TextTable, load_groups, split_groups
from .joint import joint_split_scores
from .loop import resolve_device
from .result import TrainResult

__all__ = ["diagnostics", "encode_texts", "evaluate", "evaluate_data", "scores_for"]


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


def scores_for(
    model: DualEncoderQA, split: Split, table: TextTable, device: torch.device
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


def evaluate(model: DualEncoderQA, split: Split, table: TextTable, device: torch.device) -> dict[str, Any]:
    """Dev metrics (MAP, MRR, P@1; expected values under random tie-breaking)."""
    model.eval()
    if is_joint(model):  # AP-CNN / AP-biLSTM: each question's candidates by the joint score
        joint = joint_split_scores(model, split.question, split.candidates, table, device)  # type: ignore[arg-type]
        return evaluate_scores(split.groups, joint)
    scores, _, _, _ = scores_for(model, split, table, device)
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
    groups, _ = load_groups(data)
    table = TextTable(result.tokenizer, result.max_tokens)
    split = split_groups(groups, table)
    dev = resolve_device(device)
    model = result.model.to(dev)
    out = evaluate(model, split, table, dev)
    if with_norms:
        norms, extra = diagnostics(model, split, table, dev)
        out["norms"] = norms
        if "dev_cosine_of_same_vectors" in extra:
            out["cosine_of_same_vectors"] = extra["dev_cosine_of_same_vectors"]
    return out


def best_result(
    model: DualEncoderQA, state: dict[str, Any], split: Split, table: TextTable, device: torch.device, **fields: Any
) -> TrainResult:
    """The model at its best epoch (``state`` loaded, eval mode) as a :class:`TrainResult`
    with its dev :func:`diagnostics`; ``fields`` are the result's other fields."""
    model.load_state_dict(state)
    model.eval()
    norms, extra = diagnostics(model, split, table, device)
    return TrainResult(model=model, norms=norms, diagnostics=extra, device=device.type, **fields)


def diagnostics(
    model: DualEncoderQA, split: Split, table: TextTable, device: torch.device
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Norm statistics of the dev texts, and dev MAP when ranking the same vectors by cosine."""
    if is_joint(model):  # no vectors to describe
        return {}, {}
    model.eval()
    _, vectors, sums, rows = scores_for(model, split, table, device)
    norms = norm_statistics(sums, vectors, model.ball.max_norm if model.geometry == "poincare" else None)
    extra: dict[str, Any] = {}
    if model.geometry == "poincare":
        position = np.full(int(rows.max()) + 1, -1, dtype=np.int64)
        position[rows] = np.arange(len(rows))
        cos_scores = []
        with torch.no_grad():
            for q, cands in zip(split.question, split.candidates, strict=True):
                cv = vectors[torch.from_numpy(position[cands]).to(device)]
                cos_scores.append(cosine_similarity(vectors[int(position[q])][None, :], cv).double().cpu().numpy())
        extra["dev_cosine_of_same_vectors"] = evaluate_scores(split.groups, cos_scores)
    return norms, extra

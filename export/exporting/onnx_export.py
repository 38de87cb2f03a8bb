"""Export a trained model as a qaindex model directory: one pipeline for every family.

:func:`export_model` runs three stages:

1. **graph**: the family's exporter (:data:`EXPORTERS`, keyed by
   :func:`qaindex_export.networks.families.family`) traces the trained model to ONNX
   (:mod:`.onnx_graph`) — :mod:`.dual_export` (HyperQA, CosineQA, QA-CNN, QA-biLSTM: encoder +
   scorer), :mod:`.recurrent_export` (RDE family: question and answer encoders + scorer),
   :mod:`.attentive_export` (AP-CNN / AP-biLSTM: one reranker graph);
2. **parity**: the same exporter checks onnxruntime against torch on varied shapes
   (:mod:`.parity`), raising :class:`ExportError` beyond the tolerance;
3. **model directory**: written atomically by :func:`qaindex.model.write_model` (or
   :func:`qaindex.reranker.write_reranker`) with the training provenance; with ``dev_data``
   the directory is then loaded by the runtime (:class:`qaindex.Model` /
   :class:`qaindex.Reranker`: its tokenizer, chunking and ONNX sessions), the dev questions are
   scored through it and the metrics recorded as ``metrics.dev_onnx``.

:func:`set_ranking` re-exports a shipped Poincaré model's scorer with another ranking rule.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from qaindex import Model, Reranker
from qaindex.eval.datasets import QuestionGroup
from qaindex.eval.metrics import evaluate_groups
from qaindex.model import write_model
from qaindex.reranker import write_reranker
from qaindex.store.atomic_files import file_entry, fsync_tree, temporary_sibling, write_json_atomic

from ..networks.families import family
from ..networks.models import RANKINGS
from ..training.data import load_groups
from ..training.result import TrainResult
from . import attentive_export, dual_export, recurrent_export
from .dual_export import check_parity, folded_encoder, scorer_module
from .export_forms import PoincareScorer
from .onnx_graph import Exported, ExportError, export_encoder, export_scorer, session
from .parity import SCORER_SHAPES, Parity, ball_cases, check_scorer

__all__ = [
    "DEFAULT_MAX_BYTES",
    "EXPORTERS",
    "ExportError",
    "check_parity",
    "export_encoder",
    "export_model",
    "export_scorer",
    "folded_encoder",
    "runtime_metrics",
    "scorer_module",
    "set_ranking",
]

DEFAULT_MAX_BYTES = 20_000_000
TABLE_DTYPES = ("auto", "float32", "float16")

#: family → exporter: ``(result, *, tolerance, table_dtype, max_bytes) -> Exported``
EXPORTERS: dict[str, Callable[..., Exported]] = {
    "dual": dual_export.export_graphs,
    "sequence": dual_export.export_graphs,
    "recurrent": recurrent_export.export_graphs,
    "attentive": attentive_export.export_graphs,
}


def export_model(
    result: TrainResult,
    directory: str | os.PathLike[str],
    *,
    name: str | None = None,
    table_dtype: str = "auto",
    max_bytes: int = DEFAULT_MAX_BYTES,
    dev_data: str | os.PathLike[str] | Sequence[QuestionGroup] | None = None,
    tolerance: float | None = None,
) -> Path:
    """Write ``result`` as a qaindex model directory, after checking ONNX parity.

    Parameters
    ----------
    result : TrainResult
        From :func:`qaindex_export.training.train.train` or
        :func:`~qaindex_export.training.checkpoints.load_checkpoint`.
    directory : path-like
        Target model directory (replaced atomically if it is one already).
    name : str, optional
        Model name (default ``"<model>-<embeddings>[-<ball map>]"``).
    table_dtype : {"auto", "float32", "float16"}, keyword-only
        Storage of a bag-of-words model's per-token table; ``auto`` uses float32 unless the
        model would then exceed ``max_bytes``.
    max_bytes : int, keyword-only
        Size budget for ``auto``.
    dev_data : path or groups, optional
        Also evaluate these through the written directory, as the runtime loads it, and record
        the metrics (``dev_onnx``).
    tolerance : float, optional
        Parity tolerance; default 1e-4 (float32 table, and float16 table against its own
        rounded torch copy).

    Returns
    -------
    Path

    Raises
    ------
    ExportError
        If onnxruntime and torch disagree, or the graphs have static batch/length axes.

    Example
    -------
    >>> export_model(result, "models/hyperqa-wikiqa")  # doctest: +SKIP
    PosixPath('models/hyperqa-wikiqa')
    """
    if table_dtype not in TABLE_DTYPES:
        raise ValueError(f"table_dtype must be one of {TABLE_DTYPES}, got {table_dtype!r}")
    exporter = EXPORTERS[family(result.config.model)]
    tol = 1e-4 if tolerance is None else tolerance
    exported = exporter(result, tolerance=tol, table_dtype=table_dtype, max_bytes=max_bytes)
    metrics: dict[str, Any] = {
        "dev": result.dev,
        "best_epoch": result.best_epoch,
        "parity": exported.parity,
        **exported.metrics,
    }
    training = result.provenance(**exported.training, torch_version=torch.__version__, device=result.device)
    write = write_model if exported.kind == "model" else write_reranker

    def publish() -> Path:
        return write(
            directory,
            name=name or exported.name,
            tokenizer=result.tokenizer,
            max_tokens=result.max_tokens,
            training=training,
            metrics=metrics,
            **exported.files,
        )

    path = publish()
    if dev_data is not None:  # through the runtime, then recorded (the directory is rewritten whole)
        groups, _ = load_groups(dev_data)
        metrics["dev_onnx"] = runtime_metrics(path, groups, kind=exported.kind, rank_by=exported.rank_by)
        path = publish()
    return path


def runtime_metrics(
    directory: Path, groups: Sequence[QuestionGroup], *, kind: str = "model", rank_by: str = "score"
) -> dict[str, Any]:
    """MAP, MRR, P@1 of ``groups`` through a model directory as the runtime loads and scores it.

    A model directory (``kind="model"``) ranks each question's candidates by
    :meth:`qaindex.Model.score`'s ``score`` (``rank_by="distance"``: by lowest distance), a
    reranker directory (``kind="reranker"``) by :meth:`qaindex.Reranker.score`.
    """
    if kind == "reranker":
        reranker = Reranker.load(directory, device="cpu")
        scores = [reranker.score(g.question, [c.answer for c in g.candidates]) for g in groups]
        return evaluate_groups(groups, [s.astype(np.float64) for s in scores])
    model = Model.load(directory, device="cpu")
    qv = model.encode([g.question for g in groups], role="question")
    scores = []
    for i, g in enumerate(groups):
        cv = model.encode([c.answer for c in g.candidates], role="answer")
        score, distance = model.score(qv[i : i + 1], cv[None])
        scores.append((-distance[0] if rank_by == "distance" else score[0]).astype(np.float64))
    return evaluate_groups(groups, scores)


def set_ranking(directory: str | os.PathLike[str], ranking: str, *, tolerance: float = 1e-4) -> Path:
    """Re-export a Poincaré model directory's scorer with another ranking rule, in place.

    Keeps the encoder and the trained ``w_f``, ``b_f`` (from the manifest's ``score``); writes a
    new ``scorer.onnx`` computing ``-(w_f f + b_f)`` (``f = d`` or ``d(q, a) - d(0, a)``,
    :class:`~.export_forms.PoincareScorer`), checks it against torch on points spread
    over the ball, and updates the manifest's ``geometry.ranking``, ``score`` and file
    checksums. The directory is replaced atomically (a sibling copy renamed into place).

    Parameters
    ----------
    directory : path-like
        A qaindex model directory with the Poincaré geometry.
    ranking : {"relative", "distance"}
    tolerance : float, keyword-only
        Parity tolerance (as in :func:`check_parity`).

    Returns
    -------
    Path

    Example
    -------
    >>> set_ranking("qaindex/models/default", "relative")  # doctest: +SKIP
    PosixPath('qaindex/models/default')
    """
    if ranking not in RANKINGS:
        raise ValueError(f"ranking must be one of {RANKINGS}, got {ranking!r}")
    target = Path(directory)
    manifest = Model.read_manifest(target)
    if manifest["geometry"]["name"] != "poincare":
        raise ExportError(f"{target}: geometry {manifest['geometry']['name']!r} has no ranking rule to set")
    params = manifest["score"]["parameters"]
    w_f, b_f = float(params["w_f"]), float(params["b_f"])
    scorer = PoincareScorer(w_f, b_f, ranking).eval()
    dim = int(manifest["dimension"])
    graph = export_scorer(scorer, dim)
    cases = ball_cases(np.random.default_rng(0), dim, float(manifest["geometry"]["max_norm"]), SCORER_SHAPES[:3])
    check_scorer(Parity(tolerance), session(graph), scorer, cases)
    relative = ranking == "relative"
    manifest["geometry"]["ranking"] = ranking
    manifest["score"] = {
        **manifest["score"],
        "formula": "-(w_f * f + b_f), f = d(q, a) - d(0, a)" if relative else "-(w_f * d + b_f)",
        "distance_output": "d(q, a), the plain Poincaré distance",
    }
    with temporary_sibling(target) as tmp:
        for name in manifest["files"]:
            (tmp / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(target / name, tmp / name)
        for extra in target.iterdir():  # e.g. MODEL_CARD.md
            if extra.is_file() and extra.name not in manifest["files"] and extra.name != "manifest.json":
                shutil.copyfile(extra, tmp / extra.name)
        (tmp / manifest["graphs"]["scorer"]).write_bytes(graph)
        manifest["files"] = {name: file_entry(tmp / name) for name in manifest["files"]}
        write_json_atomic(tmp / "manifest.json", manifest)
        fsync_tree(tmp)
        old = target.with_name(f".{target.name}.old-{os.getpid()}")
        os.replace(target, old)
        os.replace(tmp, target)
        shutil.rmtree(old, ignore_errors=True)
    return target

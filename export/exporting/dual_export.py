"""Exporter of the dual-encoder families: HyperQA / CosineQA (bag of words) and QA-CNN / QA-biLSTM.

:func:`export_graphs` makes (for :func:`.onnx_export.export_model`):

- ``encoder.onnx``: ``input_ids``, ``attention_mask`` (int64, batch × seq) → ``vectors``
  (float32, batch × dim). The bag-of-words network is folded into one per-token table
  ``ReLU(W_p E[v] + b_p)`` (the same function: a text's vector is the sum of its tokens'
  rows), so the graph is a gather, a masked sum and the ball map. The table is stored as
  float16 (cast to float32 in the graph) when float32 would make the model larger than
  ``max_bytes``. QA-CNN / QA-biLSTM export the network itself (float32 embeddings).
- ``scorer.onnx``: ``query`` (n × dim), ``candidates`` (n × m × dim) → ``score`` (n × m,
  higher is better) and ``distance``; traced from modules that call
  :mod:`qaindex.geometry.hyperbolic` (one formula for training, export and runtime).

:func:`check_parity` then runs onnxruntime against torch on varied batch sizes and lengths
(including length 1, padding and empty rows) and raises :class:`ExportError` when they differ
by more than the tolerance.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from ..networks.encoders import BiLSTMEncoder, SequenceQA
from ..networks.encoders import export_module as sequence_export_module
from ..networks.models import DualEncoderQA
from ..training.result import TrainResult
from .export_forms import CosineScorer, FoldedEncoder, PoincareScorer
from .onnx_graph import RNN_EXPORTER, Exported, ExportError, export_encoder, export_scorer, session
from .parity import Parity, ball_cases, check_scorer, padded_batch

__all__ = ["check_parity", "export_graphs", "folded_encoder", "scorer_module"]

ENCODER_SHAPES = ((1, 1), (2, 2), (5, 7), (17, 40), (1, 40), (3, 1))  # (batch, length)


def folded_encoder(model: DualEncoderQA, *, dtype: torch.dtype = torch.float32) -> FoldedEncoder:
    """The encoder as a per-token table (``dtype``) + masked sum + ball map, on the CPU.

    Example
    -------
    >>> from qaindex_export.networks.families import build_model
    >>> enc = folded_encoder(build_model("hyperqa", 10, dim=4, embed_dim=3), dtype=torch.float16)
    >>> enc.table.dtype, tuple(enc.table.shape)
    (torch.float16, (10, 4))
    """
    model = model.cpu().eval()
    table = model.encoder.folded_table().to(dtype)
    return FoldedEncoder(table, model.ball).eval()


def scorer_module(model: DualEncoderQA) -> torch.nn.Module:
    """The scorer with the trained ``w_f``, ``b_f`` frozen in.

    Example
    -------
    >>> from qaindex_export.networks.families import build_model
    >>> type(scorer_module(build_model("cosineqa", 10, dim=4, embed_dim=3))).__name__
    'CosineScorer'
    """
    w_f, b_f = model.w_f.item(), model.b_f.item()
    if model.geometry == "poincare":
        return PoincareScorer(w_f, b_f, getattr(model, "ranking", "distance")).eval()
    return CosineScorer(w_f, b_f).eval()


def check_parity(
    model: DualEncoderQA,
    encoder_graph: bytes,
    scorer_graph: bytes,
    *,
    reference: torch.nn.Module | None = None,
    tolerance: float = 1e-4,
    seed: int = 0,
) -> dict[str, float]:
    """Compare onnxruntime with torch on varied shapes; raise :class:`ExportError` on mismatch.

    Encoder inputs: batch sizes 1, 2, 5 and 17 with lengths 1, 2, 7 and 40, random padding,
    a row of length 1 and an empty row. The reference is ``reference`` (the exported module
    itself, e.g. with its float16-rounded table) or else the unfolded ``model``. Scorer
    inputs: n in {1, 3}, m in {1, 4, 9}, points anywhere in the ball, on the clip, at the
    origin, and identical query/candidate pairs; the reference is ``model.score``.

    Parameters
    ----------
    model : DualEncoderQA
    encoder_graph, scorer_graph : bytes
    reference : FoldedEncoder, optional
    tolerance : float
        Largest allowed ``|onnx - torch| / max(1, |torch|)`` (absolute for values ≤ 1).
    seed : int

    Returns
    -------
    dict
        ``{"encoder_max_abs_diff", "score_max_abs_diff", "distance_max_abs_diff",
        "fold_max_abs_diff"}``; the last compares the reference with the unfolded model
        (non-zero for a float16 table).

    Example
    -------
    >>> check_parity(model, encoder_bytes, scorer_bytes)  # doctest: +SKIP
    {'encoder_max_abs_diff': 5.9e-08, ...}
    """
    model = model.cpu().eval()
    rng = np.random.default_rng(seed)
    encoder = session(encoder_graph)
    vocab = model.encoder.embedding.shape[0]
    check = Parity(tolerance)
    fold = 0.0
    with torch.no_grad():
        for batch, length in ENCODER_SHAPES:
            ids, mask = padded_batch(rng, vocab, batch, length, last=1 if batch == 2 else 0)
            (got,) = encoder.run(["vectors"], {"input_ids": ids, "attention_mask": mask})
            t_ids, t_mask = torch.from_numpy(ids), torch.from_numpy(mask)
            plain = model(t_ids, t_mask).numpy()
            want = reference(t_ids, t_mask).numpy() if reference is not None else plain
            fold = max(fold, float(np.abs(want - plain).max(initial=0.0)))
            check.record("encoder", got, want)
    max_norm = model.ball.max_norm if model.geometry == "poincare" else None
    cases = ball_cases(rng, model.encoder.dim, max_norm)
    check_scorer(check, session(scorer_graph), lambda q, c: model.score(q[:, None, :], c), cases)
    return {**check.result(), "fold_max_abs_diff": fold}


def export_graphs(result: TrainResult, *, tolerance: float, table_dtype: str, max_bytes: int) -> Exported:
    """The encoder and scorer graphs of a HyperQA / CosineQA / QA-CNN / QA-biLSTM ``result``, checked.

    ``table_dtype`` (``auto``: float32 unless the model would exceed ``max_bytes``) stores the
    bag-of-words per-token table; the sequence models keep float32.
    """
    model: Any = result.model.cpu().eval()
    vocab, dim, width = model.encoder.embedding.shape[0], model.encoder.dim, model.encoder.width
    sequence = isinstance(model, SequenceQA)
    if sequence:  # QA-CNN / QA-biLSTM: the network itself, float32 embeddings
        width = model.encoder.embed_width
        table_dtype = "float32"
    if table_dtype == "auto":
        overhead = 1_000_000  # vocabulary, manifest, scorer and graph structure, generously
        table_dtype = "float32" if vocab * width * 4 + overhead <= max_bytes else "float16"
    dtype = torch.float32 if table_dtype == "float32" else torch.float16
    encoder_module: Any = sequence_export_module(model) if sequence else folded_encoder(model, dtype=dtype)
    rnn = sequence and isinstance(model.encoder, BiLSTMEncoder)
    encoder_graph = export_encoder(encoder_module, exporter=RNN_EXPORTER if rnn else "dynamo")
    scorer_graph = export_scorer(scorer_module(model), dim)
    parity = check_parity(model, encoder_graph, scorer_graph, reference=encoder_module, tolerance=tolerance)
    if dtype == torch.float32 and parity["fold_max_abs_diff"] > 1e-4:
        raise ExportError(f"folding the encoder changed it by {parity['fold_max_abs_diff']:.3g}; please report this")
    cfg = result.config
    return Exported(
        kind="model",
        name="-".join(
            [cfg.model, cfg.embeddings.partition(":")[0], *([model.ball.kind] if model.geometry == "poincare" else [])]
        ),
        files={
            "geometry": model.geometry_info(),
            "dimension": dim,
            "encoder": encoder_graph,
            "scorer": scorer_graph,
            "score": model.score_definition(),
            "static_encoder": not sequence,  # a folded per-token table summed: answers read whole
            "parameters": {
                **model.parameter_counts(),
                "exported_table": {"rows": int(vocab), "dim": int(width), "dtype": table_dtype},
            },
        },
        parity=parity,
        metrics={"norms_dev": result.norms, **result.diagnostics},
        training={
            "ball_selection": result.selection,
            "encoder": model.describe()
            if sequence
            else f"folded per-token table ReLU(W_p E + b_p), {table_dtype}, masked sum, ball map",
            "loss": "mean over triples of max(0, margin - score(q, a) + score(q, a'))",
        },
    )

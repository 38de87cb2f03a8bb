"""Exporter of the attentive family (AP-CNN / AP-biLSTM): one two-input reranker graph.

:func:`export_graphs` makes (for :func:`.onnx_export.export_model`, which writes
a ``kind: "reranker"`` model directory through :func:`qaindex.reranker.write_reranker`):

- ``reranker.onnx``: ``question_ids``, ``question_mask`` (n, M), ``answer_ids``,
  ``answer_mask`` (n, L) → ``scores`` (n,), with ``n``, ``M`` and ``L`` symbolic;

checked by :func:`check_reranker_parity` (onnxruntime against torch on varied shapes).
"""

from __future__ import annotations

import copy

import numpy as np
import torch

from ..networks.attentive import AttentiveQA
from ..networks.encoders import BiLSTMEncoder
from ..training.result import TrainResult
from .onnx_graph import RNN_EXPORTER, Exported, export_traced, session
from .parity import Parity, padded_batch

__all__ = ["check_reranker_parity", "export_graphs", "export_module", "export_reranker_graph"]

PARITY_SHAPES = ((1, 1, 1), (2, 2, 5), (5, 7, 3), (9, 12, 40), (1, 40, 2), (3, 1, 17))  # (n, M, L)


def export_module(model: AttentiveQA) -> AttentiveQA:
    """The model to export: a CPU float32 copy without gradients (the same function)."""
    module = copy.deepcopy(model).cpu().float().eval()
    return module.requires_grad_(False)


def export_reranker_graph(module: AttentiveQA, *, exporter: str | None = None) -> bytes:
    """ONNX bytes: ``(question_ids, question_mask (n, M), answer_ids, answer_mask (n, L)) -> scores (n,)``.

    ``n``, ``M`` and ``L`` are symbolic (checked after export). The runtime repeats a
    single question for its ``n`` candidates. ``exporter`` (default: ``torchscript`` for
    AP-biLSTM, :data:`~.onnx_graph.RNN_EXPORTER`; ``dynamo`` for AP-CNN).
    """
    if exporter is None:
        exporter = RNN_EXPORTER if isinstance(module.encoder, BiLSTMEncoder) else "dynamo"
    vocab = int(module.encoder.embedding.shape[0])
    v = [min(i, vocab - 1) for i in range(2, 9)]
    q_ids = torch.tensor([[v[0], v[1], 0], [v[2], 0, 0]], dtype=torch.int64)
    q_mask = torch.tensor([[1, 1, 0], [1, 0, 0]], dtype=torch.int64)
    a_ids = torch.tensor([[v[3], v[4], v[5], 0], [v[6], v[0], 0, 0]], dtype=torch.int64)
    a_mask = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0]], dtype=torch.int64)
    question, answer = {0: "n", 1: "question_seq"}, {0: "n", 1: "answer_seq"}
    return export_traced(
        module,
        (q_ids, q_mask, a_ids, a_mask),
        ["question_ids", "question_mask", "answer_ids", "answer_mask"],
        ["scores"],
        {"question_ids": question, "question_mask": question, "answer_ids": answer, "answer_mask": answer},
        arg_names=["q_ids", "q_mask", "a_ids", "a_mask"],
        exporter=exporter,
        what=module.kind,
    )


def check_reranker_parity(
    model: AttentiveQA, graph: bytes, *, tolerance: float = 1e-4, seed: int = 0
) -> dict[str, float]:
    """onnxruntime against torch on varied shapes; raise :class:`~.onnx_graph.ExportError`.

    Shapes (n, M, L): (1, 1, 1), (2, 2, 5), (5, 7, 3), (9, 12, 40), (1, 40, 2) and
    (3, 1, 17), with random padding, a one-token text and an empty answer.

    Returns
    -------
    dict
        ``{"reranker_max_abs_diff": ...}``.
    """
    model = model.cpu().eval()
    rng = np.random.default_rng(seed)
    reranker = session(graph)
    vocab = int(model.encoder.embedding.shape[0])
    check = Parity(tolerance)
    with torch.no_grad():
        for n, m, length in PARITY_SHAPES:
            q_ids, q_mask = padded_batch(rng, vocab, n, m, last=1)
            a_ids, a_mask = padded_batch(rng, vocab, n, length, last=0)
            feeds = {"question_ids": q_ids, "question_mask": q_mask, "answer_ids": a_ids, "answer_mask": a_mask}
            (got,) = reranker.run(["scores"], feeds)
            want = model(*(torch.from_numpy(x) for x in (q_ids, q_mask, a_ids, a_mask))).numpy()
            check.record("reranker", got, want, label="reranker scores")
    return check.result()


def export_graphs(result: TrainResult, *, tolerance: float, table_dtype: str, max_bytes: int) -> Exported:
    """The reranker graph of an AP-CNN / AP-biLSTM ``result``, checked (``table_dtype``, ``max_bytes``: unused)."""
    model = result.model
    assert isinstance(model, AttentiveQA)
    module = export_module(model)
    graph = export_reranker_graph(module)
    parity = check_reranker_parity(module, graph, tolerance=tolerance)
    cfg = result.config
    rows, width = int(module.encoder.embedding.shape[0]), module.encoder.embed_width
    return Exported(
        kind="reranker",
        name=f"{cfg.model}-{cfg.embeddings.partition(':')[0]}",
        files={
            "dimension": module.encoder.dim,
            "graph": graph,
            "score": module.score_definition(),
            "parameters": {
                **model.parameter_counts(),
                "exported_table": {"rows": rows, "dim": width, "dtype": "float32"},
            },
        },
        parity=parity,
        training={
            "network": module.describe(),
            "loss": "mean over triples of max(0, margin - score(q, a) + score(q, a'))",
        },
    )

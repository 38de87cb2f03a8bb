"""Export RDE / RDE-LTC / HRDE / HRDE-LTC as a qaindex model directory (bilinear geometry).

:func:`export_graphs` makes (for :func:`.onnx_export.export_model`, which writes
them through :func:`qaindex.model.write_model`):

- ``encoder.onnx`` (question role): ``input_ids``, ``attention_mask`` (batch, seq) → ``q``;
- ``answer_encoder.onnx``: the same inputs, or (batch, chunks, tokens) for HRDE, → ``M e``;
- ``scorer.onnx``: :func:`qaindex.geometry.bilinear.bilinear_score` with the trained ``b`` frozen in;
- the manifest with ``geometry = {"name": "bilinear", "bias": b}`` and, for HRDE, the
  ``chunking`` of answers (:mod:`qaindex.text.chunking`).

The GRU graphs are exported with torch's TorchScript exporter by default (``exporter=
"torchscript"``): on this project's 2-core machine it took 0.1-0.5 s per graph against about
20 s for the dynamo exporter, whose second RNN export in one process pins the sequence length
(measured here: "static axis 1 (3)"; see the toolchain notes), so ``exporter="dynamo"`` runs
each GRU graph in a fresh Python process. Either way the example inputs have every dynamic
size ≥ 2, the saved graphs must have symbolic axes and pass ``onnx.checker``, and
:func:`check_recurrent_parity` then compares onnxruntime with torch on batch sizes 1-17,
lengths 1-40, padding, empty texts, and for HRDE one to many chunks.

Example
-------
>>> export_model(result, "models/hrde-wikiqa")  # doctest: +SKIP
PosixPath('models/hrde-wikiqa')
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from qaindex.geometry import bilinear
from qaindex.text.chunking import Chunking, manifest_entry

from ..networks.recurrent import AnswerEncoder, BilinearScorer, QuestionEncoder, RecurrentQA
from ..training.result import TrainResult
from .onnx_graph import (
    EXPORTERS,
    RNN_EXPORTER,
    Exported,
    ExportError,
    export_in_subprocess,
    export_scorer,
    export_traced,
    run_child,
)
from .onnx_graph import session as onnx_session
from .parity import Parity, check_scorer, padded_batch

__all__ = ["EXPORTERS", "check_recurrent_parity", "export_graph", "export_graphs"]


def _spec(model: Any) -> dict[str, Any]:
    return {
        "kind": model.kind,
        "vocab_size": int(model.embedding.shape[0]),
        "hidden": model.dim,
        "embed_dim": int(model.embedding.shape[1]),
        "topics": max(1, model.topics),
    }


def _example(role: str, hierarchical: bool, vocab: int) -> tuple[torch.Tensor, torch.Tensor, dict[int, str]]:
    """Example ``(input_ids, attention_mask)`` of the ``role`` encoder, every size ≥ 2, and its named axes."""
    v = lambda i: min(i, vocab - 1)  # noqa: E731
    if role == "answer" and hierarchical:
        ids = torch.tensor(
            [[[v(2), v(3), v(5)], [v(4), 0, 0]], [[v(6), v(7), 0], [0, 0, 0]]], dtype=torch.int64
        )  # (2 texts, 2 chunks, 3 tokens)
        return ids, (ids != 0).to(torch.int64), {0: "batch", 1: "chunks", 2: "tokens"}
    ids = torch.tensor([[v(2), v(3), 0], [v(4), 0, 0]], dtype=torch.int64)
    return ids, (ids != 0).to(torch.int64), {0: "batch", 1: "seq"}


def _encoder_graph(model: Any, role: str, exporter: str) -> bytes:
    """The ``role`` ("question" or "answer") encoder graph through ``exporter``, in this process."""
    model = model.cpu().eval()
    module = (QuestionEncoder if role == "question" else AnswerEncoder)(model).eval()
    ids, mask, axes = _example(role, model.hierarchical, int(model.embedding.shape[0]))
    names = ["input_ids", "attention_mask"]
    return export_traced(
        module,
        (ids, mask),
        names,
        ["vectors"],
        {name: axes for name in names},
        arg_names=names,
        exporter=exporter,
        what=f"the {role} encoder of {model.kind}",
    )


def export_graph(model: Any, role: str) -> bytes:
    """ONNX bytes of ``model``'s ``role`` ("question", "answer" or "scorer") graph, dynamo exporter, in this process.

    Prefer the TorchScript exporter or a fresh process for the GRU graphs (see the module docstring).
    """
    if role == "scorer":
        model = model.cpu().eval()
        return export_scorer(BilinearScorer(model.bias).eval(), model.dim)
    return _encoder_graph(model, role, "dynamo")


def _export_torchscript(model: Any, role: str) -> bytes:
    """The ``role`` encoder graph through the TorchScript exporter (``dynamo=False``), in this process."""
    return _encoder_graph(model, role, "torchscript")


def _export_in_subprocess(model: Any, role: str) -> bytes:
    """:func:`export_graph` run in a fresh interpreter (weights passed as safetensors, no pickle)."""
    what = f"the {role} encoder of {model.kind}"
    return export_in_subprocess(model, {**_spec(model), "role": role}, __name__, what=what)


def _graph_in_child(spec: dict[str, Any], weights: dict[str, torch.Tensor]) -> bytes:
    model = RecurrentQA(
        spec["kind"], spec["vocab_size"], hidden=spec["hidden"], embed_dim=spec["embed_dim"], topics=spec["topics"]
    )
    model.load_state_dict(weights)
    return export_graph(model, spec["role"])


def _refuse_unstable(
    model: Any, role: str, ids: torch.Tensor, mask: torch.Tensor, want: np.ndarray, tolerance: float
) -> None:
    """Raise :class:`ExportError` if torch's own float32 ``role`` vectors differ from float64 beyond ``tolerance``.

    A GRU whose recurrent weights have grown large (spectral norms far above 1) can amplify a
    float32 rounding error at every step: then torch in float32, torch in float64 and
    onnxruntime each give different vectors for the same text, and no graph can reproduce
    the model. That is a property of the trained weights, not of the export, and the message
    says so.
    """
    exact = copy.deepcopy(model).double()
    with torch.no_grad():
        encode = exact.encode_answer if role == "answer" else exact.encode_question
        reference = encode(ids, mask).numpy()
    drift = float((np.abs(want - reference) / np.maximum(1.0, np.abs(reference))).max(initial=0.0))
    if drift > tolerance:
        raise ExportError(
            f"parity check failed: the trained {model.kind} model is numerically unstable (its GRU amplifies "
            f"rounding: torch's own float32 and float64 {role} vectors differ by {drift:.3g}, tolerance "
            f"{tolerance:g}), so no export can reproduce it; train again with a lower --lr or --optimizer adam"
        )


def check_recurrent_parity(
    model: Any,
    question_graph: bytes,
    answer_graph: bytes,
    scorer_graph: bytes,
    *,
    tolerance: float = 1e-4,
    seed: int = 0,
) -> dict[str, float]:
    """onnxruntime against torch on varied shapes; :class:`ExportError` beyond ``tolerance``.

    Questions (and non-hierarchical answers): (batch, length) in (1, 1), (2, 2), (5, 7),
    (17, 40), (1, 40), (3, 1) with random padding, a one-token row and an empty row. HRDE
    answers: (batch, chunks, tokens) in (1, 1, 1), (2, 1, 5), (3, 4, 6), (6, 8, 3), (1, 6, 32),
    (4, 3, 1) with random chunk counts and lengths, a single-chunk text and an empty text.
    Where onnxruntime differs and torch's own float32 vectors differ from float64 as much, the
    error says the trained model is numerically unstable rather than the export unfaithful.

    Returns
    -------
    dict
        ``{"question_max_abs_diff", "answer_max_abs_diff", "score_max_abs_diff", "distance_max_abs_diff"}``
    """
    model = model.cpu().eval()
    rng = np.random.default_rng(seed)
    vocab = int(model.embedding.shape[0])
    sessions = {"question": onnx_session(question_graph), "answer": onnx_session(answer_graph)}
    check = Parity(tolerance)

    def chunked_batch(batch: int, chunks: int, tokens: int) -> tuple[np.ndarray, np.ndarray]:
        ids = rng.integers(1, vocab, size=(batch, chunks, tokens)).astype(np.int64)
        n_chunks = rng.integers(1, chunks + 1, size=batch)
        n_chunks[0] = chunks
        if batch > 2:
            n_chunks[1], n_chunks[-1] = 1, 0  # a single chunk, an empty text
        lengths = rng.integers(1, tokens + 1, size=(batch, chunks))
        lengths[0, 0] = tokens
        lengths = np.where(np.arange(chunks)[None, :] < n_chunks[:, None], lengths, 0)
        mask = (np.arange(tokens)[None, None, :] < lengths[:, :, None]).astype(np.int64)
        return np.where(mask == 1, ids, 0), mask

    with torch.no_grad():
        for role in ("question", "answer"):
            chunked = role == "answer" and model.hierarchical
            shapes: Sequence[tuple[int, ...]] = (
                ((1, 1, 1), (2, 1, 5), (3, 4, 6), (6, 8, 3), (1, 6, 32), (4, 3, 1))
                if chunked
                else ((1, 1), (2, 2), (5, 7), (17, 40), (1, 40), (3, 1))
            )
            for shape in shapes:
                if chunked:
                    ids, mask = chunked_batch(*shape)
                else:
                    ids, mask = padded_batch(rng, vocab, *shape, last=1 if shape[0] == 2 else 0)
                (got,) = sessions[role].run(["vectors"], {"input_ids": ids, "attention_mask": mask})
                t_ids, t_mask = torch.from_numpy(ids), torch.from_numpy(mask)
                encode = model.encode_answer if role == "answer" else model.encode_question
                want = encode(t_ids, t_mask).numpy()
                try:
                    check.record(role, got, want)
                except ExportError:
                    _refuse_unstable(model, role, t_ids, t_mask, want, tolerance)
                    raise
    cases = []
    for n, m in ((1, 1), (3, 4), (2, 9), (1, 4)):
        query = rng.normal(size=(n, model.dim)).astype(np.float32)
        cands = rng.normal(size=(n, m, model.dim)).astype(np.float32)
        cands[0, 0] = 0.0
        cases.append((query, cands))
    reference = lambda q, c: bilinear.bilinear_score(q, c, model.bias)  # noqa: E731
    check_scorer(check, onnx_session(scorer_graph), reference, cases)
    return check.result()


SHARED_TABLE = "embeddings.data"


def _share_embedding_table(graphs: list[bytes], table: np.ndarray) -> tuple[list[bytes], bytes]:
    """Move the word-embedding table out of both encoder graphs into one shared file.

    Each graph's initializer equal to ``table`` becomes ONNX external data pointing at
    :data:`SHARED_TABLE` (offset 0), so the question and answer encoders store the table once
    (onnxruntime reads it relative to the graph's folder). Graphs without such an initializer
    are returned unchanged.
    """
    import onnx
    from onnx import numpy_helper

    raw = np.ascontiguousarray(table, dtype="<f4").tobytes()
    out = []
    for graph in graphs:
        proto = onnx.load_from_string(graph)
        for init in proto.graph.initializer:
            if tuple(init.dims) == table.shape and init.data_type == onnx.TensorProto.FLOAT:
                if not np.array_equal(numpy_helper.to_array(init), table):
                    continue
                init.ClearField("raw_data")
                init.ClearField("float_data")
                init.data_location = onnx.TensorProto.EXTERNAL
                del init.external_data[:]
                for key, value in (("location", SHARED_TABLE), ("offset", "0"), ("length", str(len(raw)))):
                    entry = init.external_data.add()
                    entry.key, entry.value = key, value
        out.append(bytes(proto.SerializeToString()))
    return out, raw


def export_graphs(
    result: TrainResult, *, tolerance: float, table_dtype: str, max_bytes: int, exporter: str = RNN_EXPORTER
) -> Exported:
    """The question, answer and scorer graphs of an RDE-family ``result``, checked.

    ``exporter`` (``torchscript`` or ``dynamo``) exports the GRU graphs (see the module
    docstring); the scorer always uses dynamo. ``table_dtype`` and ``max_bytes`` are unused
    (the shared embedding table is float32).
    """
    if exporter not in EXPORTERS:
        raise ValueError(f"exporter must be one of {EXPORTERS}, got {exporter!r}")
    model: Any = result.model.cpu().eval()
    export = _export_torchscript if exporter == "torchscript" else _export_in_subprocess
    question_graph = export(model, "question")
    answer_graph = export(model, "answer")
    scorer_graph = export_graph(model, "scorer")
    parity = check_recurrent_parity(model, question_graph, answer_graph, scorer_graph, tolerance=tolerance)
    cfg = result.config
    chunking = None
    if model.hierarchical:
        assert isinstance(model.chunking, Chunking)
        chunking = {
            "answer": manifest_entry(
                method=cfg.chunking, max_chunks=cfg.max_chunks, max_chunk_tokens=cfg.max_chunk_tokens
            )
        }
    table = model.embedding.detach().cpu().numpy().astype(np.float32)
    (question_graph, answer_graph), shared = _share_embedding_table([question_graph, answer_graph], table)
    return Exported(
        kind="model",
        name=f"{cfg.model}-{cfg.embeddings.partition(':')[0]}",
        files={
            "geometry": {"name": "bilinear", "bias": model.bias},
            "dimension": model.dim,
            "encoder": question_graph,
            "answer_encoder": answer_graph,
            "scorer": scorer_graph,
            "score": model.score_definition(),
            "parameters": model.parameter_counts(),
            "chunking": chunking,
            "extra_files": {SHARED_TABLE: shared},
        },
        parity=parity,
        training={
            "encoder": model.describe(),
            "exporter": exporter,
            "loss": "binary cross-entropy: mean over correct answers of -log p + mean over wrong ones of -log(1 - p)"
            if cfg.effective_loss == "cross-entropy"
            else "mean over triples of max(0, margin - score(q, a) + score(q, a'))",
        },
        rank_by="distance",  # q.Ma: the sigmoid of the score saturates in float32
    )


if __name__ == "__main__":
    import sys

    run_child(sys.argv[1], _graph_in_child)

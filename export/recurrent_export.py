"""Export RDE / RDE-LTC / HRDE / HRDE-LTC as a qaindex model directory (bilinear geometry).

:func:`export_recurrent` writes, through :func:`qaindex.model.write_model`:

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
>>> export_recurrent(result, "models/hrde-wikiqa")  # doctest: +SKIP
PosixPath('models/hrde-wikiqa')
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from qaindex.eval.datasets import QuestionGroup
from qaindex.geometry import bilinear
from qaindex.text.chunking import Chunking, manifest_entry

__all__ = ["EXPORTERS", "check_recurrent_parity", "export_graph", "export_recurrent"]

EXPORTERS = ("torchscript", "dynamo")


def _spec(model: Any) -> dict[str, Any]:
    return {
        "kind": model.kind,
        "vocab_size": int(model.embedding.shape[0]),
        "hidden": model.dim,
        "embed_dim": int(model.embedding.shape[1]),
        "topics": max(1, model.topics),
    }


def _example(role: str, hierarchical: bool, vocab: int) -> tuple[torch.Tensor, torch.Tensor, dict[str, Any], int]:
    from torch.export import Dim

    v = lambda i: min(i, vocab - 1)  # noqa: E731
    if role == "answer" and hierarchical:
        ids = torch.tensor(
            [[[v(2), v(3), v(5)], [v(4), 0, 0]], [[v(6), v(7), 0], [0, 0, 0]]], dtype=torch.int64
        )  # (2 texts, 2 chunks, 3 tokens)
        mask = (ids != 0).to(torch.int64)
        axes = {0: Dim("batch"), 1: Dim("chunks"), 2: Dim("tokens")}
        return ids, mask, {"input_ids": axes, "attention_mask": axes}, 3
    ids = torch.tensor([[v(2), v(3), 0], [v(4), 0, 0]], dtype=torch.int64)
    mask = (ids != 0).to(torch.int64)
    axes = {0: Dim("batch"), 1: Dim("seq")}
    return ids, mask, {"input_ids": axes, "attention_mask": axes}, 2


def export_graph(model: Any, role: str) -> bytes:
    """ONNX bytes of ``model``'s ``role`` ("question", "answer" or "scorer") graph, in this process.

    Prefer :func:`_export_in_subprocess` for the GRU graphs (one per process).
    """
    from .onnx_export import _export, export_scorer
    from .recurrent import AnswerEncoder, BilinearScorer, QuestionEncoder

    model = model.cpu().eval()
    if role == "scorer":
        return export_scorer(BilinearScorer(model.bias).eval(), model.dim)
    module = (QuestionEncoder if role == "question" else AnswerEncoder)(model).eval()
    ids, mask, dynamic, rank = _example(role, model.hierarchical, int(model.embedding.shape[0]))
    return _export(
        module,
        (ids, mask),
        ["input_ids", "attention_mask"],
        ["vectors"],
        dynamic,
        {"input_ids": rank, "attention_mask": rank},
    )


def _export_torchscript(model: Any, role: str) -> bytes:
    """The ``role`` encoder graph through the TorchScript exporter (``dynamo=False``), in this process."""
    import io
    import warnings

    import onnx

    from .onnx_export import ExportError, _symbolic_dims
    from .recurrent import AnswerEncoder, QuestionEncoder

    model = model.cpu().eval()
    module = (QuestionEncoder if role == "question" else AnswerEncoder)(model).eval()
    ids, mask, dynamic, rank = _example(role, model.hierarchical, int(model.embedding.shape[0]))
    axes = {name: {axis: str(dim.__name__) for axis, dim in dims.items()} for name, dims in dynamic.items()}
    buffer = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the TorchScript exporter's deprecation notice
        try:
            torch.onnx.export(
                module,
                (ids, mask),
                buffer,  # type: ignore[arg-type]  # a file object works too
                input_names=["input_ids", "attention_mask"],
                output_names=["vectors"],
                dynamic_axes=axes,
                dynamo=False,
                opset_version=20,
            )
        except Exception as exc:
            raise ExportError(f"torch.onnx.export failed for the {role} encoder of {model.kind}: {exc}") from exc
    proto = onnx.load_from_string(buffer.getvalue())
    _symbolic_dims(proto, {"input_ids": rank, "attention_mask": rank})
    onnx.checker.check_model(proto)
    return bytes(proto.SerializeToString())


def _export_in_subprocess(model: Any, role: str) -> bytes:
    """:func:`export_graph` run in a fresh interpreter (weights passed as safetensors, no pickle)."""
    from safetensors.torch import save_file

    from .onnx_export import ExportError

    with tempfile.TemporaryDirectory() as tmp:
        state = {k: v.detach().cpu().contiguous().clone() for k, v in model.state_dict().items()}
        save_file(state, os.path.join(tmp, "weights.safetensors"))
        with open(os.path.join(tmp, "spec.json"), "w", encoding="utf-8") as handle:
            json.dump({**_spec(model), "role": role}, handle)
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        done = subprocess.run(
            [sys.executable, "-m", "qaindex_export.recurrent_export", tmp],
            capture_output=True,
            text=True,
            env=env,
            check=False,
        )
        out = Path(tmp) / "graph.onnx"
        if done.returncode != 0 or not out.is_file():
            tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
            raise ExportError(f"exporting the {role} encoder of {model.kind} failed: {tail[0]}")
        return out.read_bytes()


def _main(folder: str) -> None:
    """Child process of :func:`_export_in_subprocess`."""
    from safetensors.torch import load_file

    from .recurrent import RecurrentQA

    torch.set_num_threads(1)
    with open(os.path.join(folder, "spec.json"), encoding="utf-8") as handle:
        spec = json.load(handle)
    model = RecurrentQA(
        spec["kind"], spec["vocab_size"], hidden=spec["hidden"], embed_dim=spec["embed_dim"], topics=spec["topics"]
    )
    model.load_state_dict(load_file(os.path.join(folder, "weights.safetensors")))
    graph = export_graph(model, spec["role"])
    Path(folder, "graph.onnx").write_bytes(graph)


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

    Returns
    -------
    dict
        ``{"question_max_abs_diff", "answer_max_abs_diff", "score_max_abs_diff", "distance_max_abs_diff"}``
    """
    from .onnx_export import ExportError, _session

    model = model.cpu().eval()
    rng = np.random.default_rng(seed)
    vocab = int(model.embedding.shape[0])
    sessions = {"question": _session(question_graph), "answer": _session(answer_graph)}
    scorer = _session(scorer_graph)
    worst = dict.fromkeys(("question", "answer", "score", "distance"), 0.0)

    def record(key: str, got: np.ndarray, want: np.ndarray) -> None:
        if got.shape != want.shape:
            raise ExportError(f"{key}: onnxruntime gave shape {got.shape}, torch {want.shape}")
        diff = np.abs(got.astype(np.float64) - want.astype(np.float64))
        worst[key] = max(worst[key], float(diff.max(initial=0.0)))
        scaled = diff / np.maximum(1.0, np.abs(want.astype(np.float64)))
        if not np.all(np.isfinite(got)) or (scaled.size and float(scaled.max()) > tolerance):
            raise ExportError(
                f"parity check failed: {key} differs by {float(diff.max()):.3g} between onnxruntime and torch "
                f"(tolerance {tolerance:g}); the export is not faithful"
            )

    def flat_batch(batch: int, length: int) -> tuple[np.ndarray, np.ndarray]:
        ids = rng.integers(1, vocab, size=(batch, length)).astype(np.int64)
        lengths = rng.integers(1, length + 1, size=batch)
        lengths[0] = length
        if batch > 1:
            lengths[-1] = 1 if batch == 2 else 0
        mask = (np.arange(length)[None, :] < lengths[:, None]).astype(np.int64)
        return np.where(mask == 1, ids, 0), mask

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
                ids, mask = chunked_batch(*shape) if chunked else flat_batch(*shape)
                (got,) = sessions[role].run(["vectors"], {"input_ids": ids, "attention_mask": mask})
                t_ids, t_mask = torch.from_numpy(ids), torch.from_numpy(mask)
                encode = model.encode_answer if role == "answer" else model.encode_question
                record(role, got, encode(t_ids, t_mask).numpy())
        for n, m in ((1, 1), (3, 4), (2, 9), (1, 4)):
            query = rng.normal(size=(n, model.dim)).astype(np.float32)
            cands = rng.normal(size=(n, m, model.dim)).astype(np.float32)
            cands[0, 0] = 0.0
            score, distance = scorer.run(["score", "distance"], {"query": query, "candidates": cands})
            want_s, want_d = bilinear.bilinear_score(torch.from_numpy(query), torch.from_numpy(cands), model.bias)
            record("score", score, want_s.numpy())
            record("distance", distance, want_d.numpy())
    return {f"{k}_max_abs_diff": v for k, v in worst.items()}


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


def _runtime_metrics(directory: Path, groups: Sequence[QuestionGroup]) -> dict[str, Any]:
    """Metrics of ``groups`` through the runtime (:class:`qaindex.Model`: tokenizer, chunking, ONNX)."""
    from qaindex import Model
    from qaindex.eval.metrics import evaluate_groups

    loaded = Model.load(directory, device="cpu")
    qv = loaded.encode([g.question for g in groups], role="question")
    scores = []
    for i, g in enumerate(groups):
        cv = loaded.encode([c.answer for c in g.candidates], role="answer")
        _, distance = loaded.score(qv[i : i + 1], cv[None])
        scores.append(-distance[0].astype(np.float64))  # rank by q.c (sigma saturates in float32)
    return evaluate_groups(groups, scores)


def export_recurrent(
    result: Any,
    directory: str | os.PathLike[str],
    *,
    name: str | None = None,
    dev_data: str | os.PathLike[str] | Sequence[QuestionGroup] | None = None,
    tolerance: float | None = None,
    exporter: str = "torchscript",
) -> Path:
    """Write a trained RDE-family ``result`` (a ``TrainResult``) as a model directory.

    Parameters
    ----------
    result : TrainResult
    directory : path-like
        Replaced atomically if it is a model directory already.
    name : str, optional
        Default ``"<model>-<embeddings>"``.
    dev_data : path or groups, optional
        Also evaluate these through the runtime and record the metrics (``dev_onnx``).
    tolerance : float, optional
        Parity tolerance (default 1e-4).
    exporter : {"torchscript", "dynamo"}, keyword-only
        How the GRU graphs are exported (see the module docstring); the scorer always uses dynamo.

    Returns
    -------
    Path

    Raises
    ------
    ExportError
        If onnxruntime and torch disagree or a graph has static axes.
    """
    from qaindex.model import write_model

    from .train import _load

    if exporter not in EXPORTERS:
        raise ValueError(f"exporter must be one of {EXPORTERS}, got {exporter!r}")
    model = result.model.cpu().eval()
    export = _export_torchscript if exporter == "torchscript" else _export_in_subprocess
    question_graph = export(model, "question")
    answer_graph = export(model, "answer")
    scorer_graph = export_graph(model, "scorer")
    parity = check_recurrent_parity(
        model, question_graph, answer_graph, scorer_graph, tolerance=1e-4 if tolerance is None else tolerance
    )
    cfg = result.config
    chunking = None
    if model.hierarchical:
        assert isinstance(model.chunking, Chunking)
        chunking = {
            "answer": manifest_entry(
                method=cfg.chunking, max_chunks=cfg.max_chunks, max_chunk_tokens=cfg.max_chunk_tokens
            )
        }
    training = result.provenance(
        encoder=model.describe(),
        torch_version=torch.__version__,
        exporter=exporter,
        device=result.device,
        loss="binary cross-entropy: mean over correct answers of -log p + mean over wrong ones of -log(1 - p)"
        if cfg.effective_loss == "cross-entropy"
        else "mean over triples of max(0, margin - score(q, a) + score(q, a'))",
    )
    metrics: dict[str, Any] = {"dev": result.dev, "best_epoch": result.best_epoch, "parity": parity}
    table = model.embedding.detach().cpu().numpy().astype(np.float32)
    (question_graph, answer_graph), shared = _share_embedding_table([question_graph, answer_graph], table)

    def publish() -> Path:
        return write_model(
            directory,
            name=name or f"{cfg.model}-{cfg.embeddings.partition(':')[0]}",
            geometry={"name": "bilinear", "bias": model.bias},
            dimension=model.dim,
            tokenizer=result.tokenizer,
            max_tokens=result.max_tokens,
            encoder=question_graph,
            answer_encoder=answer_graph,
            scorer=scorer_graph,
            score=model.score_definition(),
            training=training,
            metrics=metrics,
            parameters=model.parameter_counts(),
            chunking=chunking,
            extra_files={SHARED_TABLE: shared},
        )

    path = publish()
    if dev_data is not None:  # evaluated through the runtime, then recorded (the directory is rewritten whole)
        groups, _ = _load(dev_data)
        metrics["dev_onnx"] = _runtime_metrics(path, groups)
        path = publish()
    return path


if __name__ == "__main__":
    _main(sys.argv[1])

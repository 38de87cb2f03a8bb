"""Export a trained HyperQA / CosineQA model as a qaindex model directory (ONNX).

:func:`export_model` writes, through :func:`qaindex.model.write_model`:

- ``encoder.onnx``: ``input_ids``, ``attention_mask`` (int64, batch × seq) → ``vectors``
  (float32, batch × dim). The bag-of-words network is folded into one per-token table
  ``ReLU(W_p E[v] + b_p)`` (the same function: a text's vector is the sum of its tokens'
  rows), so the graph is a gather, a masked sum and the ball map. The table is stored as
  float16 (cast to float32 in the graph) when float32 would make the model larger than
  ``max_bytes``.
- ``scorer.onnx``: ``query`` (n × dim), ``candidates`` (n × m × dim) → ``score`` (n × m,
  higher is better) and ``distance``; traced from modules that call
  :mod:`qaindex.geometry.hyperbolic` (one formula for training, export and runtime).
- ``vocab.txt`` and ``manifest.json`` with the training config, SHA-256 of the training
  data, dev metrics (torch and through onnxruntime), norm statistics and parameter counts.

Both graphs are exported with the dynamo exporter (``external_data=False``,
``verbose=False``) from example inputs with every dynamic size ≥ 2, and the saved graphs are
checked to have symbolic batch/seq/n/m axes. :func:`check_parity` then runs onnxruntime
against torch on varied batch sizes and lengths (including length 1, padding and empty
rows) and raises :class:`ExportError` when they differ by more than the tolerance.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import tempfile
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from qaindex.errors import QAIndexError
from qaindex.eval.datasets import QuestionGroup
from qaindex.eval.metrics import evaluate_groups as evaluate_scores
from qaindex.model import write_model

from .encoders import SequenceQA
from .encoders import export_module as sequence_export_module
from .models import CosineScorer, DualEncoderQA, FoldedEncoder, PoincareScorer
from .train import TrainResult, _load

__all__ = [
    "DEFAULT_MAX_BYTES",
    "ExportError",
    "check_parity",
    "export_encoder",
    "export_model",
    "export_scorer",
    "folded_encoder",
    "scorer_module",
    "set_ranking",
]

DEFAULT_MAX_BYTES = 20_000_000
TABLE_DTYPES = ("auto", "float32", "float16")


class ExportError(QAIndexError):
    """The exported graphs are not faithful to the trained model (or could not be made)."""


# ------------------------------------------------------------------------ modules to export


def folded_encoder(model: DualEncoderQA, *, dtype: torch.dtype = torch.float32) -> FoldedEncoder:
    """The encoder as a per-token table (``dtype``) + masked sum + ball map, on the CPU.

    Example
    -------
    >>> from qaindex_export.models import build_model
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
    >>> from qaindex_export.models import build_model
    >>> type(scorer_module(build_model("cosineqa", 10, dim=4, embed_dim=3))).__name__
    'CosineScorer'
    """
    w_f, b_f = model.w_f.item(), model.b_f.item()
    if model.geometry == "poincare":
        return PoincareScorer(w_f, b_f, getattr(model, "ranking", "distance")).eval()
    return CosineScorer(w_f, b_f).eval()


# ------------------------------------------------------------------------ ONNX export


def _symbolic_dims(proto: Any, expected: dict[str, int]) -> None:
    """Raise unless each named graph input has ``expected[name]`` symbolic leading dims."""
    for value in proto.graph.input:
        if value.name not in expected:
            continue
        dims = value.type.tensor_type.shape.dim
        for axis in range(expected[value.name]):
            if dims[axis].HasField("dim_value") or not dims[axis].dim_param:
                raise ExportError(
                    f"exported graph input {value.name!r} has a static axis {axis} "
                    f"({dims[axis].dim_value}); export with example sizes >= 2"
                )


def _export(
    module: torch.nn.Module,
    args: tuple[torch.Tensor, ...],
    input_names: list[str],
    output_names: list[str],
    dynamic_shapes: dict[str, dict[int, Any]],
    symbolic: dict[str, int],
) -> bytes:
    import onnx

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "graph.onnx"
        sink = io.StringIO()
        quiet = logging.getLogger("torch.onnx")
        level = quiet.level
        quiet.setLevel(logging.ERROR)
        with warnings.catch_warnings(), contextlib.redirect_stdout(sink):
            warnings.simplefilter("ignore")
            try:
                torch.onnx.export(
                    module,
                    args,
                    path,
                    input_names=input_names,
                    output_names=output_names,
                    dynamic_shapes=dynamic_shapes,
                    dynamo=True,
                    external_data=False,
                    verbose=False,
                )
            except Exception as exc:
                raise ExportError(f"torch.onnx.export failed for {type(module).__name__}: {exc}") from exc
            finally:
                quiet.setLevel(level)
        proto = onnx.load(os.fspath(path))
    names = [o.name for o in proto.graph.output]
    if names != output_names:
        raise ExportError(f"exported graph outputs are {names}, expected {output_names}")
    _symbolic_dims(proto, symbolic)
    onnx.checker.check_model(proto)
    return bytes(proto.SerializeToString())


def export_encoder(encoder: torch.nn.Module) -> bytes:
    """ONNX bytes of an encoder: ``(input_ids, attention_mask) -> vectors``, dynamic batch/seq.

    Example
    -------
    >>> graph = export_encoder(folded_encoder(model))  # doctest: +SKIP
    """
    from torch.export import Dim

    batch, seq = Dim("batch"), Dim("seq")
    table = encoder.table if isinstance(encoder, FoldedEncoder) else getattr(encoder, "embedding")  # noqa: B009
    vocab = int(table.shape[0])
    ids = torch.tensor([[min(2, vocab - 1), min(3, vocab - 1), 0], [min(4, vocab - 1), 0, 0]], dtype=torch.int64)
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]], dtype=torch.int64)
    return _export(
        encoder,
        (ids, mask),
        ["input_ids", "attention_mask"],
        ["vectors"],
        {"input_ids": {0: batch, 1: seq}, "attention_mask": {0: batch, 1: seq}},
        {"input_ids": 2, "attention_mask": 2},
    )


def export_scorer(scorer: torch.nn.Module, dim: int) -> bytes:
    """ONNX bytes of a scorer: ``(query (n, d), candidates (n, m, d)) -> (score, distance)``.

    Example
    -------
    >>> graph = export_scorer(PoincareScorer(1.0, 0.0), 8)
    >>> len(graph) > 0
    True
    """
    from torch.export import Dim

    n, m = Dim("n"), Dim("m")
    gen = torch.Generator().manual_seed(0)
    query = torch.rand(2, dim, generator=gen) * 0.1
    candidates = torch.rand(2, 3, dim, generator=gen) * 0.1
    return _export(
        scorer,
        (query, candidates),
        ["query", "candidates"],
        ["score", "distance"],
        {"query": {0: n}, "candidates": {0: n, 1: m}},
        {"query": 1, "candidates": 2},
    )


# ------------------------------------------------------------------------ parity


def _session(graph: bytes) -> Any:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    return ort.InferenceSession(graph, options, providers=["CPUExecutionProvider"])


def _ball_points(rng: np.random.Generator, shape: tuple[int, ...], max_norm: float | None) -> np.ndarray:
    """Random points with norms spread over (0, max_norm], some on the clip, one zero row."""
    x = rng.normal(size=shape)
    x /= np.linalg.norm(x, axis=-1, keepdims=True)
    radius = rng.uniform(0.0, 1.0, size=(*shape[:-1], 1))
    if max_norm is not None:
        radius = np.where(rng.random(radius.shape) < 0.3, max_norm, radius * max_norm)
    out = (x * radius).astype(np.float32)
    out.reshape(-1, shape[-1])[0] = 0.0
    return out


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
    encoder = _session(encoder_graph)
    scorer = _session(scorer_graph)
    vocab = model.encoder.embedding.shape[0]
    worst = {"encoder_max_abs_diff": 0.0, "score_max_abs_diff": 0.0, "distance_max_abs_diff": 0.0}
    fold = 0.0

    def record(key: str, got: np.ndarray, want: np.ndarray) -> None:
        if got.shape != want.shape:
            raise ExportError(f"{key}: onnxruntime gave shape {got.shape}, torch {want.shape}")
        if not np.all(np.isfinite(got)):
            raise ExportError(f"{key}: onnxruntime produced non-finite values")
        diff = np.abs(got.astype(np.float64) - want.astype(np.float64))
        worst[key] = max(worst[key], float(diff.max(initial=0.0)))
        scaled = diff / np.maximum(1.0, np.abs(want.astype(np.float64)))
        if scaled.size and float(scaled.max()) > tolerance:
            raise ExportError(
                f"parity check failed: {key.removesuffix('_max_abs_diff')} differs by {float(diff.max()):.3g} "
                f"between onnxruntime and torch (tolerance {tolerance:g}); the export is not faithful"
            )

    with torch.no_grad():
        for batch, length in ((1, 1), (2, 2), (5, 7), (17, 40), (1, 40), (3, 1)):
            ids = rng.integers(1, vocab, size=(batch, length)).astype(np.int64)
            lengths = rng.integers(1, length + 1, size=batch)
            lengths[0] = length
            if batch > 1:
                lengths[-1] = 1 if batch == 2 else 0  # a single token, or an empty text
            mask = (np.arange(length)[None, :] < lengths[:, None]).astype(np.int64)
            ids = np.where(mask == 1, ids, 0)
            (got,) = encoder.run(["vectors"], {"input_ids": ids, "attention_mask": mask})
            t_ids, t_mask = torch.from_numpy(ids), torch.from_numpy(mask)
            plain = model(t_ids, t_mask).numpy()
            want = reference(t_ids, t_mask).numpy() if reference is not None else plain
            fold = max(fold, float(np.abs(want - plain).max(initial=0.0)))
            record("encoder_max_abs_diff", got, want)
        dim = model.encoder.dim
        max_norm = model.ball.max_norm if model.geometry == "poincare" else None
        for n, m in ((1, 1), (3, 4), (2, 9), (1, 4)):
            query = _ball_points(rng, (n, dim), max_norm)
            cands = _ball_points(rng, (n, m, dim), max_norm)
            cands[:, 0] = query  # identical pairs: distance 0
            score, distance = scorer.run(["score", "distance"], {"query": query, "candidates": cands})
            want_s, want_d = model.score(torch.from_numpy(query)[:, None, :], torch.from_numpy(cands))
            record("score_max_abs_diff", score, want_s.numpy())
            record("distance_max_abs_diff", distance, want_d.numpy())
    worst["fold_max_abs_diff"] = fold
    return worst


def _onnx_metrics(
    encoder_graph: bytes,
    scorer_graph: bytes,
    result: TrainResult,
    groups: Sequence[QuestionGroup],
    max_norm: float | None,
) -> dict[str, Any]:
    """Metrics of ``groups`` computed entirely with onnxruntime (as the runtime would)."""
    from qaindex.geometry.hyperbolic import project

    encoder = _session(encoder_graph)
    scorer = _session(scorer_graph)
    tok = result.tokenizer

    def encode(texts: list[str], role: str) -> np.ndarray:
        out = []
        for start in range(0, len(texts), 256):
            ids, mask = tok.encode_batch(texts[start : start + 256], result.max_tokens[role])
            out.append(encoder.run(["vectors"], {"input_ids": ids, "attention_mask": mask})[0])
        vectors = np.concatenate(out) if out else np.zeros((0, result.model.encoder.dim), np.float32)
        return project(vectors, max_norm=max_norm) if max_norm is not None else vectors

    qv = encode([g.question for g in groups], "question")
    scores = []
    for i, g in enumerate(groups):
        cv = encode([c.answer for c in g.candidates], "answer")
        (s,) = scorer.run(["score"], {"query": qv[i : i + 1], "candidates": cv[None]})
        scores.append(s[0].astype(np.float64))
    return evaluate_scores(groups, scores)


# ------------------------------------------------------------------------ model directory


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
        From :func:`qaindex_export.train.train` or :func:`~qaindex_export.train.load_checkpoint`.
    directory : path-like
        Target model directory (replaced atomically if it is one already).
    name : str, optional
        Model name (default ``"<model>-<embeddings>-<ball map>"``).
    table_dtype : {"auto", "float32", "float16"}, keyword-only
        Storage of the per-token table; ``auto`` uses float32 unless the model would then
        exceed ``max_bytes``.
    max_bytes : int, keyword-only
        Size budget for ``auto``.
    dev_data : path or groups, optional
        Also evaluate these through onnxruntime and record the metrics (``dev_onnx``).
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
    if getattr(result.model, "role_aware", False):  # RDE family: two GRU graphs, bilinear geometry
        from .recurrent_export import export_recurrent

        return export_recurrent(result, directory, name=name, dev_data=dev_data, tolerance=tolerance)
    if getattr(result.model, "joint", False):  # AP-CNN / AP-biLSTM: a reranker model directory
        from .attentive import export_reranker

        return export_reranker(result, directory, name=name, dev_data=dev_data, tolerance=tolerance)
    model = result.model.cpu().eval()
    vocab, dim, width = model.encoder.embedding.shape[0], model.encoder.dim, model.encoder.width
    if isinstance(model, SequenceQA):  # QA-CNN / QA-biLSTM: the network itself, float32 embeddings
        width = model.encoder.embed_width
        table_dtype = "float32"
    if table_dtype == "auto":
        overhead = 1_000_000  # vocabulary, manifest, scorer and graph structure, generously
        table_dtype = "float32" if vocab * width * 4 + overhead <= max_bytes else "float16"
    dtype = torch.float32 if table_dtype == "float32" else torch.float16
    encoder_module: Any = (
        sequence_export_module(model) if isinstance(model, SequenceQA) else folded_encoder(model, dtype=dtype)
    )
    scorer = scorer_module(model)
    encoder_graph = export_encoder(encoder_module)
    scorer_graph = export_scorer(scorer, dim)
    parity = check_parity(
        model,
        encoder_graph,
        scorer_graph,
        reference=encoder_module,
        tolerance=1e-4 if tolerance is None else tolerance,
    )
    if dtype == torch.float32 and parity["fold_max_abs_diff"] > 1e-4:
        raise ExportError(f"folding the encoder changed it by {parity['fold_max_abs_diff']:.3g}; please report this")
    geometry = model.geometry_info()
    max_norm = geometry.get("max_norm")
    metrics: dict[str, Any] = {
        "dev": result.dev,
        "best_epoch": result.best_epoch,
        "norms_dev": result.norms,
        "parity": parity,
        **{k: v for k, v in result.diagnostics.items()},
    }
    if dev_data is not None:
        groups, _ = _load(dev_data)
        metrics["dev_onnx"] = _onnx_metrics(encoder_graph, scorer_graph, result, groups, max_norm)
    counts = model.parameter_counts()
    parameters = {
        **counts,
        "exported_table": {"rows": int(vocab), "dim": int(width), "dtype": table_dtype},
    }
    cfg = result.config
    label = name or "-".join(
        [cfg.model, cfg.embeddings.partition(":")[0], *([model.ball.kind] if model.geometry == "poincare" else [])]
    )
    training = result.provenance(
        ball_selection=result.selection,
        encoder=model.describe()
        if isinstance(model, SequenceQA)
        else f"folded per-token table ReLU(W_p E + b_p), {table_dtype}, masked sum, ball map",
        torch_version=torch.__version__,
        device=result.device,
        loss="mean over triples of max(0, margin - score(q, a) + score(q, a'))",
    )
    return write_model(
        directory,
        name=label,
        geometry=geometry,
        dimension=dim,
        tokenizer=result.tokenizer,
        max_tokens=result.max_tokens,
        encoder=encoder_graph,
        scorer=scorer_graph,
        score=model.score_definition(),
        training=training,
        metrics=metrics,
        parameters=parameters,
    )


# ------------------------------------------------------------------------ ranking of a shipped model


def set_ranking(directory: str | os.PathLike[str], ranking: str, *, tolerance: float = 1e-4) -> Path:
    """Re-export a Poincaré model directory's scorer with another ranking rule, in place.

    Keeps the encoder and the trained ``w_f``, ``b_f`` (from the manifest's ``score``); writes a
    new ``scorer.onnx`` computing ``-(w_f f + b_f)`` (``f = d`` or ``d(q, a) - d(0, a)``,
    :class:`~qaindex_export.models.PoincareScorer`), checks it against torch on points spread
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
    import shutil

    from qaindex.model import Model
    from qaindex.store.storage import file_entry, fsync_tree, temporary_sibling, write_json_atomic

    from .models import RANKINGS

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
    session = _session(graph)
    rng = np.random.default_rng(0)
    max_norm = float(manifest["geometry"]["max_norm"])
    worst = 0.0
    for n, m in ((1, 1), (3, 4), (2, 9)):
        query = _ball_points(rng, (n, dim), max_norm)
        cands = _ball_points(rng, (n, m, dim), max_norm)
        cands[:, 0] = query
        got, _ = session.run(["score", "distance"], {"query": query, "candidates": cands})
        with torch.no_grad():
            want = scorer(torch.from_numpy(query), torch.from_numpy(cands))[0].numpy()
        diff = np.abs(got.astype(np.float64) - want) / np.maximum(1.0, np.abs(want))
        worst = max(worst, float(diff.max()))
    if worst > tolerance:
        raise ExportError(f"parity check failed: score differs by {worst:.3g} (tolerance {tolerance:g})")
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

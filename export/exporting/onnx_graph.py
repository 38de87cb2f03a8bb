"""The graph stage of an export: torch module → checked ONNX bytes.

Every family's exporter (:mod:`.dual_export`, :mod:`.attentive_export`,
:mod:`.recurrent_export`) and the other writers (:mod:`qaindex_export.embeddings.distill`,
:mod:`qaindex_export.training.tokenlearn`, :mod:`.sentence_transformer`) trace their modules through here:

- :func:`export_graph`: torch's dynamo exporter (``external_data=False``, quiet) from example
  inputs with every dynamic size ≥ 2; :func:`export_torchscript`: the TorchScript exporter
  (every LSTM and GRU graph: :data:`RNN_EXPORTER`);
- either way the saved graph must have the expected outputs, symbolic batch/length axes
  (:func:`symbolic_dims`) and pass ``onnx.checker``;
- :func:`export_in_subprocess`: the same in a fresh interpreter (torch 2.13's dynamo exporter
  can pin the sequence length of a second RNN exported in one process), weights passed as
  safetensors (no pickle); the family module is the child's entry point (:func:`run_child`);
  the RDE family's ``exporter="dynamo"`` option uses it;
- :func:`session`: a one-thread CPU onnxruntime session for the parity checks (:mod:`.parity`).

:class:`Exported` is what a family exporter hands to the pipeline
(:func:`.onnx_export.export_model`), which writes the model directory.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import subprocess
import sys
import tempfile
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from qaindex.errors import QAIndexError

from .export_forms import FoldedEncoder

__all__ = [
    "EXPORTERS",
    "RNN_EXPORTER",
    "ExportError",
    "Exported",
    "export_encoder",
    "export_graph",
    "export_in_subprocess",
    "export_scorer",
    "export_torchscript",
    "export_traced",
    "run_child",
    "session",
    "symbolic_dims",
]


EXPORTERS = ("dynamo", "torchscript")
# Every LSTM and GRU graph goes through the TorchScript exporter: torch 2.11's dynamo exporter pinned
# a BiLSTM's sequence length (a static axis 1) even in a fresh process, torch 2.13's does so for the
# second RNN exported in one process, and TorchScript takes 0.1-0.5 s per graph against ~20 s.
RNN_EXPORTER = "torchscript"


class ExportError(QAIndexError):
    """The exported graphs are not faithful to the trained model (or could not be made)."""


@dataclass
class Exported:
    """A family exporter's graphs, checked, and what the model directory records about them.

    Attributes
    ----------
    kind : {"model", "reranker"}
        Written by :func:`qaindex.model.write_model` or :func:`qaindex.reranker.write_reranker`.
    name : str
        The default model name.
    files : dict
        The writer's other keyword arguments (graphs, tokenizer, geometry, score, parameters...).
    parity : dict
        The parity check's worst differences (``metrics.parity``).
    metrics, training : dict
        Extra entries of the manifest's ``metrics`` and ``training`` records.
    rank_by : {"score", "distance"}
        How the dev metrics through the runtime rank candidates (``distance``: lower first).
    """

    kind: str
    name: str
    files: dict[str, Any]
    parity: dict[str, float]
    metrics: dict[str, Any] = field(default_factory=dict)
    training: dict[str, Any] = field(default_factory=dict)
    rank_by: str = "score"


def symbolic_dims(proto: Any, expected: dict[str, int]) -> None:
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


def _checked(proto: Any, output_names: list[str], symbolic: dict[str, int]) -> bytes:
    import onnx

    names = [o.name for o in proto.graph.output]
    if names != output_names:
        raise ExportError(f"exported graph outputs are {names}, expected {output_names}")
    symbolic_dims(proto, symbolic)
    onnx.checker.check_model(proto)
    return bytes(proto.SerializeToString())


def export_graph(
    module: torch.nn.Module,
    args: tuple[torch.Tensor, ...],
    input_names: list[str],
    output_names: list[str],
    dynamic_shapes: dict[str, dict[int, Any]],
    symbolic: dict[str, int],
) -> bytes:
    """ONNX bytes of ``module`` through the dynamo exporter, checked (outputs, symbolic axes, checker).

    ``dynamic_shapes`` is keyed by ``forward``'s argument names, ``symbolic`` by graph input
    name: how many leading axes of each input must be symbolic.
    """
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
    return _checked(proto, output_names, symbolic)


def export_torchscript(
    module: torch.nn.Module,
    args: tuple[torch.Tensor, ...],
    input_names: list[str],
    output_names: list[str],
    dynamic_axes: dict[str, dict[int, str]],
    symbolic: dict[str, int],
    *,
    what: str,
) -> bytes:
    """ONNX bytes of ``module`` through the TorchScript exporter (``dynamo=False``), checked alike."""
    import onnx

    buffer = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the TorchScript exporter's deprecation notice
        try:
            torch.onnx.export(
                module,
                args,
                buffer,  # type: ignore[arg-type]  # a file object works too
                input_names=input_names,
                output_names=output_names,
                dynamic_axes=dynamic_axes,
                dynamo=False,
                opset_version=20,
            )
        except Exception as exc:
            raise ExportError(f"torch.onnx.export failed for {what}: {exc}") from exc
    return _checked(onnx.load_from_string(buffer.getvalue()), output_names, symbolic)


def export_traced(
    module: torch.nn.Module,
    args: tuple[torch.Tensor, ...],
    input_names: list[str],
    output_names: list[str],
    axes: dict[str, dict[int, str]],
    *,
    arg_names: list[str],
    exporter: str = "dynamo",
    what: str,
) -> bytes:
    """ONNX bytes of ``module`` through ``exporter`` (one of :data:`EXPORTERS`), checked alike.

    ``axes`` names the dynamic axes of each graph input (``{"input_ids": {0: "batch", 1:
    "seq"}}``), all leading and all required symbolic in the saved graph; ``arg_names`` are
    ``forward``'s parameters in the order of ``input_names`` (dynamo keys its shapes by them).
    """
    symbolic = {name: len(named) for name, named in axes.items()}
    if exporter == "torchscript":
        return export_torchscript(module, args, input_names, output_names, axes, symbolic, what=what)
    if exporter != "dynamo":
        raise ValueError(f"exporter must be one of {EXPORTERS}, got {exporter!r}")
    from torch.export import Dim

    dims: dict[str, Any] = {}
    shapes = {
        arg: {axis: dims.setdefault(dim, Dim(dim)) for axis, dim in axes.get(name, {}).items()}
        for arg, name in zip(arg_names, input_names, strict=True)
    }
    return export_graph(module, args, input_names, output_names, shapes, symbolic)


def export_encoder(encoder: torch.nn.Module, *, exporter: str = "dynamo") -> bytes:
    """ONNX bytes of an encoder: ``(input_ids, attention_mask) -> vectors``, dynamic batch/seq.

    ``exporter``: ``dynamo``, or ``torchscript`` for an LSTM encoder (:data:`RNN_EXPORTER`).

    Example
    -------
    >>> graph = export_encoder(folded_encoder(model))  # doctest: +SKIP
    """
    table = encoder.table if isinstance(encoder, FoldedEncoder) else getattr(encoder, "embedding")  # noqa: B009
    vocab = int(table.shape[0])
    ids = torch.tensor([[min(2, vocab - 1), min(3, vocab - 1), 0], [min(4, vocab - 1), 0, 0]], dtype=torch.int64)
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]], dtype=torch.int64)
    names = ["input_ids", "attention_mask"]
    return export_traced(
        encoder,
        (ids, mask),
        names,
        ["vectors"],
        {name: {0: "batch", 1: "seq"} for name in names},
        arg_names=names,
        exporter=exporter,
        what=f"the encoder {type(encoder).__name__}",
    )


def export_scorer(scorer: torch.nn.Module, dim: int) -> bytes:
    """ONNX bytes of a scorer: ``(query (n, d), candidates (n, m, d)) -> (score, distance)``.

    Example
    -------
    >>> from qaindex_export.exporting.export_forms import PoincareScorer
    >>> graph = export_scorer(PoincareScorer(1.0, 0.0), 8)
    >>> len(graph) > 0
    True
    """
    from torch.export import Dim

    n, m = Dim("n"), Dim("m")
    gen = torch.Generator().manual_seed(0)
    query = torch.rand(2, dim, generator=gen) * 0.1
    candidates = torch.rand(2, 3, dim, generator=gen) * 0.1
    return export_graph(
        scorer,
        (query, candidates),
        ["query", "candidates"],
        ["score", "distance"],
        {"query": {0: n}, "candidates": {0: n, 1: m}},
        {"query": 1, "candidates": 2},
    )


def session(graph: bytes) -> Any:
    """A one-thread CPU onnxruntime session of ``graph`` (for parity checks)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    return ort.InferenceSession(graph, options, providers=["CPUExecutionProvider"])


def quantize_int8(graph: bytes) -> bytes:
    """The graph with its weights stored as int8, one scale per output channel, and its
    activations quantized at run time (onnxruntime's dynamic quantization).

    A transformer's matrix products then run in 8-bit integers: about 4x smaller and 2x faster
    on a CPU, at the cost of a small drift of the vectors, which the caller measures.

    Example
    -------
    >>> from qaindex_export.exporting.export_forms import CosineScorer
    >>> graph = quantize_int8(export_scorer(CosineScorer(1.0, 0.0), 4))  # no weights: unchanged maths
    >>> s, d = session(graph).run(None, {"query": [[1.0, 0, 0, 0]], "candidates": [[[1.0, 0, 0, 0]]]})
    >>> round(float(s[0, 0]), 4)
    1.0
    """
    from onnxruntime.quantization import QuantType, quantize_dynamic

    root = logging.getLogger()  # onnxruntime logs a pre-processing advice through the root logger
    with tempfile.TemporaryDirectory(prefix="qaindex-quantize-") as tmp:
        source, target = Path(tmp) / "float.onnx", Path(tmp) / "int8.onnx"
        source.write_bytes(graph)
        was, root.disabled = root.disabled, True
        try:
            with contextlib.redirect_stderr(io.StringIO()), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                quantize_dynamic(source, target, per_channel=True, weight_type=QuantType.QInt8)
        finally:
            root.disabled = was
        return target.read_bytes()


def export_in_subprocess(
    module: torch.nn.Module, spec: dict[str, Any], entry: str, *, what: str, threads: int = 1
) -> bytes:
    """ONNX bytes made by ``python -m <entry> FOLDER`` from ``module``'s weights and ``spec``.

    The folder holds ``weights.safetensors`` and ``spec.json``; the child (``entry``'s
    ``__main__``, which calls :func:`run_child`) rebuilds the module and writes ``graph.onnx``.
    """
    from safetensors.torch import save_file

    with tempfile.TemporaryDirectory() as tmp:
        state = {k: v.detach().cpu().contiguous().clone() for k, v in module.state_dict().items()}
        save_file(state, os.path.join(tmp, "weights.safetensors"))
        Path(tmp, "spec.json").write_text(json.dumps({**spec, "threads": threads}), encoding="utf-8")
        done = subprocess.run(
            [sys.executable, "-m", entry, tmp],
            capture_output=True,
            text=True,
            env={**os.environ, "OMP_NUM_THREADS": str(threads)},
            check=False,
        )
        out = Path(tmp) / "graph.onnx"
        if done.returncode != 0 or not out.is_file():
            tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
            raise ExportError(f"exporting {what} in a fresh process failed: {tail[0]}")
        return out.read_bytes()


def run_child(folder: str, graph: Callable[[dict[str, Any], dict[str, torch.Tensor]], bytes]) -> None:
    """The child of :func:`export_in_subprocess`: ``graph(spec, weights)`` written to ``graph.onnx``."""
    from safetensors.torch import load_file

    spec = json.loads(Path(folder, "spec.json").read_text(encoding="utf-8"))
    torch.set_num_threads(int(spec.pop("threads")))
    weights = load_file(os.path.join(folder, "weights.safetensors"))
    Path(folder, "graph.onnx").write_bytes(graph(spec, weights))

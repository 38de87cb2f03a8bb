"""Adaptation's start point: a model directory read back into torch (:mod:`.adapt`),
and the adapted encoder whose changes start at zero."""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from qaindex.errors import QAIndexError
from qaindex.text.tokenizer import Tokenizer

from ..config import TrainConfig
from ..networks.models import BagOfWords, BallMap, CosineQA, DualEncoderQA, HyperQA, _inverse_softplus


class StartError(QAIndexError):
    """The start model directory cannot be adapted (unreadable, or an encoder of another form)."""


# ------------------------------------------------------------------------ the adapted encoder


class AdaptedTable(nn.Module):
    """A start model's per-token table, adapted: ``x_t = (I + M)(T_t + Δ_t)``, then a masked sum.

    Parameters
    ----------
    base : Tensor (vocab_size, width)
        The start model's table ``T`` (a buffer: never trained).
    trainable_ids : array of int
        Tokens that get a row change ``Δ_t`` (the tokens of the training texts); others keep
        ``T_t`` (still through ``M``). Empty: no row changes.
    depth : bool
        The last column is the ``weighted`` ball map's per-token depth weight: it gets ``Δ``
        but not ``M``, and stays non-negative (``ReLU``; the start values are positive).

    Example
    -------
    >>> enc = AdaptedTable(torch.eye(4), np.array([2]), depth=False)
    >>> enc(torch.tensor([[1, 2, 0]]), torch.tensor([[1, 1, 0]])).tolist()   # rows 1 + 2 (M = 0, Δ = 0)
    [[0.0, 1.0, 1.0, 0.0]]
    """

    def __init__(self, base: Tensor, trainable_ids: np.ndarray, *, depth: bool = False) -> None:
        super().__init__()
        base = base.detach().to(torch.float32).clone()
        vocab, width = base.shape
        ids = np.unique(np.asarray(trainable_ids, dtype=np.int64))
        if len(ids) and (ids.min() < 0 or ids.max() >= vocab):
            raise ValueError(f"trainable token ids must be in [0, {vocab}), got {ids.min()}..{ids.max()}")
        slot = torch.full((vocab,), len(ids), dtype=torch.int64)
        slot[torch.from_numpy(ids)] = torch.arange(len(ids))
        self.base: Tensor
        self.slot: Tensor
        self.register_buffer("base", base)
        self.register_buffer("slot", slot)
        self.delta = nn.Parameter(torch.zeros(len(ids), width))
        self.depth_column = bool(depth)
        self.dim = width - (1 if depth else 0)
        self.mix = nn.Parameter(torch.zeros(self.dim, self.dim))

    @property
    def embedding(self) -> Tensor:
        """The start table (what the exporter reads the vocabulary size from)."""
        return self.base

    @property
    def width(self) -> int:
        return int(self.base.shape[1])

    def _rows(self, ids: Tensor) -> Tensor:
        """``T + Δ`` of ``ids`` (the depth column kept non-negative)."""
        padded = torch.cat([self.delta, self.delta.new_zeros(1, self.width)])
        x = F.embedding(ids, self.base) + F.embedding(self.slot[ids], padded)
        if self.depth_column:
            return torch.cat([x[..., :-1], F.relu(x[..., -1:])], dim=-1)
        return x

    def _mix(self, x: Tensor) -> Tensor:
        """``(I + M)`` on the direction columns (linear: the same on a token row or on a sum of rows)."""
        if self.depth_column:
            v = x[..., :-1]
            return torch.cat([v + v @ self.mix.T, x[..., -1:]], dim=-1)
        return x + x @ self.mix.T

    def token_vectors(self, ids: Tensor) -> Tensor:
        """``(I + M)(T + Δ)`` of ``ids``, shape ``ids.shape + (width,)``."""
        return self._mix(self._rows(ids))

    def forward(self, input_ids: Tensor, attention_mask: Tensor) -> Tensor:
        x = self._rows(input_ids)
        return self._mix((x * attention_mask.unsqueeze(-1).to(x.dtype)).sum(dim=1))

    def bags(self, flat_ids: Tensor, offsets: Tensor) -> Tensor:
        """Sums of ragged texts (as :meth:`qaindex_export.networks.models.BagOfWords.bags`); ``M`` applied
        to the sums."""
        if flat_ids.numel() == 0:
            return self.base.new_zeros((offsets.numel(), self.width))
        unique, inverse = torch.unique(flat_ids, return_inverse=True)
        return self._mix(F.embedding_bag(inverse, self._rows(unique), offsets, mode="sum"))

    @torch.no_grad()
    def folded_table(self, chunk: int = 8192) -> Tensor:
        """The adapted table for every token id: what the export writes."""
        ids = torch.arange(self.base.shape[0], device=self.base.device)
        return torch.cat([self.token_vectors(ids[i : i + chunk]) for i in range(0, len(ids), chunk)])


# ------------------------------------------------------------------------ the start point


@dataclass
class StartPoint:
    """A model directory read back as a trainable torch model."""

    directory: Path
    manifest: dict[str, Any]
    tokenizer: Tokenizer
    model: DualEncoderQA
    max_tokens: dict[str, int]

    @property
    def config(self) -> TrainConfig:
        """The :class:`TrainConfig` fields the start model fixes (model kind, width, truncation, ball)."""
        geo = self.manifest["geometry"]
        return TrainConfig(
            model="hyperqa" if geo["name"] == "poincare" else "cosineqa",
            embeddings=f"start:{self.manifest.get('name', self.directory.name)}",
            dim=int(self.manifest["dimension"]),
            ball=geo.get("ball_map", "clip") if geo["name"] == "poincare" else "clip",
            ranking=geo.get("ranking", "distance") if geo["name"] == "poincare" else "relative",
            max_norm=float(geo.get("max_norm", 0.999)),
            max_question_tokens=self.max_tokens["question"],
            max_answer_tokens=self.max_tokens["answer"],
        )


def onnx_initializers(path: Path) -> dict[str, np.ndarray]:
    import onnx
    from onnx import numpy_helper

    try:
        proto = onnx.load(os.fspath(path))
    except Exception as exc:  # noqa: BLE001 - any unreadable graph is the same user-facing problem
        raise StartError(f"{path}: cannot be read as an ONNX graph ({exc}); pass another --start directory") from None
    return {init.name: numpy_helper.to_array(init) for init in proto.graph.initializer}


def load_start(
    directory: str | os.PathLike[str] | None = None,
    trainable_ids: np.ndarray | None = None,
    *,
    check: bool = True,
) -> StartPoint:
    """Read a qaindex model directory (per-token table + masked sum + ball map) as a torch model.

    Parameters
    ----------
    directory : path-like, optional
        A model directory written by ``qaindex train`` / the exporter (any version whose
        encoder is a per-token table, a masked sum and a ball map); default: the built-in model.
    trainable_ids : array of int, optional
        Tokens that get a row change (see :class:`AdaptedTable`).
    check : bool, keyword-only
        Compare the torch model with the directory's ``encoder.onnx`` (onnxruntime) on random
        token ids and refuse a model they disagree on.

    Raises
    ------
    StartError
        Not a dual encoder with one shared per-token-table encoder this version can read back.

    Example
    -------
    >>> start = load_start()  # doctest: +SKIP
    >>> start.model.encoder.base.shape  # doctest: +SKIP
    torch.Size([30522, 300])
    """
    from qaindex.model import DEFAULT_MODEL_DIR, Model

    root = Path(directory) if directory is not None else DEFAULT_MODEL_DIR
    manifest = Model.read_manifest(root)
    hint = "train with --from-scratch, or pass another --start directory"
    graphs = manifest.get("graphs", {})
    if manifest.get("kind") != "dual_encoder" or graphs.get("question_encoder") != graphs.get("answer_encoder"):
        raise StartError(f"{root}: only a dual encoder with one shared encoder can be adapted; {hint}")
    if manifest.get("chunking"):
        raise StartError(f"{root}: a chunking (hierarchical) encoder cannot be adapted; {hint}")
    geo = manifest["geometry"]
    if geo["name"] not in ("poincare", "cosine"):
        raise StartError(f"{root}: geometry {geo['name']!r} cannot be adapted; {hint}")
    tokenizer = Tokenizer.from_config(manifest["tokenizer"], root)
    encoder_path = root / graphs["answer_encoder"]
    weights = onnx_initializers(encoder_path)
    table = weights.get("table")
    if table is None or table.ndim != 2 or table.shape[0] != len(tokenizer.vocab):
        raise StartError(
            f"{encoder_path}: no per-token table ('table', {len(tokenizer.vocab)} rows) among the graph's "
            f"weights; {hint}"
        )
    kind = geo.get("ball_map", "clip") if geo["name"] == "poincare" else "none"
    depth = kind in ("weighted", "lognorm")  # the table's last column is the per-token depth/evidence
    width = int(table.shape[1])
    ball = BallMap(kind, max_norm=float(geo.get("max_norm", 0.999)), dim=width - (1 if depth else 0))
    # weights the exporter may fold into constants, and where the manifest records them
    from_manifest: dict[tuple[str, str], tuple[str, Callable[[float], float]]] = {
        ("lognorm", "log_a"): ("a", math.log),
        ("lognorm", "lognorm_b"): ("b", float),
    }
    state = {}
    for name, value in ball.state_dict().items():
        found = weights.get(f"ball.{name}")
        if found is None and (kind, name) in from_manifest and from_manifest[kind, name][0] in geo:
            field, convert = from_manifest[kind, name]
            found = np.asarray(convert(float(geo[field])), dtype=np.float32)
        if found is None or tuple(found.shape) != tuple(value.shape):
            raise StartError(f"{encoder_path}: the {kind} ball map's weight {name!r} is missing; {hint}")
        state[name] = torch.from_numpy(np.asarray(found, dtype=np.float32).copy())
    ball.load_state_dict(state)
    encoder = AdaptedTable(
        torch.from_numpy(np.array(table, dtype=np.float32)),
        np.zeros(0, np.int64) if trainable_ids is None else trainable_ids,
        depth=depth,
    )
    bag = cast(BagOfWords, encoder)  # duck-typed: the models only use the bag-of-words interface
    model: DualEncoderQA
    if geo["name"] == "poincare":
        model = HyperQA(bag, ball, ranking=geo.get("ranking", "distance"))
    else:
        model = CosineQA(bag, ball)
    params = manifest["score"]["parameters"]
    with torch.no_grad():
        model.w_raw.fill_(_inverse_softplus(float(params["w_f"])))
        model.b_f.fill_(float(params["b_f"]))
    model.eval()
    if check:
        check_against_onnx(model, encoder_path, len(tokenizer.vocab), hint)
    max_tokens = {role: int(manifest["max_tokens"][role]) for role in ("question", "answer")}
    return StartPoint(root, manifest, tokenizer, model, max_tokens)


def check_against_onnx(model: DualEncoderQA, path: Path, vocab: int, hint: str) -> None:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(os.fspath(path), options, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    ids = rng.integers(1, vocab, size=(6, 9)).astype(np.int64)
    mask = (np.arange(9)[None, :] < np.array([9, 1, 4, 7, 2, 5])[:, None]).astype(np.int64)
    ids = np.where(mask == 1, ids, 0)
    (got,) = session.run(None, {"input_ids": ids, "attention_mask": mask})[:1]
    with torch.no_grad():
        want = model(torch.from_numpy(ids), torch.from_numpy(mask)).numpy()
    diff = float(np.abs(got - want).max()) if got.shape == want.shape else math.inf
    if not diff <= 1e-4:
        raise StartError(
            f"{path}: the encoder read back as table + masked sum + ball map differs from the graph by {diff:.3g}; "
            f"this model's encoder has another form; {hint}"
        )

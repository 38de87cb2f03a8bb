"""Token tables written as model directories without the training exporter: a distilled table
(:mod:`qaindex_export.embeddings.distill`: a masked sum, then cosine or the clip ball) and the
token-learned table (:mod:`qaindex_export.training.tokenlearn`: an evidence column, the
``lognorm`` ball and the relative ranking), both through the same graph stage
(:mod:`.onnx_graph`) and the runtime's own writer.
"""

from __future__ import annotations

import os
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from qaindex.model import write_model
from qaindex.text.tokenizer import Tokenizer

from ..embeddings.distill import DistilledTable
from ..networks.models import BallMap, HyperQA
from ..training.tokenlearn import BallFit
from .export_forms import CosineScorer, FoldedEncoder, PoincareScorer
from .onnx_graph import export_encoder, export_scorer

__all__ = ["StaticBag", "export_table_model", "export_tokenlearn_model", "read_tokenlearn_model"]


def export_table_model(
    table: DistilledTable,
    directory: str | os.PathLike[str],
    *,
    name: str = "distilled-minilm",
    geometry: str = "cosine",
    max_norm: float = 0.999,
    ranking: str | None = None,
    max_tokens: dict[str, int] | None = None,
    table_dtype: str = "auto",
    max_bytes: int = 20_000_000,
    extra_training: dict[str, Any] | None = None,
) -> Path:
    """Write a distilled table as a qaindex model directory (no training): sum of token rows,
    then cosine, or the Poincaré ball by ``clip`` (where Poincaré ranking equals cosine ranking).

    Parameters
    ----------
    table : DistilledTable
    directory : path-like
    name : str
    geometry : {"cosine", "poincare"}
    max_norm : float
        Ball radius (``poincare``). The table is scaled so every non-empty text lands on
        the clip sphere.
    ranking : str, optional
        Recorded as the manifest geometry's ``ranking`` field when given.
    max_tokens : dict, optional
        ``{"question": 40, "answer": 128}`` by default.
    table_dtype : {"auto", "float32", "float16"}
        ``auto``: float16 when float32 would exceed ``max_bytes``.

    Example
    -------
    >>> export_table_model(load_distilled(), "models/distilled")  # doctest: +SKIP
    PosixPath('models/distilled')
    """
    if geometry not in ("cosine", "poincare"):
        raise ValueError(f"geometry must be cosine or poincare, got {geometry!r}")
    vectors = np.asarray(table.vectors, dtype=np.float32)
    vocab_size, dim = vectors.shape
    if table_dtype == "auto":
        table_dtype = "float32" if vocab_size * dim * 4 + 1_000_000 <= max_bytes else "float16"
    dtype = torch.float32 if table_dtype == "float32" else torch.float16
    if geometry == "poincare":
        # scale rows so that the shortest real token row has norm >= 10: sums land on the clip
        norms = np.linalg.norm(vectors[1:], axis=1)
        smallest = float(norms[norms > 0].min()) if (norms > 0).any() else 1.0
        vectors = vectors * max(1.0, 10.0 / smallest)
        ball = BallMap("clip", max_norm=max_norm)
        # the scorer computes the recorded ranking rule (no field: the plain distance)
        scorer: torch.nn.Module = PoincareScorer(1.0, 0.0, ranking or "distance").eval()
        geo: dict[str, Any] = {"name": "poincare", **ball.describe()}
        if ranking is not None:
            geo["ranking"] = ranking
        formula = "-(w_f * f + b_f), f = d(q, a) - d(0, a)" if ranking == "relative" else "-(w_f * d + b_f)"
        score = {"formula": formula, "higher_is_better": True, "parameters": {"w_f": 1.0, "b_f": 0.0}}
    else:
        ball = BallMap("none")
        scorer = CosineScorer(1.0, 0.0).eval()
        geo = {"name": "cosine"}
        score = {"formula": "w_f * cos + b_f", "higher_is_better": True, "parameters": {"w_f": 1.0, "b_f": 0.0}}
    encoder = FoldedEncoder(torch.from_numpy(vectors).to(dtype), ball).eval()
    encoder_graph = export_encoder(encoder)
    scorer_graph = export_scorer(scorer, dim)
    tokenizer = Tokenizer(table.vocab, kind="wordpiece")
    training = {
        "method": "distillation without training data (Model2Vec style)",
        "distillation": table.info,
        "encoder": f"per-token table ({table_dtype}), masked sum, "
        + ("clip to the ball" if geometry == "poincare" else "cosine"),
        **(extra_training or {}),
    }
    return write_model(
        directory,
        name=name,
        geometry=geo,
        dimension=dim,
        tokenizer=tokenizer,
        max_tokens=max_tokens or {"question": 40, "answer": 128},
        static_encoder=True,  # a per-token table summed: answers are read whole at run time
        encoder=encoder_graph,
        scorer=scorer_graph,
        score=score,
        training=training,
        metrics={},
        parameters={
            "trainable": 0,
            "total": int(vocab_size * dim),
            "exported_table": {"rows": int(vocab_size), "dim": int(dim), "dtype": table_dtype},
        },
    )


class StaticBag(nn.Module):
    """A frozen folded table as a bag-of-words encoder (what :func:`check_parity` compares with).

    Example
    -------
    >>> bag = StaticBag(torch.ones(3, 2))
    >>> bag(torch.tensor([[1, 2]]), torch.tensor([[1, 0]])).tolist()
    [[1.0, 1.0]]
    """

    def __init__(self, table: Tensor, *, depth: bool = False) -> None:
        super().__init__()
        self.embedding = nn.Parameter(table.detach().float().clone(), requires_grad=False)
        self.width = int(table.shape[1])
        self.dim = self.width - 1 if depth else self.width

    def forward(self, input_ids: Tensor, attention_mask: Tensor) -> Tensor:
        x = F.embedding(input_ids, self.embedding)
        return (x * attention_mask.unsqueeze(-1).to(x.dtype)).sum(dim=1)

    def bags(self, flat_ids: Tensor, offsets: Tensor) -> Tensor:
        return F.embedding_bag(flat_ids, self.embedding, offsets, mode="sum")


def export_tokenlearn_model(
    table: np.ndarray,
    evidence: np.ndarray,
    ball: BallFit,
    tokenizer: Tokenizer,
    directory: str | os.PathLike[str],
    *,
    name: str = "qaindex-default-tokenlearn",
    training: dict[str, Any] | None = None,
    metrics: dict[str, Any] | None = None,
    max_tokens: dict[str, int] | None = None,
) -> Path:
    """Write a distilled table (float16) with the ``lognorm`` ball and the relative ranking.

    ``evidence`` (one value per token, :func:`evidence_weights`) becomes the table's last
    column. The encoder graph is a gather, a masked sum and :func:`qaindex.geometry.hyperbolic.lognorm_map`;
    onnxruntime is checked against torch (:func:`qaindex_export.exporting.onnx_export.check_parity`).

    Example
    -------
    >>> export_tokenlearn_model(result.table, weights, fit, tokenizer, "models/new")  # doctest: +SKIP
    PosixPath('models/new')
    """
    from qaindex.model import write_model

    from ..exporting.dual_export import check_parity, scorer_module
    from ..exporting.export_forms import FoldedEncoder
    from ..exporting.onnx_graph import export_encoder, export_scorer
    from ..networks.models import BallMap

    full = np.concatenate([np.asarray(table, np.float32), np.asarray(evidence, np.float32).reshape(-1, 1)], axis=1)
    half = torch.as_tensor(full).to(torch.float16)
    ball_map = BallMap("lognorm", max_norm=ball.max_norm, lognorm=(ball.a, ball.b))
    bag = StaticBag(half.float(), depth=True)
    model = HyperQA(bag, ball_map, ranking="relative").eval()  # type: ignore[arg-type]
    encoder = FoldedEncoder(half, model.ball).eval()
    encoder_graph = export_encoder(encoder)
    scorer_graph = export_scorer(scorer_module(model), bag.dim)
    parity = check_parity(model, encoder_graph, scorer_graph, reference=encoder)
    vocab, dim = int(half.shape[0]), bag.dim
    return write_model(
        directory,
        name=name,
        geometry=model.geometry_info(),
        dimension=int(dim),
        tokenizer=tokenizer,
        max_tokens=max_tokens or {"question": 40, "answer": 128},
        static_encoder=True,  # a per-token table summed: answers are read whole at run time
        encoder=encoder_graph,
        scorer=scorer_graph,
        score=model.score_definition(),
        training={
            "encoder": "per-token table (float16) with an evidence column, masked sum, lognorm ball map (no ReLU)",
            "ball_fit": asdict(ball) | {"grid": ball.grid},
            **(training or {}),
        },
        metrics={"parity": parity, **(metrics or {})},
        parameters={
            "trainable": int(vocab * dim),
            "total": int(vocab * dim),
            "frozen": 0,
            "exported_table": {"rows": int(vocab), "dim": int(dim) + 1, "dtype": "float16"},
        },
    )


def read_tokenlearn_model(directory: str | os.PathLike[str]) -> tuple[np.ndarray, np.ndarray, BallFit]:
    """The inverse of :func:`export_tokenlearn_model`: ``(table (V, dim) float32, evidence (V,), ball)``
    of a model directory it wrote (the float16 table as stored, its last column the evidence).

    The ball's ``dev_mrr`` and norm statistics are not stored in the graph and come back as NaN
    unless the manifest's training record has them.

    Example
    -------
    >>> table, evidence, ball = read_tokenlearn_model("qaindex/models/default")  # doctest: +SKIP
    >>> table.shape, ball.a  # doctest: +SKIP
    ((30522, 256), 1.0)
    """
    import onnx
    from onnx import numpy_helper

    from qaindex.model import Model

    root = Path(directory)
    manifest = Model.read_manifest(root)
    geometry = manifest["geometry"]
    if geometry.get("ball_map") != "lognorm":
        raise ValueError(
            f"{root}: not a token-learned table with the lognorm ball (ball map {geometry.get('ball_map')!r})"
        )
    graph = onnx.load(os.fspath(root / manifest["graphs"]["answer_encoder"])).graph
    stored = {init.name: init for init in graph.initializer}
    if "table" not in stored:
        raise ValueError(f"{root}: its encoder graph has no 'table' weight")
    full = numpy_helper.to_array(stored["table"]).astype(np.float32)
    fit = manifest.get("training", {}).get("ball_fit", {})
    nan = float("nan")
    ball = BallFit(
        a=float(geometry["a"]),
        b=float(geometry["b"]),
        max_norm=float(geometry.get("max_norm", 0.999)),
        dev_mrr=float(fit.get("dev_mrr", nan)),
        answer_norm_std=float(fit.get("answer_norm_std", nan)),
        answer_norm_median=float(fit.get("answer_norm_median", nan)),
    )
    return full[:, :-1].copy(), full[:, -1].copy(), ball

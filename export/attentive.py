"""AP-CNN and AP-biLSTM (dos Santos et al., 2016, section 3): attentive pooling, a joint scorer.

The feature extractors are QA-CNN's and QA-biLSTM's (:mod:`qaindex_export.encoders`); what
changes is the pooling, which looks at both texts of the pair::

    Q = features(q)  (M × c),   A = features(a)  (L × c)   columns before pooling
    G   = tanh(Q U Aᵀ)          (M × L), U (c × c) learned
    g_q = max over the row  j of G   (M),  g_a = max over the column of G   (L)
    σ_q = softmax(g_q),  σ_a = softmax(g_a)     over real tokens only (padding gets 0)
    r_q = Qᵀ σ_q,        r_a = Aᵀ σ_a
    score = cos(r_q, r_a)

Because the question's representation depends on the answer (and vice versa), answers cannot
be encoded once and indexed: the model scores (question, candidate) pairs and is served as a
**reranker** over the first stage's candidates (a ``kind: "reranker"`` model directory with one
two-input ONNX graph, see :func:`export_reranker` and :mod:`qaindex.reranker`).

Training uses the same loop, loss and max-of-K negative sampling as QA-CNN
(:mod:`qaindex_export.train` dispatches here for models with ``joint = True``): every score goes
through :meth:`AttentiveQA.forward` on padded token ids. Masking is by hand: the padded
positions of ``G`` are set below any real value before the max-poolings, and the softmax
multiplies by the mask (``G`` lies in [-1, 1], so ``exp(g - 1)`` never overflows and needs no
max-subtraction). An empty question or answer has ``r = 0`` and scores 0.

Example
-------
>>> model = build_attentive_model("ap-cnn", 10, dim=6, embed_dim=4, window=3)
>>> q, qm = torch.tensor([[2, 3, 0]]), torch.tensor([[1, 1, 0]])
>>> a, am = torch.tensor([[4, 5], [6, 0]]), torch.tensor([[1, 1], [1, 0]])
>>> s = model(q.expand(2, -1), qm.expand(2, -1), a, am)
>>> tuple(s.shape), bool((s.abs() <= 1).all())
((2,), True)
"""

from __future__ import annotations

import copy
import json
import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .encoders import BiLSTMEncoder, CNNEncoder, SequenceEncoder, pad_ragged
from .models import BallMap

if TYPE_CHECKING:
    from qaindex.eval.datasets import QuestionGroup

    from .train import TextTable, TrainResult

__all__ = [
    "ATTENTIVE_MODELS",
    "AttentivePooling",
    "AttentiveQA",
    "build_attentive_model",
    "check_reranker_parity",
    "export_reranker",
    "export_reranker_graph",
    "is_joint",
    "joint_max_of_pool",
    "joint_pair_scores",
    "joint_split_scores",
]

ATTENTIVE_MODELS = ("ap-cnn", "ap-bilstm")
_PAIR_CHUNK = 512  # (question, answer) pairs per no-grad scoring call


def is_joint(model: Any) -> bool:
    """Whether ``model`` scores (question, answer) pairs jointly (AP-CNN / AP-biLSTM).

    Example
    -------
    >>> is_joint(build_attentive_model("ap-cnn", 10, dim=4, embed_dim=3)), is_joint(object())
    (True, False)
    """
    return bool(getattr(model, "joint", False))


class AttentivePooling(nn.Module):
    """Two-way attentive pooling and cosine of the pooled vectors.

    Parameters
    ----------
    dim : int
        Feature width ``c``; ``U`` is ``c × c``, initialised ``N(0, 1/c)``.

    Example
    -------
    >>> ap = AttentivePooling(3)
    >>> q, a = torch.randn(2, 4, 3), torch.randn(2, 5, 3)
    >>> qm, am = torch.ones(2, 4, dtype=torch.bool), torch.ones(2, 5, dtype=torch.bool)
    >>> ap(q, qm, a, am).shape
    torch.Size([2])
    """

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.U = nn.Parameter(torch.randn(dim, dim) / math.sqrt(dim))

    def pooled(self, q: Tensor, q_mask: Tensor, a: Tensor, a_mask: Tensor) -> tuple[Tensor, Tensor]:
        """``(r_q, r_a)`` (n, c) of feature columns ``q`` (n, M, c) and ``a`` (n, L, c) with bool masks."""
        g = torch.tanh(torch.matmul(torch.matmul(q, self.U), a.transpose(1, 2)))  # (n, M, L)
        valid = q_mask.unsqueeze(2) & a_mask.unsqueeze(1)
        g = torch.where(valid, g, torch.full_like(g, -2.0))  # below tanh's range: never a max
        sigma_q = _masked_softmax(g.max(dim=2).values, q_mask)
        sigma_a = _masked_softmax(g.max(dim=1).values, a_mask)
        r_q = (q * sigma_q.unsqueeze(-1)).sum(dim=1)
        r_a = (a * sigma_a.unsqueeze(-1)).sum(dim=1)
        return r_q, r_a

    def forward(self, q: Tensor, q_mask: Tensor, a: Tensor, a_mask: Tensor) -> Tensor:
        """``cos(r_q, r_a)`` (n,); 0 when either text is empty."""
        r_q, r_a = self.pooled(q, q_mask, a, a_mask)
        dot = (r_q * r_a).sum(dim=-1)
        norms = (r_q * r_q).sum(dim=-1) * (r_a * r_a).sum(dim=-1)
        return dot * torch.rsqrt(torch.clamp(norms, min=1e-24))


def _masked_softmax(g: Tensor, mask: Tensor) -> Tensor:
    """Softmax of ``g`` (values ≤ 1 where ``mask``) over the masked positions; all zeros if none."""
    e = torch.exp(torch.clamp(g, max=1.0) - 1.0) * mask.to(g.dtype)
    return e / torch.clamp(e.sum(dim=-1, keepdim=True), min=1e-30)


class AttentiveQA(nn.Module):
    """AP-CNN / AP-biLSTM: a sequence encoder's feature columns and :class:`AttentivePooling`.

    ``forward(q_ids, q_mask, a_ids, a_mask)`` scores row ``i`` of the questions with row ``i``
    of the answers (the same ``n`` rows; different padded lengths ``M`` and ``L``).

    Attributes
    ----------
    joint : True
        Tells the training loop to score pairs through this model.
    ball : BallMap("none")
        Present for the checkpoint format (which records a ball map); unused.

    Example
    -------
    >>> m = build_attentive_model("ap-bilstm", 10, dim=4, embed_dim=3)
    >>> m.kind, m.geometry
    ('ap-bilstm', 'joint')
    """

    joint = True
    geometry = "joint"

    def __init__(self, encoder: SequenceEncoder, kind: str) -> None:
        super().__init__()
        self.encoder = encoder
        self.attention = AttentivePooling(encoder.dim)
        self.ball = BallMap("none")
        self.kind = kind

    @property
    def w_f(self) -> Tensor:
        """The cosine's scale, fixed at 1 (reported in the training history like QA-CNN's)."""
        return torch.ones(())

    def features(self, ids: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
        """Padded ids (n, S) → feature columns (n, S, c) and the bool mask (n, S)."""
        m = mask.to(torch.bool)
        z = F.embedding(ids, self.encoder.embedding) * m.unsqueeze(-1).to(torch.float32)
        return self.encoder.features(z, m), m

    def forward(self, q_ids: Tensor, q_mask: Tensor, a_ids: Tensor, a_mask: Tensor) -> Tensor:
        q, qm = self.features(q_ids, q_mask)
        a, am = self.features(a_ids, a_mask)
        return self.attention(q, qm, a, am)

    def score_definition(self) -> dict[str, Any]:
        return {"formula": "cos(Q softmax(rowmax G), A softmax(colmax G)), G = tanh(Q U A^T)", "higher_is_better": True}

    def describe(self) -> dict[str, Any]:
        """Manifest description of the network."""
        return {
            "model": self.kind,
            **self.encoder.spec(),
            "embedding_width": self.encoder.embed_width,
            "pooling": "attentive pooling: G = tanh(Q U A^T), softmax of row/column max over real tokens",
        }

    def parameter_counts(self) -> dict[str, int]:
        """Trainable and total parameters (the embedding table counts when it is trained)."""
        total = sum(p.numel() for p in self.parameters())
        trainable = sum(p.numel() for p in self.parameters() if p.requires_grad)
        return {"trainable": int(trainable), "total": int(total), "embedding": int(self.encoder.embedding.numel())}


def build_attentive_model(
    kind: str,
    vocab_size: int,
    *,
    dim: int = 400,
    embeddings: np.ndarray | None = None,
    train_embeddings: bool | None = None,
    embed_dim: int = 300,
    window: int = 4,
    **_ignored: Any,
) -> AttentiveQA:
    """Create an AP-CNN (``dim`` filters, context ``window``) or AP-biLSTM (``dim // 2`` units per direction).

    Other keyword arguments (the dual encoders' ball settings) are accepted and ignored, so
    the training loop builds every model kind with one call.

    Example
    -------
    >>> build_attentive_model("ap-cnn", 10, dim=4, embed_dim=3, ball="clip").describe()["window"]
    4
    """
    common: dict[str, Any] = {"embeddings": embeddings, "train_embeddings": train_embeddings, "embed_dim": embed_dim}
    encoder: SequenceEncoder
    if kind == "ap-cnn":
        encoder = CNNEncoder(vocab_size, dim, window=window, **common)
    elif kind == "ap-bilstm":
        encoder = BiLSTMEncoder(vocab_size, dim, **common)
    else:
        raise ValueError(f"unknown attentive model {kind!r}; choose one of {ATTENTIVE_MODELS}")
    return AttentiveQA(encoder, kind)


# ------------------------------------------------------------------------ scoring rows of a TextTable


def _padded(table: TextTable, rows: np.ndarray, device: torch.device) -> tuple[Tensor, Tensor]:
    flat, offsets = table.gather(rows)
    return pad_ragged(torch.from_numpy(flat).to(device), torch.from_numpy(offsets).to(device))


def joint_pair_scores(
    model: AttentiveQA, table: TextTable, questions: np.ndarray, answers: np.ndarray, device: torch.device
) -> Tensor:
    """Scores (b, n) of question rows ``questions`` (b,) with answer rows ``answers`` (b, n), with gradients.

    Each distinct question text's features are computed once and repeated for its answers.
    """
    b, n = answers.shape
    q_ids, q_mask = _padded(table, questions, device)
    a_ids, a_mask = _padded(table, answers.reshape(-1), device)
    q, qm = model.features(q_ids, q_mask)
    a, am = model.features(a_ids, a_mask)
    q = q.repeat_interleave(n, dim=0)
    qm = qm.repeat_interleave(n, dim=0)
    return model.attention(q, qm, a, am).view(b, n)


def _scores_no_grad(
    model: AttentiveQA, table: TextTable, questions: np.ndarray, answers: np.ndarray, device: torch.device
) -> np.ndarray:
    """Scores of pairs (``questions[i]``, ``answers[i]``) (flat arrays), no gradient, in length-sorted chunks."""
    table._pack()
    order = np.lexsort((table._lengths[questions], table._lengths[answers]))
    out = np.zeros(len(answers), dtype=np.float64)
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            for start in range(0, len(order), _PAIR_CHUNK):
                idx = order[start : start + _PAIR_CHUNK]
                q_ids, q_mask = _padded(table, questions[idx], device)
                a_ids, a_mask = _padded(table, answers[idx], device)
                out[idx] = model(q_ids, q_mask, a_ids, a_mask).double().cpu().numpy()
    finally:
        model.train(was_training)
    return out


def joint_max_of_pool(
    model: AttentiveQA, table: TextTable, questions: np.ndarray, pool: np.ndarray, k: int, device: torch.device
) -> np.ndarray:
    """(b, k) highest-scoring rows of each question's sampled ``pool`` (b, K) under the current model."""
    b, width = pool.shape
    scores = _scores_no_grad(model, table, np.repeat(questions, width), pool.reshape(-1), device).reshape(b, width)
    top = np.argsort(-scores, axis=1, kind="stable")[:, :k]
    return np.take_along_axis(pool, top, axis=1)


def joint_split_scores(
    model: AttentiveQA, questions: np.ndarray, candidates: Sequence[np.ndarray], table: TextTable, device: torch.device
) -> list[np.ndarray]:
    """Each question's candidate scores (float64), as the dual encoders' evaluation returns them."""
    counts = [len(c) for c in candidates]
    if not sum(counts):
        return [np.zeros(0) for _ in candidates]
    flat_q = np.repeat(np.asarray(questions, dtype=np.int64), counts)
    flat_a = np.concatenate([np.asarray(c, dtype=np.int64) for c in candidates])
    scores = _scores_no_grad(model, table, flat_q, flat_a, device)
    return list(np.split(scores, np.cumsum(counts)[:-1]))


# ------------------------------------------------------------------------ export: one two-input graph


def export_module(model: AttentiveQA) -> AttentiveQA:
    """The model to export: a CPU float32 copy without gradients (the same function)."""
    module = copy.deepcopy(model).cpu().float().eval()
    return module.requires_grad_(False)


def export_reranker_graph(module: AttentiveQA, *, subprocess: bool | None = None) -> bytes:
    """ONNX bytes: ``(question_ids, question_mask (n, M), answer_ids, answer_mask (n, L)) -> scores (n,)``.

    ``n``, ``M`` and ``L`` are symbolic (checked after export). The runtime repeats a
    single question for its ``n`` candidates. ``subprocess`` (default: for AP-biLSTM) exports
    in a fresh Python process: torch 2.13's dynamo exporter can pin the sequence length of a
    second LSTM model exported in one process.
    """
    if subprocess is None:
        subprocess = isinstance(module.encoder, BiLSTMEncoder)
    if subprocess:
        return _export_in_subprocess(module)
    from torch.export import Dim

    from .onnx_export import _export

    n, m, length = Dim("n"), Dim("question_seq"), Dim("answer_seq")
    vocab = int(module.encoder.embedding.shape[0])
    v = [min(i, vocab - 1) for i in range(2, 9)]
    q_ids = torch.tensor([[v[0], v[1], 0], [v[2], 0, 0]], dtype=torch.int64)
    q_mask = torch.tensor([[1, 1, 0], [1, 0, 0]], dtype=torch.int64)
    a_ids = torch.tensor([[v[3], v[4], v[5], 0], [v[6], v[0], 0, 0]], dtype=torch.int64)
    a_mask = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0]], dtype=torch.int64)
    names = ["question_ids", "question_mask", "answer_ids", "answer_mask"]
    return _export(
        module,
        (q_ids, q_mask, a_ids, a_mask),
        names,
        ["scores"],
        {
            "q_ids": {0: n, 1: m},
            "q_mask": {0: n, 1: m},
            "a_ids": {0: n, 1: length},
            "a_mask": {0: n, 1: length},
        },
        dict.fromkeys(names, 2),
    )


def _export_in_subprocess(module: AttentiveQA) -> bytes:
    """:func:`export_reranker_graph` run by a fresh interpreter on a copy of ``module``'s weights."""
    import subprocess
    import sys
    import tempfile

    from safetensors.torch import save_file

    from .onnx_export import ExportError

    spec = {
        "kind": module.kind,
        "vocab_size": int(module.encoder.embedding.shape[0]),
        "dim": module.encoder.dim,
        "embed_dim": module.encoder.embed_width,
        "window": getattr(module.encoder, "window", 4),
    }
    with tempfile.TemporaryDirectory() as tmp:
        weights, out = Path(tmp) / "weights.safetensors", Path(tmp) / "graph.onnx"
        save_file({k: v.detach().cpu().contiguous() for k, v in module.state_dict().items()}, str(weights))
        code = (
            "import json, sys, torch\n"
            "from pathlib import Path\n"
            "from safetensors.torch import load_file\n"
            "from qaindex_export.attentive import build_attentive_model, export_reranker_graph\n"
            "spec = json.loads(sys.argv[1])\n"
            "model = build_attentive_model(spec.pop('kind'), spec.pop('vocab_size'), **spec)\n"
            "model.load_state_dict(load_file(sys.argv[2]))\n"
            "model = model.eval().requires_grad_(False)\n"
            "Path(sys.argv[3]).write_bytes(export_reranker_graph(model, subprocess=False))\n"
        )
        done = subprocess.run(
            [sys.executable, "-c", code, json.dumps(spec), str(weights), str(out)],
            capture_output=True,
            text=True,
            check=False,
            env={**os.environ, "OMP_NUM_THREADS": str(torch.get_num_threads())},
        )
        if done.returncode != 0 or not out.is_file():
            tail = " ".join((done.stderr or "").strip().splitlines()[-1:])
            raise ExportError(f"exporting {module.kind} in a fresh process failed: {tail}")
        return out.read_bytes()


def check_reranker_parity(
    model: AttentiveQA, graph: bytes, *, tolerance: float = 1e-4, seed: int = 0
) -> dict[str, float]:
    """onnxruntime against torch on varied shapes; raise :class:`~qaindex_export.onnx_export.ExportError`.

    Shapes (n, M, L): (1, 1, 1), (2, 2, 5), (5, 7, 3), (9, 12, 40), (1, 40, 2) and
    (3, 1, 17), with random padding, a one-token text and an empty answer.

    Returns
    -------
    dict
        ``{"reranker_max_abs_diff": ...}``.
    """
    from .onnx_export import ExportError, _session

    model = model.cpu().eval()
    rng = np.random.default_rng(seed)
    session = _session(graph)
    vocab = int(model.encoder.embedding.shape[0])
    worst = 0.0

    def texts(n: int, length: int, empty: bool) -> tuple[np.ndarray, np.ndarray]:
        ids = rng.integers(1, vocab, size=(n, length)).astype(np.int64)
        lengths = rng.integers(1, length + 1, size=n)
        lengths[0] = length
        if n > 1:
            lengths[-1] = 0 if empty else 1
        mask = (np.arange(length)[None, :] < lengths[:, None]).astype(np.int64)
        return np.where(mask == 1, ids, 0), mask

    with torch.no_grad():
        for n, m, length in ((1, 1, 1), (2, 2, 5), (5, 7, 3), (9, 12, 40), (1, 40, 2), (3, 1, 17)):
            q_ids, q_mask = texts(n, m, empty=False)
            a_ids, a_mask = texts(n, length, empty=True)
            feeds = {"question_ids": q_ids, "question_mask": q_mask, "answer_ids": a_ids, "answer_mask": a_mask}
            (got,) = session.run(["scores"], feeds)
            want = model(*(torch.from_numpy(x) for x in (q_ids, q_mask, a_ids, a_mask))).numpy()
            if got.shape != want.shape or not np.all(np.isfinite(got)):
                raise ExportError(f"reranker: onnxruntime gave shape {got.shape} (finite: {np.isfinite(got).all()}), "
                                  f"torch {want.shape}")  # fmt: skip
            diff = float(np.abs(got.astype(np.float64) - want).max(initial=0.0))
            worst = max(worst, diff)
            if diff > tolerance:
                raise ExportError(
                    f"parity check failed: reranker scores differ by {diff:.3g} between onnxruntime and torch "
                    f"(tolerance {tolerance:g}); the export is not faithful"
                )
    return {"reranker_max_abs_diff": worst}


def _onnx_metrics(graph: bytes, result: TrainResult, groups: Sequence[QuestionGroup]) -> dict[str, Any]:
    """Metrics of ``groups`` computed with onnxruntime, as :class:`qaindex.reranker.Reranker` does."""
    from qaindex.eval.metrics import evaluate_groups
    from qaindex.reranker import score_with_session

    from .onnx_export import _session

    session = _session(graph)
    scores = [
        score_with_session(session, result.tokenizer, result.max_tokens, g.question, [c.answer for c in g.candidates])
        for g in groups
    ]
    return evaluate_groups(groups, [s.astype(np.float64) for s in scores])


def export_reranker(
    result: TrainResult,
    directory: str | os.PathLike[str],
    *,
    name: str | None = None,
    dev_data: Any = None,
    tolerance: float | None = None,
) -> Path:
    """Write an AP model as a reranker model directory (``kind: "reranker"``), after a parity check.

    Parameters
    ----------
    result : TrainResult
        A trained AP-CNN / AP-biLSTM.
    directory : path-like
        Target (replaced atomically if it is a model directory already).
    name : str, optional
        Default ``"<model>-<embeddings>"``.
    dev_data : path or groups, optional
        Also evaluate these through onnxruntime (``metrics.dev_onnx``).
    tolerance : float, optional
        Parity tolerance (default 1e-4).

    Returns
    -------
    Path

    Example
    -------
    >>> export_reranker(result, "models/ap-cnn-wikiqa")  # doctest: +SKIP
    PosixPath('models/ap-cnn-wikiqa')
    """
    from qaindex.reranker import write_reranker

    from .train import _load

    model = result.model
    assert isinstance(model, AttentiveQA)
    module = export_module(model)
    graph = export_reranker_graph(module)
    parity = check_reranker_parity(module, graph, tolerance=1e-4 if tolerance is None else tolerance)
    metrics: dict[str, Any] = {"dev": result.dev, "best_epoch": result.best_epoch, "parity": parity}
    if dev_data is not None:
        groups, _ = _load(dev_data)
        metrics["dev_onnx"] = _onnx_metrics(graph, result, groups)
    cfg = result.config
    training = result.provenance(
        network=module.describe(),
        torch_version=torch.__version__,
        device=result.device,
        loss="mean over triples of max(0, margin - score(q, a) + score(q, a'))",
    )
    return write_reranker(
        directory,
        name=name or f"{cfg.model}-{cfg.embeddings.partition(':')[0]}",
        dimension=module.encoder.dim,
        tokenizer=result.tokenizer,
        max_tokens=result.max_tokens,
        graph=graph,
        score=module.score_definition(),
        training=training,
        metrics=metrics,
        parameters={**model.parameter_counts(), "exported_table": {
            "rows": int(module.encoder.embedding.shape[0]), "dim": module.encoder.embed_width, "dtype": "float32"}},
    )  # fmt: skip

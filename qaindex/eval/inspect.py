"""Where a Poincaré model puts questions, answers and words (HyperQA paper, section 5).

In a hyperbolic model the norm of a vector (its distance from the origin of the ball) is
free to carry meaning: the HyperQA paper reports that questions and answers settle at
different norms, and that single words sort into norm levels (its Table 9, levels H1-H5).
This module measures both for any model:

- :func:`norm_report`: the norm distributions of question and answer vectors
  (percentiles, mean, a shared histogram) and a 2-D view of the ball;
- :func:`word_levels`: every single-token text encoded alone, grouped into norm bands;
- :func:`plot`: both histograms and the 2-D view, drawn with matplotlib (optional extra
  ``qaindex[plot]``).

For a cosine model the norms are reported too, but its scores ignore them.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from ..errors import MissingDependencyError, QAIndexError
from ..model import Model
from .datasets import QuestionGroup

__all__ = [
    "PERCENTILES",
    "norm_report",
    "plot",
    "project_ball_2d",
    "single_token_words",
    "word_frequencies",
    "word_levels",
]

PERCENTILES = (1, 5, 25, 50, 75, 95, 99)
"""The percentiles of the norm distributions :func:`norm_report` gives."""

WordLevel = tuple[tuple[float, float], list[str]]


def _texts(groups_or_texts: Sequence[QuestionGroup] | Sequence[str]) -> tuple[list[str], list[str]]:
    items = list(groups_or_texts)
    if all(isinstance(x, str) for x in items):
        texts = [x for x in items if isinstance(x, str)]
        return texts, texts
    if all(isinstance(x, QuestionGroup) for x in items):
        groups = [x for x in items if isinstance(x, QuestionGroup)]
        answers = dict.fromkeys((c.aid, c.answer) for g in groups for c in g.candidates)
        return [g.question for g in groups], [text for _, text in answers]
    raise TypeError("norm_report takes a list of QuestionGroup or a list of str")


def _summary(norms: npt.NDArray[np.float64]) -> dict[str, Any]:
    return {
        "count": int(norms.size),
        "mean": float(norms.mean()),
        "std": float(norms.std()),
        "min": float(norms.min()),
        "max": float(norms.max()),
        "percentiles": {f"p{p}": float(v) for p, v in zip(PERCENTILES, np.percentile(norms, PERCENTILES), strict=True)},
    }


def project_ball_2d(vectors: npt.ArrayLike, *, fit: npt.ArrayLike | None = None) -> npt.NDArray[np.float64]:
    """Project vectors to 2-D with PCA, keeping each vector's norm.

    The two principal directions come from the centred ``fit`` vectors (default:
    ``vectors``); each vector is projected onto them *without* centring (the ball's origin
    stays at the origin), then rescaled so its 2-D norm equals its original norm. A vector
    orthogonal to both directions is placed on the first axis.

    Parameters
    ----------
    vectors : array-like (n, d)
    fit : array-like (m, d), optional
        Vectors that define the principal directions.

    Returns
    -------
    numpy.ndarray (n, 2), float64

    Example
    -------
    >>> pts = project_ball_2d([[0.3, 0.0, 0.4], [0.0, 0.1, 0.0]])
    >>> np.round(np.linalg.norm(pts, axis=1), 6).tolist()
    [0.5, 0.1]
    """
    x = np.asarray(vectors, dtype=np.float64)
    if x.ndim != 2:
        raise ValueError(f"vectors must be a 2-D array, got shape {x.shape}")
    f = x if fit is None else np.asarray(fit, dtype=np.float64)
    d = x.shape[1]
    basis = np.zeros((2, d))
    if f.shape[0] >= 2 and d >= 1:
        _, _, vt = np.linalg.svd(f - f.mean(axis=0), full_matrices=False)
        k = min(2, vt.shape[0])
        basis[:k] = vt[:k]
    # fill missing directions (fewer than 2 vectors or dimensions, or no variance)
    for axis in range(min(2, d)):
        if not np.any(basis[axis]):
            for e in np.eye(d):
                if axis == 0 or abs(float(e @ basis[0])) < 0.5:
                    basis[axis] = e
                    break
    proj = x @ basis.T
    norms = np.linalg.norm(x, axis=1)
    pnorms = np.linalg.norm(proj, axis=1)
    out = np.zeros((len(x), 2))
    ok = pnorms > 1e-12
    out[ok] = proj[ok] * (norms[ok] / pnorms[ok])[:, None]
    out[~ok, 0] = norms[~ok]
    return out


def norm_report(
    model: Model,
    groups_or_texts: Sequence[QuestionGroup] | Sequence[str],
    *,
    bins: int = 20,
    max_points: int = 2000,
    batch_size: int = 256,
    seed: int = 0,
) -> dict[str, Any]:
    """Norm distributions of question and answer vectors.

    Parameters
    ----------
    model : Model
        A loaded model.
    groups_or_texts : list of QuestionGroup, or list of str
        Labelled data (its questions are encoded as questions and its distinct candidate
        answers as answers), or plain texts (each encoded in both roles).
    bins : int, keyword-only
        Histogram bins, shared by both roles, over ``[0, max_norm]`` (Poincaré) or
        ``[0, largest norm]`` (cosine).
    max_points : int, keyword-only
        At most this many points per role (a fixed random sample) in the 2-D view.
    batch_size : int, keyword-only
        Texts per encoder call.
    seed : int, keyword-only
        Seed of the 2-D view's sample.

    Returns
    -------
    dict
        ``model``, ``geometry``, ``dimension``, ``max_norm``; ``question`` and ``answer``:
        ``{"count", "mean", "std", "min", "max", "percentiles": {"p1", ..., "p99"}}``;
        ``histogram``: ``{"edges", "question", "answer"}`` (counts); ``ball_2d``:
        ``{"question", "answer"}`` lists of ``[x, y]`` (see :func:`project_ball_2d`).
        Everything is JSON-serializable.

    Example
    -------
    >>> report = norm_report(model, ["what is a refund?", "Refunds take 14 days."])
    >>> sorted(report["question"]["percentiles"])[:3]
    ['p1', 'p25', 'p5']
    """
    if isinstance(bins, bool) or not isinstance(bins, int) or bins < 1:
        raise ValueError(f"bins must be a positive integer, got {bins!r}")
    questions, answers = _texts(groups_or_texts)
    if not questions or not answers:
        raise ValueError("norm_report needs at least one question and one answer text")
    qv = model.encode(questions, role="question", batch_size=batch_size).astype(np.float64)
    av = model.encode(answers, role="answer", batch_size=batch_size).astype(np.float64)
    qn = np.linalg.norm(qv, axis=1)
    an = np.linalg.norm(av, axis=1)
    top = model.max_norm if model.space.ball and model.max_norm is not None else 0.0
    top = max(top, float(qn.max()), float(an.max()), 1e-12)
    edges = np.linspace(0.0, top, bins + 1)
    qh, _ = np.histogram(qn, bins=edges)
    ah, _ = np.histogram(an, bins=edges)
    rng = np.random.default_rng(seed)

    def sample(v: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
        if len(v) <= max_points:
            return v
        return v[np.sort(rng.choice(len(v), size=max(0, max_points), replace=False))]

    both = np.concatenate([qv, av])
    return {
        "model": model.name,
        "geometry": model.geometry,
        "dimension": model.dimension,
        "max_norm": model.max_norm,
        "question": _summary(qn),
        "answer": _summary(an),
        "histogram": {"edges": edges.tolist(), "question": qh.tolist(), "answer": ah.tolist()},
        "ball_2d": {
            "question": project_ball_2d(sample(qv), fit=both).tolist(),
            "answer": project_ball_2d(sample(av), fit=both).tolist(),
        },
    }


def single_token_words(model: Model) -> list[str]:
    """Vocabulary tokens whose text, encoded alone, is exactly that one token (vocab order).

    Leaves out the padding and unknown tokens, WordPiece continuations (``##ing``) and
    special tokens that the tokenizer would split (``[CLS]``).

    Example
    -------
    >>> words = single_token_words(model)
    >>> "the" in words, "[CLS]" in words
    (True, False)
    """
    return list(_single_token_words(model))


def _single_token_words(model: Model) -> dict[str, int]:
    tok = model.tokenizer
    out: dict[str, int] = {}
    special = {tok.pad_id, tok.unk_id}
    for i, word in enumerate(tok.vocab):
        if i not in special and tok.encode(word) == [i]:
            out[word] = i
    return out


def word_frequencies(model: Model, texts: Iterable[str]) -> Counter[str]:
    """How often each vocabulary token occurs in ``texts`` (with the model's tokenizer).

    Example
    -------
    >>> word_frequencies(model, ["the cat", "the dog"]).most_common(1)
    [('the', 2)]
    """
    tok = model.tokenizer
    counts: Counter[str] = Counter()
    for text in texts:
        counts.update(tok.tokenize(text))
    return counts


def word_levels(
    model: Model,
    words: Sequence[str] | Mapping[str, int] | None = None,
    levels: int = 5,
    per_level: int = 10,
    *,
    batch_size: int = 256,
) -> list[WordLevel]:
    """Single words grouped into norm bands (the paper's levels H1-H5).

    Each word that is one vocabulary token on its own is encoded alone as a question; the
    range from the smallest to the largest of these norms is cut into ``levels`` bands of
    equal width, lowest norm (nearest the origin) first.

    Parameters
    ----------
    model : Model
        A loaded model.
    words : mapping of str to int, sequence of str, or None
        Word frequencies (e.g. :func:`word_frequencies` of the data): only these words are
        placed and each band lists its most frequent ones. A sequence: these words, listed
        in the given order. None: the whole vocabulary, in vocabulary order. Words that are
        not a single vocabulary token are left out.
    levels : int
        Number of bands.
    per_level : int
        Words listed per band.
    batch_size : int, keyword-only
        Texts per encoder call.

    Returns
    -------
    list of ((low, high), words)
        One entry per band, from the lowest norms to the highest; ``words`` holds up to
        ``per_level`` words whose norm falls in ``[low, high)`` (the last band includes
        ``high``). Empty when no word qualifies.

    Example
    -------
    >>> levels = word_levels(model, levels=5, per_level=3)
    >>> all(low <= high and len(ws) <= 3 for (low, high), ws in levels)
    True
    """
    for name, value in (("levels", levels), ("per_level", per_level)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    vocab = _single_token_words(model)
    if words is None:
        chosen = list(vocab)
    elif isinstance(words, Mapping):
        ranked = sorted(words.items(), key=lambda kv: (-kv[1], vocab.get(kv[0], 0)))
        chosen = [w for w, c in ranked if w in vocab and c > 0]
    else:
        chosen = [w for w in dict.fromkeys(words) if w in vocab]
    if not chosen:
        return []
    vectors = model.encode(chosen, role="question", batch_size=batch_size)
    norms = np.linalg.norm(vectors.astype(np.float64), axis=1)
    low, high = float(norms.min()), float(norms.max())
    edges = np.linspace(low, high, levels + 1)
    band = np.clip(np.searchsorted(edges, norms, side="right") - 1, 0, levels - 1)
    out: list[WordLevel] = []
    for level in range(levels):
        members = [chosen[i] for i in np.flatnonzero(band == level)[:per_level]]
        out.append(((float(edges[level]), float(edges[level + 1])), members))
    return out


def plot(report: Mapping[str, Any], path: str | os.PathLike[str]) -> None:
    """Draw a :func:`norm_report`: norm histograms and a 2-D view of the ball.

    Left: histograms of question and answer norms. Right: the vectors projected to 2-D by
    PCA with their original norms kept (:func:`project_ball_2d`), inside the unit circle
    (the ball's boundary, drawn for the Poincaré geometry). Uses matplotlib's Agg canvas
    directly, so no GUI backend and no global pyplot state are touched.

    Parameters
    ----------
    report : mapping
        The output of :func:`norm_report`.
    path : path-like
        The image file; its suffix picks the format (``.png``, ``.svg``, ``.pdf``...).

    Raises
    ------
    MissingDependencyError
        When matplotlib is not installed.
    QAIndexError
        When the file cannot be written.

    Example
    -------
    >>> from qaindex.eval.datasets import read_labelled
    >>> plot(norm_report(model, read_labelled("test.jsonl")), "norms.png")
    """
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
        from matplotlib.patches import Circle
    except ImportError:
        raise MissingDependencyError("plotting needs matplotlib: pip install 'qaindex[plot]'") from None

    fig = Figure(figsize=(11, 5), dpi=100)
    FigureCanvasAgg(fig)
    hist_ax, ball_ax = fig.subplots(1, 2)
    edges = np.asarray(report["histogram"]["edges"], dtype=np.float64)
    centres = (edges[:-1] + edges[1:]) / 2
    width = float(edges[1] - edges[0]) if len(edges) > 1 else 1.0
    for role, colour in (("question", "tab:blue"), ("answer", "tab:orange")):
        counts = np.asarray(report["histogram"][role], dtype=np.float64)
        summary = report[role]
        hist_ax.bar(
            centres,
            counts,
            width=width,
            alpha=0.5,
            color=colour,
            label=f"{role}s (n={summary['count']}, median {summary['percentiles']['p50']:.3f})",
        )
    hist_ax.set_xlabel("vector norm")
    hist_ax.set_ylabel("count")
    hist_ax.set_title(f"{report.get('model', 'model')}: norms ({report.get('geometry', '?')})")
    hist_ax.legend(loc="upper left")

    radius = 1.0
    if report.get("geometry") == "poincare":
        ball_ax.add_patch(Circle((0.0, 0.0), 1.0, fill=False, color="black", linewidth=1.0))
    else:
        radius = max(
            [1e-12] + [float(np.hypot(*p)) for role in ("question", "answer") for p in report["ball_2d"][role]]
        )
    shown = sum(len(report["ball_2d"][role]) for role in ("question", "answer"))
    size = 20.0 if shown <= 200 else 6.0
    for role, colour, marker in (("answer", "tab:orange", "o"), ("question", "tab:blue", "x")):
        pts = np.asarray(report["ball_2d"][role], dtype=np.float64).reshape(-1, 2)
        ball_ax.scatter(pts[:, 0], pts[:, 1], s=size, alpha=0.6, color=colour, marker=marker, label=f"{role}s")
    lim = radius * 1.05
    ball_ax.set_xlim(-lim, lim)
    ball_ax.set_ylim(-lim, lim)
    ball_ax.set_aspect("equal")
    ball_ax.set_title("2-D PCA view, norms kept")
    ball_ax.legend(loc="upper right")
    fig.tight_layout()
    try:
        fig.savefig(os.fspath(path))
    except OSError as exc:
        raise QAIndexError(f"{os.fspath(path)}: cannot write the plot ({exc.strerror or exc})") from None
    except ValueError as exc:  # unknown image format
        raise QAIndexError(f"{os.fspath(path)}: cannot write the plot ({exc})") from None

"""The parity stage of an export: onnxruntime against torch on varied shapes.

One recorder (:class:`Parity`) and one set of input generators serve every family's check
(:func:`.dual_export.check_parity`,
:func:`.attentive_export.check_reranker_parity`,
:func:`.recurrent_export.check_recurrent_parity`, and the re-exported scorer of
:func:`.onnx_export.set_ranking`): a difference ``|onnx - torch| / max(1, |torch|)``
above the tolerance, a shape mismatch or a non-finite output is an
:class:`~.onnx_graph.ExportError`.

Example
-------
>>> check = Parity(1e-4)
>>> try:
...     check.record("score", np.array([1.0, 2.0]), np.array([1.0, 2.5]))
... except ExportError as exc:
...     print(exc)
parity check failed: score differs by 0.5 between onnxruntime and torch (tolerance 0.0001); the export is not faithful
>>> check.record("distance", np.array([0.5]), np.array([0.5]))
>>> check.result()
{'score_max_abs_diff': 0.5, 'distance_max_abs_diff': 0.0}
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
import torch

from .onnx_graph import ExportError

__all__ = ["SCORER_SHAPES", "Parity", "ball_cases", "ball_points", "check_scorer", "padded_batch"]

SCORER_SHAPES = ((1, 1), (3, 4), (2, 9), (1, 4))  # (queries n, candidates m)


class Parity:
    """Worst differences per output, raising :class:`ExportError` beyond ``tolerance``."""

    def __init__(self, tolerance: float) -> None:
        self.tolerance = tolerance
        self.worst: dict[str, float] = {}

    def record(self, key: str, got: np.ndarray, want: np.ndarray, *, label: str | None = None) -> None:
        """Compare onnxruntime's ``got`` with torch's ``want`` for output ``key`` (``label`` in messages)."""
        label = label or key
        if got.shape != want.shape:
            raise ExportError(f"{label}: onnxruntime gave shape {got.shape}, torch {want.shape}")
        if not np.all(np.isfinite(got)):
            raise ExportError(f"{label}: onnxruntime produced non-finite values")
        diff = np.abs(got.astype(np.float64) - want.astype(np.float64))
        self.worst[key] = max(self.worst.get(key, 0.0), float(diff.max(initial=0.0)))
        scaled = diff / np.maximum(1.0, np.abs(want.astype(np.float64)))
        if scaled.size and float(scaled.max()) > self.tolerance:
            verb = "differ" if label.endswith("s") else "differs"
            raise ExportError(
                f"parity check failed: {label} {verb} by {float(diff.max()):.3g} between onnxruntime and torch "
                f"(tolerance {self.tolerance:g}); the export is not faithful"
            )

    def result(self) -> dict[str, float]:
        """``{"<key>_max_abs_diff": worst}`` for every output compared."""
        return {f"{k}_max_abs_diff": v for k, v in self.worst.items()}


def padded_batch(
    rng: np.random.Generator, vocab: int, batch: int, length: int, *, last: int
) -> tuple[np.ndarray, np.ndarray]:
    """``(ids, mask)`` (batch, length): random lengths, the first row full, the last row ``last`` tokens long.

    Example
    -------
    >>> ids, mask = padded_batch(np.random.default_rng(0), 10, 3, 4, last=0)
    >>> mask.sum(axis=1)[[0, -1]].tolist(), bool((ids[mask == 0] == 0).all())
    ([4, 0], True)
    """
    ids = rng.integers(1, vocab, size=(batch, length)).astype(np.int64)
    lengths = rng.integers(1, length + 1, size=batch)
    lengths[0] = length
    if batch > 1:
        lengths[-1] = last
    mask = (np.arange(length)[None, :] < lengths[:, None]).astype(np.int64)
    return np.where(mask == 1, ids, 0), mask


def ball_points(rng: np.random.Generator, shape: tuple[int, ...], max_norm: float | None) -> np.ndarray:
    """Random points with norms spread over (0, max_norm], some on the clip, one zero row."""
    x = rng.normal(size=shape)
    x /= np.linalg.norm(x, axis=-1, keepdims=True)
    radius = rng.uniform(0.0, 1.0, size=(*shape[:-1], 1))
    if max_norm is not None:
        radius = np.where(rng.random(radius.shape) < 0.3, max_norm, radius * max_norm)
    out = (x * radius).astype(np.float32)
    out.reshape(-1, shape[-1])[0] = 0.0
    return out


def check_scorer(
    check: Parity,
    scorer: Any,
    reference: Callable[[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]],
    cases: Iterable[tuple[np.ndarray, np.ndarray]],
) -> None:
    """Record the scorer session's ``score`` and ``distance`` against ``reference(query, candidates)``."""
    with torch.no_grad():
        for query, cands in cases:
            score, distance = scorer.run(["score", "distance"], {"query": query, "candidates": cands})
            want_s, want_d = reference(torch.from_numpy(query), torch.from_numpy(cands))
            check.record("score", score, want_s.numpy())
            check.record("distance", distance, want_d.numpy())


def ball_cases(
    rng: np.random.Generator, dim: int, max_norm: float | None, shapes: Iterable[tuple[int, int]] = SCORER_SHAPES
) -> list[tuple[np.ndarray, np.ndarray]]:
    """Scorer inputs: points anywhere in the ball, on the clip, at the origin, and identical pairs."""
    out = []
    for n, m in shapes:
        query = ball_points(rng, (n, dim), max_norm)
        cands = ball_points(rng, (n, m, dim), max_norm)
        cands[:, 0] = query  # identical pairs: distance 0
        out.append((query, cands))
    return out

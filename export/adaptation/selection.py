"""Adaptation's epoch selection (:mod:`.adapt`): an epoch replaces the start model only
when its held-out gain is beyond noise (a sign test and a paired bootstrap)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np


def reciprocal_ranks(ranked: list[np.ndarray], relevant: list[np.ndarray]) -> np.ndarray:
    out = np.zeros(len(ranked))
    for i, (ids, rel) in enumerate(zip(ranked, relevant, strict=True)):
        hits = np.flatnonzero(np.isin(ids, rel))
        out[i] = 1.0 / (hits[0] + 1) if len(hits) else 0.0
    return out


def paired_gain_test(start: np.ndarray, epoch: np.ndarray, *, resamples: int = 2000, seed: int = 0) -> dict[str, Any]:
    """Is ``epoch``'s per-question score above ``start``'s beyond noise? (paired, one-sided)

    Returns the mean gain, how many questions got better / worse, the sign test's p-value
    (``P(Bin(better + worse, 1/2) >= better)``, ties dropped) and the paired bootstrap's
    (share of resamples of the questions whose mean gain is ``<= 0``).

    Example
    -------
    >>> t = paired_gain_test(np.zeros(6), np.array([1.0, 1.0, 1.0, 1.0, 0.0, -0.5]))
    >>> t["better"], t["worse"], round(t["sign_p"], 4)
    (4, 1, 0.1875)
    """
    diff = np.asarray(epoch, np.float64) - np.asarray(start, np.float64)
    better, worse = int((diff > 1e-12).sum()), int((diff < -1e-12).sum())
    n = better + worse
    sign_p = sum(math.comb(n, k) for k in range(better, n + 1)) / 2.0**n if n else 1.0
    if len(diff):
        draws = np.random.default_rng(seed).integers(0, len(diff), size=(resamples, len(diff)))
        boot_p = float((diff[draws].mean(axis=1) <= 0.0).mean())
    else:
        boot_p = 1.0
    return {
        "gain": float(diff.mean()) if len(diff) else 0.0,
        "better": better,
        "worse": worse,
        "sign_p": float(sign_p),
        "bootstrap_p": boot_p,
    }


def versus_start(start: np.ndarray, epoch: np.ndarray, *, seed: int, alpha: float) -> dict[str, Any]:
    """:func:`paired_gain_test` of an epoch's per-question scores against the start's, with the
    number of questions and ``significant``: a positive gain passing both tests at ``alpha``.

    Example
    -------
    >>> t = versus_start(np.zeros(8), np.ones(8), seed=0, alpha=0.05)
    >>> t["questions"], t["significant"]
    (8, True)
    """
    test = paired_gain_test(start, epoch, seed=seed)
    test["questions"] = len(epoch)
    test["significant"] = bool(test["gain"] > 0 and test["sign_p"] <= alpha and test["bootstrap_p"] <= alpha)
    return test


class Selection:
    """The running choice of an epoch: kept when its gain is beyond noise and its score the best
    kept so far; progress (for the loop's patience) whenever its score is the best seen."""

    def __init__(self) -> None:
        self.kept_score = self.top_score = -math.inf

    def start(self, score: float) -> None:
        self.kept_score = self.top_score = score

    def judge(self, score: float, test: dict[str, Any]) -> tuple[bool, bool]:
        """``(keep, progress)`` of an epoch with ``score`` and its :func:`versus_start`."""
        keep, progress = bool(test["significant"] and score > self.kept_score), score > self.top_score
        self.kept_score = score if keep else self.kept_score
        self.top_score = score if progress else self.top_score
        return keep, progress


def gain_summary(measure: str, score: float, test: dict[str, Any]) -> str:
    """The progress line's figures: ``"held-out MRR@10 0.7100 (5 better, 1 worse, sign p ..., bootstrap p ...)"``."""
    return (
        f"{measure} {score:.4f} ({test['better']} better, {test['worse']} worse, sign p "
        f"{test['sign_p']:.3g}, bootstrap p {test['bootstrap_p']:.3g})"
    )


def selection_why(
    best_epoch: int, tests: dict[int, dict[str, Any]], start_mrr: float, final_mrr: float, alpha: float
) -> str:
    """The report's ``why``: which epoch was kept, and the held-out evidence for it."""

    def evidence(t: dict[str, Any]) -> str:
        return (
            f"{t['better']} of {t['questions']} held-out questions better, {t['worse']} worse, "
            f"sign-test p {t['sign_p']:.3g}, bootstrap p {t['bootstrap_p']:.3g}"
        )

    if best_epoch > 0:
        return (
            f"epoch {best_epoch} had the best held-out MRR@10 beyond noise ({final_mrr:.4f} against the start "
            f"model's {start_mrr:.4f}; {evidence(tests[best_epoch])})"
        )
    gaining = {e: t for e, t in tests.items() if t["gain"] > 0}
    if not gaining:
        return "no epoch beat the start model on the held-out split, so the start model is kept unchanged"
    e = max(gaining, key=lambda k: (gaining[k]["gain"], -k))
    t = gaining[e]
    return (
        f"no epoch beat the start model on the held-out split beyond noise (best: epoch {e}, MRR@10 "
        f"{start_mrr + t['gain']:.4f} against {start_mrr:.4f}; {evidence(t)}; needed both p <= {alpha:g}), "
        "so the start model is kept unchanged"
    )

"""The geometry objects: each lift ranks like its exact distance; screened distances match it.

Ground truth is brute force with the element-difference formulas of
:mod:`qaindex.geometry.hyperbolic` (and ``-q·a``, ``1 - cos``), independent of the objects.
"""

from __future__ import annotations

import numpy as np
import pytest

from qaindex import QAIndexError, geometry
from qaindex.geometry import hyperbolic
from qaindex.vector_index import CoarseIndex, best_first

CASES = [("poincare", "distance"), ("poincare", "relative"), ("cosine", "distance"), ("bilinear", "distance")]


def _points(name: str, n: int, dim: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, dim))
    if name == "poincare":  # inside the ball, norms spread over (0, 0.9)
        x = x / np.linalg.norm(x, axis=1, keepdims=True) * rng.uniform(0.01, 0.9, (n, 1))
    return x


def _truth(name: str, ranking: str, q: np.ndarray, a: np.ndarray) -> np.ndarray:
    qq, aa = q[:, None, :], a[None, :, :]
    if name == "poincare":
        d = hyperbolic.distance(qq, aa)
        return d - hyperbolic.origin_distance(a)[None, :] if ranking == "relative" else d
    if name == "cosine":
        return 1.0 - np.sum(qq * aa, -1) / (np.linalg.norm(q, axis=1)[:, None] * np.linalg.norm(a, axis=1)[None, :])
    return -np.sum(qq * aa, -1)


def _lift_order(name: str, ranking: str, q: np.ndarray, a: np.ndarray) -> np.ndarray:
    """What the lift ranks by: the distance, except for the relative ranking's lift, which ranks by
    ``2 cosh d(x, y) / e^{d(0, y)}`` exactly (``≈ e^{f(x, y)}`` for distances of a few units)."""
    if ranking == "relative":
        d = hyperbolic.distance(q[:, None, :], a[None, :, :])
        return np.log(np.cosh(d)) - hyperbolic.origin_distance(a)[None, :]
    return _truth(name, ranking, q, a)


def test_registry_names_and_errors() -> None:
    assert geometry.NAMES == ("poincare", "cosine", "bilinear")
    assert [geometry.get(n).name for n in geometry.NAMES] == list(geometry.NAMES)
    assert geometry.get("poincare", "relative").ranking == "relative"
    assert geometry.get("cosine", "relative").ranking == "distance"  # Poincaré only, as in manifests
    space = geometry.get("bilinear")
    assert geometry.get(space) is space
    with pytest.raises(QAIndexError, match="unknown geometry 'euclid'"):
        geometry.get("euclid")
    with pytest.raises(QAIndexError, match="unknown ranking 'nearest'; choose one of: distance, relative"):
        geometry.get("poincare", "nearest")
    assert [geometry.get(n).ball for n in geometry.NAMES] == [True, False, False]


@pytest.mark.parametrize(("name", "ranking"), CASES)
def test_exact_and_screened_distances_match_brute_force(name: str, ranking: str) -> None:
    space = geometry.get(name, ranking)
    q, a = _points(name, 7, 5, 0), _points(name, 40, 5, 1)
    truth = _truth(name, ranking, q, a)
    np.testing.assert_allclose(space.distance(q[:, None, :], a[None, :, :]), truth, rtol=1e-9, atol=1e-9)
    screened = space.screened_distance(np.sum(q * q, 1), np.sum(a * a, 1), q @ a.T)
    np.testing.assert_allclose(screened, truth, rtol=1e-7, atol=1e-7)


@pytest.mark.parametrize(("name", "ranking"), CASES)
@pytest.mark.parametrize("inner_product", [True, False])
def test_lifts_rank_like_the_distance(name: str, ranking: str, inner_product: bool) -> None:
    """Inner product (flat, IVF, PQ) or the HNSW metric of the lifts orders answers by distance."""
    space = geometry.get(name, ranking)
    q, a = _points(name, 6, 4, 2), _points(name, 30, 4, 3)
    db = space.lift(a, inner_product=inner_product).astype(np.float64)
    qs = space.lift_query(q, inner_product=inner_product).astype(np.float64)
    assert db.shape == (30, space.lifted_dimension(4, inner_product=inner_product)) and qs.shape[1] == db.shape[1]
    truth = _lift_order(name, ranking, q, a)
    if inner_product or space.hnsw_metric == "ip":
        coarse = -(qs @ db.T)
    else:
        coarse = np.sum((qs[:, None, :] - db[None, :, :]) ** 2, -1)
    if name == "poincare" and ranking == "distance" and not inner_product:
        return  # HNSW on raw coordinates is a recall heuristic, not an exact order
    for i in range(len(q)):
        assert np.argsort(coarse[i])[:5].tolist() == np.argsort(truth[i])[:5].tolist()
    if inner_product:  # PQ's refinement scores the same inner products
        scores = np.stack([space.lift_scores(qs[i].astype(np.float32), a) for i in range(len(q))])
        np.testing.assert_allclose(scores, qs @ db.T, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(("name", "ranking"), CASES)
def test_index_takes_the_object_or_the_name(name: str, ranking: str) -> None:
    a, q = _points(name, 50, 6, 4).astype(np.float32), _points(name, 3, 6, 5).astype(np.float32)
    by_object = CoarseIndex(geometry.get(name, ranking), 6, "flat")
    by_name = CoarseIndex(name, 6, "flat", ranking=ranking)
    assert by_object.geometry == by_name.geometry == name
    for ix in (by_object, by_name):
        ix.add(a)
    np.testing.assert_array_equal(by_object.search(q, 10), by_name.search(q, 10))
    truth = np.argsort(_lift_order(name, ranking, q.astype(np.float64), a.astype(np.float64)), axis=1)
    np.testing.assert_array_equal(by_object.search(q, 3), truth[:, :3])


@pytest.mark.parametrize("seed", range(20))
def test_the_refinements_partial_order_is_the_stable_sorts_prefix(seed: int) -> None:
    """PQ's refinement keeps its ``m`` best by a partition: exactly the first ``m`` of a stable
    sort, ties at the cut included (scores drawn from few values, so ties are everywhere)."""
    rng = np.random.default_rng(seed)
    scores = rng.integers(0, 6, size=1 if seed == 1 else int(rng.integers(2, 300))).astype(np.float32)
    if seed % 5 == 0:
        scores[rng.integers(0, len(scores))] = np.nan  # a damaged vector: the plain sort's order
    for m in (0, 1, 2, 10, len(scores) - 1, len(scores), len(scores) + 5):
        expected = np.argsort(-scores, kind="stable")[:m]
        np.testing.assert_array_equal(best_first(scores, m), expected)

"""Identities of the Poincaré-ball functions, across seeds and dtypes (geoopt style)."""

from __future__ import annotations

import numpy as np
import pytest

from qaindex.geometry import hyperbolic as H

SEEDS = [0, 1, 2]
DTYPES = [np.float32, np.float64]


def naive_distance(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """The textbook formula in float64, written independently of the module."""
    x = x.astype(np.float64)
    y = y.astype(np.float64)
    num = 2.0 * ((x - y) ** 2).sum(-1)
    den = (1.0 - (x**2).sum(-1)) * (1.0 - (y**2).sum(-1))
    return np.arccosh(1.0 + num / den)


def ball(rng: np.random.Generator, n: int, dim: int, dtype: type, max_norm: float) -> np.ndarray:
    v = rng.normal(size=(n, dim))
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    r = rng.uniform(0, max_norm, size=(n, 1)) ** 0.5 * max_norm**0.5
    return (v * r).astype(dtype)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_distance_matches_textbook_formula(seed: int, dtype: type) -> None:
    rng = np.random.default_rng(seed)
    max_norm = H.max_norm_for(dtype)
    x, y = ball(rng, 200, 5, dtype, max_norm), ball(rng, 200, 5, dtype, max_norm)
    got = H.distance(x, y)
    assert got.dtype == dtype
    want = naive_distance(x, y)
    np.testing.assert_allclose(got, want, rtol=2e-4 if dtype == np.float32 else 1e-9)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_metric_axioms(seed: int, dtype: type) -> None:
    rng = np.random.default_rng(seed)
    m = H.max_norm_for(dtype)
    x, y, z = (ball(rng, 100, 4, dtype, m) for _ in range(3))
    dxy, dyx = H.distance(x, y), H.distance(y, x)
    np.testing.assert_array_equal(dxy, dyx)
    assert np.all(H.distance(x, x) < (1e-3 if dtype == np.float32 else 1e-7))
    assert np.all(dxy >= 0)
    slack = 1e-3 if dtype == np.float32 else 1e-9
    assert np.all(H.distance(x, z) <= dxy + H.distance(y, z) + slack)


@pytest.mark.parametrize("dtype", DTYPES)
def test_distance_from_origin_is_2_artanh_norm(dtype: type) -> None:
    r = np.linspace(0.0, H.max_norm_for(dtype), 50)
    pts = np.stack([r, np.zeros_like(r)], axis=1).astype(dtype)
    got = H.distance(np.zeros_like(pts), pts)
    np.testing.assert_allclose(got, 2 * np.arctanh(r), rtol=1e-4 if dtype == np.float32 else 1e-10, atol=1e-6)


@pytest.mark.parametrize("dtype", DTYPES)
def test_nearby_points_near_boundary_keep_precision(dtype: type) -> None:
    """|x - y|^2 from differences: neighbours 1e-4 apart at norm 0.999 are still resolved."""
    rng = np.random.default_rng(3)
    m = H.max_norm_for(dtype)
    base = rng.normal(size=8)
    base = base / np.linalg.norm(base) * (m - 1e-3)
    y = base + rng.normal(scale=1e-4, size=(50, 8))
    x = np.broadcast_to(base, y.shape)
    got = H.distance(x.astype(dtype), y.astype(dtype))
    want = naive_distance(x.astype(dtype), y.astype(dtype))
    np.testing.assert_allclose(got, want, rtol=5e-3 if dtype == np.float32 else 1e-8)
    assert np.array_equal(np.argsort(got, kind="stable")[:10], np.argsort(want, kind="stable")[:10])


def test_arcosh1p_small_and_large() -> None:
    z = np.array([0.0, 1e-14, 1e-8, 1e-3, 1.0, 1e6])
    got = H.arcosh1p(z)
    want = np.array([0.0, *np.arccosh(1.0 + z[1:].astype(np.longdouble)).astype(np.float64)])
    want[1] = np.sqrt(2e-14)  # arccosh(1 + z) ~ sqrt(2 z) where 1 + z rounds
    np.testing.assert_allclose(got[1:], want[1:], rtol=1e-6)
    assert got[0] < 1e-15


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_project_keeps_inside_points_and_clips_outside(seed: int, dtype: type) -> None:
    rng = np.random.default_rng(seed)
    x = (rng.normal(size=(300, 6)) * rng.uniform(0.01, 3, size=(300, 1))).astype(dtype)
    m = H.max_norm_for(dtype)
    p = H.project(x, max_norm=m)
    norms = np.linalg.norm(x.astype(np.float64), axis=1)
    pn = np.linalg.norm(p.astype(np.float64), axis=1)
    inside = norms <= m
    np.testing.assert_array_equal(p[inside], x[inside])
    np.testing.assert_allclose(pn[~inside], m, rtol=1e-6)
    assert np.all(pn <= m * (1 + 1e-6))
    assert np.isfinite(H.distance(p, p[::-1])).all()


def test_project_rejects_bad_radius() -> None:
    with pytest.raises(ValueError, match=r"max_norm must be in \(0, 1\), got 1.0"):
        H.project(np.ones(2), max_norm=1.0)


def test_ball_eps_by_dtype() -> None:
    assert H.ball_eps(np.float32) == 1e-3
    assert H.ball_eps("float64") == 1e-5
    assert H.max_norm_for(np.dtype("float32")) == pytest.approx(0.999)


@pytest.mark.parametrize("seed", SEEDS)
def test_lift_inner_product_ranks_like_distance_in_float64(seed: int) -> None:
    rng = np.random.default_rng(seed)
    y = ball(rng, 400, 6, np.float64, 0.999)
    x = ball(rng, 5, 6, np.float64, 0.999)
    # the lift computed in float64 (lift() itself returns float32 for FAISS)
    a = 1.0 / (1.0 - (y**2).sum(1, keepdims=True))
    ly = np.concatenate([-a, -a * (y**2).sum(1, keepdims=True), 2 * a * y], axis=1)
    lx = np.concatenate([(x**2).sum(1, keepdims=True), np.ones((5, 1)), x], axis=1)
    by_ip = np.argsort(-(lx @ ly.T), axis=1)
    by_d = np.argsort(naive_distance(x[:, None, :], y[None, :, :]), axis=1)
    np.testing.assert_array_equal(by_ip[:, :20], by_d[:, :20])
    np.testing.assert_allclose(H.lift(y), ly.astype(np.float32), rtol=1e-6)
    np.testing.assert_allclose(H.lift_query(x), lx.astype(np.float32), rtol=1e-6)


def test_cosine_similarity_zero_vector_is_zero() -> None:
    assert float(H.cosine_similarity(np.zeros(3), np.ones(3))) == 0.0
    assert float(H.cosine_similarity(np.array([1.0, 1.0]), np.array([-2.0, -2.0]))) == pytest.approx(-1.0)


def test_torch_and_numpy_agree_and_gradients_are_finite() -> None:
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    for dtype, tdtype in ((np.float32, torch.float32), (np.float64, torch.float64)):
        m = H.max_norm_for(dtype)
        x = ball(rng, 64, 5, dtype, m)
        y = ball(rng, 64, 5, dtype, m)
        y[0] = x[0]  # identical points
        x[1] = 0.0  # the origin
        y[2] = x[2] / np.linalg.norm(x[2]) * m  # on the clip radius
        tx = torch.tensor(x, dtype=tdtype, requires_grad=True)
        ty = torch.tensor(y, dtype=tdtype, requires_grad=True)
        d = H.distance(tx, ty)
        np.testing.assert_allclose(d.detach().numpy(), H.distance(x, y), rtol=1e-5, atol=1e-6)
        d.sum().backward()
        assert torch.isfinite(tx.grad).all() and torch.isfinite(ty.grad).all()
        p = H.project(tx * 10, max_norm=m)
        assert float(p.detach().norm(dim=-1).max()) <= m * (1 + 1e-6)


# -- origin-relative distance (the ranking rule that keeps the centre from being a hub) ---------


@pytest.mark.parametrize("dtype", DTYPES)
def test_origin_distance_is_2_artanh_norm(dtype: type) -> None:
    r = np.linspace(0.0, H.max_norm_for(dtype), 200)
    pts = np.stack([r * 0.6, r * 0.8], axis=1).astype(dtype)
    got = H.origin_distance(pts)
    assert got.dtype == dtype
    want = 2 * np.arctanh(np.linalg.norm(pts.astype(np.float64), axis=1))
    np.testing.assert_allclose(got, want, rtol=1e-5 if dtype == np.float32 else 1e-12, atol=1e-6)
    np.testing.assert_allclose(got, H.distance(np.zeros_like(pts), pts), rtol=2e-4, atol=2e-6)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_relative_distance_bounds_and_origin_is_worst(seed: int, dtype: type) -> None:
    rng = np.random.default_rng(seed)
    m = H.max_norm_for(dtype)
    x, y = ball(rng, 300, 5, dtype, m), ball(rng, 300, 5, dtype, m)
    f = H.relative_distance(x, y)
    assert f.dtype == dtype
    dx = H.origin_distance(x)
    slack = 2e-3 if dtype == np.float32 else 1e-8
    # triangle inequality: -d(0, x) <= f <= d(0, x)
    assert np.all(f <= dx + slack) and np.all(f >= -dx - slack)
    want = naive_distance(x, y) - 2 * np.arctanh(np.linalg.norm(y.astype(np.float64), axis=1))
    np.testing.assert_allclose(f, want, rtol=1e-3 if dtype == np.float32 else 1e-9, atol=slack)
    # the origin attains the maximum d(0, x): it is every question's *worst* answer
    at_origin = H.relative_distance(x, np.zeros_like(y))
    np.testing.assert_allclose(at_origin, dx, rtol=1e-4, atol=1e-6)
    assert np.all(at_origin >= f - slack)
    # along the question's own direction, deeper is better up to the question's depth, then
    # constant at the minimum -d(0, x)
    norm = np.linalg.norm(x.astype(np.float64), axis=1, keepdims=True)
    unit = (x / norm).astype(dtype)
    f_shallow = H.relative_distance(x, unit * np.asarray(0.3, dtype))
    f_deep = H.relative_distance(x, unit * np.asarray(0.9, dtype))
    assert np.all(f_deep <= f_shallow + slack)
    assert np.all((f_deep < f_shallow)[norm[:, 0] > 0.31])
    beyond = norm[:, 0] < 0.89
    np.testing.assert_allclose(f_deep[beyond], -dx[beyond], atol=slack)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_relative_distance_on_a_sphere_is_distance_minus_constant(seed: int, dtype: type) -> None:
    rng = np.random.default_rng(seed)
    m = H.max_norm_for(dtype)
    x = ball(rng, 20, 6, dtype, m)
    y = rng.normal(size=(500, 6))
    y = (y / np.linalg.norm(y, axis=1, keepdims=True) * m).astype(dtype)
    for q in x:
        f = H.relative_distance(q[None, :], y)
        d = H.distance(q[None, :], y)
        const = np.full_like(f, -H.origin_distance(y[:1])[0])
        np.testing.assert_allclose(f - d, const, atol=2e-3 if dtype == np.float32 else 1e-9)
        # same order (up to float32 rounding of the radius: d sorted by f never drops by more)
        d_by_f = d.astype(np.float64)[np.argsort(f.astype(np.float64), kind="stable")]
        assert np.all(np.diff(d_by_f) >= -(2e-3 if dtype == np.float32 else 1e-9))


@pytest.mark.parametrize("seed", SEEDS)
def test_relative_lift_is_exact_for_cosh_form(seed: int) -> None:
    """``<lift_query(x), lift(y)> = -2 cosh d(x, y) / (X0 e^{d(0, y)})`` exactly; its order
    is the order of ``f`` wherever ``d`` is not tiny."""
    rng = np.random.default_rng(seed)
    x, y = ball(rng, 6, 5, np.float64, 0.999), ball(rng, 400, 5, np.float64, 0.999)
    ip = H.relative_lift_query(x).astype(np.float64) @ H.relative_lift(y).astype(np.float64).T
    d = naive_distance(x[:, None, :], y[None, :, :])
    x0 = (1 + (x**2).sum(1)) / (1 - (x**2).sum(1))
    d0 = 2 * np.arctanh(np.linalg.norm(y, axis=1))
    np.testing.assert_allclose(ip, -2 * np.cosh(d) / (x0[:, None] * np.exp(d0)[None, :]), rtol=1e-5, atol=1e-6)
    sq = (H.relative_lift(y).astype(np.float64) ** 2).sum(1)
    assert np.all(sq <= H.RELATIVE_LIFT_BOUND * (1 + 1e-6)) and np.all(sq >= 2 * (1 - 1e-6))
    f = H.relative_distance(x[:, None, :], y[None, :, :])
    far = d > 3.0
    # e^d ≈ 2 cosh d where d is large: log(-X0 ip) then equals f to within e^{-2d}
    approx = np.log(-x0[:, None] * ip)
    assert np.all(np.abs(approx - f)[far] < 5e-3)


def test_near_centre_counts_well_below_the_median() -> None:
    rng = np.random.default_rng(0)
    v = rng.normal(size=(10, 4))
    v = v / np.linalg.norm(v, axis=1, keepdims=True)
    radii = np.array([0.999] * 6 + [0.99, 0.5, 0.1, 0.0])[:, None]  # d(0, a): 7.6 ×6, 5.29, 1.1, 0.2, 0
    out = H.near_centre(v * radii)
    median = 2 * np.arctanh(0.999)
    assert out["count"] == 4 and out["fraction_of_answers"] == 0.4  # 0.99 is 2.3 shallower: counted
    assert out["median_origin_distance"] == pytest.approx(median, rel=1e-9)
    assert out["threshold"] == pytest.approx(median - 2.0, rel=1e-9)
    # with shallow answers everywhere the fraction rule applies: half the median
    low = H.near_centre(v * np.array([0.5] * 8 + [0.2, 0.0])[:, None])
    assert low["threshold"] == pytest.approx(np.arctanh(0.5), rel=1e-9) and low["count"] == 2
    assert H.near_centre(np.zeros((0, 4)))["count"] == 0


def test_relative_torch_and_numpy_agree_with_finite_gradients() -> None:
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(1)
    for dtype, tdtype in ((np.float32, torch.float32), (np.float64, torch.float64)):
        m = H.max_norm_for(dtype)
        x, y = ball(rng, 64, 5, dtype, m), ball(rng, 64, 5, dtype, m)
        y[0] = 0.0  # the origin
        y[1] = x[1] / np.linalg.norm(x[1]) * m  # on the clip
        y[2] = x[2]
        tx = torch.tensor(x, dtype=tdtype, requires_grad=True)
        ty = torch.tensor(y, dtype=tdtype, requires_grad=True)
        f = H.relative_distance(tx, ty)
        np.testing.assert_allclose(f.detach().numpy(), H.relative_distance(x, y), rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(H.origin_distance(ty).detach().numpy(), H.origin_distance(y), rtol=2e-5, atol=1e-6)
        f.sum().backward()
        assert torch.isfinite(tx.grad).all() and torch.isfinite(ty.grad).all()
        pf = H.pairwise_relative_distance(tx[:3], ty[None].expand(3, -1, -1))
        assert tuple(pf.shape) == (3, 64)


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_relative_lift_scores_equal_the_inner_product_with_the_lift(seed: int, dtype: type) -> None:
    rng = np.random.default_rng(seed)
    y = rng.normal(size=(200, 12))
    y *= rng.uniform(0.0, 0.999, (200, 1)) / np.linalg.norm(y, axis=1, keepdims=True)
    y[0] = 0.0  # the centre, where the lift is largest
    x = rng.uniform(-0.2, 0.2, (1, 12))
    lq = H.relative_lift_query(x)[0]
    want = H.relative_lift(y).astype(np.float64) @ lq.astype(np.float64)
    got = H.relative_lift_scores(lq, y.astype(dtype))
    assert got.dtype == np.float32 and got.shape == (200,)
    assert np.allclose(got, want, atol=2e-6)


def test_relative_lift_of_many_rows_equals_the_lift_of_each(monkeypatch: pytest.MonkeyPatch) -> None:
    """The lift is computed a block of rows at a time: blocks that split the rows change no bit."""
    rng = np.random.default_rng(0)
    y = ball(rng, 50, 7, np.float32, 0.999)
    whole = H.relative_lift(y)
    monkeypatch.setattr(H, "_LIFT_ROWS", 3)
    blocked = H.relative_lift(y)
    one_by_one = np.concatenate([H.relative_lift(y[i : i + 1]) for i in range(len(y))])
    assert blocked.dtype == np.float32 and blocked.shape == (50, 8)
    np.testing.assert_array_equal(blocked, whole)
    np.testing.assert_array_equal(blocked, one_by_one)
    assert H.relative_lift(y.reshape(5, 10, 7)).shape == (5, 10, 8)
    np.testing.assert_array_equal(H.relative_lift(y.reshape(5, 10, 7)).reshape(50, 8), whole)

"""Recall tuning of the coarse stage and the IVF / scalar-quantised index kinds.

Ground truth everywhere is a plain brute force written here (every pair's distance under the
model's ranking rule, float64, argsort), not the library's own exact search.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner

from qaindex import IndexFormatError, QAIndexError, QueryError, Ranker
from qaindex.cli import main
from qaindex.corpus import read_corpus
from qaindex.geometry import hyperbolic
from qaindex.indexing.tuning import answer_spans, recall_at, tune_breadth
from qaindex.store.index_format import manifest_checksum
from qaindex.vector_index import CoarseIndex, default_params, exact_search

ROOT = Path(__file__).resolve().parents[2]


def brute_force(queries: np.ndarray, vectors: np.ndarray, k: int, ranking: str) -> np.ndarray:
    """Top-k rows under the Poincaré ranking rule, float64, every pair (ties by row)."""
    q = np.asarray(queries, np.float64)[:, None, :]
    v = np.asarray(vectors, np.float64)[None, :, :]
    d = hyperbolic.relative_distance(q, v) if ranking == "relative" else hyperbolic.distance(q, v)
    return np.argsort(d, axis=1, kind="stable")[:, :k]


def ball_points(n: int, dim: int, seed: int) -> np.ndarray:
    """Clustered points inside the ball at varied norms (like real answer vectors)."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(max(4, n // 50), dim))
    x = centres[rng.integers(0, len(centres), n)] + 0.6 * rng.normal(size=(n, dim))
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    return (x * rng.uniform(0.3, 0.95, (n, 1))).astype(np.float32)


@pytest.mark.parametrize(
    ("kind", "ranking"),
    [("hnsw", "relative"), ("hnsw", "distance"), ("ivf", "relative"), ("pq", "relative"), ("pq", "distance")],
)
def test_tuning_reaches_the_recall_target_against_brute_force(kind: str, ranking: str) -> None:
    vectors = ball_points(4000, 16, seed=0)
    queries = ball_points(300, 16, seed=1)
    tune_q, check_q = queries[:150], queries[150:]
    params = {
        "hnsw": {"M": 8, "ef_construction": 40, "ef_search": 1},
        "ivf": {"nlist": 64, "nprobe": 1},
        "pq": {"M": 4, "refine": 1},  # 4 sub-quantisers of 16 (or 18 lifted) coordinates: coarse codes
    }[kind]
    ix = CoarseIndex("poincare", 16, kind, params, ranking=ranking, count=len(vectors))
    ix.add(vectors)
    # plain distance: HNSW searches L2 on ball coordinates, which orders unlike d near the
    # boundary, so it needs more candidates for the rerank
    k, overfetch, target = 10, (2 if ranking == "relative" else 5), 0.97
    out = tune_breadth(
        ix, vectors, tune_q, target=target, k=k, overfetch=overfetch, geometry="poincare", ranking=ranking
    )
    assert out["reached"] is True
    param = {"hnsw": "ef_search", "ivf": "nprobe", "pq": "refine"}[kind]
    assert out["param"] == param and ix.params[param] == out["value"]
    # the recall it reports is what brute force says on the tuning queries ...
    truth = brute_force(tune_q, vectors, k, ranking)
    measured = recall_at(ix.search(tune_q, k * overfetch, vectors=vectors), truth)
    assert measured == pytest.approx(out["recall"], abs=1e-6)
    assert measured >= target
    # ... and it is the smallest breadth tried that reaches the target
    assert all(recall < target for value, recall in out["tried"] if value < out["value"])
    # (or it is the least there is: HNSW searches at least as broadly as the candidate count)
    smaller = [value for value, _ in out["tried"] if value < out["value"]]
    assert smaller or out["value"] == (k * overfetch if kind == "hnsw" else 1)
    # held-out queries land near the target too (not a pass/fail on speed, a sanity bound)
    held = recall_at(ix.search(check_q, k * overfetch, vectors=vectors), brute_force(check_q, vectors, k, ranking))
    assert held >= target - 0.05


def test_an_unreachable_target_keeps_the_best_breadth_tried_and_says_so() -> None:
    vectors = ball_points(600, 8, seed=2)
    ix = CoarseIndex("poincare", 8, "ivf", {"nlist": 32, "nprobe": 1}, ranking="relative", count=600)
    ix.add(vectors)
    out = tune_breadth(
        ix, vectors, vectors[:40], target=1.0, k=10, overfetch=1, geometry="poincare", ranking="relative", max_breadth=2
    )
    assert out["reached"] is False and out["value"] == 2 and ix.params["nprobe"] == 2
    assert out["recall"] < 1.0 and out["tried"][0][1] < out["recall"]


class _ScriptedGraph:
    """An ``hnsw`` coarse index whose recall at each breadth is scripted: at breadth ``b`` its
    search returns the first ``round(r · n · k)`` rows of the exact top ``k`` (query by query)
    and nothing else, ``r`` the curve's value at the largest breadth in it up to ``b``, so the
    tuner's measure of recall is exactly that value."""

    kind, tuning = "hnsw", None

    def __init__(self, vectors: np.ndarray, curve: dict[int, float]) -> None:
        self.vectors, self.curve, self.params = vectors, curve, {"ef_search": 1}

    def set_breadth(self, value: int) -> None:
        self.params["ef_search"] = value

    def exhaustive_search(self, queries: np.ndarray, m: int, vectors: np.ndarray) -> np.ndarray:
        return exact_search(queries, self.vectors, m, geometry="cosine")[1]

    def search(self, queries: np.ndarray, m: int, vectors: np.ndarray | None = None) -> np.ndarray:
        truth = exact_search(queries, self.vectors, 10, geometry="cosine")[1]
        at = max(b for b in self.curve if b <= self.params["ef_search"])
        keep = round(self.curve[at] * truth.size)
        out = np.full((len(queries), m), -1, dtype=np.int64)
        out[:, :10] = np.where(np.arange(truth.size).reshape(truth.shape) < keep, truth, -1)
        return out


def _ladder_curve(recalls: list[float]) -> dict[int, float]:
    """``recalls`` at the ×√2 ladder from 100 (the candidate count of k 10, overfetch 10)."""
    from qaindex.indexing.tuning import _ladder

    steps = _ladder(100, 16_384)
    return dict(zip(steps, recalls + [recalls[-1]] * (len(steps) - len(recalls)), strict=True))


def test_a_recall_that_only_creeps_up_stops_the_climb_at_the_breadth_where_it_stopped_rising() -> None:
    """HNSW on answer spans at a million answers (benchmarks.speed.ann_difficulty): steep to
    ef 800, then + 0.001 to 0.0025 per √2 step up to ef 9,051. Once a doubling of the breadth
    gains no more than one standard error of the recall (200 queries × 10 hits), the climb
    stops and keeps the cheapest breadth within one standard error of the best measured,
    instead of ef 6,400 (twenty times slower)."""
    spans = [0.9365, 0.9445, 0.9535, 0.9575, 0.967, 0.9745, 0.978, 0.982, 0.982, 0.9835, 0.984, 0.985, 0.9875, 0.989]
    vectors = ball_points(20_000, 8, seed=7)
    graph = _ScriptedGraph(vectors, _ladder_curve(spans))
    out = tune_breadth(graph, vectors, vectors[:200], target=0.99, k=10, overfetch=10, geometry="cosine")  # type: ignore[arg-type]
    tried = dict(out["tried"])
    assert list(tried) == [100, 141, 200, 283, 400, 566, 800, 1131, 1600, 2263]  # 2263 gains 0.0015 over 1131
    best = max(tried.values())
    error = (best * (1 - best) / 2000) ** 0.5
    assert out["value"] == min(b for b, r in tried.items() if r >= best - error) == 1131
    assert out["reached"] is False and graph.params["ef_search"] == 1131
    # a recall that keeps rising by more than its noise climbs on to the target
    steady = [0.90, 0.92, 0.935, 0.95, 0.96, 0.968, 0.975, 0.981, 0.986, 0.991]
    graph = _ScriptedGraph(vectors, _ladder_curve(steady))
    out = tune_breadth(graph, vectors, vectors[:200], target=0.99, k=10, overfetch=10, geometry="cosine")  # type: ignore[arg-type]
    assert out["reached"] is True and out["recall"] >= 0.99 and out["value"] == 2263  # its first breadth at 0.99


@pytest.mark.parametrize(("kind", "params"), [("ivf", {"nlist": 64}), ("pq", {"M": 2})])
def test_a_ceiling_short_of_the_target_is_aimed_at_not_climbed_towards(kind: str, params: dict[str, int]) -> None:
    """With one candidate per hit, the lift's approximation caps recall below 1 even searching
    every answer (the index's own metric, ``exhaustive_search``): the breadths aim at that
    ceiling less one standard error and keep the smallest that reaches it."""
    vectors = ball_points(600, 8, seed=2)
    ix = CoarseIndex("poincare", 8, kind, params, ranking="relative", count=600)
    ix.add(vectors)
    truth = exact_search(vectors[:40], vectors, 10, geometry="poincare", ranking="relative")[1]
    ceiling = recall_at(ix.exhaustive_search(vectors[:40], 10, vectors), truth)
    out = tune_breadth(
        ix, vectors, vectors[:40], target=1.0, k=10, overfetch=1, geometry="poincare", ranking="relative"
    )
    aim = ceiling - (ceiling * (1 - ceiling) / (40 * 10)) ** 0.5  # one standard error of a share of 400 hits
    assert out["reached"] is False and out["ceiling"] == round(ceiling, 6) < 1.0
    assert out["recall"] >= aim - 1e-6
    assert out["value"] == min(v for v, r in out["tried"] if r >= aim - 1e-6)
    assert ix.params[out["param"]] == out["value"]


def test_the_exhaustive_search_is_what_the_widest_breadth_returns() -> None:
    """``exhaustive_search`` ranks every answer by the index's own metric: a flat index's search,
    and an IVF index probing every list, return the same rows."""
    vectors = ball_points(500, 8, seed=5)
    queries = ball_points(20, 8, seed=6)
    for kind, params in (("flat", None), ("ivf", {"nlist": 8, "nprobe": 8})):
        ix = CoarseIndex("poincare", 8, kind, params, ranking="relative", count=500)
        ix.add(vectors)
        np.testing.assert_array_equal(ix.exhaustive_search(queries, 15, vectors), ix.search(queries, 15))
    flat = CoarseIndex("poincare", 8, "flat", ranking="relative", count=500)
    flat.add(vectors)
    out = tune_breadth(flat, vectors, queries, target=0.9, k=5, overfetch=3, geometry="poincare", ranking="relative")
    assert out["param"] is None and out["ceiling"] == out["recall"]  # flat's search is its exhaustive one


@pytest.mark.parametrize(
    ("geometry", "ranking"), [("poincare", "relative"), ("poincare", "distance"), ("cosine", "distance")]
)
def test_pq_refines_its_codes_with_the_float_vectors(geometry: str, ranking: str) -> None:
    vectors = ball_points(3000, 16, seed=3)
    queries = ball_points(50, 16, seed=4)
    m = 20
    flat = CoarseIndex(geometry, 16, "flat", ranking=ranking, count=len(vectors))
    flat.add(vectors)
    pq = CoarseIndex(geometry, 16, "pq", {"M": 4, "refine": 1}, ranking=ranking, count=len(vectors))
    pq.add(vectors)
    assert pq.stored_dimension % 4 == 0 and pq.params == {"M": 4, "refine": 1}
    # the float scores the refinement sorts by: flat's own (exhaustive) inner products
    exact = flat._db(vectors).astype(np.float64) @ flat._query(queries).astype(np.float64).T
    # refine covering every answer: the exhaustive top m, whatever the codes say
    pq.set_breadth(len(vectors) // m)
    full = pq.search(queries, m, vectors=vectors)
    for i in range(len(queries)):
        assert np.allclose(np.sort(exact[full[i], i])[::-1], np.sort(exact[:, i])[::-1][:m], atol=1e-5)
    # breadth 1 without re-scoring is the codes' order: coarser than the refined search
    pq.set_breadth(1)
    codes_only = pq.search(queries, m)
    pq.set_breadth(8)
    refined = pq.search(queries, m, vectors=vectors)
    truth = np.argsort(-exact, axis=0, kind="stable")[:m].T
    assert recall_at(refined, truth) > recall_at(codes_only, truth)
    assert recall_at(codes_only, truth) < 1.0
    # every refined row is one of the codes' top m × refine
    pq.set_breadth(8)
    wide = pq.search(queries, m * 8)
    assert all(set(r.tolist()) <= set(w.tolist()) for r, w in zip(refined, wide, strict=True))


def test_default_parameters_per_size() -> None:
    assert default_params("hnsw", 100_000) == {"M": 32, "ef_construction": 200, "ef_search": 256}
    assert default_params("hnsw", 1_000_000)["ef_construction"] == 100
    assert default_params("ivf", 10_000) == {"nlist": 200, "nprobe": 25}
    assert default_params("ivf_sq8", 10**9)["nlist"] == 8192
    assert default_params("flat", 10) == {}
    assert default_params("pq", 50_000) == {"refine": 10}
    assert default_params("pq", 10**6) == {"refine": 32}
    # one sub-quantiser per four searched coordinates (301 for the relative lift of 300), rounded up
    pq = CoarseIndex("poincare", 300, "pq", ranking="relative")
    assert pq.params == {"refine": 10, "M": 76} and pq.stored_dimension == 304
    assert CoarseIndex("cosine", 256, "pq").params["M"] == 64


# -- the new kinds through the Ranker ------------------------------------------------------------
def _answers(n: int, seed: int = 0) -> list[dict[str, Any]]:
    words = sorted({w for r in read_corpus(ROOT / "examples" / "faq.jsonl") for w in r.answer.lower().split()})
    rng = np.random.default_rng(seed)
    return [{"id": i, "answer": " ".join(rng.choice(words, size=int(rng.integers(6, 20))))} for i in range(n)]


@pytest.fixture(scope="module")
def answers() -> list[dict[str, Any]]:
    return _answers(800)


@pytest.mark.parametrize(
    ("kind", "params"),
    [
        ("ivf", {"nlist": 16, "nprobe": 16}),
        ("ivf_sq8", {"nlist": 16, "nprobe": 16}),
        ("hnsw_sq8", {"ef_search": 800}),
        ("pq", {"refine": 100}),  # re-scores every answer: exact candidates
    ],
)
def test_new_kinds_return_the_brute_force_top_k_and_persist(
    kind: str, params: dict[str, int], answers: list[dict[str, Any]], tmp_path: Path
) -> None:
    ranker = Ranker.build(answers, index_kind=kind, hnsw=params, device="cpu")
    assert ranker.index_kind == kind
    questions = [a["answer"] for a in answers[:40]] + ["how do I get a refund", "export my notes"]
    qv = ranker.model.encode(questions, role="question")
    truth = brute_force(qv, np.asarray(ranker._vectors), 10, ranker.model.ranking)
    _, _, rows = ranker.search_vectors(qv, 10, use_coarse=True)
    assert recall_at(rows, truth) == 1.0
    ranker.save(tmp_path / "ix")
    manifest = json.loads((tmp_path / "ix" / "manifest.json").read_text())
    assert manifest["coarse"]["kind"] == kind
    again = Ranker.load(tmp_path / "ix")
    assert again.index_kind == kind and again.info()["index"]["params"] == ranker.info()["index"]["params"]
    _, _, rows2 = again.search_vectors(qv, 10, use_coarse=True)
    assert np.array_equal(rows, rows2)
    # updates keep working (IVF lists and quantisers stay trained)
    with Ranker.edit(tmp_path / "ix") as r:
        r.add([{"id": "new", "answer": "refunds are paid within fourteen days"}])
        r.remove([0])
    assert Ranker.load(tmp_path / "ix").search("refunds paid within fourteen days", k=1)[0].id == "new"


def test_build_with_recall_tunes_stores_and_reports(answers: list[dict[str, Any]], tmp_path: Path) -> None:
    ranker = Ranker.build(answers, index_kind="hnsw", hnsw={"M": 16, "ef_construction": 40}, recall=0.99)
    tuning = ranker.info()["index"]["tuning"]
    assert tuning["target"] == 0.99 and tuning["reached"] is True and tuning["source"] == "held-out answer spans"
    assert tuning["param"] == "ef_search" and ranker.info()["index"]["params"]["ef_search"] == tuning["value"]
    ranker.save(tmp_path / "ix")
    loaded = Ranker.load(tmp_path / "ix")
    assert loaded.info()["index"]["tuning"] == tuning
    assert loaded.info()["index"]["params"]["ef_search"] == tuning["value"]
    # the stored figure is what brute force gives on the same sample
    measured = loaded.recall(10, questions=[a["answer"] for a in answers])
    assert measured["coarse_recall"] >= 0.95


@pytest.mark.parametrize("with_questions", [False, True])
def test_a_streamed_build_tunes_exactly_like_an_in_memory_one(
    with_questions: bool, answers: list[dict[str, Any]], tmp_path: Path
) -> None:
    rows = [
        {**a, "question": " ".join(a["answer"].split()[:5])} if with_questions and i % 3 == 0 else a
        for i, a in enumerate(answers)
    ]
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    params = {"M": 16, "ef_construction": 40}
    streamed = Ranker.build(corpus, index_kind="hnsw", hnsw=params, recall=0.99).info()["index"]["tuning"]
    in_memory = Ranker.build(rows, index_kind="hnsw", hnsw=params, recall=0.99).info()["index"]["tuning"]
    assert streamed["source"] == ("stored questions" if with_questions else "held-out answer spans")
    assert {k: v for k, v in streamed.items() if k != "seconds"} == {
        k: v for k, v in in_memory.items() if k != "seconds"
    }


def test_cli_build_recall_and_info(answers: list[dict[str, Any]], tmp_path: Path) -> None:
    corpus = tmp_path / "c.jsonl"
    corpus.write_text("".join(json.dumps(a) + "\n" for a in answers[:300]))
    index = tmp_path / "ix"
    runner = CliRunner()
    res = runner.invoke(main, ["build", str(corpus), "--index", str(index), "--index-kind", "ivf", "--recall", "0.99"])
    assert res.exit_code == 0, res.output
    assert "nprobe=" in res.output and "tuned to recall@10" in res.output and "target 0.9900 reached" in res.output
    res = runner.invoke(main, ["info", "--index", str(index)])
    assert res.exit_code == 0 and "tuning:     nprobe=" in res.output
    info = json.loads(runner.invoke(main, ["info", "--index", str(index), "--json"]).output)
    assert info["index"]["kind"] == "ivf" and info["index"]["tuning"]["reached"] is True
    res = runner.invoke(main, ["build", str(corpus), "--index", str(index), "--recall", "1.5"])
    assert res.exit_code == 2 and "Invalid value for '--recall'" in res.output


def test_bad_recall_targets_and_tuning_fields_are_refused(answers: list[dict[str, Any]], tmp_path: Path) -> None:
    with pytest.raises(QueryError) as err:
        Ranker.build(answers[:10], recall=1.5)
    assert str(err.value) == "recall must be a number above 0 and at most 1 (e.g. 0.99), got 1.5"
    Ranker.build(answers[:50], recall=0.9).save(tmp_path / "ix")
    mpath = tmp_path / "ix" / "manifest.json"
    manifest = json.loads(mpath.read_text())
    assert "tuning" not in manifest["coarse"]  # flat is exact: nothing to tune
    Ranker.build(answers[:300], index_kind="ivf", recall=0.9).save(tmp_path / "ix", overwrite=True)
    manifest = json.loads(mpath.read_text())
    manifest["coarse"]["tuning"]["recall"] = 2
    manifest["checksum"] = manifest_checksum({k: v for k, v in manifest.items() if k != "checksum"})
    mpath.write_text(json.dumps(manifest))
    with pytest.raises(IndexFormatError) as err2:
        Ranker.load(tmp_path / "ix")
    assert 'field "coarse.tuning" must be an object with target and recall between 0 and 1' in str(err2.value)


# -- backward compatibility ------------------------------------------------------------------------
MAIN_COMMIT = "8eaf8cb"  # the main branch this work started from


def _git(*args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, check=False)


@pytest.mark.skipif(
    _git("cat-file", "-e", f"{MAIN_COMMIT}^{{commit}}").returncode != 0, reason="the main commit is not in this clone"
)
@pytest.mark.parametrize("kind", ["flat", "hnsw"])
def test_an_index_saved_by_main_still_loads(kind: str, answers: list[dict[str, Any]], tmp_path: Path) -> None:
    old = tmp_path / "old"
    archive = _git("archive", "--format=tar", MAIN_COMMIT, "qaindex")
    assert archive.returncode == 0
    old.mkdir()
    subprocess.run(["tar", "-x", "-C", str(old)], input=archive.stdout, check=True)
    corpus = tmp_path / "c.jsonl"
    corpus.write_text("".join(json.dumps(a) + "\n" for a in answers[:200]))
    script = (
        "import sys, qaindex; assert qaindex.__file__.startswith(sys.argv[1]), qaindex.__file__; "
        "r = qaindex.Ranker.build(sys.argv[2], index_kind=sys.argv[3]); r.save(sys.argv[4]); "
        "print([h.id for h in r.search('refund', k=5)])"
    )
    env = {**os.environ, "PYTHONPATH": str(old)}
    done = subprocess.run(
        [sys.executable, "-c", script, str(old), str(corpus), kind, str(tmp_path / "ix")],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    ranker = Ranker.load(tmp_path / "ix")
    assert ranker.index_kind == kind and "tuning" not in ranker.info()["index"]
    assert str([h.id for h in ranker.search("refund", k=5)]) == done.stdout.strip()


@pytest.mark.parametrize(
    ("geometry", "ranking"), [("poincare", "relative"), ("poincare", "distance"), ("cosine", "distance")]
)
def test_the_screened_exact_search_equals_the_plain_one(geometry: str, ranking: str) -> None:
    rng = np.random.default_rng(3)
    v = rng.normal(size=(3000, 12))
    v = (v / np.linalg.norm(v, axis=1, keepdims=True) * rng.uniform(0.2, 0.99, (3000, 1))).astype(np.float32)
    v[2000:2012] = v[7]  # exact ties, broken by row
    q = np.concatenate([v[:15] * 0.9, v[7:8], rng.normal(size=(5, 12)).astype(np.float32) * 0.05])
    plain = exact_search(q, v, 20, geometry=geometry, ranking=ranking, screen_above=10**9)
    screened = exact_search(q, v, 20, geometry=geometry, ranking=ranking, screen_above=0)
    assert np.array_equal(plain[1], screened[1]) and np.array_equal(plain[0], screened[0])
    if geometry == "poincare":
        assert np.array_equal(plain[1], brute_force(q, v, 20, ranking))


def test_held_out_queries_leave_their_own_answer_out() -> None:
    vectors = ball_points(1500, 8, seed=4)
    ix = CoarseIndex("poincare", 8, "ivf", {"nlist": 30, "nprobe": 1}, ranking="relative", count=1500)
    ix.add(vectors)
    q, rows = vectors[:40] * 0.98, np.arange(40)
    out = tune_breadth(ix, vectors, q, target=0.95, k=10, overfetch=2, geometry="poincare", ranking="relative",
                       exclude=rows)  # fmt: skip
    truth = brute_force(q, vectors, 11, "relative")
    truth = np.array([[r for r in t if r != own][:10] for t, own in zip(truth, rows, strict=True)])
    found = ix.search(q, 20)
    found = np.array([np.pad(f[f != own][:20], (0, 20 - len(f[f != own][:20])), constant_values=-1)
                      for f, own in zip(found, rows, strict=True)])  # fmt: skip
    assert recall_at(found, truth) == pytest.approx(out["recall"], abs=1e-6)
    assert all(own not in t for t, own in zip(truth, rows, strict=True))


def test_answer_spans_are_seeded_word_spans_of_their_answers() -> None:
    texts = [" ".join(f"w{i}-{j}" for j in range(3 + i % 15)) for i in range(500)]
    spans, rows = answer_spans(texts, 50)
    assert len(spans) == 50 and len(set(rows.tolist())) == 50
    for span, row in zip(spans, rows, strict=True):
        assert span in texts[row] and 3 <= len(span.split()) <= 10
    assert answer_spans(texts, 50)[0] == spans


def test_configure_sets_each_kinds_breadth_and_saves_it(answers: list[dict[str, Any]], tmp_path: Path) -> None:
    pq = Ranker.build(answers, index_kind="pq", hnsw={"M": 4, "refine": 1}, device="cpu")
    ivf = Ranker.build(answers, index_kind="ivf", hnsw={"nlist": 16, "nprobe": 1}, device="cpu")
    qv = pq.model.encode([a["answer"] for a in answers[:30]], role="question")
    truth = brute_force(qv, np.asarray(pq._vectors), 10, pq.model.ranking)
    before = recall_at(pq.candidates(qv, 100), truth)
    pq.configure(refine=80, nprobe=3)  # nprobe: not a pq breadth, ignored
    assert pq.info()["index"]["params"] == {"M": 4, "refine": 80}
    assert recall_at(pq.candidates(qv, 100), truth) == 1.0 > before  # 800 re-scored: every answer
    ivf.configure(nprobe=16, refine=5)
    assert ivf.info()["index"]["params"] == {"nlist": 16, "nprobe": 16}
    assert recall_at(ivf.candidates(qv, 100), truth) == 1.0
    pq.save(tmp_path / "pq")
    again = Ranker.load(tmp_path / "pq")
    assert again.info()["index"]["params"]["refine"] == 80
    assert np.array_equal(again.candidates(qv, 100), pq.candidates(qv, 100))
    with pytest.raises(QueryError, match=r"^refine must be a positive integer"):
        pq.configure(refine=0)


def test_pq_trains_quietly_and_refuses_too_few_answers(
    answers: list[dict[str, Any]], capfd: pytest.CaptureFixture[str]
) -> None:
    Ranker.build(answers[:100], index_kind="pq", device="cpu")
    assert "WARNING" not in capfd.readouterr().err  # FAISS's k-means warns below 39 points per code
    with pytest.raises(QAIndexError) as info:
        Ranker.build(answers[:10], index_kind="pq", device="cpu")
    assert str(info.value) == (
        "a pq index needs at least 16 answers to train its codes, got 10; add more answers or choose --index-kind flat"
    )

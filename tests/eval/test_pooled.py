"""Whole-corpus evaluation (`evaluate_pooled`, `answer_pool`, `qaindex eval --pool`) against brute force (no torch)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from helpers.onnx_models import point_model

from qaindex.cli import main
from qaindex.errors import QueryError
from qaindex.eval.datasets import Candidate, QuestionGroup
from qaindex.eval.evaluate import answer_pool, evaluate_pooled, pooled_metrics
from qaindex.model import Model

N_ANSWERS = 240  # more than k * overfetch = 100, so the search goes through FAISS
N_QUESTIONS = 60


def _points(rng: np.random.Generator, n: int, dim: int) -> np.ndarray:
    directions = rng.normal(size=(n, dim))
    directions /= np.linalg.norm(directions, axis=1, keepdims=True)
    return (directions * rng.uniform(0.05, 0.95, size=(n, 1))).astype(np.float32)


@pytest.fixture(scope="module", params=["poincare", "cosine"])
def setup(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Path, list[QuestionGroup], np.ndarray]:
    """A model where text ``p<i>`` is point i; answers are p0..p239, questions p240..p299."""
    rng = np.random.default_rng(5)
    points = _points(rng, N_ANSWERS + N_QUESTIONS, 8)
    words = [f"p{i}" for i in range(len(points))]
    groups = []
    for qi in range(N_QUESTIONS):
        # each question lists 8 candidates, 1-3 of them correct; the pool is every answer of the data
        cands = rng.choice(N_ANSWERS, size=8, replace=False)
        n_good = int(rng.integers(1, 4))
        # planted signal: the question sits near (not on) its first correct answer
        near = points[cands[0]] + rng.normal(scale=0.12, size=points.shape[1])
        points[N_ANSWERS + qi] = near * min(1.0, 0.95 / float(np.linalg.norm(near)))
        groups.append(
            QuestionGroup(
                f"q{qi}",
                words[N_ANSWERS + qi],
                tuple(Candidate(f"a{c}", words[c], int(j < n_good)) for j, c in enumerate(cands)),
            )
        )
    # a question without a correct candidate is skipped
    groups.append(QuestionGroup("none", words[-1], (Candidate("a0", words[0], 0),)))
    directory, _ = point_model(tmp_path_factory.mktemp("pool") / request.param, points, geometry=request.param)
    return directory, groups, points.astype(np.float64)


def distance(q: np.ndarray, a: np.ndarray, geometry: str) -> np.ndarray:
    """Float64 distance of question point ``q`` to each answer point (smaller is better)."""
    if geometry == "poincare":
        num = 2 * ((a - q) ** 2).sum(axis=1)
        den = (1 - (q**2).sum()) * (1 - (a**2).sum(axis=1))
        return np.asarray(np.arccosh(1 + num / den))
    return np.asarray(-(a @ q) / (np.linalg.norm(a, axis=1) * np.linalg.norm(q)))


def brute_force(groups: list[QuestionGroup], points: np.ndarray, geometry: str, k: int) -> dict[str, float]:
    """Independent float64 computation: every pool answer scored, sorted, metrics by hand."""
    pool = sorted({int(c.aid[1:]) for g in groups for c in g.candidates})
    a = points[pool]
    rr, recall, p1 = [], [], []
    for g in groups:
        good = {int(c.aid[1:]) for c in g.candidates if c.label == 1}
        if not good:
            continue
        key = distance(points[int(g.question[1:])], a, geometry)
        top = [pool[i] for i in np.argsort(key, kind="stable")[:k]]
        ranks = [r for r, ans in enumerate(top, start=1) if ans in good]
        rr.append(1 / ranks[0] if ranks else 0.0)
        recall.append(len(ranks) / len(good))
        p1.append(float(top[0] in good))
    return {"mrr": float(np.mean(rr)), "recall": float(np.mean(recall)), "p@1": float(np.mean(p1)), "n": len(rr)}


@pytest.mark.parametrize("index_kind", ["flat", "hnsw"])
@pytest.mark.parametrize("k", [1, 10])
def test_pooled_equals_brute_force(
    setup: tuple[Path, list[QuestionGroup], np.ndarray], index_kind: str, k: int
) -> None:
    directory, groups, points = setup
    model = Model.load(directory)
    got = evaluate_pooled(model, groups, k=k, index_kind=index_kind)
    want = brute_force(groups, points, model.geometry, k)
    assert got["questions"] == want["n"] == N_QUESTIONS
    assert got["skipped"] == 1
    assert got["answers"] == len({c.aid for g in groups for c in g.candidates})
    assert got[f"mrr@{k}"] == pytest.approx(want["mrr"], abs=1e-12)
    assert got[f"recall@{k}"] == pytest.approx(want["recall"], abs=1e-12)
    assert got["p@1"] == pytest.approx(want["p@1"], abs=1e-12)
    # the data has a real spread: neither perfect nor zero
    assert 0.0 < got[f"recall@{k}"] < 1.0


def test_pooled_metrics_by_hand() -> None:
    # q1: correct rows {1}; ranked 3, 1, 2 -> rank 2, RR 0.5, recall 1, P@1 0
    # q2: correct rows {1, 2}; ranked 2, 0, 1 -> rank 1, RR 1, recall@3 1, P@1 1
    out = pooled_metrics([[3, 1, 2], [2, 0, 1]], [[1], [1, 2]], k=3)
    assert out == {"mrr@3": 0.75, "recall@3": 1.0, "p@1": 0.5, "questions": 2, "k": 3}
    # at k = 1 only the first hit counts; -1 rows ("no hit") are ignored
    assert pooled_metrics([[-1, 3, 1], [2, 0, 1]], [[1], [1, 2]], k=1)["recall@1"] == 0.25
    with pytest.raises(ValueError, match="at least one correct answer"):
        pooled_metrics([[1]], [[]])


def test_cli_pool_json_matches_library(setup: tuple[Path, list[QuestionGroup], np.ndarray], tmp_path: Path) -> None:
    directory, groups, _ = setup
    data = tmp_path / "data.jsonl"
    data.write_text(
        "".join(
            json.dumps({"qid": g.qid, "question": g.question, "aid": c.aid, "answer": c.answer, "label": c.label})
            + "\n"
            for g in groups
            for c in g.candidates
        )
    )
    runner = CliRunner()
    res = runner.invoke(main, ["eval", str(directory), str(data), "--pool", "-k", "5", "--json"])
    assert res.exit_code == 0, res.output
    got = json.loads(res.stdout)
    want = evaluate_pooled(Model.load(directory), groups, k=5)
    assert got["mrr@5"] == want["mrr@5"] and got["recall@5"] == want["recall@5"] and got["pool"] is True
    res = runner.invoke(main, ["eval", str(directory), str(data), "--pool"])
    assert res.exit_code == 0 and "MRR@10" in res.stdout and f"{want['answers']} distinct answers" in res.stdout
    res = runner.invoke(main, ["eval", str(directory), str(data), "--pool", "--via-index"])
    assert res.exit_code == 2 and "choose one of --pool and --via-index" in res.output


def test_a_ranking_of_the_public_pool_outside_qaindex_scores_like_evaluate_pooled(
    setup: tuple[Path, list[QuestionGroup], np.ndarray],
) -> None:
    """What a benchmark does with another system: rank ``answer_pool``'s rows itself, score with ``pooled_metrics``."""
    directory, groups, points = setup
    model = Model.load(directory)
    pool = answer_pool(groups)
    assert pool.skipped == 1 and len(pool.questions) == len(pool.relevant) == N_QUESTIONS
    assert pool.answers == [text for _, text in pool.keys] and pool.questions == [g.question for g in groups[:-1]]
    assert [r.id for r in pool.records()] == pool.ids == [aid for aid, _ in pool.keys]  # every aid has one text
    for group, rows in zip(pool.groups, pool.relevant, strict=True):
        assert sorted(pool.keys[r][0] for r in rows) == sorted(c.aid for c in group.candidates if c.label == 1)
    a = points[[int(text[1:]) for text in pool.answers]]
    ranked = [np.argsort(distance(points[int(q[1:])], a, model.geometry), kind="stable") for q in pool.questions]
    got = pooled_metrics(ranked, pool.relevant, 10)
    want = evaluate_pooled(model, groups, k=10, index_kind="flat")
    assert got["questions"] == want["questions"] == N_QUESTIONS
    for key in ("mrr@10", "recall@10", "p@1"):
        assert got[key] == pytest.approx(want[key], abs=1e-12)


def test_answer_pool_refuses_what_is_not_labelled_data() -> None:
    with pytest.raises(QueryError) as exc:
        answer_pool("q1 a1 1")
    assert str(exc.value) == "groups must be a list of QuestionGroup (from read_labelled), got str"
    with pytest.raises(QueryError) as exc:
        answer_pool([QuestionGroup("q1", "who?", (Candidate("a1", "Ann", 2),))])
    assert str(exc.value) == "groups[0]: candidate 'a1' has label 2; labels are 0 or 1"

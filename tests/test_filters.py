"""Filtered search (``where``) against a brute force over every matching answer, for every
index kind, both plans (pre-filter: exact scoring of the matches; post-filter: a wider ANN
search) and selectivities from one answer to all; strict field names."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers.onnx_models import point_model

from qaindex import QueryError, Ranker
from qaindex.search import filters
from qaindex.search.filters import compile_where
from qaindex.vector_index import CONCRETE_KINDS

N = 600
QUESTIONS = 40
K = 5


def _metadata(i: int) -> dict[str, Any]:
    meta: dict[str, Any] = {"half": i % 2, "decile": i % 10, "pct": i % 100}
    if i % 50 == 7:
        meta["tags"] = ["x", "y"]  # unhashable values are matched too
    return meta


@pytest.fixture(scope="module", params=["poincare", "cosine"])
def points_model(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    # spread points (no tight cluster): the test compares plans with brute force, not an ANN's recall
    rng = np.random.default_rng(5)
    directions = rng.normal(size=(N + QUESTIONS, 8))
    directions /= np.linalg.norm(directions, axis=1, keepdims=True)
    points = (directions * rng.uniform(0.1, 0.9, (N + QUESTIONS, 1))).astype(np.float32)
    return point_model(tmp_path_factory.mktemp("filters") / request.param, points, geometry=request.param)


_RANKERS: dict[tuple[str, str], Ranker] = {}


def _ranker(points_model: tuple[Path, list[str]], kind: str) -> Ranker:
    directory, words = points_model
    key = (str(directory), kind)
    if key not in _RANKERS:
        records = [{"id": f"a{i}", "answer": words[i], **_metadata(i)} for i in range(N)]
        # exhaustive IVF probing: the test compares with brute force, not an ANN's recall
        params = {"nprobe": 1 << 16} if kind.startswith("ivf") else None
        # dense search: these tests pin the dense planner (hybrid filtering is tested in test_hybrid)
        _RANKERS[key] = Ranker.build(records, model=directory, index_kind=kind, hnsw=params, device="cpu", hybrid=False)
    return _RANKERS[key]


def _brute(ranker: Ranker, question: str, k: int, where: Any) -> list[tuple[str | int, float]]:
    """Every answer scored by the model, the matching ones kept, best score first (ties: distance, row)."""
    flt = compile_where(where)
    q = ranker.model.encode([question], role="question")
    vectors = np.stack([ranker.model.encode([r.answer], role="answer")[0] for r in ranker.records()])
    score, dist = ranker.model.score(q, vectors[None])
    records = list(ranker.records())
    order = sorted(range(len(records)), key=lambda i: (-score[0, i], dist[0, i], i))
    kept = [i for i in order if flt is None or flt.matches(records[i])]
    return [(records[i].id, float(score[0, i])) for i in kept[:k]]


WHERES = [
    pytest.param({"id": "a17"}, id="one-answer"),
    pytest.param({"pct": 3}, id="1pct"),
    pytest.param({"decile": [1, 2]}, id="20pct"),
    pytest.param({"half": 0}, id="50pct"),
    pytest.param({"half": [0, 1]}, id="all"),
    pytest.param({"pct": 4, "half": 1}, id="none"),
    pytest.param({"tags": [["x", "y"]], "half": 1}, id="unhashable"),
    pytest.param(lambda r: r.metadata["decile"] == 3, id="predicate"),
    pytest.param(lambda r: r.id == "a5", id="rare-predicate"),
]


@pytest.mark.parametrize("plan", ["auto", "pre", "post"])
@pytest.mark.parametrize("kind", CONCRETE_KINDS)
@pytest.mark.parametrize("where", WHERES)
def test_filtered_search_equals_brute_force(
    points_model: tuple[Path, list[str]], kind: str, plan: str, where: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    if plan != "auto":  # force one plan whatever the selectivity
        monkeypatch.setattr(filters, "prefilter_limit", lambda *a: N if plan == "pre" else 0)
    ranker = _ranker(points_model, kind)
    _, words = points_model
    questions = words[N : N + QUESTIONS : 4]
    batch = ranker.search_batch(questions, K, where=where)
    for question, hits in zip(questions, batch, strict=True):
        want = _brute(ranker, question, K, where)
        assert [h.id for h in hits] == [w[0] for w in want], (question, kind)
        np.testing.assert_allclose([h.raw_score for h in hits], [w[1] for w in want], rtol=1e-5, atol=1e-6)
        assert [h.id for h in ranker.search(question, K, where=where)] == [h.id for h in hits]


def test_both_plans_are_exercised(points_model: tuple[Path, list[str]], monkeypatch: pytest.MonkeyPatch) -> None:
    """The default planner pre-filters a rare filter and post-filters a common one."""
    ranker = _ranker(points_model, "hnsw")
    calls: list[int] = []
    real = filters.exact_among

    def spy(queries: np.ndarray, vectors: np.ndarray, rows: np.ndarray, k: int, scorer: Any) -> Any:
        calls.append(len(rows))
        return real(queries, vectors, rows, k, scorer)

    monkeypatch.setattr(filters, "exact_among", spy)
    monkeypatch.setattr(filters, "PREFILTER_MIN", 0)
    monkeypatch.setattr(filters, "POST_FILTER_COST", 1)
    ranker.search("p610", K, where={"pct": 3})
    assert calls == [6]  # every match scored
    ranker.search("p610", K, where={"half": 0})
    # 300 matches > sqrt(5 * 10 * 600): only the matching ones of 5 * 10 * 600 / 300 coarse candidates
    assert len(calls) == 2 and K <= calls[1] <= 100


def test_unknown_field_is_an_error_naming_the_fields(points_model: tuple[Path, list[str]]) -> None:
    ranker = _ranker(points_model, "flat")
    with pytest.raises(QueryError) as info:
        ranker.search("p610", K, where={"Half": 0})
    assert str(info.value) == (
        "where: no answer has the field 'Half'; the fields are: id, decile, half, pct, tags "
        "(names are matched exactly, case included)"
    )


def test_filters_follow_add_and_remove(points_model: tuple[Path, list[str]]) -> None:
    directory, words = points_model
    ranker = Ranker.build(
        [{"id": f"a{i}", "answer": words[i], **_metadata(i)} for i in range(40)],
        model=directory,
        device="cpu",
        hybrid=False,
    )
    assert [h.id for h in ranker.search("p610", 3, where={"decile": 4})] == [
        w[0] for w in _brute(ranker, "p610", 3, {"decile": 4})
    ]
    with pytest.raises(QueryError, match="no answer has the field 'colour'"):
        ranker.search("p610", 3, where={"colour": "red"})
    ranker.add([{"id": "new", "answer": words[41], "colour": "red", "decile": 4}])
    assert [h.id for h in ranker.search("p610", 3, where={"colour": "red"})] == ["new"]
    ranker.remove(["a4", "a14"])
    got = [h.id for h in ranker.search("p610", 3, where={"decile": 4})]
    assert sorted(got) == sorted(["a24", "a34", "new"])
    ranker.remove(["new"])
    with pytest.raises(QueryError, match="no answer has the field 'colour'"):
        ranker.search("p610", 3, where={"colour": "red"})


def test_id_filters_compare_like_python_equality(points_model: tuple[Path, list[str]]) -> None:
    directory, words = points_model
    records = [{"id": 5, "answer": words[0]}, {"id": "6", "answer": words[1]}, {"id": "x", "answer": words[2]}]
    ranker = Ranker.build(records, model=directory, device="cpu")
    assert [h.id for h in ranker.search("p610", 3, where={"id": 5})] == [5]
    assert [h.id for h in ranker.search("p610", 3, where={"id": 5.0})] == [5]
    assert [h.id for h in ranker.search("p610", 3, where={"id": np.int64(5)})] == [5]
    assert [h.id for h in ranker.search("p610", 3, where={"id": "6"})] == ["6"]
    assert ranker.search("p610", 3, where={"id": ["5", 6, None, "y"]}) == []  # "5" is not 5, 6 is not "6"


def test_cli_search_where(faq_file: Path, faq_model: Path, tmp_path: Path) -> None:
    import json

    from click.testing import CliRunner

    import qaindex.cli

    runner = CliRunner()
    index = str(tmp_path / "index")
    assert (
        runner.invoke(qaindex.cli.main, ["build", str(faq_file), "--model", str(faq_model), "--index", index]).exit_code
        == 0
    )
    args = ["search", "refund password", "--index", index, "--json", "-k", "5"]
    out = runner.invoke(qaindex.cli.main, [*args, "--where", "category=account", "--where", "category=billing"])
    assert out.exit_code == 0, out.output
    ids = [h["id"] for h in json.loads(out.output)["hits"]]
    assert sorted(ids) == ["refund", "reset"]
    out = runner.invoke(qaindex.cli.main, [*args, "--where", "id=7"])  # JSON: the integer id 7
    assert [h["id"] for h in json.loads(out.output)["hits"]] == [7]
    out = runner.invoke(qaindex.cli.main, [*args, "--where", "categry=account"])
    assert out.exit_code == 1
    assert out.output == (
        "Error: where: no answer has the field 'categry'; the fields are: id, category "
        "(names are matched exactly, case included)\n"
    )
    out = runner.invoke(qaindex.cli.main, [*args, "--where", "category"])
    assert out.exit_code == 2
    assert "--where 'category': expected FIELD=VALUE, e.g. --where category=billing" in out.output

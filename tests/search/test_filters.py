"""Filtered search (``where``) against a brute force over every matching answer, for every
index kind, both plans (exact: a screening pass and the scorer on its checked short list, or
on every match; post-filter: a wider ANN search), every way of screening (gathered, streamed,
a short list that must widen, none) and selectivities from one answer to all; strict field
names; filters after add and remove."""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers.onnx_models import point_model
from hypothesis import given, settings
from hypothesis import strategies as st

from qaindex import QueryError, Ranker, Record
from qaindex.search import exact, filters
from qaindex.search.filters import compile_where
from qaindex.store.records import RecordStore
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
    pytest.param({"pct": {"$in": [3, 40, 77]}, "half": {"$ne": 0}}, id="in-ne"),
    pytest.param({"pct": {"$gte": 10, "$lt": 13}}, id="range"),
    pytest.param({"$or": [{"decile": {"$nin": list(range(1, 10))}}, {"tags": {"$exists": True}}]}, id="or-nin-exists"),
    pytest.param(lambda r: r.metadata["decile"] == 3, id="predicate"),
    pytest.param(lambda r: r.id == "a5", id="rare-predicate"),
]


@pytest.mark.parametrize("plan", ["auto", "exact", "post"])
@pytest.mark.parametrize("kind", CONCRETE_KINDS)
@pytest.mark.parametrize("where", WHERES)
def test_filtered_search_equals_brute_force(
    points_model: tuple[Path, list[str]], kind: str, plan: str, where: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    if plan != "auto":  # force one plan whatever the selectivity
        monkeypatch.setattr(filters, "choose_plan", lambda *a: plan)
    _check_brute_force(_ranker(points_model, kind), points_model[1], where)


def _check_brute_force(ranker: Ranker, words: list[str], where: Any) -> None:
    questions = words[N : N + QUESTIONS : 4]
    batch = ranker.search_batch(questions, K, where=where)  # 10 questions: one matrix product
    for question, hits in zip(questions, batch, strict=True):
        want = _brute(ranker, question, K, where)
        assert [h.id for h in hits] == [w[0] for w in want], question
        np.testing.assert_allclose([h.raw_score for h in hits], [w[1] for w in want], rtol=1e-5, atol=1e-6)
        # one question: a matrix-vector product
        assert [h.id for h in ranker.search(question, K, where=where)] == [h.id for h in hits]


SCREENS = {
    "gather": {"GATHER_COST": 0},  # the matches' vectors gathered
    "stream": {"GATHER_COST": 10**9},  # every vector streamed
    "narrow": {"_screen_keep": lambda k: k + 1},  # a short list of k + 1: widened on near ties
    "unscreened": {"screened_among": lambda q, v, rows, k, scorer, space: exact.exact_among(q, v, rows, k, scorer)},
}


@pytest.mark.parametrize("screen", sorted(SCREENS))
@pytest.mark.parametrize("where", WHERES)
def test_exact_plan_equals_brute_force_every_way(
    points_model: tuple[Path, list[str]], screen: str, where: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(filters, "choose_plan", lambda *a: "exact")
    for name, value in SCREENS[screen].items():
        monkeypatch.setattr(exact, name, value)
    _check_brute_force(_ranker(points_model, "hnsw"), points_model[1], where)


def _dot_scorer(sign: float) -> Any:
    def score(q: np.ndarray, c: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        dot = np.einsum("nd,nmd->nm", q, c)
        return (sign * dot).astype(np.float32), (-sign * dot).astype(np.float32)

    return score


def test_screen_widens_on_ties_and_distrusts_a_scorer_of_another_geometry() -> None:
    from qaindex import geometry

    rng = np.random.default_rng(0)
    vectors = rng.normal(size=(1000, 6))
    vectors = (vectors / np.linalg.norm(vectors, axis=1, keepdims=True)).astype(np.float32)
    vectors[100:400] = vectors[0]  # 301 equal vectors: ties far past the short list
    rows = np.arange(0, 1000, 2)  # 151 of the tied rows match
    queries = np.stack([vectors[0], rng.normal(size=6).astype(np.float32)])
    bilinear = geometry.get("bilinear")
    for scorer in (_dot_scorer(1.0), _dot_scorer(-1.0)):  # -1: ranks against the geometry
        want = exact.exact_among(queries, vectors, rows, 5, scorer)
        got = exact.screened_among(queries, vectors, rows, 5, scorer, bilinear)
        for a, b in zip(got, want, strict=True):
            np.testing.assert_array_equal(a, b)
    assert exact.exact_among(queries, vectors, rows, 5, _dot_scorer(1.0))[2][0].tolist() == [0, 100, 102, 104, 106]


def test_both_plans_are_exercised(points_model: tuple[Path, list[str]], monkeypatch: pytest.MonkeyPatch) -> None:
    """The default planner searches exactly while the screening pass is small, and
    post-filters a common filter past it."""
    ranker = _ranker(points_model, "hnsw")
    calls: list[int] = []
    real = exact.exact_among

    def spy(queries: np.ndarray, vectors: np.ndarray, rows: np.ndarray, k: int, scorer: Any) -> Any:
        calls.append(len(rows))
        return real(queries, vectors, rows, k, scorer)

    monkeypatch.setattr(exact, "exact_among", spy)
    ranker.search("p610", K, where={"pct": 3})
    assert calls == [6]  # every match scored
    ranker.search("p610", K, where={"half": 0})
    assert calls[1:] == [max(4 * K, K + 64)]  # 300 matches screened, the best 69 scored
    monkeypatch.setattr(filters, "PREFILTER_MIN", 0)
    monkeypatch.setattr(filters, "POST_FILTER_COST", 1)
    monkeypatch.setattr(filters, "EXACT_FLOATS", 0)
    ranker.search("p610", K, where={"pct": 3})
    assert calls[2:] == [6]
    ranker.search("p610", K, where={"half": 0})
    # 300 matches > sqrt(5 * 10 * 600): only the matching ones of 5 * 10 * 600 / 300 coarse candidates
    assert len(calls) == 4 and K <= calls[3] <= 100


def test_choose_plan() -> None:
    assert filters.choose_plan(25_000, 50_000, 256, 10, 10) == "exact"  # 12.8 M floats streamed
    assert filters.choose_plan(40_000, 1_000_000, 256, 10, 10) == "exact"  # 120,000 gathered
    assert filters.choose_plan(50_000, 1_000_000, 256, 10, 10) == "post"
    assert filters.choose_plan(2_000, 10**9, 256, 10, 10) == "exact"  # few: post-filter costs more


def test_filter_rows_are_cached_per_store(points_model: tuple[Path, list[str]]) -> None:
    ranker = _ranker(points_model, "flat")
    flt = compile_where({"decile": [1, 2]})
    assert flt is not None
    rows = filters.matching_rows(ranker._records, flt)
    assert filters.matching_rows(ranker._records, compile_where({"decile": [1, 2]})) is rows
    assert not rows.flags.writeable
    assert rows.tolist() == [i for i in range(N) if i % 10 in (1, 2)]


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


def test_exact_plan_follows_add_and_remove(points_model: tuple[Path, list[str]]) -> None:
    """The screening pass's cached rows and squared norms belong to one store: after add and
    remove the filtered search is brute force's again."""
    directory, words = points_model
    records = [{"id": f"a{i}", "answer": words[i], **_metadata(i)} for i in range(N)]
    ranker = Ranker.build(records[:400], model=directory, device="cpu", hybrid=False)
    questions = words[N : N + QUESTIONS : 8]
    where = {"half": 1}

    def check() -> None:
        for question in questions:
            got = [h.id for h in ranker.search(question, K, where=where)]
            assert got == [w[0] for w in _brute(ranker, question, K, where)], question

    check()
    ranker.add(records[400:])
    check()
    ranker.remove([f"a{i}" for i in range(1, N, 4)])  # a quarter of the matches
    check()


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
    assert "--where 'category': expected FIELD=VALUE or a JSON object, e.g. --where category=billing or" in out.output
    out = runner.invoke(qaindex.cli.main, [*args, "--where", '{"category": {"$in": ["account"]}}', "--where", "id=7"])
    assert out.exit_code == 0, out.output
    assert [h["id"] for h in json.loads(out.output)["hits"]] == []  # both must hold
    out = runner.invoke(qaindex.cli.main, [*args, "--where", '{"category": {"$nin": ["account", "billing"]}}'])
    assert {h["id"] for h in json.loads(out.output)["hits"]} == {"export", 7}  # not the answer without a category
    out = runner.invoke(qaindex.cli.main, [*args, "--where", '{"category": {"$regex": "acc"}}'])
    assert out.exit_code == 1
    assert out.output == "Error: " + UNKNOWN_OPERATOR + "\n"
    out = runner.invoke(qaindex.cli.main, [*args, "--where", '{"category": '])
    assert out.exit_code == 2
    assert "--where '{\"category\": ': not valid JSON" in out.output


UNKNOWN_OPERATOR = (
    "where: unknown operator '$regex' on 'category'; the supported operators are: "
    "$eq, $ne, $in, $nin, $gt, $gte, $lt, $lte, $exists, $and, $or"
)


def test_unknown_operators_and_forms_are_errors_not_empty_results() -> None:
    with pytest.raises(QueryError) as info:
        compile_where({"category": {"$regex": "acc"}})
    assert str(info.value) == UNKNOWN_OPERATOR
    with pytest.raises(QueryError) as info:
        compile_where({"$nor": [{"a": 1}]})
    assert str(info.value) == (
        "where: unknown operator '$nor'; the supported operators are: "
        "$eq, $ne, $in, $nin, $gt, $gte, $lt, $lte, $exists, $and, $or"
    )
    with pytest.raises(QueryError) as info:
        compile_where({"category": {"in": ["a"]}})
    assert str(info.value) == (
        "where: 'category': 'in' is not an operator (a dict value must map operators to operands, "
        'e.g. {"$in": ["a", "b"]}; to match a value that is itself a dict, use {"$eq": ...}); '
        "the supported operators are: $eq, $ne, $in, $nin, $gt, $gte, $lt, $lte, $exists, $and, $or"
    )
    with pytest.raises(QueryError, match=r"'price': \$lt compares numbers or ISO 8601 dates .*; got 'ten'"):
        compile_where({"price": {"$lt": "ten"}})
    with pytest.raises(QueryError, match=r"'price': \$in takes a list of values; got 3"):
        compile_where({"price": {"$in": 3}})
    with pytest.raises(QueryError, match=r"\$or takes a non-empty list of filters"):
        compile_where({"$or": []})
    with pytest.raises(QueryError, match=r"\$exists takes true or false; got 1"):
        compile_where({"price": {"$exists": 1}})


def test_comparing_a_number_with_texts_is_an_error() -> None:
    store = RecordStore.from_records([Record(id=i, answer="a", metadata={"price": f"{i}.99"}) for i in range(3)])
    with pytest.raises(QueryError) as info:
        filters.matching_rows(store, compile_where({"price": {"$lt": 10}}))
    assert str(info.value) == (
        "where: 'price' $lt 10 compares numbers, but no answer's 'price' is a number (e.g. '0.99'); "
        "store the field as a number or compare with a value of its kind"
    )
    assert filters.matching_rows(store, compile_where({"price": {"$eq": "1.99"}})).tolist() == [1]


# A random metadata corpus: few fields and values, so that filters often match some answers.
_DATES = ["2023-12-31", "2024-01-01", "2024-01-01T00:00:00Z", "2024-01-01T12:30:00+02:00", "2024-06-15T08:00:00"]
_SCALARS = st.one_of(
    st.integers(-3, 3),
    st.sampled_from([0.5, -1.5, 2.0, True, False, None, "a", "b", "ten", *_DATES]),
)
_VALUES = st.one_of(_SCALARS, st.lists(st.sampled_from(["a", "b"]), max_size=2))
_FIELDS = ["n", "m", "when"]
_CORPUS = st.lists(st.dictionaries(st.sampled_from(_FIELDS), _VALUES, max_size=3), min_size=1, max_size=25)
_BOUNDS = st.one_of(st.integers(-3, 3), st.sampled_from([0.5, 1.5, True, *_DATES]))


def _condition() -> st.SearchStrategy[dict[str, Any]]:
    field = st.sampled_from([*_FIELDS, "id"])
    operator = st.one_of(
        st.tuples(st.sampled_from(["$eq", "$ne"]), _VALUES),
        st.tuples(st.sampled_from(["$in", "$nin"]), st.lists(_SCALARS, max_size=3)),
        st.tuples(st.sampled_from(["$gt", "$gte", "$lt", "$lte"]), _BOUNDS),
        st.tuples(st.just("$exists"), st.booleans()),
    )
    plain = st.one_of(_SCALARS, st.lists(_SCALARS, max_size=3))
    return st.one_of(
        st.builds(lambda f, v: {f: v}, field, plain),
        st.builds(lambda f, ops: {f: dict(ops)}, field, st.lists(operator, min_size=1, max_size=2)),
    )


_WHERE = st.recursive(
    _condition(),
    lambda inner: st.one_of(
        st.builds(
            lambda op, parts: {op: parts}, st.sampled_from(["$and", "$or"]), st.lists(inner, min_size=1, max_size=3)
        ),
        st.builds(lambda a, b: {**a, **b}, inner, inner),
    ),
    max_leaves=5,
)


def _as_time(value: Any) -> datetime.datetime | None:
    if not isinstance(value, str):
        return None
    try:
        when = datetime.datetime.fromisoformat(value)
    except ValueError:
        return None
    return when if when.tzinfo else when.replace(tzinfo=datetime.timezone.utc)


def _reference(where: dict[str, Any], record: Record) -> bool:
    """Brute force, written from the documented semantics (not the library's code)."""
    for key, want in where.items():
        if key == "$and":
            ok = all(_reference(w, record) for w in want)
        elif key == "$or":
            ok = any(_reference(w, record) for w in want)
        else:
            present = key == "id" or key in record.metadata
            got = record.id if key == "id" else record.metadata.get(key)
            ops = want if isinstance(want, dict) else {"$in": want} if isinstance(want, list) else {"$eq": want}
            ok = all(_reference_op(op, bound, present, got) for op, bound in ops.items())
        if not ok:
            return False
    return True


def _reference_op(op: str, bound: Any, present: bool, got: Any) -> bool:
    if op == "$exists":
        return present == bound
    if not present:
        return False
    if op in ("$eq", "$ne", "$in", "$nin"):
        hit = got == bound if op in ("$eq", "$ne") else any(got == b for b in bound)
        return bool(hit) == (op in ("$eq", "$in"))
    if isinstance(bound, str):
        got, bound = _as_time(got), _as_time(bound)
    elif isinstance(got, str) or got is None or isinstance(got, list):
        return False
    if got is None:
        return False
    return {"$gt": got > bound, "$gte": got >= bound, "$lt": got < bound, "$lte": got <= bound}[op]


def _expected_error(where: dict[str, Any], records: list[Record]) -> bool:
    """Whether the filter names a field no answer has, or compares a field none of whose values is
    of the comparison's kind."""
    for key, want in where.items():
        if key in ("$and", "$or"):
            if any(_expected_error(w, records) for w in want):
                return True
            continue
        values = [r.id if key == "id" else r.metadata[key] for r in records if key == "id" or key in r.metadata]
        if not values:
            return True
        for op, bound in want.items() if isinstance(want, dict) else ():
            if op in ("$gt", "$gte", "$lt", "$lte"):
                kind = (
                    (lambda v: _as_time(v) is not None)
                    if isinstance(bound, str)
                    else (lambda v: isinstance(v, int | float))
                )
                if not any(kind(v) for v in values):
                    return True
    return False


@settings(max_examples=300, deadline=None)
@given(corpus=_CORPUS, where=_WHERE)
def test_operators_match_a_brute_force_evaluation(corpus: list[dict[str, Any]], where: dict[str, Any]) -> None:
    records = [Record(id=f"r{i}" if i % 3 else i, answer="a", metadata=m) for i, m in enumerate(corpus)]
    store = RecordStore.from_records(records)
    flt = compile_where(where)
    assert flt is not None
    want = [i for i, r in enumerate(records) if _reference(where, r)]
    assert [i for i, r in enumerate(records) if flt.matches(r)] == want
    if _expected_error(where, records):
        with pytest.raises(QueryError):
            filters.matching_rows(store, flt)
    else:
        assert filters.matching_rows(store, flt).tolist() == want

"""Calibrated scores: fitting (Platt, isotonic), ECE, the manifest field, the fallback of old models,
``qaindex calibrate`` on a planted task, ``min_score`` on the calibrated score."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from helpers.onnx_models import make_model

from qaindex import ModelFormatError, QueryError, Ranker
from qaindex.cli import main
from qaindex.eval.calibration_fit import (
    calibrate_model,
    expected_calibration_error,
    fit,
    hybrid_features,
    measure,
    reliability_bins,
)
from qaindex.eval.datasets import Candidate, QuestionGroup
from qaindex.model import Model
from qaindex.search.calibration import Calibration
from qaindex.text.lexical import tokenizer_available


def _planted(n: int, seed: int, topics: int = 30, candidates: int = 8) -> list[QuestionGroup]:
    """Questions with a topic word; the relevant answer shares it, the others have other topics.
    Some questions carry a second, misleading topic word, so the task is learnable but noisy."""
    rng = np.random.default_rng(seed)
    groups = []
    for i in range(n):
        topic = int(rng.integers(topics))
        words = [f"topic{topic}", *(f"fill{int(f)}" for f in rng.integers(40, size=3))]
        if rng.random() < 0.4:
            words.append(f"topic{int(rng.integers(topics))}")
        cands = [Candidate(f"a{topic}", f"topic{topic} fill{int(rng.integers(40))} fill{int(rng.integers(40))}", 1)]
        for other in rng.choice([t for t in range(topics) if t != topic], size=candidates - 1, replace=False):
            cands.append(
                Candidate(f"a{other}", f"topic{other} fill{int(rng.integers(40))} fill{int(rng.integers(40))}", 0)
            )
        groups.append(QuestionGroup(f"q{seed}-{i}", " ".join(words), tuple(cands)))
    return groups


@pytest.fixture(scope="module")
def planted_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A cosine bag-of-words model: topic words orthogonal-ish and strong, fillers weak noise."""
    vocab = ["[PAD]", "[UNK]", *(f"topic{i}" for i in range(30)), *(f"fill{i}" for i in range(40))]
    rng = np.random.default_rng(0)
    emb = rng.normal(scale=0.35, size=(len(vocab), 32)).astype(np.float32)
    emb[2:32] += 2.0 * rng.normal(size=(30, 32)).astype(np.float32) / np.sqrt(32) * 3
    emb[0] = 0.0
    return make_model(tmp_path_factory.mktemp("cal") / "planted", vocab, emb, geometry="cosine")


# -- fitting ---------------------------------------------------------------------------------------
def test_platt_recovers_a_known_logistic_map() -> None:
    rng = np.random.default_rng(0)
    raw = rng.normal(size=20_000) * 2
    y = (rng.random(20_000) < 1 / (1 + np.exp(-(1.5 * raw - 0.5)))).astype(int)
    cal = fit(raw, y, method="platt")
    assert cal.a == pytest.approx(1.5, rel=0.05) and cal.b == pytest.approx(-0.5, abs=0.06)
    fresh = rng.normal(size=20_000) * 2
    fresh_y = (rng.random(20_000) < 1 / (1 + np.exp(-(1.5 * fresh - 0.5)))).astype(int)
    assert expected_calibration_error(cal(fresh), fresh_y) < 0.02
    assert expected_calibration_error(Calibration.uncalibrated()(fresh), fresh_y) > 0.05


def test_platt_with_the_gap_to_the_best_hit() -> None:
    """Planted: relevance depends on the raw score and, more, on the distance below the best hit."""
    rng = np.random.default_rng(3)
    best = rng.normal(size=30_000) + 2
    raw = best - rng.exponential(1.0, size=30_000)
    y = (rng.random(30_000) < 1 / (1 + np.exp(-(0.5 * raw + 2.0 * (raw - best) - 0.5)))).astype(int)
    cal = fit(raw, y, best=best)
    assert cal.a == pytest.approx(0.5, abs=0.1) and cal.c == pytest.approx(2.0, rel=0.1)
    assert expected_calibration_error(cal(raw, best), y) < 0.02
    plain = fit(raw, y)
    assert plain.c == 0.0 and expected_calibration_error(plain(raw, best), y) > expected_calibration_error(
        cal(raw, best), y
    )
    # a hit at the top of its search: raw == best
    assert cal(np.array([1.0]), np.array([1.0]))[0] == pytest.approx(1 / (1 + np.exp(-(cal.a + cal.b))))


def test_isotonic_is_monotone_in_0_1_and_calibrated_in_sample() -> None:
    rng = np.random.default_rng(1)
    raw = rng.normal(size=5000)
    y = (rng.random(5000) < np.clip(raw**3 / 4 + 0.5, 0, 1)).astype(int)
    cal = fit(raw, y, method="isotonic")
    grid = np.linspace(-4, 4, 401)
    p = cal(grid)
    assert np.all(np.diff(p) >= 0) and p.min() >= 0 and p.max() <= 1
    assert expected_calibration_error(cal(raw), y) < 0.02
    assert Calibration.from_manifest(cal.to_json()) == cal


def test_ece_by_hand() -> None:
    # bin [0.8, 0.9): mean 0.85, 1 of 2 relevant -> |0.85 - 0.5| = 0.35, weight 1/2; bin [0.1, 0.2): exact
    assert expected_calibration_error([0.8, 0.9 - 1e-9, 0.15, 0.15], [1, 0, 0, 0]) == pytest.approx(
        0.5 * 0.35 + 0.5 * 0.15
    )
    assert [b["count"] for b in reliability_bins([0.0, 1.0, 0.55], [0, 1, 1])] == [1, 1, 1]


@pytest.mark.parametrize(
    ("raw", "labels", "message"),
    [
        ([1.0, 2.0], [1, 1], "calibration needs both relevant and irrelevant pairs; got 2 relevant of 2"),
        ([1.0, 2.0], [1, 2], "calibration labels must be 0 or 1"),
        ([1.0, np.nan], [1, 0], "calibration scores must be finite numbers"),
        ([1.0], [1, 0], r"calibration needs as many labels as scores"),
    ],
)
def test_bad_fitting_data_is_refused(raw: list[float], labels: list[int], message: str) -> None:
    with pytest.raises(QueryError, match=message):
        fit(raw, labels)


# -- the manifest field ------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ([1, 2], "must be an object"),
        ({"method": "magic"}, '"method" must be one of platt, isotonic'),
        ({"method": "platt", "a": -1.0, "b": 0.0}, 'needs finite "a", "c" >= 0'),
        ({"method": "platt", "a": 1.0}, 'needs finite "a", "c" >= 0 \\(not both 0\\) and "b"'),
        ({"method": "platt", "a": 0.0, "b": 1.0, "c": 0.0}, "not both 0"),
        ({"method": "isotonic", "x": [0.0, 0.0], "y": [0.1, 0.2]}, '"x" \\(increasing\\)'),
        ({"method": "isotonic", "x": [0.0, 1.0], "y": [0.5, 1.5]}, "in \\[0, 1\\]"),
    ],
)
def test_a_bad_calibration_in_a_model_manifest_is_refused(
    planted_model: Path, tmp_path: Path, entry: object, message: str
) -> None:
    import shutil

    copy = tmp_path / "m"
    shutil.copytree(planted_model, copy)
    manifest = json.loads((copy / "manifest.json").read_text())
    manifest["calibration"] = entry
    (copy / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(ModelFormatError, match=rf'manifest.json: field "calibration" .*{message}'):
        Model.load(copy)


def test_a_model_without_calibration_loads_with_the_documented_fallback(planted_model: Path) -> None:
    ranker = Ranker.build(
        [{"id": 1, "answer": "topic1 fill2"}, {"id": 2, "answer": "topic3 fill4"}], model=planted_model
    )
    assert ranker.info()["calibration"]["calibrated"] is False
    for h in ranker.search("topic1 fill9", k=2):
        assert h.score == pytest.approx(1 / (1 + np.exp(-h.raw_score)))


# -- calibrating a model on a planted task ------------------------------------------------------------
def test_calibrate_model_on_a_planted_task(planted_model: Path, tmp_path: Path) -> None:
    import shutil

    model_dir = tmp_path / "model"
    shutil.copytree(planted_model, model_dir)
    before_raw, _, before_y = measure(Model.load(model_dir), _planted(150, seed=9), depth=5)
    ece_before = expected_calibration_error(Calibration.uncalibrated()(before_raw), before_y)
    stored = calibrate_model(model_dir, _planted(300, seed=1), depth=5, source="planted")
    assert stored["method"] == "platt" and stored["pairs"] > 1000 and stored["ece"] < 0.05
    model = Model.load(model_dir)  # validated on load
    assert model.calibration.calibrated and model.calibration.a == pytest.approx(stored["a"])
    # held out: other questions of the task
    raw, best, y = measure(model, _planted(150, seed=9), depth=5)
    ece = expected_calibration_error(model.calibration(raw, best), y)
    assert ece < 0.1 < ece_before
    # min_score filters on the calibrated score
    groups = _planted(20, seed=4)
    answers = sorted({c.answer for g in groups for c in g.candidates})[:60]
    ranker = Ranker.build([{"id": i, "answer": a} for i, a in enumerate(answers)], model=model_dir)
    for g in groups[:5]:  # dense search: the model's calibration (hybrid: the test below)
        hits = ranker.search(g.question, k=10, hybrid=False)
        kept = ranker.search(g.question, k=10, min_score=0.5, hybrid=False)
        assert [h.id for h in kept] == [h.id for h in hits if h.score >= 0.5]
        top = max(h.raw_score for h in hits)
        assert all(h.score == pytest.approx(float(model.calibration(h.raw_score, top))) for h in hits)


def test_calibrate_model_fits_the_hybrid_score_on_the_fused_value(planted_model: Path, tmp_path: Path) -> None:
    """With hybrid search, ``calibrate_model`` also fits ``fusion.fused_score``: hybrid hits then
    score sigmoid(bias + w_f * fused + w_t * logit(p_top) + w_1 * first + w_c * coverage
    + w_n * ln(1 + n(q))), falling with rank (the match's weight is 0), and the fusion rule is the
    safe fallback, unchanged."""
    import shutil
    from dataclasses import replace

    from qaindex.search.fusion import SAFE_FUSION, fusion_from

    pytest.importorskip("Stemmer")
    model_dir = tmp_path / "model"
    shutil.copytree(planted_model, model_dir)
    dense_only = calibrate_model(model_dir, _planted(100, seed=1), depth=5, hybrid=False)
    assert "hybrid" not in dense_only and "fusion" not in json.loads((model_dir / "manifest.json").read_text())
    teacher = calibrate_model(model_dir, _planted(100, seed=1), depth=5, labels="teacher: planted")
    assert "hybrid" not in teacher  # by default, label-free data leave the hybrid score alone
    # the dense calibration on the teacher's data, the hybrid score on labelled questions
    from qaindex.eval.calibration_fit import fit_fused_score, hybrid_pairs

    both = calibrate_model(
        model_dir, _planted(100, seed=1), depth=5, labels="teacher: planted", hybrid=True,
        hybrid_groups=_planted(300, seed=2), hybrid_source="planted, labelled",
    )  # fmt: skip
    assert both["a"] == teacher["a"] and both["hybrid"]["data"] == "planted, labelled"
    reloaded = Model.load(model_dir)  # the dense calibration just fitted is what the hybrid fit read
    x, y, sw = hybrid_pairs(reloaded, _planted(300, seed=2), reloaded.calibration, depth=5)
    expected = dict(
        zip(("bias", "fused", "top", "match", "first", "coverage", "length"), fit_fused_score(x, y, sw), strict=True)
    )
    assert both["hybrid"]["fused_score"] == pytest.approx(expected, abs=1e-6)
    stored = calibrate_model(model_dir, _planted(300, seed=1), depth=5, source="planted")  # labelled: both
    fitted = stored["hybrid"]["fused_score"]
    assert stored["hybrid"]["pairs"] > 1000 and stored["hybrid"]["ece"] < 0.05 and fitted["fused"] > 0
    assert json.loads((model_dir / "manifest.json").read_text())["fusion"] == {"fused_score": fitted}
    model = Model.load(model_dir)
    rule = fusion_from(None, model)
    assert rule.fused_score == tuple(
        fitted[k] for k in ("bias", "fused", "top", "match", "first", "coverage", "length")
    )
    assert fitted["match"] == 0.0 and fitted["coverage"] != 0.0 and fitted["length"] != 0.0
    assert fitted["first"] >= 0 and fitted["fused"] >= 0  # the first hit's score stays the highest
    assert replace(rule, fused_score=None) == SAFE_FUSION  # no fitted rule: the safe fallback
    groups = _planted(20, seed=4)
    answers = sorted({c.answer for g in groups for c in g.candidates})[:60]
    ranker = Ranker.build([{"id": i, "answer": a} for i, a in enumerate(answers)], model=model_dir, hybrid=True)
    lexical = ranker._lexical
    assert lexical is not None
    for g in groups[:8]:
        hits = ranker.search(g.question, k=10, explain=True)
        p_top = float(model.calibration(ranker.search(g.question, k=1, hybrid=False)[0].raw_score))
        terms, length = lexical.query(g.question)
        scores = lexical.scores(g.question)
        match = float(scores.max()) / lexical.score_bound(terms, length)
        coverage = lexical.coverage(terms, length, int(np.argmax(scores))) if scores.max() > 0 else 0.0
        for i, h in enumerate(hits):
            assert h.explanation is not None and h.explanation.fused is not None
            z = (
                fitted["bias"]
                + fitted["fused"] * h.explanation.fused
                + fitted["match"] * match
                + fitted["first"] * (i == 0)
                + fitted["coverage"] * coverage
                + fitted["length"] * np.log1p(length)
            )
            z += fitted["top"] * np.log(p_top / (1 - p_top))
            assert h.score == pytest.approx(1 / (1 + np.exp(-z)), rel=1e-6)
        assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    # hybrid_features gives, per question, exactly what the served score reads, and the labels
    asked = [g for g in _planted(80, seed=5) if any(a.split()[0] == g.question.split()[0] for a in answers)][:8]
    relevant = [{i for i, a in enumerate(answers) if a.split()[0] == g.question.split()[0]} for g in asked]  # its topic
    weights = np.array([fitted[k] for k in ("fused", "top", "match", "first", "coverage", "length")])
    per_question = hybrid_features(ranker, [g.question for g in asked], relevant, model.calibration, depth=10)
    for g, rows, (x, y) in zip(asked, relevant, per_question, strict=True):
        hits = ranker.search(g.question, k=10)
        assert x.shape == (len(hits), 6) and y.tolist() == [int(h.row in rows) for h in hits]
        assert x[:, 3].tolist() == [1.0] + [0.0] * (len(hits) - 1)  # the first hit
        np.testing.assert_allclose(
            1 / (1 + np.exp(-(fitted["bias"] + x @ weights))), [h.score for h in hits], rtol=1e-6
        )
    assert sum(int(y[0]) for _, y in per_question) >= 4  # labels of both kinds: most first hits share the topic


def test_hybrid_features_are_what_the_search_read_without_a_bm25_scan(
    planted_model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Beyond LEXICAL_SCAN_LIMIT answers BM25 scores only the candidates of its impact-ordered
    postings: the question's coverage and match a fit reads are those the search computed over
    its candidates, so every hit's score is the stored weights applied to its features."""
    import shutil

    import qaindex.search.fusion as fusion_module

    pytest.importorskip("Stemmer")
    model_dir = tmp_path / "model"
    shutil.copytree(planted_model, model_dir)
    weights = {"bias": -2.0, "fused": 3.0, "top": 0.5, "match": 1.5, "first": 0.7, "coverage": 1.2, "length": -0.3}
    manifest = json.loads((model_dir / "manifest.json").read_text())
    manifest["fusion"] = {"fused_score": weights}
    (model_dir / "manifest.json").write_text(json.dumps(manifest))
    model = Model.load(model_dir)
    # BM25's best answer holds both question terms among four: each weighs less in it than in
    # the 300 answers of two terms holding one of them, so it is not among the 100
    # highest-weighted postings of either term; stopwords (no BM25 terms, unknown words to the
    # model) dilute its vector, so the model ranks it below them too
    answers = ["topic1 topic2 fill0 fill1 " + " ".join(["the"] * 40)]
    answers += [f"topic{t} fill{i % 40}" for t in (1, 2) for i in range(150)]
    ranker = Ranker.build([{"id": i, "answer": a} for i, a in enumerate(answers)], model=model_dir, hybrid=True)
    lexical = ranker.state().lexical
    assert lexical is not None
    monkeypatch.setattr(fusion_module, "LEXICAL_SCAN_LIMIT", 0)
    questions = ["topic1 topic2", "topic1 topic2 fill3", "topic2 fill7"]
    relevant = [{0}, {0}, {0}]
    w = np.array([weights[k] for k in ("fused", "top", "match", "first", "coverage", "length")])
    per_question = hybrid_features(ranker, questions, relevant, model.calibration)
    for q, (x, _) in zip(questions, per_question, strict=True):
        hits = ranker.search(q, k=10, explain=True)
        assert 0 not in [h.row for h in hits]  # the scan's best BM25 answer is not a candidate
        why = hits[0].explanation
        assert why is not None and (x[0, 2], x[0, 4]) == (why.question_match, why.question_coverage)
        np.testing.assert_allclose(1 / (1 + np.exp(-(weights["bias"] + x @ w))), [h.score for h in hits], rtol=1e-6)
    terms, length = lexical.query(questions[0])  # a scan would read another coverage
    assert lexical.coverage(terms, length, 0) == pytest.approx(1.0)
    assert per_question[0][0][0, 4] < 0.9


def test_cli_calibrate_writes_the_manifest_and_reports_ece(planted_model: Path, tmp_path: Path) -> None:
    import shutil

    model_dir = tmp_path / "model"
    shutil.copytree(planted_model, model_dir)
    data = tmp_path / "dev.jsonl"
    check = tmp_path / "test.jsonl"
    for path, groups in ((data, _planted(200, seed=2)), (check, _planted(100, seed=3))):
        rows = [
            {"qid": g.qid, "question": g.question, "aid": c.aid, "answer": c.answer, "label": c.label}
            for g in groups
            for c in g.candidates
        ]
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    dry = CliRunner().invoke(main, ["calibrate", str(model_dir), str(data), "--dry-run"])
    assert dry.exit_code == 0, dry.output
    assert "calibration" not in json.loads((model_dir / "manifest.json").read_text())
    res = CliRunner().invoke(
        main, ["calibrate", str(model_dir), str(data), "--check", str(check), "--method", "isotonic"]
    )
    assert res.exit_code == 0, res.output
    report = json.loads(res.output)
    assert report["calibration"]["method"] == "isotonic" and report["checks"][str(check)]["ece"] < 0.1
    manifest = json.loads((model_dir / "manifest.json").read_text())
    assert manifest["calibration"] == report["calibration"]
    # the default search is hybrid: labelled data refits its score too, where the hybrid extra is installed
    if tokenizer_available():
        assert manifest["fusion"] == {"fused_score": report["calibration"]["hybrid"]["fused_score"]}
        assert report["calibration"]["hybrid"]["fused_score"]["fused"] > 0
    else:
        assert "hybrid" not in report["calibration"] and "fusion" not in manifest
    dense = CliRunner().invoke(main, ["calibrate", str(model_dir), str(data), "--no-hybrid-score", "--dry-run"])
    assert dense.exit_code == 0, dense.output
    assert "hybrid" not in json.loads(dense.output)["calibration"]
    Ranker.build([{"id": 1, "answer": "topic1"}], model=model_dir).save(tmp_path / "ix")
    info = CliRunner().invoke(main, ["info", "--index", str(tmp_path / "ix")])
    assert "scores:     calibrated (isotonic on dev.jsonl, labelled" in info.output
    missing = CliRunner().invoke(main, ["calibrate", str(model_dir), str(tmp_path / "nope.jsonl")])
    assert missing.exit_code == 2 and "does not exist" in missing.output


@pytest.mark.parametrize("method", ["platt", "isotonic"])
def test_a_pair_weighted_twice_fits_like_the_pair_repeated(method: str) -> None:
    rng = np.random.default_rng(5)
    raw = rng.normal(size=200)
    y = (raw + rng.normal(size=200) > 0.5).astype(int)
    best = raw + np.abs(rng.normal(size=200))
    w = np.where(np.arange(200) % 3 == 0, 2.0, 1.0)
    repeat = np.repeat(np.arange(200), w.astype(int))
    weighted = fit(raw, y, method=method, best=best, weights=w)
    repeated = fit(raw[repeat], y[repeat], method=method, best=best[repeat])
    grid = np.linspace(-3, 3, 25)
    np.testing.assert_allclose(weighted(grid, grid + 0.5), repeated(grid, grid + 0.5), atol=1e-6)
    with pytest.raises(QueryError, match="calibration weights must be 200 finite positive numbers, one per pair"):
        fit(raw, y, method=method, weights=np.zeros(200))


def test_fused_score_weights_and_offtopic_share() -> None:
    from qaindex.eval.calibration_fit import OFFTOPIC_SHARE, fit_fused_score, offtopic_weight

    rng = np.random.default_rng(6)
    # columns: fused, top, match, first (every tenth hit), coverage, ln(1 + n(q))
    x = rng.normal(size=(300, 6))
    x[:, 3] = np.arange(300) % 10 == 0
    y = (x @ np.array([1.5, 0.5, 1.0, 1.0, 0.8, -0.4]) + rng.normal(size=300) > 0).astype(int)
    w = np.where(np.arange(300) < 100, 3.0, 1.0)
    repeat = np.repeat(np.arange(300), w.astype(int))
    fitted = fit_fused_score(x, y, w)
    np.testing.assert_allclose(fitted, fit_fused_score(x[repeat], y[repeat]), atol=1e-6)
    # the match is not read (its weight is 0, whatever it holds); the coverage and length are
    assert fitted[3] == 0.0 and fitted[5] > 0.3 and fitted[6] < -0.1
    shuffled = x.copy()
    shuffled[:, 2] = rng.permutation(x[:, 2])
    assert fit_fused_score(shuffled, y, w) == fitted
    with pytest.raises(
        QueryError, match=r"fused score features must be finite numbers of shape \(n, 6\), got \(300, 4\)"
    ):
        fit_fused_score(x[:, :4], y, w)
    # another choice of features: the others weigh 0 (the four of a calibration fitted before)
    older = fit_fused_score(x, y, w, reads=("fused", "top", "match", "first"))
    assert older[5:] == (0.0, 0.0) and older[3] != 0.0
    with pytest.raises(
        QueryError,
        match=r"the fused score fit reads some of fused, top, match, first, coverage, length; got \['size'\]",
    ):
        fit_fused_score(x, y, w, reads=("size",))
    # the off-topic questions count as OFFTOPIC_SHARE of all the questions, whatever their number
    for answerable, off in [(732, 114), (40, 190), (5, 5)]:
        weight = offtopic_weight(answerable, off)
        assert weight * off / (weight * off + answerable) == pytest.approx(OFFTOPIC_SHARE)

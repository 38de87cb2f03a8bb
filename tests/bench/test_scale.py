"""Smoke test of benchmarks/speed/scale.py at tiny sizes: the JSON and table it writes, its
corpus recombination, and its recall computation against a brute force written here.
No timing is asserted."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from qaindex import Ranker
from qaindex.geometry import hyperbolic
from qaindex.model import Model
from qaindex.vector_index import exact_search

ROOT = Path(__file__).resolve().parents[2]
from helpers.bench_data import tiny_datasets  # noqa: E402

from benchmarks import common  # noqa: E402
from benchmarks.speed import scale  # noqa: E402


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_datasets(tmp_path_factory.mktemp("datasets"))


def test_corpus_is_real_sentences_then_seeded_joins(data: Path) -> None:
    sentences, questions = common.read_texts(data)
    assert len(sentences) == 60 and len(questions) == 15
    texts, parts = common.make_corpus(sentences, 100)
    assert len(texts) == 100 and len(set(texts[:60])) == 60 and set(texts[:60]) == set(sentences)
    real = texts[:60]
    for text, ids in zip(texts[60:], parts[60:], strict=True):
        assert len(ids) == 2 and text == f"{real[ids[0]]} {real[ids[1]]}"
    assert common.make_corpus(sentences, 100) == (texts, parts)  # seeded
    assert common.make_corpus(sentences, 30)[0] == texts[:30]


def brute_force(qv: np.ndarray, vectors: np.ndarray, k: int) -> np.ndarray:
    d = hyperbolic.relative_distance(np.asarray(qv, np.float64)[:, None], np.asarray(vectors, np.float64)[None])
    return np.argsort(d, axis=1, kind="stable")[:, :k]


def test_recall_computation_matches_brute_force(data: Path) -> None:
    sentences, questions = common.read_texts(data)
    texts, _ = common.make_corpus(sentences, 200)
    ranker = Ranker.build(
        [{"id": i, "answer": t} for i, t in enumerate(texts)], index_kind="ivf", hnsw={"nlist": 20, "nprobe": 1}
    )
    ranker.configure(overfetch=1)  # few candidates: recall below 1, so the count matters
    qv = ranker.model.encode(questions, role="question")
    vectors = np.asarray(ranker._vectors)
    truth = brute_force(qv, vectors, 10)
    rows = ranker.search_vectors(qv, 10)[2]
    expected = np.mean([len(set(r.tolist()) & set(t.tolist())) / 10 for r, t in zip(rows, truth, strict=True)])
    got = scale.pipeline_recall(ranker, qv, vectors)
    assert got == pytest.approx(expected) and got < 1.0
    ranker.configure(overfetch=20)
    ranker._coarse.set_breadth(20)  # every list: exhaustive
    assert scale.pipeline_recall(ranker, qv, vectors) == 1.0
    assert scale.recall_at_k(np.array([[4, -1, 2]]), np.array([[2, 3]])) == 0.5


def test_recall_with_ties_counts_an_answer_as_good_as_the_kth() -> None:
    """MiniLM + HNSW's equal-recall measure: a found answer scoring at least the true k-th
    counts (another of several tied answers is as right), counted against a loop here."""
    rng = np.random.default_rng(0)
    scores = rng.integers(0, 8, size=(50, 40)).astype(np.float32)  # few values: many ties
    order = np.argsort(-scores, axis=1, kind="stable")
    truth, truth_scores = order[:, :10], np.take_along_axis(scores, order[:, :10], axis=1)
    found = np.stack([rng.permutation(row)[:10] for row in order[:, :20]])  # some listed, some tied, some worse
    found_scores = np.take_along_axis(scores, found, axis=1)
    expected = np.mean(
        [min(10, sum(s >= t[-1] - 1e-6 for s in row)) / 10 for row, t in zip(found_scores, truth_scores, strict=True)]
    )
    got = scale.recall_with_ties(found_scores, truth_scores)
    assert got == pytest.approx(expected) and got < 1.0
    assert scale.recall_with_ties(truth_scores, truth_scores) == 1.0
    assert scale.recall_at_k(found, truth) < got  # rows tied with the 10th count only here
    assert scale.recall_with_ties(np.array([[5.0, 1.0, 0.0]]), np.array([[5.0, 3.0, 2.0]])) == pytest.approx(1 / 3)


def test_the_benchmark_writes_its_json_and_table(data: Path, tmp_path: Path) -> None:
    baselines = "flat,bm25" if importlib.util.find_spec("bm25s") else "flat"
    out, table = tmp_path / "scale.json", tmp_path / "scale.md"
    argv = ["--sizes", "50,90", "--kinds", "auto,ivf", "--questions", "12", "--baselines", baselines,
            "--data", str(data), "--out", str(out), "--table", str(table)]  # fmt: skip
    scale.main(argv)
    result: dict[str, Any] = json.loads(out.read_text())
    assert result["real_sentences"] == 60 and result["questions"] == 12 and result["recall_target"] == 0.99
    assert [s["answers"] for s in result["sizes"]] == [50, 90]
    assert [s["recombined"] for s in result["sizes"]] == [0, 30]
    for size in result["sizes"]:
        assert len(size["load_average_before"]) == 3
        flat, ivf = size["qaindex"]
        assert flat["kind"] == "flat" and flat["tuning"] == {} and flat["recall_at_10"] == 1.0
        assert ivf["kind"] == "ivf" and ivf["tuning"]["param"] == "nprobe" and ivf["tuning"]["target"] == 0.99
        assert ivf["params"]["nprobe"] == ivf["tuning"]["value"]
        for row in (flat, ivf):
            assert set(row["split_1_thread_ms"]) == {"tokenize", "encode", "coarse", "rerank", "records"}
            assert row["disk_bytes"] > row["model_copy_bytes"] > 0
            assert row["disk_ratio"] == pytest.approx(row["disk_bytes"] / row["raw_bytes"], abs=1e-3)
            assert 0.0 <= row["recall_at_10"] <= 1.0 and row["recall_questions"] == 12
            for key in ("single_1_thread", "single_2_threads"):
                assert row[key]["p50_ms"] <= row[key]["p99_ms"]
        assert "no_index" not in size  # flat is already among the kinds
        assert ("bm25" in size) == ("bm25" in baselines)
    figures = [t for t in result["targets"] if t["target"].startswith("1M")]
    assert len(figures) == 1 and figures[0]["met"] is None and "1M not measured" in figures[0]["figure"]
    assert all(t["met"] in (True, False, None) for t in result["targets"])
    text = table.read_text()
    assert "| target | figure | result |" not in text and "| 90 | ivf nprobe=" in text
    # the docs section: one row per size (the non-flat kind where auto is flat), no list of targets
    body = scale.readme_body(result)
    rows = [line for line in body.splitlines() if line.startswith(("| 50 |", "| 90 |"))]
    assert len(rows) == 2 and all(f"| ivf, nprobe {s['qaindex'][1]['tuning']['value']} |" in row
                                  for row, s in zip(rows, result["sizes"], strict=True))  # fmt: skip
    assert not [line for line in body.splitlines() if line.startswith("- ")] and "target" not in body
    # --merge keeps the other sizes of an earlier run
    scale.main(["--sizes", "70", "--kinds", "auto", "--questions", "12", "--baselines", "",
                      "--data", str(data), "--out", str(out), "--table", str(table), "--merge"])  # fmt: skip
    assert [s["answers"] for s in json.loads(out.read_text())["sizes"]] == [50, 70, 90]
    # ... and, measuring one kind of a size again, that size's other kinds and baselines
    scale.main(["--sizes", "90", "--kinds", "ivf", "--questions", "12", "--baselines", "",
                "--data", str(data), "--out", str(out), "--table", str(table), "--merge"])  # fmt: skip
    again = json.loads(out.read_text())["sizes"][2]
    before = result["sizes"][1]
    assert [r["kind"] for r in again["qaindex"]] == ["flat", "ivf"] and again["qaindex"][0] == before["qaindex"][0]
    assert json.loads(out.read_text())["command"].count("; then ") == 2  # the ivf row replaced, not added
    assert ("bm25" in again) == ("bm25" in baselines) and again.get("bm25") == before.get("bm25")
    table.unlink()  # --render rewrites the table from the JSON alone
    scale.main(["--render", "--out", str(out), "--table", str(table)])
    assert "| 70 | flat |" in table.read_text()


def _ball_points(n: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``n`` answers in the 8-dimensional Poincaré ball, 20 questions near the first ones, and
    each question's brute-force top 10 under the relative ranking."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 8))
    a = (x / np.linalg.norm(x, axis=1, keepdims=True) * rng.uniform(0.3, 0.9, (n, 1))).astype(np.float32)
    q = (a[:20] * 0.8).astype(np.float32)
    d = hyperbolic.relative_distance(q.astype(np.float64)[:, None, :], a.astype(np.float64)[None, :, :])
    return a, q, np.argsort(d, axis=1, kind="stable")[:, :10]


def test_ann_difficulty_measures_against_brute_force(data: Path, tmp_path: Path) -> None:
    from benchmarks.speed import ann_difficulty

    a, q, truth = _ball_points(300, 5)
    # the exact rerank of every row is the brute force
    every = np.broadcast_to(np.arange(300), (20, 300))
    assert np.array_equal(ann_difficulty.rerank(q, a, every, "relative"), truth)
    # candidates from an exhaustive score: 400 >= 300 rows hold everything
    depth = ann_difficulty.depth(q, a, truth, "relative")
    assert all(row["400"] == 1.0 for row in depth.values())
    assert all(row["10"] <= row["40"] <= row["400"] for row in depth.values())
    c = ann_difficulty.contrast(q, a)
    assert (
        c["question_to_answer_cosine"]["1st"]
        >= c["question_to_answer_cosine"]["10th"]
        >= (c["question_to_answer_cosine"]["median"])
    )
    # refinement covering every answer finds what brute force finds
    pq = ann_difficulty.curve("pq", a, q, truth, "relative", [1, 3])
    assert pq["rows"][-1]["recall_at_10"] == 1.0
    # "pq:C": C coordinates per sub-quantiser (the relative lift of 8 coordinates has 9)
    assert pq["params"]["M"] == 3
    assert ann_difficulty.curve("pq:2", a, q, truth, "relative", [1])["params"]["M"] == 5
    # the whole script on the tiny datasets writes its results file
    out = ann_difficulty.main(
        [
            "--size",
            "120",
            "--questions",
            "10",
            "--kinds",
            "flat,pq",
            "--data",
            str(data),
            "--out",
            str(tmp_path / "a.json"),
        ]
    )
    assert json.loads((tmp_path / "a.json").read_text())["curves"]["flat"]["rows"][0]["recall_at_10"] == 1.0
    assert out["answers"] == 120


def test_ann_difficulty_hnsw_links_and_routed_lists(data: Path, tmp_path: Path) -> None:
    from benchmarks.speed import ann_difficulty

    a, q, truth = _ball_points(400, 7)
    # "hnsw:M": M links per node
    assert ann_difficulty.curve("hnsw:12", a, q, truth, "relative", [100])["params"]["M"] == 12
    # recall and share scanned from each true answer's lists: 2 questions, 3 lists of sizes 5, 3, 2
    order = np.array([[0, 1, 2], [2, 0, 1]])
    held = [[np.array([0]), np.array([1, 2])], [np.array([1]), np.array([2])]]
    rows = ann_difficulty._routed(order, held, np.array([5, 3, 2]), 10)
    assert [(r["probe"], r["recall_at_10"], r["scanned"]) for r in rows] == [(1, 0.5, 0.35), (2, 0.75, 0.75)]
    # on a real corpus: probing every list finds every true answer, and recall grows with the probes
    model = Model.load(None)
    texts = [f"answer {i} about topic {i % 7} and item {i % 11} with detail {i % 13}" for i in range(400)]
    vectors = model.encode(texts, role="answer")
    questions = model.encode([f"which topic {i % 7} item {i % 11}" for i in range(20)], role="question")
    _, exact = exact_search(questions, vectors, 10, geometry="poincare", ranking=model.ranking)
    out = ann_difficulty.routing(vectors, questions, exact, texts, model, 8, 300)
    assert out["lists"] == 8 and out["pseudo_questions"] == 300
    for name, scheme in out["schemes"].items():
        recalls = [r["recall_at_10"] for r in scheme]
        assert recalls == sorted(recalls), name
        assert scheme[-1]["probe"] == 8 and recalls[-1] == 1.0, name
    assert out["schemes"]["answer lists"][-1]["scanned"] == 1.0
    assert out["schemes"]["question lists + spill"][-1]["scanned"] >= 1.0  # answers in several lists count again
    # pseudo-questions: words of their answer, in order; an answer never in its own pseudo-questions' truth
    distinct = [" ".join(f"w{i}x{j}" for j in range(12)) for i in range(40)]
    cut, rows = ann_difficulty.cut_words(distinct, 30, 4, 8, scattered=True, seed=1)
    for text, row in zip(cut, rows, strict=True):
        words, source = text.split(), distinct[row].split()
        assert 4 <= len(words) <= 8 and all(w in source for w in words)
        assert [source.index(w) for w in words] == sorted(source.index(w) for w in words)
    sets = ann_difficulty.query_sets(vectors, texts, ["which topic 3"] * 5, model, 20)
    spans = ann_difficulty.answer_spans(texts, 20)[1]
    truth = sets["answer spans (the tuning's)"][1]
    assert truth.shape == (20, 10) and not any(row in t for row, t in zip(spans, truth, strict=True))
    assert set(sets) == {"other questions", "answer spans (the tuning's)", "spans of 2-4 words", "4-8 scattered words"}


def test_scale_report_names_where_each_query_set_reaches_the_target() -> None:
    from benchmarks.speed import scale_report

    rows = [
        {"breadth": 64, "recall_at_10": 0.98, "p50_ms": 0.3, "recall_by_queries": {"spans": 0.95}},
        {"breadth": 128, "recall_at_10": 0.991, "p50_ms": 0.5, "recall_by_queries": {"spans": 0.97}},
    ]
    d = {"curves": {"hnsw:64": {"rows": rows, "build_s": 375.0}}}
    assert scale_report.query_sets_sentence(d).endswith(
        "hnsw:64: the measured questions 0.99 at breadth 128, spans only 0.970 (breadth 128)."
    )
    routing = {
        "lists": 4,
        "pseudo_questions": 9,
        "schemes": {
            "answer lists": [
                {"probe": 1, "recall_at_10": 0.5, "scanned": 0.25},
                {"probe": 2, "recall_at_10": 0.995, "scanned": 0.5},
            ]
        },
    }
    assert "answer lists reach 0.995 probing 2 lists (50.0% of the answers scanned)" in scale_report.routing_sentence(
        routing
    )

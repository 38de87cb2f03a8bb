"""Norm analysis of Poincaré models (norm_report, word_levels, plot) and `qaindex inspect`."""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner
from helpers.onnx_models import make_model, point_model, random_ball

from qaindex.cli import main
from qaindex.errors import MissingDependencyError, QAIndexError
from qaindex.eval.datasets import Candidate, QuestionGroup
from qaindex.eval.inspect import (
    PERCENTILES,
    norm_report,
    plot,
    project_ball_2d,
    single_token_words,
    word_frequencies,
    word_levels,
)
from qaindex.model import Model

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
# ten points whose norms are evenly spread over [0.1, 0.9], in shuffled order
NORMS = np.linspace(0.1, 0.9, 10)
SHUFFLE = [3, 7, 0, 9, 5, 1, 8, 2, 6, 4]


@pytest.fixture(scope="module")
def points_model(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str], np.ndarray]:
    rng = np.random.default_rng(5)
    directions = rng.normal(size=(10, 3))
    directions /= np.linalg.norm(directions, axis=1, keepdims=True)
    points = (directions * NORMS[SHUFFLE][:, None]).astype(np.float32)
    directory, words = point_model(tmp_path_factory.mktemp("m") / "points", points)
    return directory, words, points


@pytest.fixture(scope="module")
def ball_model(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    points = random_ball(np.random.default_rng(2), 60, 5)
    directory, words = point_model(tmp_path_factory.mktemp("m") / "ball", points)
    return directory, words


def test_norm_report_of_texts(points_model: tuple[Path, list[str], np.ndarray]) -> None:
    directory, words, points = points_model
    model = Model.load(directory, device="cpu")
    report = norm_report(model, words, bins=8)
    norms = np.linalg.norm(points.astype(np.float64), axis=1)
    assert (report["geometry"], report["dimension"], report["max_norm"]) == ("poincare", 3, 0.999)
    for role in ("question", "answer"):
        s = report[role]
        assert s["count"] == 10
        assert s["mean"] == pytest.approx(norms.mean(), abs=1e-6)
        assert s["min"] == pytest.approx(0.1, abs=1e-6)
        assert s["max"] == pytest.approx(0.9, abs=1e-6)
        assert list(s["percentiles"]) == [f"p{p}" for p in PERCENTILES]
        values = list(s["percentiles"].values())
        assert values == sorted(values)
        assert s["percentiles"]["p50"] == pytest.approx(np.median(norms), abs=1e-6)
        assert sum(report["histogram"][role]) == 10
    edges = report["histogram"]["edges"]
    assert len(edges) == 9 and edges[0] == 0.0 and edges[-1] == pytest.approx(0.999)
    # the 2-D view keeps every vector's norm
    for role in ("question", "answer"):
        kept = np.linalg.norm(np.asarray(report["ball_2d"][role]), axis=1)
        np.testing.assert_allclose(kept, norms, atol=1e-6)
    json.dumps(report)  # JSON-serializable


def test_norm_report_of_groups_separates_questions_and_answers(
    points_model: tuple[Path, list[str], np.ndarray],
) -> None:
    directory, words, _points = points_model
    model = Model.load(directory, device="cpu")
    # questions are the two smallest-norm points; answers (distinct by aid and text) the rest
    small = [words[SHUFFLE.index(0)], words[SHUFFLE.index(1)]]
    large = [w for w in words if w not in small]
    groups = [
        QuestionGroup("q1", small[0], tuple(Candidate(f"a{i}", w, int(i == 0)) for i, w in enumerate(large))),
        QuestionGroup("q2", small[1], tuple(Candidate(f"a{i}", w, 0) for i, w in enumerate(large))),
    ]
    report = norm_report(model, groups)
    assert report["question"]["count"] == 2
    assert report["answer"]["count"] == 8
    assert report["question"]["max"] < report["answer"]["min"]
    assert report["question"]["mean"] == pytest.approx(np.mean(NORMS[:2]), abs=1e-6)


def test_norm_report_samples_the_2d_view(ball_model: tuple[Path, list[str]]) -> None:
    directory, words = ball_model
    report = norm_report(Model.load(directory, device="cpu"), words, max_points=25)
    assert len(report["ball_2d"]["question"]) == 25
    assert report["question"]["count"] == 60
    assert all(np.hypot(*p) < 1.0 for p in report["ball_2d"]["answer"])


def test_norm_report_rejects_bad_input(points_model: tuple[Path, list[str], np.ndarray]) -> None:
    model = Model.load(points_model[0], device="cpu")
    with pytest.raises(ValueError) as exc:
        norm_report(model, [])
    assert str(exc.value) == "norm_report needs at least one question and one answer text"
    with pytest.raises(TypeError):
        norm_report(model, ["p1", 3])  # type: ignore[list-item]
    with pytest.raises(ValueError):
        norm_report(model, ["p1"], bins=0)


def test_project_ball_2d_keeps_norms_and_the_origin() -> None:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(50, 7)) * 0.1
    x[0] = 0.0
    out = project_ball_2d(x)
    assert out.shape == (50, 2)
    np.testing.assert_allclose(np.linalg.norm(out, axis=1), np.linalg.norm(x, axis=1), atol=1e-12)
    assert out[0].tolist() == [0.0, 0.0]
    # the first axis follows the direction of largest variance
    line = np.outer(np.linspace(-0.5, 0.5, 11), [0.0, 0.6, 0.8]) + 1e-3 * rng.normal(size=(11, 3))
    flat = project_ball_2d(line)
    assert np.abs(flat[:, 0]).sum() > 10 * np.abs(flat[:, 1]).sum()
    # degenerate shapes
    np.testing.assert_allclose(project_ball_2d([[0.3, 0.4]]), [[0.3, 0.4]])
    np.testing.assert_allclose(np.abs(project_ball_2d([[0.5], [-0.2]])), [[0.5, 0.0], [0.2, 0.0]])


def test_word_levels_bands(points_model: tuple[Path, list[str], np.ndarray]) -> None:
    directory, words, _ = points_model
    model = Model.load(directory, device="cpu")
    by_norm = [words[SHUFFLE.index(i)] for i in range(10)]  # words from smallest norm to largest
    levels = word_levels(model, levels=5, per_level=10)
    assert len(levels) == 5
    edges = np.linspace(0.1, 0.9, 6)
    for i, ((low, high), members) in enumerate(levels):
        assert low == pytest.approx(edges[i], abs=1e-6)
        assert high == pytest.approx(edges[i + 1], abs=1e-6)
        assert sorted(members) == sorted(by_norm[2 * i : 2 * i + 2])
        # vocabulary order without data
        assert members == sorted(members, key=words.index)
    assert sorted(w for _, ws in levels for w in ws) == sorted(words)


def test_word_levels_with_frequencies(points_model: tuple[Path, list[str], np.ndarray]) -> None:
    directory, words, _ = points_model
    model = Model.load(directory, device="cpu")
    by_norm = [words[SHUFFLE.index(i)] for i in range(10)]
    counts = Counter({by_norm[0]: 1, by_norm[1]: 5, by_norm[9]: 2, "unknown-word": 50, "[PAD]": 9})
    levels = word_levels(model, counts, levels=2, per_level=1)
    (low, _), first = levels[0]
    (_, high), second = levels[1]
    assert first == [by_norm[1]]  # the more frequent of the two low-norm words
    assert second == [by_norm[9]]
    assert low == pytest.approx(0.1, abs=1e-6) and high == pytest.approx(0.9, abs=1e-6)
    # a sequence keeps its order; repeated and unknown words are ignored
    seq = word_levels(model, [by_norm[1], by_norm[0], by_norm[0], "nope"], levels=1, per_level=5)
    assert seq[0][1] == [by_norm[1], by_norm[0]]
    assert word_levels(model, ["nope"]) == []
    with pytest.raises(ValueError) as exc:
        word_levels(model, levels=0)
    assert str(exc.value) == "levels must be a positive integer, got 0"


def test_single_token_words_and_frequencies(tmp_path: Path) -> None:
    vocab = ["[PAD]", "[UNK]", "[CLS]", "the", "cat", "##s", "dog"]
    emb = np.random.default_rng(0).normal(scale=0.1, size=(len(vocab), 3)).astype(np.float32)
    model = Model.load(make_model(tmp_path / "m", vocab, emb), device="cpu")
    assert single_token_words(model) == ["the", "cat", "dog"]
    assert word_frequencies(model, ["The cat", "the DOG", "the bird"]) == Counter(
        {"the": 3, "cat": 1, "dog": 1, "[UNK]": 1}
    )


def test_plot_writes_a_png(ball_model: tuple[Path, list[str]], tmp_path: Path) -> None:
    directory, words = ball_model
    report = norm_report(Model.load(directory, device="cpu"), words)
    path = tmp_path / "norms.png"
    plot(report, path)
    assert path.read_bytes()[:8] == PNG_MAGIC


def test_plot_of_a_cosine_model(tmp_path: Path) -> None:
    vocab = ["[PAD]", "[UNK]", "a", "b", "c"]
    emb = np.random.default_rng(1).normal(size=(5, 3)).astype(np.float32)
    model = Model.load(make_model(tmp_path / "cos", vocab, emb, geometry="cosine"), device="cpu")
    report = norm_report(model, ["a", "b c", "c"])
    assert report["max_norm"] is None
    plot(report, tmp_path / "cos.png")
    assert (tmp_path / "cos.png").read_bytes()[:8] == PNG_MAGIC


def test_plot_errors(ball_model: tuple[Path, list[str]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    directory, words = ball_model
    report = norm_report(Model.load(directory, device="cpu"), words[:5])
    target = tmp_path / "missing-dir" / "x.png"
    with pytest.raises(QAIndexError) as exc:
        plot(report, target)
    assert str(exc.value) == f"{target}: cannot write the plot (No such file or directory)"

    for name in [m for m in sys.modules if m == "matplotlib" or m.startswith("matplotlib.")]:
        monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(MissingDependencyError) as exc2:
        plot(report, tmp_path / "x.png")
    assert str(exc2.value) == "plotting needs matplotlib: pip install 'qaindex[plot]'"
    assert not (tmp_path / "x.png").exists()


# -- CLI --------------------------------------------------------------------------------------


def run(*args: str | Path) -> Any:
    return CliRunner().invoke(main, [str(a) for a in args])


@pytest.fixture()
def data_file(points_model: tuple[Path, list[str], np.ndarray], tmp_path: Path) -> Path:
    _, words, _ = points_model
    rows = [
        {"qid": f"q{i}", "question": f"{words[i]} {words[i]}", "aid": f"a{j}", "answer": words[j], "label": int(i == j)}
        for i in range(4)
        for j in range(6)
    ]
    path = tmp_path / "data.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def test_inspect_with_data_and_plot(
    points_model: tuple[Path, list[str], np.ndarray], data_file: Path, tmp_path: Path
) -> None:
    directory, _words, _ = points_model
    png = tmp_path / "ball.png"
    result = run("inspect", directory, data_file, "--plot", png, "--levels", "3", "--device", "cpu")
    assert result.exit_code == 0, result.output
    assert png.read_bytes()[:8] == PNG_MAGIC
    lines = result.output.splitlines()
    assert lines[0] == "model      tiny-test-model (poincare, dimension 3, max norm 0.999)"
    assert lines[1] == f"source     {data_file} (4 questions, 6 distinct answers)"
    assert lines[2].split() == ["norms", "count", "mean", "min", "p1", "p5", "p25", "p50", "p75", "p95", "p99", "max"]
    assert lines[3].split()[:2] == ["questions", "4"]
    assert lines[4].split()[:2] == ["answers", "6"]
    assert sum(1 for line in lines if line.startswith("  H")) == 3
    assert lines[-1] == f"plot       {png}"


def test_inspect_json_without_data(points_model: tuple[Path, list[str], np.ndarray]) -> None:
    directory, _words, _ = points_model
    result = run("inspect", directory, "--json", "--levels", "5", "--per-level", "1")
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    assert out["source"] == "vocabulary words (10), each encoded as a question and as an answer"
    assert out["norms"]["question"]["count"] == 10
    assert "ball_2d" not in out["norms"]
    assert [lv["level"] for lv in out["word_levels"]] == ["H1", "H2", "H3", "H4", "H5"]
    assert all(len(lv["words"]) == 1 for lv in out["word_levels"])
    assert out["word_levels"][0]["low"] == pytest.approx(0.1, abs=1e-6)
    assert out["plot"] is None


def test_inspect_errors(points_model: tuple[Path, list[str], np.ndarray], tmp_path: Path) -> None:
    directory = points_model[0]
    missing = tmp_path / "nope.jsonl"
    result = run("inspect", directory, missing)
    assert result.exit_code == 1
    assert result.output == f"Error: {missing}: no such file\n"
    result = run("inspect", tmp_path / "no-model")
    assert result.exit_code == 1
    assert result.output == f"Error: {tmp_path / 'no-model'}: no such model directory\n"
    result = run("inspect", directory, "--levels", "0")
    assert result.exit_code == 2


def test_inspect_plot_without_matplotlib(
    points_model: tuple[Path, list[str], np.ndarray], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in [m for m in sys.modules if m == "matplotlib" or m.startswith("matplotlib.")]:
        monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    result = run("inspect", points_model[0], "--plot", tmp_path / "x.png")
    assert result.exit_code == 1
    assert result.output == "Error: plotting needs matplotlib: pip install 'qaindex[plot]'\n"

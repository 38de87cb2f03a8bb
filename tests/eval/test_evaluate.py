"""evaluate_model, evaluate_via_index and `qaindex eval`, on tiny ONNX models (no torch)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import click
import numpy as np
import pytest
from click.testing import CliRunner
from helpers.onnx_models import make_model, point_model

from qaindex.cli import main
from qaindex.cli.eval import eval_command, inspect_command
from qaindex.errors import CorpusError, ModelFormatError
from qaindex.eval.datasets import Candidate, QuestionGroup, read_labelled
from qaindex.eval.evaluate import answer_pool, evaluate_model, evaluate_via_index
from qaindex.eval.metrics import evaluate_scores
from qaindex.model import Model
from qaindex.text.tokenizer import Tokenizer

ROWS = [
    # q1: positives listed first (TrecQA style)
    ("q1", "how do I reset my password", "a1", "open settings and choose reset password", 1),
    ("q1", "how do I reset my password", "a7", "a reset link arrives by email", 1),
    ("q1", "how do I reset my password", "a2", "refunds are paid within fourteen days", 0),
    ("q1", "how do I reset my password", "a3", "export notes as markdown from the file menu", 0),
    ("q2", "can I get a refund", "a2", "refunds are paid within fourteen days", 1),
    ("q2", "can I get a refund", "a1", "open settings and choose reset password", 0),
    ("q2", "can I get a refund", "a4", "sync runs every five minutes", 0),
    # q3: no correct candidate (skipped)
    ("q3", "what colour is the sky", "a3", "export notes as markdown from the file menu", 0),
    ("q3", "what colour is the sky", "a4", "sync runs every five minutes", 0),
    # q4: aid a4 reused with a different text; and an id that collides with the renamed one
    ("q4", "how often does sync run", "a4", "sync runs while the app is open", 1),
    ("q4", "how often does sync run", "a4#2", "two factor login uses an app", 0),
    ("q4", "how often does sync run", "a5", "the app works offline", 0),
    ("q4", "how often does sync run", "a6", "notes sync every five minutes", 1),
    # q5: every candidate correct
    ("q5", "does the app work offline", "a5", "the app works offline", 1),
    ("q5", "does the app work offline", "a8", "offline mode keeps every note", 1),
]


def write_data(path: Path, rows: list[tuple[str, str, str, str, int]] = ROWS) -> Path:
    keys = ("qid", "question", "aid", "answer", "label")
    path.write_text("".join(json.dumps(dict(zip(keys, r, strict=True))) + "\n" for r in rows), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def vocab() -> list[str]:
    return Tokenizer.build_word_vocab([r[1] for r in ROWS] + [r[3] for r in ROWS])


@pytest.fixture(scope="module", params=["poincare", "cosine"])
def model_dir(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, vocab: list[str]) -> Path:
    rng = np.random.default_rng(11)
    emb = rng.normal(scale=0.2, size=(len(vocab), 6)).astype(np.float32)
    emb[0] = 0.0
    return make_model(tmp_path_factory.mktemp("m") / request.param, vocab, emb, geometry=request.param)


@pytest.fixture(scope="module")
def constant_model_dir(tmp_path_factory: pytest.TempPathFactory, vocab: list[str]) -> Path:
    """Every text encodes to the origin, so every candidate gets the same score."""
    emb = np.zeros((len(vocab), 4), dtype=np.float32)
    return make_model(tmp_path_factory.mktemp("m") / "constant", vocab, emb)


@pytest.fixture()
def data_file(tmp_path: Path) -> Path:
    return write_data(tmp_path / "data.jsonl")


def manual_scores(model: Model, groups: list[QuestionGroup]) -> list[tuple[np.ndarray, np.ndarray]]:
    """Each question scored on its own, one scorer call per question."""
    out = []
    for g in groups:
        q = model.encode([g.question], role="question")
        a = model.encode([c.answer for c in g.candidates], role="answer")
        score, _ = model.score(q, a[None])
        out.append((score[0], np.array([c.label for c in g.candidates])))
    return out


def chance(groups: list[QuestionGroup]) -> dict[str, float]:
    """Mean over questions of E[AP], E[RR], P@1 under a random permutation (closed forms)."""
    aps, rrs, p1s = [], [], []
    for g in groups:
        n = len(g.candidates)
        r = sum(c.label for c in g.candidates)
        if not r:
            continue
        harmonic = math.fsum(1 / k for k in range(1, n + 1))
        aps.append(1.0 if n == 1 else (r - 1) / (n - 1) + harmonic * (n - r) / (n * (n - 1)))
        rrs.append(math.fsum(math.comb(n - p, r - 1) / math.comb(n, r) / p for p in range(1, n - r + 2)))
        p1s.append(r / n)
    return {"map": math.fsum(aps) / len(aps), "mrr": math.fsum(rrs) / len(rrs), "p@1": math.fsum(p1s) / len(p1s)}


# -- library --------------------------------------------------------------------------------


def test_evaluate_model_matches_scoring_each_question_alone(model_dir: Path, data_file: Path) -> None:
    model = Model.load(model_dir, device="cpu")
    groups = read_labelled(data_file)
    result = evaluate_model(model, groups)
    expected = evaluate_scores(manual_scores(model, groups))
    for key in ("map", "mrr", "p@1"):
        assert result[key] == pytest.approx(expected[key], rel=1e-6)
    assert result["questions"] == 4
    assert result["skipped"] == 1
    assert result["candidates"] == 13  # pairs of the 4 evaluated questions
    assert result["answers"] == 10  # distinct (aid, text), a4 counted twice


@pytest.mark.parametrize("index_kind", ["flat", "hnsw"])
def test_served_path_gives_the_same_numbers(model_dir: Path, data_file: Path, index_kind: str) -> None:

    model = Model.load(model_dir, device="cpu")
    groups = read_labelled(data_file)
    direct = evaluate_model(model, groups)
    served = evaluate_via_index(model, groups, index_kind=index_kind, device="cpu")
    assert served == direct
    assert 0.0 < direct["map"] < 1.0


def test_batch_sizes_do_not_change_the_result(model_dir: Path, data_file: Path) -> None:

    model = Model.load(model_dir, device="cpu")
    groups = read_labelled(data_file)
    reference = evaluate_model(model, groups)
    for batch_size in (1, 2, 3):
        assert evaluate_model(model, groups, batch_size=batch_size) == pytest.approx(reference, rel=1e-6)
        assert evaluate_via_index(model, groups, batch_size=batch_size, device="cpu") == pytest.approx(
            reference, rel=1e-6
        )


def test_constant_model_scores_exactly_at_chance(constant_model_dir: Path, data_file: Path) -> None:

    model = Model.load(constant_model_dir, device="cpu")
    groups = read_labelled(data_file)
    expected = chance(groups)
    for result in (evaluate_model(model, groups), evaluate_via_index(model, groups, device="cpu")):
        assert result["map"] == pytest.approx(expected["map"], rel=1e-12)
        assert result["mrr"] == pytest.approx(expected["mrr"], rel=1e-12)
        assert result["p@1"] == pytest.approx(expected["p@1"], rel=1e-12)


def test_trecqa_like_order_with_a_constant_model_is_not_map_1(constant_model_dir: Path, tmp_path: Path) -> None:

    rows = [
        (f"q{q}", f"how do I reset my password {q}", f"a{q}-{i}", ROWS[i % len(ROWS)][3], int(i < 2))
        for q in range(3)
        for i in range(8)
    ]
    groups = read_labelled(write_data(tmp_path / "trec.jsonl", rows))
    model = Model.load(constant_model_dir, device="cpu")
    expected = chance(groups)
    for result in (evaluate_model(model, groups), evaluate_via_index(model, groups, device="cpu")):
        assert result["map"] < 0.6
        assert result["map"] == pytest.approx(expected["map"], rel=1e-12)
        assert result["mrr"] == pytest.approx(expected["mrr"], rel=1e-12)


def test_a_perfect_model_scores_1(tmp_path: Path) -> None:

    points = np.array([[0.1, 0.2], [0.5, -0.3], [-0.6, 0.1], [0.0, -0.8]], dtype=np.float32)
    directory, words = point_model(tmp_path / "points", points)
    groups = [
        QuestionGroup(f"q{i}", words[i], tuple(Candidate(f"a{j}", words[j], int(i == j)) for j in range(4)))
        for i in range(4)
    ]
    model = Model.load(directory, device="cpu")
    for result in (evaluate_model(model, groups), evaluate_via_index(model, groups, device="cpu")):
        assert (result["map"], result["mrr"], result["p@1"], result["questions"]) == (1.0, 1.0, 1.0, 4)


def test_no_evaluable_question_gives_nan(model_dir: Path) -> None:

    model = Model.load(model_dir, device="cpu")
    groups = [QuestionGroup("q", "what", (Candidate("a", "open settings", 0),)), QuestionGroup("e", "empty", ())]
    for result in (evaluate_model(model, groups), evaluate_via_index(model, groups, device="cpu")):
        assert math.isnan(result["map"])
        assert (result["questions"], result["skipped"], result["candidates"], result["answers"]) == (0, 2, 0, 1)


def test_empty_answer_text_cannot_go_through_the_index(model_dir: Path) -> None:

    model = Model.load(model_dir, device="cpu")
    groups = [QuestionGroup("q", "refund", (Candidate("a1", " ", 1), Candidate("a2", "refunds", 0)))]
    assert evaluate_model(model, groups)["questions"] == 1
    with pytest.raises(CorpusError) as exc:
        evaluate_via_index(model, groups)
    assert str(exc.value) == (
        "answer 'a1' is empty, and an index cannot store an empty answer; "
        "drop it from the data or evaluate without the index"
    )


def test_nan_scores_are_reported_as_a_broken_model(
    model_dir: Path, data_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:

    model = Model.load(model_dir, device="cpu")

    def nan_score(query: np.ndarray, candidates: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        nan = np.full(candidates.shape[:2], np.nan, dtype=np.float32)
        return nan, nan

    monkeypatch.setattr(model, "score", nan_score)
    with pytest.raises(ModelFormatError) as exc:
        evaluate_model(model, read_labelled(data_file))
    assert str(exc.value) == (
        f"{model.directory}: the scorer returned NaN for question 'q1'; the model is broken, re-export it"
    )


def test_answer_ids_are_unique_and_keep_plain_aids() -> None:
    keys = [("a1", "x"), ("a4", "y"), ("a4", "z"), ("a4#2", "w"), ("", "v"), ("a9", "u")]
    pool = answer_pool([QuestionGroup("q", "?", tuple(Candidate(aid, text, 1) for aid, text in keys))])
    assert pool.keys == keys
    ids = pool.ids
    assert ids == ["a1", "a4#2", "a4#3", "a4#2#2", "answer", "a9"]
    assert len(set(ids)) == len(ids) and [(r.id, r.answer) for r in pool.records()] == list(
        zip(ids, "xyzwvu", strict=True)
    )


def test_bad_batch_size(model_dir: Path, data_file: Path) -> None:

    with pytest.raises(ValueError) as exc:
        evaluate_model(Model.load(model_dir, device="cpu"), read_labelled(data_file), batch_size=0)
    assert str(exc.value) == "batch_size must be a positive integer, got 0"


def test_runtime_modules_import_neither_torch_nor_matplotlib() -> None:
    code = (
        "import sys, qaindex.eval.metrics, qaindex.eval.evaluate, qaindex.eval.inspect, qaindex.cli.eval; "
        "print(sorted(m for m in ('torch', 'matplotlib') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# -- CLI --------------------------------------------------------------------------------------


def run(*args: str | Path) -> Any:
    return CliRunner().invoke(main, [str(a) for a in args])


def test_eval_json(model_dir: Path, data_file: Path) -> None:

    result = run("eval", model_dir, data_file, "--json", "--device", "cpu")
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    expected = evaluate_model(Model.load(model_dir, device="cpu"), read_labelled(data_file))
    assert {k: out[k] for k in expected} == expected
    assert out["model"] == "tiny-test-model"
    assert out["data"] == str(data_file)
    assert out["via_index"] is False


@pytest.mark.parametrize("kind", ["flat", "hnsw"])
def test_eval_via_index_json_matches_direct(model_dir: Path, data_file: Path, kind: str) -> None:
    direct = json.loads(run("eval", model_dir, data_file, "--json").output)
    served = run("eval", model_dir, data_file, "--json", "--via-index", "--index-kind", kind, "--device", "cpu")
    assert served.exit_code == 0, served.output
    out = json.loads(served.output)
    assert out["via_index"] is True
    for key in ("map", "mrr", "p@1", "r@1", "r@2", "r@5", "questions", "skipped", "candidates", "answers"):
        assert out[key] == direct[key]


def test_eval_table(model_dir: Path, data_file: Path) -> None:
    result = run("eval", model_dir, data_file)
    assert result.exit_code == 0, result.output
    out = json.loads(run("eval", model_dir, data_file, "--json").output)
    lines = result.output.splitlines()
    assert lines[0].startswith("model       tiny-test-model (")
    assert "questions   4 evaluated, 1 skipped (no correct candidate)" in lines
    assert "candidates  13 pairs, 10 distinct answers" in lines
    assert f"MAP         {out['map']:.4f}" in lines
    assert f"MRR         {out['mrr']:.4f}" in lines
    assert f"P@1         {out['p@1']:.4f}" in lines
    recall = f"R@1/2/5     {out['r@1']:.4f} / {out['r@2']:.4f} / {out['r@5']:.4f}  "
    assert recall + "(share of a question's correct candidates in its top 1, 2, 5)" in lines
    assert out["r@1"] <= out["r@2"] <= out["r@5"] == 1.0  # no question here has more than 5 candidates


def test_eval_on_a_corpus_with_questions(model_dir: Path, tmp_path: Path) -> None:
    corpus = tmp_path / "faq.jsonl"
    corpus.write_text(
        "".join(
            json.dumps(r) + "\n"
            for r in [
                {"id": "reset", "answer": "open settings and choose reset password", "question": "reset my password"},
                {"id": "refund", "answer": "refunds are paid within fourteen days", "question": "can I get a refund"},
                {"id": "sync", "answer": "sync runs every five minutes"},
            ]
        ),
        encoding="utf-8",
    )
    result = run("eval", model_dir, corpus, "--json")
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    assert (out["questions"], out["candidates"], out["answers"]) == (2, 6, 3)


def test_a_question_listed_under_several_answers_is_one_question(model_dir: Path, tmp_path: Path) -> None:
    rows = [
        {"id": "reset", "answer": "open settings and choose reset password", "questions": ["reset my password"]},
        {"id": "link", "answer": "the reset link is sent by email", "questions": ["reset my password", "email"]},
        {"id": "refund", "answer": "refunds are paid within fourteen days", "question": "can I get a refund"},
        {"id": "sync", "answer": "sync runs every five minutes"},
    ]
    corpus = tmp_path / "faq.jsonl"
    corpus.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    groups = read_labelled(corpus)
    assert [(g.question, [c.aid for c in g.candidates if c.label]) for g in groups] == [
        ("reset my password", ["reset", "link"]),
        ("email", ["link"]),
        ("can I get a refund", ["refund"]),
    ]
    # the same data in the benchmark format (one qid per question) gives the same figures
    questions = list(dict.fromkeys(q for r in rows for q in r.get("questions", [r.get("question")]) if q))
    bench = [
        (f"q{n}", q, r["id"], r["answer"], int(q in r.get("questions", [r.get("question")])))
        for n, q in enumerate(questions)
        for r in rows
    ]
    as_corpus = json.loads(run("eval", model_dir, corpus, "--json").output)
    as_bench = json.loads(run("eval", model_dir, write_data(tmp_path / "b.jsonl", bench), "--json").output)
    assert as_corpus["questions"] == 3
    assert {k: as_corpus[k] for k in ("questions", "map", "mrr", "p@1")} == {
        k: as_bench[k] for k in ("questions", "map", "mrr", "p@1")
    }


def test_eval_errors(model_dir: Path, data_file: Path, tmp_path: Path) -> None:
    missing = tmp_path / "missing.jsonl"
    result = run("eval", model_dir, missing)
    assert result.exit_code == 1
    assert result.output == f"Error: {missing}: no such file\n"

    nothing = write_data(tmp_path / "none.jsonl", [r for r in ROWS if r[0] == "q3"])
    result = run("eval", model_dir, nothing)
    assert result.exit_code == 1
    assert result.output == (
        f"Error: {nothing}: no question has a correct candidate (label 1), so MAP and MRR are undefined; "
        "check the labels\n"
    )

    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"qid": "q", "question": "x", "aid": "a", "answer": "y", "label": 2}\n', encoding="utf-8")
    result = run("eval", model_dir, bad)
    assert result.exit_code == 1
    assert result.output == f'Error: {bad}:1: field "label" must be 0 or 1, got 2\n'

    no_model = tmp_path / "no-model"
    result = run("eval", no_model, data_file)
    assert result.exit_code == 1
    assert result.output == f"Error: {no_model}: no such model directory\n"

    result = run("eval", model_dir, data_file, "--device", "tpu")
    assert result.exit_code == 2


def test_every_option_has_help() -> None:
    for command in (eval_command, inspect_command):
        for param in command.params:
            if isinstance(param, click.Option):
                assert param.help, f"{command.name} {param.opts} has no help"
    assert (eval_command.name, inspect_command.name) == ("eval", "inspect")

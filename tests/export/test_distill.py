"""Distillation into a static token table (fake teachers), the table file and cache, training
without labels on a planted task, and `qaindex train --teacher`."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from helpers.trained import planted_teacher_task

torch = pytest.importorskip("torch")

from click.testing import CliRunner  # noqa: E402
from qaindex_export.embeddings.distill import (  # noqa: E402
    DistilledTable,
    distill,
    load_distilled,
    load_table,
    save_table,
    token_weights,
)
from qaindex_export.embeddings.spec import Embeddings, EmbeddingsError, build_embeddings  # noqa: E402
from qaindex_export.exporting.table_export import export_table_model  # noqa: E402
from qaindex_export.training.train import TrainConfig, pseudo_questions, train_unlabelled  # noqa: E402

from qaindex.cli import main  # noqa: E402
from qaindex.model import Model  # noqa: E402
from qaindex.text.lexical import tokenizer_available  # noqa: E402

VOCAB = ["[PAD]", "[UNK]", "alpha", "beta", "gamma", "delta", "epsilon"]
# what a fake teacher "outputs" for each token id (the [PAD] row is ignored)
OUTPUTS = np.array(
    [
        [9.0, 9.0, 9.0, 9.0],
        [0.0, 0.0, 0.0, 1.0],
        [1.0, 0.0, 0.0, 0.0],
        [0.9, 0.1, 0.0, 0.0],
        [0.0, 1.0, 0.0, 0.0],
        [0.0, 0.0, 1.0, 0.5],
        [-1.0, 0.0, 0.2, 0.0],
    ],
    dtype=np.float32,
)


def fake_teacher(calls: list[np.ndarray]) -> object:
    def run(ids: np.ndarray) -> np.ndarray:
        calls.append(ids.copy())
        return OUTPUTS[ids]

    return run


def expected_table(dim: int, weights: np.ndarray) -> np.ndarray:
    """Independent computation: eigenvectors of the covariance of the real-token rows."""
    x = OUTPUTS[1:].astype(np.float64)
    centred = x - x.mean(axis=0)
    values, vectors = np.linalg.eigh(centred.T @ centred)
    axes = vectors[:, np.argsort(values)[::-1][:dim]]
    rows = np.zeros((len(VOCAB), dim))
    rows[1:] = centred @ axes
    rows *= weights[:, None]
    rows[0] = 0.0
    return rows / np.median(np.linalg.norm(rows[1:], axis=1))


@pytest.mark.parametrize("weighting", ["none", "zipf", "sif"])
def test_distillation_of_a_fake_teacher_gives_the_expected_table(weighting: str) -> None:
    calls: list[np.ndarray] = []
    table = distill(VOCAB, fake_teacher(calls), dim=2, weighting=weighting, batch_size=3)  # type: ignore[arg-type]
    # every token id went through the teacher exactly once, in batches of 3
    assert [c.tolist() for c in calls] == [[0, 1, 2], [3, 4, 5], [6]]
    weights = {"none": np.ones(7), "zipf": np.log1p(np.arange(1, 8))}.get(weighting)
    if weights is None:  # sif: a / (a + p), p from Zipf's law on the rank
        p = (1 / np.arange(1, 8)) / np.sum(1 / np.arange(1, 8))
        weights = 1e-4 / (1e-4 + p)
    want = expected_table(2, weights)
    # PCA axes are defined up to sign: compare the Gram matrices (all inner products) ...
    np.testing.assert_allclose(table.vectors @ table.vectors.T, want @ want.T, atol=1e-5)
    # ... and each column up to its sign
    for j in range(2):
        sign = np.sign(np.dot(table.vectors[:, j], want[:, j]))
        np.testing.assert_allclose(table.vectors[:, j], sign * want[:, j], atol=1e-5)
    assert table.vectors[0].tolist() == [0.0, 0.0]
    assert np.median(np.linalg.norm(table.vectors[1:], axis=1)) == pytest.approx(1.0)
    assert table.info["weighting"] == weighting and table.info["dim"] == 2 and table.info["teacher_dim"] == 4


def test_token_weights() -> None:
    assert token_weights(3, "none").tolist() == [1.0, 1.0, 1.0]
    # rarer (later) tokens weigh more under every weighting
    for kind in ("zipf", "sif"):
        w = token_weights(1000, kind)
        assert np.all(np.diff(w) > 0)
    w = token_weights(3, "counts", counts=np.array([10, 0, 4]), a=0.1)
    p = np.array([11, 1, 5]) / 17
    np.testing.assert_allclose(w, 0.1 / (0.1 + p), rtol=1e-6)
    with pytest.raises(ValueError, match="weighting must be one of"):
        token_weights(3, "idf")


def test_table_file_roundtrip_cache_and_errors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    table = distill(VOCAB, lambda ids: OUTPUTS[ids], dim=3, weighting="none")
    path = save_table(table, tmp_path / "t.npz")
    back = load_table(path)
    assert back.vocab == VOCAB and back.info == table.info
    np.testing.assert_array_equal(back.vectors, table.vectors)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.npz"]  # no temporary file left
    emb = build_embeddings(f"distilled:{path}", [])
    assert emb.kind == "wordpiece" and emb.vocab == VOCAB and emb.source == f"distilled:{path}"
    np.testing.assert_array_equal(emb.vectors, table.vectors)
    # the cache: "distilled" reads QAINDEX_CACHE/minilm-distilled-<dim>-<weighting>.npz when present
    monkeypatch.setenv("QAINDEX_CACHE", str(tmp_path / "cache"))
    save_table(table, tmp_path / "cache" / "minilm-distilled-128-zipf.npz")
    assert load_distilled("distilled", dim=128, weighting="zipf").vocab == VOCAB
    with pytest.raises(EmbeddingsError, match=r"nope.npz: no such distilled table; omit the path to distil MiniLM"):
        load_table(tmp_path / "nope.npz")
    bad = tmp_path / "bad.npz"
    bad.write_bytes(b"not a zip")
    with pytest.raises(EmbeddingsError, match=r"bad.npz: not a distilled table .*delete it and distil again"):
        load_table(bad)


@pytest.mark.parametrize("geometry", ["cosine", "poincare"])
def test_exported_table_model_is_the_sum_of_rows(tmp_path: Path, geometry: str) -> None:
    table = distill(VOCAB, lambda ids: OUTPUTS[ids], dim=3, weighting="zipf")
    model = Model.load(export_table_model(table, tmp_path / geometry, geometry=geometry, name="t"))
    v = model.encode(["alpha gamma gamma", "delta"], role="answer")
    want = np.stack([table.vectors[2] + 2 * table.vectors[4], table.vectors[5]])
    cos = (v * want).sum(1) / (np.linalg.norm(v, axis=1) * np.linalg.norm(want, axis=1))
    np.testing.assert_allclose(cos, 1.0, atol=1e-5)
    if geometry == "poincare":  # every non-empty text on the clip sphere: Poincaré order = cosine order
        np.testing.assert_allclose(np.linalg.norm(v, axis=1), 0.999, atol=1e-6)
    assert model.name == "t" and model.geometry == geometry


def test_pseudo_questions_are_cut_from_the_answer() -> None:
    rng = np.random.default_rng(0)
    text = "Open the settings page. Choose reset password there. A link arrives by email within minutes."
    qs = pseudo_questions(text, rng, 40)
    sentences = {"Open the settings page.", "Choose reset password there.", "A link arrives by email within minutes."}
    assert any(q in sentences for q in qs)  # whole sentences ...
    assert any(q not in sentences for q in qs)  # ... and spans
    assert all(q in text and 3 <= len(q.split()) <= 12 for q in qs)
    assert pseudo_questions("just two", rng, 2) == ["just two", "just two"]


# -- training without labels on a planted task ---------------------------------------------

CONTENT = [f"c{i}" for i in range(24)]
STOP = [f"s{i}" for i in range(4)]


def planted() -> tuple[Embeddings, list[str], object]:
    """The student's frozen table is random and dominated by stopwords; the teacher ignores
    stopwords and sees each content word as a random direction. Answers mix 3 content words
    with 6 stopwords, so an untrained head ranks mostly by stopwords."""
    vocab = ["[PAD]", "[UNK]", *STOP, *CONTENT]
    table, answers, teacher = planted_teacher_task(vocab, CONTENT, STOP, width=32, filler_scale=6.0)
    return Embeddings(vocab, table, "word", "planted", found=len(vocab)), answers, teacher


def test_training_without_labels_improves_a_planted_task() -> None:
    embeddings, answers, teacher = planted()
    config = TrainConfig(
        model="hyperqa", ball="clip", dim=64, epochs=15, batch_size=16, lr=0.02, optimizer="adam", seed=0, threads=1
    )
    result = train_unlabelled(config, answers, teacher, embeddings=embeddings, log=None, dev_candidates=40)  # type: ignore[arg-type]
    before = result.history[0]["dev_map"]
    assert result.history[0]["epoch"] == 0 and result.best_epoch > 0
    assert result.dev["map"] > before + 0.15, (before, result.dev["map"])
    # the head's width is config.dim and the table stayed frozen
    assert result.model.encoder.dim == 64 and not result.model.encoder.embedding.requires_grad
    np.testing.assert_array_equal(result.model.encoder.embedding.detach().numpy(), embeddings.vectors)
    assert result.data["train"]["labels"] is None and result.data["train"]["answers"] == len(set(answers))


def test_training_without_labels_needs_two_answers_and_a_table() -> None:
    embeddings, _, teacher = planted()
    with pytest.raises(ValueError, match="at least two distinct non-empty answers"):
        train_unlabelled(TrainConfig(), ["same", "same", " "], teacher, embeddings=embeddings, log=None)  # type: ignore[arg-type]
    empty = Embeddings(embeddings.vocab, None, "word", "none")
    with pytest.raises(ValueError, match="needs a pretrained table"):
        train_unlabelled(TrainConfig(), ["a b", "c d"], teacher, embeddings=empty, log=None)  # type: ignore[arg-type]


# -- the CLI ----------------------------------------------------------------------------------


@pytest.mark.slow  # a minute of training on two cores: CI runs it (QAINDEX_SLOW=1)
def test_cli_train_with_teacher_on_answers_only(tmp_path: Path) -> None:
    """`qaindex train CORPUS --teacher minilm` on a corpus without any question (real MiniLM
    teacher, a small distilled table from a file so no distillation runs here)."""
    pytest.importorskip("sentence_transformers")
    from qaindex_export.embeddings.spec import load_minilm

    try:
        minilm = load_minilm()
    except Exception as exc:  # noqa: BLE001 - the offline package is optional
        pytest.skip(f"MiniLM package unavailable: {exc}")
    corpus = tmp_path / "answers.jsonl"
    answers = [
        "Open settings and choose reset password to get a reset link by email.",
        "Refunds are paid within 14 days of a cancelled order.",
        "Export notes as Markdown or PDF from the file menu.",
        "Two-factor login uses an authenticator app on your phone.",
        "Sync runs every five minutes while the app is open.",
        "Delete your account from the privacy page; data is removed after 30 days.",
    ]
    corpus.write_text("".join(json.dumps({"id": i, "answer": a}) + "\n" for i, a in enumerate(answers)))
    rng = np.random.default_rng(0)
    table = DistilledTable(minilm.vocab, rng.normal(size=(len(minilm.vocab), 8)).astype(np.float32), {"dim": 8})
    table_path = save_table(table, tmp_path / "table.npz")
    runner = CliRunner()
    out = tmp_path / "model"
    res = runner.invoke(
        main,
        ["train", str(corpus), "--teacher", "minilm", "--embeddings", f"distilled:{table_path}", "--out", str(out),
         "--epochs", "2", "--model", "cosineqa", "--dim", "16", "--quiet"],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    summary = json.loads(res.stdout)
    assert summary["parameters"]["exported_table"]["dim"] == 16
    # the ONNX model is evaluated on the held-out pseudo-questions too
    assert summary["dev_onnx"]["map"] == pytest.approx(summary["dev"]["map"], abs=1e-4)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["training"]["config"]["embeddings"] == f"distilled:{table_path}"
    assert manifest["training"]["data"]["train"]["labels"] is None
    config = manifest["training"]["config"]  # the default model's recipe, --epochs given wins
    assert (config["lr"], config["optimizer"], config["batch_size"], config["epochs"]) == (0.02, "adam", 64, 2)
    assert Model.load(out).encode(["reset my password"], role="question").shape == (1, 16)
    # calibrated on the teacher's judgements of held-out pseudo-questions
    calibration = json.loads((out / "manifest.json").read_text())["calibration"]
    assert summary["calibration"]["calibrated"] and calibration["labels"].startswith("teacher: all-MiniLM-L6-v2")
    # and on the built-in off-topic questions as not relevant (those the teacher finds answered left out)
    assert calibration["offtopic"]["data"].startswith("built-in off-topic questions (fit split)")
    assert 0 < calibration["offtopic"]["questions"] <= 114
    if tokenizer_available():  # no labelled question: the fusion is fitted on the example FAQ alone
        fusion = json.loads((out / "manifest.json").read_text())["fusion"]
        assert fusion["fitted_on"] == ["example FAQ (qaindex/eval/data/faq.jsonl)"]
        # the hybrid score fit is stored where it converged (a diverged one, a weight outside
        # qaindex.store.field_ranges.FUSED_SCORE, is left out and the model loads)
        assert fusion.get("fused_score") == calibration.get("hybrid", {}).get("fused_score")
        # fitted on labelled questions written like a user's (the example FAQ's, as the fusion),
        # not on the teacher's pseudo-questions
        assert calibration["hybrid"]["data"] == fusion["fitted_on"][0]
    # without --teacher the same corpus cannot train: it has no question
    res = runner.invoke(main, ["train", str(corpus), "--out", str(tmp_path / "m2"), "--quiet"])
    assert res.exit_code == 1 and "no questions found" in res.output


def test_cli_train_with_teacher_and_questions_runs_the_hinge_training(tmp_path: Path) -> None:
    """With questions in the corpus, --teacher keeps the supervised hinge training, on the distilled table."""
    corpus = tmp_path / "faq.jsonl"
    rows = [
        {"id": "reset", "answer": "open settings and choose reset password", "questions": ["reset my password"]},
        {"id": "refund", "answer": "refunds are paid within fourteen days", "questions": ["can I get a refund"]},
        {"id": "export", "answer": "export notes as markdown from the file menu", "questions": ["export notes"]},
        {"id": "sync", "answer": "sync runs every five minutes", "questions": ["how often does sync run"]},
    ]
    corpus.write_text("".join(json.dumps(r) + "\n" for r in rows))
    vocab = ["[PAD]", "[UNK]", *sorted({w for r in rows for t in [r["answer"], *r["questions"]] for w in t.split()})]
    table = DistilledTable(vocab, np.random.default_rng(1).normal(size=(len(vocab), 6)).astype(np.float32))
    table_path = save_table(table, tmp_path / "table.npz")
    out = tmp_path / "model"
    res = CliRunner().invoke(
        main,
        ["train", str(corpus), "--teacher", "minilm", "--embeddings", f"distilled:{table_path}", "--out", str(out),
         "--epochs", "2", "--dim", "8", "--ball", "clip", "--quiet"],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    training = json.loads((out / "manifest.json").read_text())["training"]
    assert training["config"]["embeddings"] == f"distilled:{table_path}"
    assert training["loss"].startswith("mean over triples of max(0, margin")
    assert training["data"]["train"]["questions"] > 0

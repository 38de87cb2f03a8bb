"""The built-in default model ships with the package and serves the README quickstart."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from qaindex import Model, Ranker
from qaindex.cli import main
from qaindex.model import DEFAULT_MODEL_DIR

ROOT = Path(__file__).resolve().parents[1]


def test_default_model_is_small_documented_and_loads() -> None:
    files = [p for p in DEFAULT_MODEL_DIR.iterdir() if p.is_file()]
    assert sum(p.stat().st_size for p in files) <= 20_000_000
    card = (DEFAULT_MODEL_DIR / "MODEL_CARD.md").read_text()
    assert "research use only" in card.lower() and "benchmarks/default_model.py" in card
    model = Model.load()  # the default, checksums verified
    assert model.geometry == "poincare" and model.max_norm == pytest.approx(0.999)
    assert model.manifest["score"]["higher_is_better"] is True
    v = model.encode(["", "🙂", "What is the capital of France?"], role="question")
    assert v.shape == (3, model.dimension)
    assert float((v**2).sum(axis=1).max()) <= 0.999**2 * (1 + 1e-6)


def test_quickstart_commands(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    runner = CliRunner()
    res = runner.invoke(main, ["build", str(ROOT / "examples" / "faq.jsonl")])
    assert res.exit_code == 0, res.output
    assert res.stdout.startswith("indexed 289 answers into qaindex-index: dimension 300, flat index, model hyperqa-default")
    res = runner.invoke(main, ["search", "How do I reset my password?", "-k", "3", "--json"])
    assert res.exit_code == 0, res.output
    ids = [h["id"] for h in json.loads(res.stdout)["hits"]]
    assert "account-reset-password" in ids


def test_default_model_finds_faq_answers_far_above_chance() -> None:
    ranker = Ranker.build(ROOT / "examples" / "faq.jsonl")
    report = ranker.recall(10)
    # flat search is exact: the coarse stage finds every true neighbour, and the final
    # top 10 differs from float64 only where float32 scores of neighbours tie
    assert report["coarse_recall"] == 1.0 and report["recall"] >= 0.999
    questions = [(q, r.id) for r in ranker.records() for q in r.questions]
    results = ranker.search_batch([q for q, _ in questions], k=10)
    top10 = sum(rid in [h.id for h in hits] for (_, rid), hits in zip(questions, results, strict=True))
    # chance puts the right answer in the top 10 for 10/289 = 3.5% of the questions
    assert top10 / len(questions) > 0.5

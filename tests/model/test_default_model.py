"""The built-in default model ships with the package and serves the README quickstart.

Golden values pin the shipped weights: regenerating the model (``python
tools/build_default_model.py``) must update them on purpose.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from qaindex import Model, Ranker
from qaindex.cli import main
from qaindex.model import DEFAULT_MODEL_DIR

ROOT = Path(__file__).resolve().parents[2]
GOLDEN_TEXTS = ["How do I reset my password?", "Refunds are paid within 14 days.", "🙂"]
# the first 4 coordinates of each text's (question-role) vector, and its norm, rounded to 4 places
GOLDEN_VECTORS = [[-0.0735, 0.0086, -0.1661, -0.029], [-0.082, -0.0229, -0.0758, 0.0012], [0.0, 0.0, 0.0, 0.0]]
# Poincaré `lognorm` ball map: the radius grows with the text's evidence; an emoji has none (the centre)
GOLDEN_NORMS = [0.5903, 0.6803, 0.0]
GOLDEN_HITS = {
    "How do I reset my password?": [
        "account-reset-password",
        "account-change-password",
        "security-too-many-login-attempts",
    ],
    "how do I export to pdf": ["export-pdf", "export-all-notes", "export-mobile"],
    "can I get a refund": ["billing-refund-policy", "billing-eu-withdrawal-right", "security-2fa-account-recovery"],
    "sign up": ["account-create", "teams-enforce-2fa", "security-passkey-sign-in"],
}


@pytest.fixture(scope="module")
def faq_ranker() -> Ranker:
    return Ranker.build(ROOT / "examples" / "faq.jsonl", hybrid=False, question_keys=False)  # the model's own ranking


def test_default_model_is_small_permissive_and_documented() -> None:
    files = [p for p in DEFAULT_MODEL_DIR.iterdir() if p.is_file()]
    assert sum(p.stat().st_size for p in files) <= 25_000_000
    card = (DEFAULT_MODEL_DIR / "MODEL_CARD.md").read_text()
    assert "Apache-2.0" in card and "python -m tools.build_default_model" in card
    # every training source is listed with its licence
    for source, licence in (("wordnet", "WordNet 3.0 licence"), ("medquad", "CC-BY 4.0"), ("pydoc", "PSF License")):
        assert f"**{source}**" in card and licence in card
    model = Model.load()  # the default, checksums verified
    # nothing in the provenance points at the research-only datasets or the example FAQ
    provenance = json.dumps(model.manifest["training"]).lower()
    assert "wikiqa" not in provenance and "trecqa" not in provenance and "faq.jsonl" not in provenance
    assert model.manifest["geometry"]["ball_map"] == "lognorm" and model.manifest["geometry"]["ranking"] == "relative"
    assert model.manifest["score"]["higher_is_better"] is True
    v = model.encode(["", "🙂", "What is the capital of France?"], role="question")
    assert v.shape == (3, model.dimension)
    if model.geometry == "poincare":
        assert float((v**2).sum(axis=1).max()) <= model.max_norm**2 * (1 + 1e-6)


def test_golden_vectors() -> None:
    v = Model.load().encode(GOLDEN_TEXTS, role="question")
    np.testing.assert_allclose(v[:, :4], GOLDEN_VECTORS, atol=2e-4)
    np.testing.assert_allclose(np.linalg.norm(v, axis=1), GOLDEN_NORMS, atol=2e-4)


def test_golden_top_hits(faq_ranker: Ranker) -> None:
    got = {q: [h.id for h in faq_ranker.search(q, k=3)] for q in GOLDEN_HITS}
    assert got == GOLDEN_HITS


def test_default_model_is_calibrated_on_permissive_data_only() -> None:
    manifest = Model.load().manifest
    calibration = manifest["calibration"]
    # the labelled questions of examples/faq.jsonl and the built-in off-topic questions: written for this project
    assert calibration["method"] == "platt" and calibration["labels"] == "labelled"
    assert calibration["data"].startswith("examples/faq.jsonl")
    assert calibration["offtopic"]["data"] == "built-in off-topic questions (fit split)"
    # hybrid hits are calibrated on their fused value, fitted on the same data
    assert manifest["fusion"]["fused_score"] == calibration["hybrid"]["fused_score"]
    assert Model.load().calibration.calibrated


def test_quickstart_commands(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    runner = CliRunner()
    res = runner.invoke(main, ["build", str(ROOT / "examples" / "faq.jsonl")])
    assert res.exit_code == 0, res.output
    model = Model.load()
    assert res.stdout.startswith(
        f"indexed 289 answers into qaindex-index: dimension {model.dimension}, flat index, model {model.name}"
    )
    res = runner.invoke(main, ["search", "How do I reset my password?", "-k", "3", "--json"])
    assert res.exit_code == 0, res.output
    ids = [h["id"] for h in json.loads(res.stdout)["hits"]]
    assert ids[0] == "account-reset-password"


def test_default_model_finds_faq_answers_far_above_chance(faq_ranker: Ranker) -> None:
    report = faq_ranker.recall(10)
    # flat search is exact: the coarse stage finds every true neighbour, and the final
    # top 10 differs from float64 only where float32 scores of neighbours tie
    assert report["coarse_recall"] == 1.0 and report["recall"] >= 0.999
    questions = [(q, r.id) for r in faq_ranker.records() for q in r.questions]
    results = faq_ranker.search_batch([q for q, _ in questions], k=10)
    top10 = sum(rid in [h.id for h in hits] for (_, rid), hits in zip(questions, results, strict=True))
    # chance puts the right answer in the top 10 for 10/289 = 3.5% of the questions
    assert top10 / len(questions) > 0.5


def test_junk_answers_never_reach_the_faq_top_10() -> None:

    from benchmarks.quality.pooled_eval import JUNK_ANSWERS

    records = [json.loads(line) for line in (ROOT / "examples" / "faq.jsonl").read_text().splitlines()]
    junk = [{"id": f"junk-{i}", "answer": text} for i, text in enumerate(JUNK_ANSWERS)]
    ranker = Ranker.build([*records, *junk], index_kind="flat")
    questions = [q for r in records for q in r["questions"]]
    hits = ranker.search_batch(questions, k=10)
    assert not [q for q, top in zip(questions, hits, strict=True) if any(h.id.startswith("junk-") for h in top)]
    # junk carries no evidence: it sits at the centre, real answers away from it
    norms = np.linalg.norm(Model.load().encode(JUNK_ANSWERS, role="answer"), axis=1)
    assert float(norms.max()) < 1e-6


def test_answers_are_isotropic_and_their_norms_spread() -> None:
    model = Model.load()
    answers = [json.loads(line)["answer"] for line in (ROOT / "examples" / "faq.jsonl").read_text().splitlines()]
    v = model.encode(answers, role="answer").astype(np.float64)
    norms = np.linalg.norm(v, axis=1)
    unit = v / norms[:, None]
    gram = unit @ unit.T
    n = len(unit)
    assert (gram.sum() - np.trace(gram)) / (n * (n - 1)) <= 0.3  # no narrow cone
    assert norms.std() > 0.005  # norms vary with the evidence (0.009 here; every corpus: MODEL_CARD.md)
    words = np.array([len(a.split()) for a in answers])
    assert norms[words >= np.median(words)].mean() > norms[words < np.median(words)].mean()

"""The trust benchmark (benchmarks/quality/trust.py) on a tiny corpus: its figures against brute force."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from benchmarks.quality import trust
from qaindex.model import Model


def _corpus(folder: Path, answers: list[tuple[str, str]], questions: list[tuple[str, list[str]]]) -> None:
    folder.mkdir(parents=True)
    (folder / "answers.jsonl").write_text("".join(json.dumps({"id": i, "answer": a}) + "\n" for i, a in answers))
    (folder / "questions.jsonl").write_text(
        "".join(json.dumps({"question": q, "answers": ids}) + "\n" for q, ids in questions)
    )
    (folder / "meta.json").write_text("{}")


def test_measure_agrees_with_the_searches_it_summarises(faq_model: Path) -> None:
    pytest.importorskip("Stemmer")
    from qaindex import Ranker
    from qaindex.ranker import Record

    model = Model.load(faq_model)
    answers = ["Refunds are paid within 30 days.", "Reset your password from the sign-in page.", "Export notes as PDF."]
    questions = ["refund days", "reset password", "export pdf"]
    relevant = [np.array([0]), np.array([1]), np.array([2])]
    got = trust.measure(model, answers, questions, relevant, ["what is the capital of france"])
    ranker = Ranker.build([Record(str(i), a) for i, a in enumerate(answers)], model=model, hybrid=True)
    hybrid = [ranker.search(q, k=trust.K, hybrid=True) for q in questions]
    dense = [ranker.search(q, k=trust.K, hybrid=False) for q in questions]

    def mrr(runs: list[list]) -> float:  # type: ignore[type-arg]
        ranks = [
            next((1 / (i + 1) for i, h in enumerate(hits) if h.row == rel[0]), 0.0)
            for hits, rel in zip(runs, relevant, strict=True)
        ]
        return float(np.mean(ranks))

    assert got["mrr_hybrid"] == pytest.approx(mrr(hybrid))
    assert got["mrr_dense"] == pytest.approx(mrr(dense))
    assert got["order_hybrid"] == 1.0 and got["top_hit_same_k1_k10"] == 1.0
    correct = [h[0] for h, rel in zip(hybrid, relevant, strict=True) if h and h[0].row == rel[0]]
    assert got["correct_top_hits"] == len(correct)
    assert got["offtopic_questions"] == 1
    assert got["first_hit_score"] == pytest.approx(np.mean([h[0].score for h in hybrid]))
    off_top = ranker.search("what is the capital of france", k=1, hybrid=True)
    for t, (kept, refused) in got["sweep"].items():  # each threshold counted from the hits themselves
        assert kept == (np.mean([h.score >= float(t) for h in correct]) if correct else kept)
        assert refused == float(not off_top or off_top[0].score < float(t))
    assert got["sweep"][str(trust.THRESHOLD)] == (got["kept"], got["refused"]) or not correct


def test_run_and_table_mark_the_missed_targets(faq_model: Path, tmp_path: Path) -> None:
    pytest.importorskip("Stemmer")
    pytest.importorskip("bm25s")
    _corpus(
        tmp_path / "product-faq",
        [("a", "Refunds are paid within 30 days."), ("b", "Reset your password from the sign-in page.")],
        [("refund days", ["a"]), ("reset password", ["b"])],
    )
    _corpus(tmp_path / "wikiqa", [("w", "Paris is the capital of France.")], [("capital of france", ["w"])])
    out = trust.run(tmp_path, [f"tiny={faq_model}"], ["product-faq"])
    row = out["results"]["tiny"]["product-faq"]
    assert row["offtopic_from"] == "wikiqa" and row["offtopic_questions"] == 1
    assert row["fusion_loss"] == pytest.approx(max(row["mrr_dense"], row["mrr_bm25"]) - row["mrr_hybrid"])
    table = trust.table_markdown(out)
    line = next(s for s in table.splitlines() if s.startswith("| tiny | product-faq |"))
    cells = [c.strip() for c in line.strip("|").split("|")]
    assert cells[5].endswith("✗") == (row["fusion_loss"] > trust.FUSION_LOSS_TARGET)
    kept = "–" if np.isnan(row["kept"]) else f"{row['kept']:.3f}" + (" ✗" if row["kept"] < trust.KEPT_TARGET else "")
    assert cells[8] == f"{row['first_hit_right']:.3f}" and row["first_hit_right"] == row["correct_top_hits"] / 2
    assert cells[10] == kept and cells[9] == f"{row['first_hit_score']:.3f}"
    own = [row["kept_calibrated_here"], row["refused_calibrated_here"]]  # half B's right first hits; off-topic
    assert all(np.isnan(v) or 0 <= v <= 1 for v in own) and cells[-1].count(" / ") == 1
    # a model per corpus ({corpus} in its directory): here the same model, so the same figures
    import shutil

    shutil.copytree(faq_model, tmp_path / "per-corpus" / "product-faq")
    each = trust.run(tmp_path, [f"each={tmp_path / 'per-corpus' / trust.CORPUS_FIELD}"], ["product-faq"])
    assert each["results"]["each"]["product-faq"]["mrr_hybrid"] == row["mrr_hybrid"]
    sweep = [s for s in trust.sweep_markdown(out).splitlines() if s.startswith("| tiny |")]
    assert len(sweep) == len(trust.SWEEP)  # one row per threshold, both targets counted
    for line in sweep:
        cells = [c.strip() for c in line.strip("|").split("|")]
        kept, refused = row["sweep"][cells[1]]
        met = kept >= trust.KEPT_TARGET and refused >= trust.REFUSED_TARGET
        assert cells[2] == f"{kept:.2f} / {refused:.2f}" + (" ✓" if met else "") and cells[3] == f"{int(met)} of 1"


def test_separation_against_brute_force() -> None:
    rng = np.random.default_rng(3)
    for _ in range(50):
        correct = rng.integers(0, 20, size=rng.integers(1, 15)) / 20
        off = rng.integers(0, 20, size=rng.integers(1, 25)) / 20
        auc, best = trust.separation(correct.tolist(), off.tolist())
        pairs = [(c > o) + 0.5 * (c == o) for c in correct for o in off]
        assert auc == pytest.approx(np.mean(pairs))
        # every threshold that refuses at least REFUSED_TARGET of the off-topic questions
        cands = [t for t in [*correct, *off, 2.0] if np.mean(off < t) >= trust.REFUSED_TARGET]
        assert best == pytest.approx(max(np.mean(correct >= t) for t in cands))
    assert np.isnan(trust.separation([], [0.1])[0])

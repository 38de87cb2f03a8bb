"""The passages benchmark (benchmarks/quality/passages.py) on a tiny corpus: its figures against the searches."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.quality import passages
from qaindex.key_index import passages as key_passages
from qaindex.model import Model

LONG = "reset password link email " * 30  # 120 words


def test_run_measures_each_setting_and_the_table_marks_the_best(faq_model: Path, tmp_path: Path) -> None:
    pytest.importorskip("Stemmer")
    pytest.importorskip("bm25s")
    folder = tmp_path / "aws-docs"
    folder.mkdir()
    answers = [("a", LONG + "refund within days"), ("b", "Export notes as Markdown from the file menu.")]
    (folder / "answers.jsonl").write_text("".join(json.dumps({"id": i, "answer": a}) + "\n" for i, a in answers))
    questions = [("refund days", ["a"]), ("export notes", ["b"])]
    (folder / "questions.jsonl").write_text(
        "".join(json.dumps({"question": q, "answers": r}) + "\n" for q, r in questions)
    )
    (folder / "meta.json").write_text("{}")
    model = Model.load(faq_model)
    assert passages.settings(model, (32, 64)) == [("none", 0), ("64 (auto)", 64), ("32", 32)]
    out = passages.run(tmp_path, [f"tiny={faq_model}"], ["aws-docs"], (32,))
    rows = out["results"]["tiny"]["aws-docs"]["settings"]
    assert list(rows) == ["none", "64 (auto)", "32"]
    assert rows["none"]["passage_keys"] == 0
    assert rows["64 (auto)"]["passage_keys"] == len(key_passages(LONG + "refund within days", 64))
    assert rows["32"]["passage_keys"] > rows["64 (auto)"]["passage_keys"]
    for row in rows.values():
        assert 0 <= row["mrr_dense"] <= 1 and 0 <= row["mrr_hybrid"] <= 1
    table = passages.table_markdown(out).splitlines()
    mine = [line for line in table if line.startswith("| tiny | aws-docs |")]
    best = max(r["mrr_hybrid"] for r in rows.values())
    assert len(mine) == 3 and all(("**" in line) == (f"**{best:.3f}**" in line) for line in mine)
    assert any(f"**{best:.3f}**" in line for line in mine)

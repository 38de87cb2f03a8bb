"""The long-answer substitute for the HRDE-LTC paper's tests: 1-in-10 groups, document-disjoint splits."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from benchmarks.quality import long_answers
from qaindex.eval.datasets import read_labelled


def medquad(root: Path, documents: int = 120) -> Path:
    folder = root / "1_Test_QA"
    folder.mkdir(parents=True)
    for d in range(documents):
        pairs = "".join(
            f'<QAPair pid="{i}"><Question qid="{d}-{i}">What is topic {d} question {i} ?</Question>'
            f"<Answer>Topic {d} answer {i}. It has two sentences about {d}.</Answer></QAPair>"
            for i in range(1 + d % 6)
        )
        # a question without an answer (as the MedlinePlus subsets) is skipped
        pairs += f'<QAPair pid="x"><Question qid="{d}-x">Unanswered {d} ?</Question><Answer></Answer></QAPair>'
        (folder / f"{d:04d}.xml").write_text(
            f'<?xml version="1.0"?><Document id="{d}"><QAPairs>{pairs}</QAPairs></Document>'
        )
    return root


def test_every_question_ranks_its_answer_among_ten_with_topic_negatives(tmp_path: Path) -> None:
    counts = long_answers.build_splits(medquad(tmp_path / "m"), tmp_path / "out")
    docs_of: dict[str, set[str]] = {}
    for split in ("train", "dev", "test"):
        groups = read_labelled(tmp_path / "out" / f"{split}.jsonl")
        assert len(groups) == counts[split] > 0
        for g in groups:
            assert len(g.candidates) == long_answers.CANDIDATES
            assert [c.aid for c in g.candidates if c.label == 1] == [g.qid]
            texts = [c.answer for c in g.candidates]
            assert len(set(texts)) == len(texts)
            doc = g.qid.split("#")[0]
            same = [c for c in g.candidates if c.aid.split("#")[0] == doc and c.label == 0]
            others_in_doc = 1 + int(doc.rsplit("/", 1)[1]) % 6 - 1
            assert len(same) == min(long_answers.SAME_TOPIC, others_in_doc)
            docs_of.setdefault(split, set()).update(c.aid.split("#")[0] for c in g.candidates)
    # a document's questions and answers stay in one split
    assert not docs_of["train"] & docs_of["test"] and not docs_of["dev"] & docs_of["test"]
    assert not docs_of["train"] & docs_of["dev"]
    assert sum(counts.values()) == sum(1 + d % 6 for d in range(120))


def test_splits_are_deterministic_and_train_can_be_sampled(tmp_path: Path) -> None:
    root = medquad(tmp_path / "m")
    long_answers.build_splits(root, tmp_path / "a")
    long_answers.build_splits(root, tmp_path / "b")
    for split in ("train", "dev", "test"):
        assert (tmp_path / "a" / f"{split}.jsonl").read_bytes() == (tmp_path / "b" / f"{split}.jsonl").read_bytes()
    counts = long_answers.build_splits(root, tmp_path / "c", train_questions=50)
    assert counts["train"] == len(read_labelled(tmp_path / "c" / "train.jsonl")) == 50


def test_a_split_too_small_for_ten_candidates_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="too few for 1 in 10"):
        long_answers.build_splits(medquad(tmp_path / "m", documents=6), tmp_path / "out")


def test_an_answer_that_restates_its_question_loses_that_sentence(tmp_path: Path) -> None:
    folder = tmp_path / "2_GARD_QA"
    folder.mkdir()
    (folder / "0001.xml").write_text(
        '<Document><QAPairs><QAPair pid="1"><Question qid="1">What causes X ?</Question>'
        "<Answer>What causes X? X is caused by a change in the Y gene. It is inherited.</Answer></QAPair>"
        '<QAPair pid="2"><Question qid="2">Is X inherited ?</Question>'
        "<Answer>Is X inherited? Yes. Both parents carry it.</Answer></QAPair></QAPairs></Document>"
    )
    pairs = dict(next(long_answers.documents(tmp_path))[1])
    assert pairs == {
        "What causes X ?": "X is caused by a change in the Y gene. It is inherited.",
        "Is X inherited ?": "Yes. Both parents carry it.",
    }
    assert long_answers.answer_text("Summary : X is a disease. What is Y? Y is not X.") == (
        "Summary : X is a disease. What is Y? Y is not X."
    )


def test_documents_split_by_hash_in_the_stated_shares() -> None:
    shares = Counter(long_answers.split_of(f"x/{i}") for i in range(20_000))
    assert shares["train"] / 20_000 == pytest.approx(0.8, abs=0.01)
    assert shares["dev"] / 20_000 == pytest.approx(0.1, abs=0.01)


def run(model: str, seed: int, r1: float, epochs: int = 12) -> dict[str, Any]:
    test = {"r@1": r1, "r@2": r1 + 0.1, "r@5": r1 + 0.3, "map": r1 + 0.05, "mrr": r1 + 0.05}
    return {"model": model, "seed": seed, "test": test, "best_epoch": 3, "train_seconds_per_epoch": 40.0 + seed,
            "config": {"epochs": epochs}}  # fmt: skip


def test_table_states_each_claim_from_seed_means() -> None:
    results = {
        "questions": {"train": 4000, "dev": 1711, "test": 1680},
        "runs": [run("rde", 0, 0.50), run("rde", 1, 0.52), run("hrde", 0, 0.55), run("hrde", 1, 0.49),
                 run("rde-ltc", 0, 0.40), run("hrde-ltc", 0, 0.45)],
        "references": {"bm25": {"r@1": 0.386, "r@2": 0.593, "r@5": 0.944, "map": 0.593, "mrr": 0.593}},
    }  # fmt: skip
    text = long_answers.render(results)
    assert "| rde | 0.510 ± 0.014 | 0.610 ± 0.014 | 0.810 ± 0.014 |" in text
    assert "| BM25 (reference) | 0.386 | 0.593 | 0.944 | 0.593 | 0.593 | — | — | — |" in text
    assert "- HRDE > RDE: holds (0.520 vs 0.510)" in text
    assert "- RDE-LTC > RDE: does not hold (0.400 vs 0.510)" in text
    assert "4,000 train, 1,711 dev, 1,680 test" in text
    assert "trains for at most 12 epochs, stopping at the first epoch without a better dev MAP" in text
    json.dumps(results)  # the results stay plain JSON


def test_table_names_every_epoch_budget_of_its_runs() -> None:
    results = {"questions": {"test": 10}, "runs": [run("rde", 0, 0.5, epochs=12), run("hrde", 0, 0.5, epochs=5)]}
    assert "trains for at most 5/12 epochs" in long_answers.render(results)


@pytest.mark.parametrize("relative", [True, False])
def test_report_goes_to_the_docs_table_only_for_the_main_runs_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, relative: bool
) -> None:
    main_runs, side_runs = tmp_path / "results" / "long_answers.json", tmp_path / "side.json"
    main_runs.parent.mkdir()
    for path in (main_runs, side_runs):
        path.write_text(json.dumps({"questions": {"test": 10}, "runs": [run("rde", 0, 0.5)]}))
    monkeypatch.setattr(long_answers, "RESULTS", main_runs)
    monkeypatch.setattr(long_answers, "TABLE", tmp_path / "docs-table.md")
    monkeypatch.chdir(tmp_path)
    # the main runs file, named relatively or absolutely, rewrites the docs table
    long_answers.main(["--report-only", "--json", "results/long_answers.json" if relative else str(main_runs)])
    assert (tmp_path / "docs-table.md").is_file() and not (tmp_path / "results" / "long_answers.md").exists()
    # a side runs file gets its table beside it and leaves the docs table alone
    (tmp_path / "docs-table.md").unlink()
    long_answers.main(["--report-only", "--json", "side.json" if relative else str(side_runs)])
    assert (tmp_path / "side.md").is_file() and not (tmp_path / "docs-table.md").exists()


def test_a_variant_report_draws_every_variant_of_the_sweeps_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    main_runs = tmp_path / "long_answers.json"
    monkeypatch.setattr(long_answers, "RESULTS", main_runs)
    monkeypatch.setattr(long_answers, "TABLE", tmp_path / "docs-table.md")
    sweeps = {
        name: {"questions": {"test": 10}, "runs": [run("rde", 0, score)]} for name, score in (("b", 0.4), ("a", 0.6))
    }
    (tmp_path / "long_answers_sweeps.json").write_text(json.dumps(sweeps))
    assert long_answers.main(["--report-only", "--variant", "a"]) == 0
    table = (tmp_path / "long_answers_sweeps.md").read_text()
    assert table.index("\n# a\n") < table.index("\n# b\n")
    assert long_answers.render(sweeps["a"]).split("\n", 1)[1].strip() in table
    assert not (tmp_path / "docs-table.md").exists() and not main_runs.exists()  # the main table stays as it was

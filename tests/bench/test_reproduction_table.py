"""The reproduction table and its Table-7 summary are rendered correctly from a results file."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]

from benchmarks import reproduce  # noqa: E402


def run(model: str, seed: int, test_map: float, *, seconds: float, trainable: int, size: int) -> dict[str, Any]:
    return {
        "dataset": "wikiqa",
        "model": model,
        "seed": seed,
        "test": {"map": test_map, "mrr": test_map + 0.01, "p@1": test_map - 0.1, "questions": 237},
        "train_seconds_per_epoch": seconds,
        "parameters": {"trainable": trainable, "total": trainable + 1000},
        "model_bytes": size,
        "config": {"epochs": 8, "ranking": "distance"},
    }


RUNS = [
    run("hyperqa", 0, 0.70, seconds=0.5, trainable=100, size=1_000_000),
    run("hyperqa", 1, 0.72, seconds=0.7, trainable=100, size=1_000_000),
    run("qa-cnn", 0, 0.651, seconds=60.0, trainable=500, size=3_000_000),
    run("qa-bilstm", 0, 0.600, seconds=300.0, trainable=600, size=3_000_000),
]
LATENCY = {
    "k": 10,
    "repeats": 1,
    "measured": "2026-01-01T00:00:00Z",
    "machine": {"cpus": 2},
    "loadavg": {"before": [1.0, 1.0, 1.0], "after": [1.0, 1.0, 1.0]},
    "rows": [
        {"dataset": "wikiqa", "model": "hyperqa", "p50_ms": 0.5, "model_bytes": 1_000_000},
        {"dataset": "wikiqa", "model": "qa-cnn", "p50_ms": 2.0, "p50_vs_hyperqa": 4.0, "model_bytes": 3_000_000},
    ],
}


def row(markdown: str, model: str) -> list[str]:
    line = next(x for x in markdown.splitlines() if x.startswith(f"| wikiqa | {model} |"))
    return [cell.strip() for cell in line.strip("|").split("|")]


def test_table_means_paper_comparison_and_latency_cells() -> None:
    text = reproduce.table(RUNS, LATENCY)
    header = [cell.strip() for cell in text.splitlines()[0].strip("|").split("|")]
    hyperqa, cnn, bilstm = (dict(zip(header, row(text, m), strict=True)) for m in ("hyperqa", "qa-cnn", "qa-bilstm"))
    assert hyperqa["test MAP"] == "0.710 ± 0.014" and hyperqa["seeds"] == "2"
    assert hyperqa["paper MAP / MRR"] == "0.712 / 0.727" and hyperqa["within 0.02 MAP of paper"] == "yes"
    assert hyperqa["s/epoch (train, best run)"] == "0.50"
    # QA-CNN: paper 0.670, 0.651 is within 0.02; QA-biLSTM: paper 0.656, 0.600 is not
    assert cnn["within 0.02 MAP of paper"] == "yes" and cnn["paper reached (MAP and MRR)"] == "no"
    assert bilstm["within 0.02 MAP of paper"] == "no"
    assert cnn["query p50 ms (× HyperQA)"] == "2.000 (4.0x)" and bilstm["query p50 ms (× HyperQA)"] == "not measured"
    assert cnn["MB on disk"] == "3.0" and cnn["trainable / total params"] == "500 / 1,500"


def test_a_model_without_a_published_number_says_so() -> None:
    text = reproduce.table([{**RUNS[2], "model": "ap-new"}, {**RUNS[2], "model": "hrde"}])
    assert row(text, "ap-new")[8:11] == ["none in the papers' text we have", "—", "—"]
    assert row(text, "hrde")[8:11] == ["none (published on Ubuntu and Samsung QA only)", "—", "—"]


def test_table7_ratios_are_each_model_over_hyperqa() -> None:
    text = reproduce.table7(RUNS, LATENCY)
    # latency 2.0 / 0.5 ms, s/epoch 60 / 0.5, trainable 500 / 100, total 1,500 / 1,100, bytes 3 / 1 MB
    assert row(text, "qa-cnn") == ["wikiqa", "qa-cnn", "4.0x", "120.0x", "5.0x", "1.36x", "3.00x"]
    assert row(text, "qa-bilstm")[2] == "not measured"
    assert not any(line.startswith("| wikiqa | hyperqa |") for line in text.splitlines())


def test_percentiles_of_known_times() -> None:
    p = reproduce._percentiles([i / 1000 for i in range(1, 102)])  # 1..101 ms
    assert p["p50_ms"] == 51.0 and p["p99_ms"] == 100.0 and p["queries"] == 101


def test_render_names_the_latency_run_and_its_load() -> None:
    text = reproduce.render({"runs": RUNS, "latency": LATENCY})
    assert "load average before the run 1.00, 1.00, 1.00 on 2 cores" in text
    assert "## HyperQA against each model" in text
    assert "not measured yet" in reproduce.render({"runs": RUNS})


def test_hyperqa_under_the_papers_distance_is_its_own_row_against_the_paper() -> None:
    relative = [{**r, "config": {"epochs": 25, "ranking": "relative"}} for r in RUNS[:2]]
    distance = [{**r, "model": "hyperqa-distance", "test": {**r["test"], "map": 0.75}} for r in RUNS[:2]]
    text = reproduce.table(relative + distance)
    assert row(text, "hyperqa")[7:9] == ["relative", "0.712 / 0.727"]
    assert row(text, "hyperqa-distance")[2] == "0.750 ± 0.000" and row(text, "hyperqa-distance")[7] == "distance"
    summary = reproduce.readme_body({"runs": relative + distance})
    assert "| wikiqa | 0.710 / 0.720 | 0.750 / 0.720 | not run | 0.712 / 0.727 |" in summary
    assert reproduce.MODEL_SETTINGS["hyperqa-distance"]["ranking"] == "distance"
    assert "ranking" not in reproduce.MODEL_SETTINGS["hyperqa"]  # the shipped default


def test_a_side_runs_file_rewrites_its_own_table_and_never_the_readme_summary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    written: list[str] = []
    monkeypatch.setattr(reproduce, "replace_section", lambda name, body, *a, **k: written.append(name))
    side, md = tmp_path / "side.json", tmp_path / "side.md"
    side.write_text(json.dumps({"runs": RUNS}), encoding="utf-8")
    (tmp_path / "wikiqa").mkdir()  # --report-only reads no dataset, but --data must name a datasets folder
    argv = ["reproduce", "--report-only", "--json", str(side), "--markdown", str(md), "--data", str(tmp_path)]
    monkeypatch.setattr(sys, "argv", argv)
    reproduce.main()
    assert md.read_text(encoding="utf-8") == reproduce.render(json.loads(side.read_text(encoding="utf-8")))
    assert written == []  # README.md's reproduction summary stays the main runs file's
    md.unlink()
    monkeypatch.setattr(sys, "argv", argv[:4] + argv[6:])  # no --markdown: the table goes beside the side file
    reproduce.main()
    assert md.read_text(encoding="utf-8") == reproduce.render(json.loads(side.read_text(encoding="utf-8")))
    assert written == []
    monkeypatch.setattr(sys, "argv", argv)
    monkeypatch.setattr(reproduce, "RESULTS", side)
    reproduce.main()
    assert written == [reproduce.README_SECTION]

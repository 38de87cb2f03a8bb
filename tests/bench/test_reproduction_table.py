"""The reproduction table and its Table-7 summary are rendered correctly from a results file."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]

from benchmarks import common  # noqa: E402
from benchmarks.reproduction import reproduce  # noqa: E402
from qaindex.errors import QAIndexError  # noqa: E402


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


def test_runs_trained_on_a_gpu_say_so() -> None:
    text = reproduce.render({"runs": RUNS, "gpu": "NVIDIA H100 80GB HBM3", "torch": "2.11.0+cu130"})
    assert "training only, on an NVIDIA H100 80GB HBM3 GPU (torch 2.11.0+cu130) (see" in text
    assert "contended cores" not in text
    assert "training only, on 2 contended cores (see" in reproduce.render({"runs": RUNS})


def test_the_table_states_the_machine_of_its_runs_not_the_one_rendering_it(monkeypatch: pytest.MonkeyPatch) -> None:
    results = {"runs": RUNS, "processor": "aarch64", "python": "3.12.1"}
    monkeypatch.setattr(reproduce.platform, "python_version", lambda: "9.9.9")
    monkeypatch.setattr(reproduce.platform, "machine", lambda: "riscv64")
    text = reproduce.render(results)
    assert "which each row ran), aarch64 CPU, Python 3.12.1." in text
    assert "9.9.9" not in text and "riscv64" not in text
    assert "unrecorded CPU, Python unrecorded." in reproduce.render({"runs": RUNS})


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


def labelled(path: Path, groups: dict[str, list[int]]) -> Path:
    rows = [
        {"qid": q, "question": f"q {q}?", "aid": f"{q}-{i}", "answer": f"a {q} {i}", "label": label}
        for q, labels in groups.items()
        for i, label in enumerate(labels)
    ]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def test_two_sided_keeps_exactly_the_questions_with_both_labels(tmp_path: Path) -> None:
    groups = {"1": [1, 0, 0], "2": [1, 1], "3": [0, 0], "4": [0, 1], "5": [1]}
    src = labelled(tmp_path / "train.jsonl", groups)
    assert common.two_sided(src, tmp_path / "out" / "two.jsonl") == 2
    kept = [json.loads(line) for line in (tmp_path / "out" / "two.jsonl").read_text(encoding="utf-8").splitlines()]
    assert kept == [json.loads(line) for line in src.read_text(encoding="utf-8").splitlines()
                    if json.loads(line)["qid"] in {"1", "4"}]  # fmt: skip


def test_setting_overrides_parse_json_values_and_name_a_bad_pair() -> None:
    assert common.setting_overrides(["train_embeddings=true", "lr=0.001", "embeddings=glove:/x"]) == {
        "train_embeddings": True,
        "lr": 0.001,
        "embeddings": "glove:/x",
    }
    with pytest.raises(QAIndexError, match=r"^--set 'lr': expected KEY=VALUE, KEY a training setting$"):
        common.setting_overrides(["lr"])
    with pytest.raises(QAIndexError, match=r"^--set 'nope=1': unknown setting 'nope'; settings are .*train_embeddings"):
        common.setting_overrides(["nope=1"])
    # values are checked against the setting's type, as `qaindex train --config` checks a file
    with pytest.raises(
        QAIndexError, match=r"^--set 'lr=fast': setting 'lr' must be a number, got \"fast\" \(a string\)$"
    ):
        common.setting_overrides(["lr=fast"])
    assert common.setting_overrides(["batch-size=32"]) == {"batch_size": 32}


def test_a_variant_is_refused_for_the_main_runs_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "wikiqa").mkdir()
    before = reproduce.RESULTS.read_bytes()
    for variant in (["--set", "train_embeddings=true"], ["--two-sided-train"]):
        monkeypatch.setattr(sys, "argv", ["reproduce", *variant, "--data", str(tmp_path)])
        with pytest.raises(SystemExit) as exc:
            reproduce.main()
        assert exc.value.code == 2
        assert "train a variant: name it with --variant" in capsys.readouterr().err
    assert reproduce.RESULTS.read_bytes() == before


def test_a_named_variant_joins_the_sweeps_file_beside_the_others(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    written: list[str] = []
    monkeypatch.setattr(reproduce, "replace_section", lambda name, body, *a, **k: written.append(name))
    sweeps = tmp_path / "reproduction_sweeps.json"
    sweeps.write_text(json.dumps({"b_other": {"runs": RUNS[:1]}}), encoding="utf-8")
    monkeypatch.setattr(reproduce, "SWEEPS", sweeps)
    (tmp_path / "wikiqa").mkdir()
    monkeypatch.setattr(
        reproduce,
        "run_one",
        lambda dataset, model, seed, *a, **k: {
            **RUNS[0],
            "seed": seed,
            "dev": {"map": 0.7},
            "best_epoch": 1,
            "train_seconds_per_epoch": 1.0,
            "total_seconds": 9.0,
        },
    )
    argv = ["reproduce", "--datasets", "wikiqa", "--models", "hyperqa", "--seeds", "7", "--variant", "a_new"]
    monkeypatch.setattr(sys, "argv", [*argv, "--set", "lr=0.003", "--data", str(tmp_path)])
    before = reproduce.RESULTS.read_bytes()
    reproduce.main()
    stored = json.loads(sweeps.read_text(encoding="utf-8"))
    assert list(stored) == ["a_new", "b_other"] and stored["b_other"] == {"runs": RUNS[:1]}
    assert [(r["seed"], r["variant"]["set"]) for r in stored["a_new"]["runs"]] == [(7, {"lr": 0.003})]
    table = sweeps.with_suffix(".md").read_text(encoding="utf-8")
    assert table.startswith("<!-- generated by") and table.count("<!-- generated by") == 1
    assert table.index("\n# a_new\n") < table.index("\n# b_other\n")
    assert "Variant of the runs' settings: --set lr=0.003." in table
    assert written == [] and reproduce.RESULTS.read_bytes() == before  # the table and README stay the main runs'


def test_a_variant_trains_on_the_two_sided_file_and_records_itself(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = tmp_path / "data"
    labelled(data / "trecqa_clean" / "train.jsonl", {"1": [1, 0], "2": [1, 1]})
    (data / "wikiqa").mkdir()
    calls: list[dict[str, Any]] = []

    def fake_run_one(dataset: str, model: str, seed: int, epochs: int, data: Path, settings: dict[str, Any],
                     **kw: Any) -> dict[str, Any]:  # fmt: skip
        calls.append({"settings": settings, **kw, "train": kw["files"][0].read_text(encoding="utf-8")})
        return {**RUNS[2], "dataset": dataset, "model": model, "seed": seed, "dev": {"map": 0.5}, "best_epoch": 1,
                "total_seconds": 1.0}  # fmt: skip

    monkeypatch.setattr(reproduce, "run_one", fake_run_one)
    monkeypatch.setattr(reproduce, "ROOT", tmp_path)
    side = tmp_path / "side.json"
    argv = ["reproduce", "--datasets", "trecqa_clean", "--models", "ap-cnn", "--seeds", "1", "--epochs", "4",
            "--set", "train_embeddings=true", "--two-sided-train", "--json", str(side), "--data", str(data)]  # fmt: skip
    monkeypatch.setattr(sys, "argv", argv)
    reproduce.main()
    (call,) = calls
    assert call["settings"] == {**reproduce.MODEL_SETTINGS["ap-cnn"], "train_embeddings": True}
    assert call["cache"] is False  # a side run never replaces the served model kept for --latency
    assert [json.loads(line)["qid"] for line in call["train"].splitlines()] == ["1", "1"]
    assert call["files"][1:] == (data / "trecqa_clean" / "dev.jsonl", data / "trecqa_clean" / "test.jsonl")
    written = json.loads(side.read_text(encoding="utf-8"))
    assert (written["processor"], written["python"]) == (
        reproduce.platform.machine(),
        reproduce.platform.python_version(),
    )
    (run,) = written["runs"]
    assert run["variant"] == {"set": {"train_embeddings": True}, "two_sided_train": True}
    assert "Variant of the runs' settings: --set train_embeddings=true --two-sided-train." in (
        tmp_path / "side.md"
    ).read_text(encoding="utf-8")

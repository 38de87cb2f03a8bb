"""Training seconds per epoch (benchmarks.speed.epoch_seconds): the table from a results file, and a measured row."""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

import pytest

from benchmarks.speed import epoch_seconds


def row(dataset: str, model: str, seconds: list[float], cpu: float | None, **extra: Any) -> dict[str, Any]:
    return {
        "dataset": dataset,
        "model": model,
        "device": "cuda",
        "epoch_seconds": seconds,
        "seconds_per_epoch": seconds[-1],
        "cpu_seconds_per_epoch": cpu,
        **extra,
    }


def cells(text: str, dataset: str, model: str) -> list[str]:
    line = next(x for x in text.splitlines() if x.startswith(f"| {dataset} | {model} |"))
    return [c.strip() for c in line.strip("|").split("|")]


def test_table_orders_rows_and_computes_the_speed_up() -> None:
    rows = [
        row("trecqa_raw", "hyperqa", [0.7, 0.5], 4.0, parity_max_abs_diff=2e-5),
        row("wikiqa", "ap-cnn", [1.0, 0.25], 40.0, export_error="parity check failed"),
        row("wikiqa", "hyperqa", [0.3, 0.2], None),
    ]
    text = epoch_seconds.table(rows)
    order = [line.split("|")[1:3] for line in text.splitlines()[2:]]
    assert [[c.strip() for c in o] for o in order] == [
        ["wikiqa", "hyperqa"],
        ["wikiqa", "ap-cnn"],
        ["trecqa_raw", "hyperqa"],
    ]
    assert cells(text, "trecqa_raw", "hyperqa")[3:] == ["0.50", "0.70", "4.00", "8.0x", "passed (2.0e-05)"]
    assert cells(text, "wikiqa", "ap-cnn")[6:] == ["160.0x", "failed"]
    assert cells(text, "wikiqa", "hyperqa")[5:] == ["—", "—", "not exported"]


def test_cpu_reference_is_the_reproduction_tables_fastest_run() -> None:
    runs = {"runs": [
        {"dataset": "wikiqa", "model": "qa-cnn", "train_seconds_per_epoch": 30.0},
        {"dataset": "wikiqa", "model": "qa-cnn", "train_seconds_per_epoch": 22.5},
        {"dataset": "trecqa_raw", "model": "qa-cnn", "train_seconds_per_epoch": 1.0},
    ]}  # fmt: skip
    assert epoch_seconds.cpu_reference(runs, "wikiqa", "qa-cnn") == 22.5
    assert epoch_seconds.cpu_reference(runs, "wikiqa", "hyperqa") is None


@pytest.mark.torch
def test_measure_times_every_epoch_and_exports(
    planted_data: dict, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("torch")
    pytest.importorskip("onnxruntime")
    data = tmp_path / "data"
    (data / "wikiqa").mkdir(parents=True)
    for name, key in (("train.jsonl", "train"), ("dev.filtered.jsonl", "dev")):
        (data / "wikiqa" / name).write_bytes(Path(planted_data[key]).read_bytes())
    small = {"model": "cosineqa", "margin": 0.1, "embeddings": "none", "dim": 16, "batch_size": 20}
    monkeypatch.setitem(epoch_seconds.MODEL_SETTINGS, "cosineqa", small)
    got = epoch_seconds.measure("wikiqa", "cosineqa", data, device="cpu", epochs=3, export=True, cpu=9.0)
    assert got["device"] == "cpu" and got["cpu_seconds_per_epoch"] == 9.0
    assert len(got["epoch_seconds"]) == 3 and all(s > 0 for s in got["epoch_seconds"])
    assert got["seconds_per_epoch"] == statistics.median(got["epoch_seconds"][1:])  # the first is set apart
    assert 0.0 <= got["parity_max_abs_diff"] < 1e-3 and "export_error" not in got
    assert len(got["dev_map"]) == 3


def test_gpu_info_names_the_gpu_torch_sees(monkeypatch: pytest.MonkeyPatch) -> None:
    torch = pytest.importorskip("torch")
    from benchmarks.common import gpu_info

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert gpu_info() == {}
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda index=0: "NVIDIA H100 80GB HBM3")
    monkeypatch.setattr(torch.version, "cuda", "13.0")
    assert gpu_info() == {"gpu": "NVIDIA H100 80GB HBM3", "torch": torch.__version__, "cuda": "13.0"}

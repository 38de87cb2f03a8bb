"""The reproduction on a small budget (QAINDEX_SLOW=1): train on WikiQA, export, serve, evaluate.

This is ``python -m benchmarks.reproduction.reproduce`` with 2 epochs and one seed, so a change that breaks
training, export or the served path on real data fails here rather than in the next
benchmark run. The thresholds sit well above chance (WikiQA test MAP 0.398) and below what
the full 25-epoch runs reach (docs/reproduction.md), so they test learning, not noise.
"""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT.parent / "shared" / "datasets"

pytestmark = [
    pytest.mark.slow,
    pytest.mark.torch,
    pytest.mark.skipif(not (DATA / "wikiqa").is_dir(), reason=f"{DATA}: the shared datasets are not here"),
]


@pytest.mark.parametrize(("model", "minimum_map"), [("hyperqa", 0.62), ("cosineqa", 0.62)])
def test_wikiqa_reproduction_on_a_small_budget(model: str, minimum_map: float) -> None:
    pytest.importorskip("torch")
    from benchmarks.reproduction import reproduce

    run = reproduce.run_one("wikiqa", model, seed=0, epochs=2, data=DATA)
    assert run["test"]["questions"] == 243
    assert run["test"]["map"] >= minimum_map, run["test"]
    assert run["test"]["mrr"] >= run["test"]["map"] - 0.02
    assert run["best_epoch"] in (1, 2)


def test_served_index_reproduces_the_direct_evaluation(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    from qaindex_export.exporting.onnx_export import export_model
    from qaindex_export.training.train import TrainConfig, train

    from qaindex.eval.datasets import read_labelled
    from qaindex.eval.evaluate import evaluate_model, evaluate_via_index
    from qaindex.model import Model

    config = TrainConfig(epochs=1, seed=0, ball="clip")
    result = train(config, DATA / "wikiqa" / "train.jsonl", DATA / "wikiqa" / "dev.filtered.jsonl", log=None)
    out = export_model(result, tmp_path / "model")
    model = Model.load(out, threads=None, device="cpu")
    groups = read_labelled(DATA / "wikiqa" / "test.filtered.jsonl")
    direct = evaluate_model(model, groups)
    served = evaluate_via_index(model, groups)
    for key in ("map", "mrr", "p@1", "questions"):
        assert served[key] == pytest.approx(direct[key], abs=1e-9), key

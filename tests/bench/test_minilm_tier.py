"""The MiniLM-tier study: its losses, targets and rendering from a results file (the docs
section equals what its results render: tests/docs/test_claims.py)."""

from __future__ import annotations

import json

from benchmarks.speed import minilm_tier

SYSTEMS = minilm_tier.SYSTEMS


def _results(int8: dict[str, float], share: float) -> dict[str, object]:
    mrr = {corpus: {SYSTEMS[0]: 0.800, SYSTEMS[1]: 0.800, SYSTEMS[2]: value} for corpus, value in int8.items()}
    loss = {corpus: round(0.800 - value, 4) for corpus, value in int8.items()}
    speed = {
        s: {"median_ms": 10.0 * x, "share_of_sentence_transformers": x}
        for s, x in zip(SYSTEMS, (1.0, 0.6, share), strict=True)
    }
    return {
        "mrr@10": mrr,
        "int8_loss": loss,
        "question_ms": speed,
        "graph_bytes": {SYSTEMS[1]: 90_800_000, SYSTEMS[2]: 23_200_000},
        "targets": {
            "int8_loss_met": all(v <= minilm_tier.MRR_TARGET for v in loss.values()),
            "latency_met": share <= minilm_tier.LATENCY_TARGET,
        },
        "run": {"command": "python -m benchmarks.speed.minilm_tier --float a --int8 b"},
    }


def test_the_section_says_met_or_missed_as_the_figures_are() -> None:
    met = minilm_tier.readme_body(_results({"faq": 0.797, "docs": 0.801}, 0.4))
    assert "| faq | 0.800 | 0.800 | 0.797 | +0.003 |" in met and "| docs | 0.800 | 0.800 | 0.801 | -0.001 |" in met
    assert (
        "loses at most 0.003 MRR@10 (target 0.005: met)" in met
        and "0.40× sentence-transformers' time (target 0.5×: met)" in met
    )
    assert "| export-model --quantize int8 | 4.00 | 0.40× | 23 MB |" in met
    missed = minilm_tier.readme_body(_results({"faq": 0.790}, 0.55))
    assert "loses at most 0.010 MRR@10 (target 0.005: missed)" in missed and "(target 0.5×: missed)" in missed


def test_the_results_file_holds_losses_of_its_own_figures() -> None:
    results = json.loads(minilm_tier.RESULTS.read_text(encoding="utf-8"))
    assert results["int8_loss"] == {c: round(m[SYSTEMS[0]] - m[SYSTEMS[2]], 4) for c, m in results["mrr@10"].items()}
    loss_met = all(v <= minilm_tier.MRR_TARGET for v in results["int8_loss"].values())
    assert results["targets"]["int8_loss_met"] == loss_met

"""Reproduce the HyperQA paper's tables: train, export, evaluate, over several seeds.

For each dataset × model × seed it trains with ``qaindex_export.train`` (train split, best
epoch by dev MAP), exports the ONNX model directory exactly as ``qaindex train`` does, and
evaluates the *exported* model on the test split with ``qaindex.evaluate.evaluate_model``
(ties broken by expectation, never by file order). It writes:

- ``benchmarks/results/reproduction.json``: every run;
- ``docs/reproduction.md``: mean ± standard deviation per dataset and model, beside the
  paper's numbers, the reference scores and the targets.

Usage (about 30-40 minutes on a 2-core CPU for everything)::

    python benchmarks/reproduce.py [--datasets wikiqa,trecqa_raw,trecqa_clean]
        [--models hyperqa,cosineqa] [--seeds 0,1,2] [--epochs 25] [--data ../shared/datasets]

Needs the training extra (torch) and the shared datasets; never copies them.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
from readme_markers import replace_section  # noqa: E402

SPLITS = {
    "wikiqa": ("wikiqa/train.jsonl", "wikiqa/dev.filtered.jsonl", "wikiqa/test.filtered.jsonl"),
    "trecqa_raw": ("trecqa_raw/train.jsonl", "trecqa_raw/dev.jsonl", "trecqa_raw/test.jsonl"),
    "trecqa_clean": ("trecqa_clean/train.jsonl", "trecqa_clean/dev.jsonl", "trecqa_clean/test.jsonl"),
}
# The paper's published HyperQA test MAP, MRR (also the targets).
PAPER = {"wikiqa": (0.712, 0.727), "trecqa_raw": (0.770, 0.825), "trecqa_clean": (0.784, 0.865)}
BASELINES = ROOT / "benchmarks" / "results" / "baselines.json"  # written by benchmarks/baselines.py


def baseline(dataset: str, method: str) -> str:
    """MAP / MRR of a baseline measured by benchmarks/baselines.py on the same test file."""
    if not BASELINES.is_file():
        return "run baselines.py"
    r = json.loads(BASELINES.read_text())[dataset][method]
    return f"{r['map']:.3f} / {r['mrr']:.3f}"


# The HRDE-LTC paper published on Ubuntu and a Samsung product-QA corpus only: no paper number on ours.
NO_PAPER_NUMBER = ("rde", "rde-ltc", "hrde", "hrde-ltc")
RECURRENT_SETTINGS: dict[str, Any] = {
    "dim": 128, "optimizer": "adam", "lr": 0.005, "batch_size": 50, "negatives": 4, "sampling": "random",
    "patience": 1, "topics": 3, "max_chunks": 4, "max_chunk_tokens": 24, "max_answer_tokens": 64, "threads": 1,
}  # fmt: skip
# Per-model settings chosen on WikiQA dev (see docs/reproduction.md).
MODEL_SETTINGS: dict[str, dict[str, Any]] = {
    "hyperqa": {"model": "hyperqa", "ball": "auto", "margin": 1.0},
    "cosineqa": {"model": "cosineqa", "margin": 0.1},
    # the attentive-pooling paper's baselines: context window 4, max of 50 sampled negatives;
    # c = 400 filters / H = 141 (c = 282) units per direction, margin 0.2 (CPU-sized choices)
    "qa-cnn": {"model": "qa-cnn", "dim": 400, "window": 4, "negatives": 1, "negative_pool": 50, "margin": 0.2},
    "qa-bilstm": {"model": "qa-bilstm", "dim": 282, "negatives": 1, "negative_pool": 50, "margin": 0.2},
    # attentive pooling (rerankers): margin 0.5 as the paper's AP runs; CPU-sized c and pool (see README)
    "ap-cnn": {"model": "ap-cnn", "dim": 200, "window": 4, "negatives": 1, "negative_pool": 20, "margin": 0.5,
               "threads": 1},
    "ap-bilstm": {"model": "ap-bilstm", "dim": 100, "negatives": 1, "negative_pool": 10, "margin": 0.5,
                  "threads": 1},
    # the HRDE-LTC paper's GRU dual encoders (CPU-sized: 128 GRU units, frozen MiniLM token embeddings, answers
    # cut at 64 tokens (HRDE: at most 4 chunks of 24), Adam 0.005, 4 random negatives, binary cross-entropy,
    # stop at the first epoch without a better dev MAP)
    **{kind: {"model": kind, **RECURRENT_SETTINGS} for kind in NO_PAPER_NUMBER},
}
# Published WikiQA test MAP, MRR of the other papers' models (dos Santos et al., 2016, WikiQA results).
PAPER_MODELS = {
    ("wikiqa", "qa-cnn"): (0.670, 0.682),
    ("wikiqa", "qa-bilstm"): (0.656, 0.670),
    ("wikiqa", "ap-cnn"): (0.6886, 0.6957),
    ("wikiqa", "ap-bilstm"): (0.6705, 0.6842),
    ("trecqa_clean", "ap-cnn"): (0.753, 0.851),
}
# WikiQA ablations (--ablations): what was tried, each a TrainConfig override.
ABLATIONS: dict[str, dict[str, Any]] = {
    "hyperqa, clip (the paper's ball)": {"model": "hyperqa", "ball": "clip"},
    "hyperqa, radius (learned radius)": {"model": "hyperqa", "ball": "radius"},
    "hyperqa, expmap tanh(α‖y‖)": {"model": "hyperqa", "ball": "expmap"},
    "hyperqa, clip + Riemannian eq. 8": {"model": "hyperqa", "ball": "clip", "riemannian": True},
    "hyperqa, clip, random negatives": {"model": "hyperqa", "ball": "clip", "sampling": "random"},
    "hyperqa, clip, AdaGrad accumulator 0.1 (TensorFlow's)": {"model": "hyperqa", "ball": "clip", "adagrad_init": 0.1},
    "hyperqa, clip, trainable random embeddings": {"model": "hyperqa", "ball": "clip", "embeddings": "none"},
    "cosineqa, margin 1": {"model": "cosineqa", "margin": 1.0},
    "cosineqa, margin 0.1": {"model": "cosineqa", "margin": 0.1},
}


def run_one(
    dataset: str, model: str, seed: int, epochs: int, data: Path, settings: dict[str, Any] | None = None
) -> dict[str, Any]:
    from qaindex_export.onnx_export import export_model
    from qaindex_export.train import TrainConfig, train

    from qaindex.datasets import read_labelled
    from qaindex.evaluate import evaluate_model
    from qaindex.model import Model
    from qaindex.reranker import Reranker, model_kind

    train_file, dev_file, test_file = (data / p for p in SPLITS[dataset])
    config = replace(TrainConfig(), seed=seed, epochs=epochs, **(settings or MODEL_SETTINGS[model]))
    started = time.perf_counter()
    result = train(config, train_file, dev_file, log=None)
    with tempfile.TemporaryDirectory() as tmp:
        out = export_model(result, Path(tmp) / "model", dev_data=dev_file)
        served = (Reranker if model_kind(out) == "reranker" else Model).load(out, threads=None)
        test = evaluate_model(served, read_labelled(test_file))
        size = sum(p.stat().st_size for p in Path(out).rglob("*") if p.is_file())
        manifest = served.manifest
    epochs_run = [h for h in result.history]
    return {
        "dataset": dataset,
        "model": model,
        "seed": seed,
        "test": {k: test[k] for k in ("map", "mrr", "p@1", "questions")},
        "dev": {k: result.dev[k] for k in ("map", "mrr")},
        "best_epoch": result.best_epoch,
        "ball": manifest["geometry"].get("ball_map") if model == "hyperqa" else None,
        "selection": result.selection and {"chosen": result.selection["chosen"]},
        "train_seconds_per_epoch": statistics.median(h["train_seconds"] for h in epochs_run),
        "seconds_per_epoch_with_dev": statistics.median(h["seconds"] for h in epochs_run),
        "total_seconds": time.perf_counter() - started,
        "parameters": manifest["parameters"],
        "model_bytes": size,
        "load_average": list(os.getloadavg()),
        "config": asdict(result.config),
        "loadavg": list(os.getloadavg()),
    }


def fmt(values: list[float]) -> str:
    if len(values) == 1:
        return f"{values[0]:.3f}"
    return f"{statistics.mean(values):.3f} ± {statistics.stdev(values):.3f}"


def _ranking(model: str, runs: list[dict[str, Any]]) -> str:
    """The Poincaré ranking rule of HyperQA runs (runs from before the setting used plain distance)."""
    if model in NO_PAPER_NUMBER:
        return "bilinear"
    if model != "hyperqa":
        return "cosine"
    return "/".join(sorted({r["config"].get("ranking", "distance") for r in runs}))


def table(runs: list[dict[str, Any]]) -> str:
    lines = [
        "| dataset | model | test MAP | test MRR | P@1 | seeds | epochs | ranking | paper MAP / MRR | target met "
        "| MiniLM zero-shot (ours) | BM25 (ours) | s/epoch (train, best run) | trainable / total params |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    keys = sorted(
        {(r["dataset"], r["model"]) for r in runs}, key=lambda k: (list(SPLITS).index(k[0]), k[1] != "hyperqa")
    )
    for dataset, model in keys:
        rs = [r for r in runs if r["dataset"] == dataset and r["model"] == model]
        maps = [r["test"]["map"] for r in rs]
        mrrs = [r["test"]["mrr"] for r in rs]
        p1 = [r["test"]["p@1"] for r in rs]
        paper = PAPER_MODELS.get((dataset, model), PAPER[dataset])
        met = statistics.mean(maps) >= paper[0] and statistics.mean(mrrs) >= paper[1]
        paper_cell, met_cell = f"{paper[0]:.3f} / {paper[1]:.3f}", "yes" if met else "no"
        if model in NO_PAPER_NUMBER:
            paper_cell, met_cell = "none (published on Ubuntu and Samsung QA only)", "-"
        params = rs[0]["parameters"]
        lines.append(
            f"| {dataset} | {model} | {fmt(maps)} | {fmt(mrrs)} | {fmt(p1)} | {len(rs)} | "
            f"{'/'.join(sorted({str(r['config']['epochs']) for r in rs}))} | {_ranking(model, rs)} | "
            f"{paper_cell} | {met_cell} | "
            f"{baseline(dataset, 'minilm')} | {baseline(dataset, 'bm25')} | "
            f"{min(r['train_seconds_per_epoch'] for r in rs):.2f} | "
            f"{params.get('trainable', 0):,} / {params.get('total', 0):,} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--datasets", default=",".join(SPLITS), help="comma-separated: " + ", ".join(SPLITS))
    parser.add_argument(
        "--models",
        default="hyperqa,cosineqa",
        help="comma-separated: hyperqa, cosineqa, qa-cnn, qa-bilstm, ap-cnn, ap-bilstm",
    )
    parser.add_argument("--seeds", default="0,1,2", help="comma-separated seeds")
    parser.add_argument("--epochs", type=int, default=25, help="epochs per run (the paper: 25)")
    parser.add_argument("--data", default=str(ROOT.parent / "shared" / "datasets"), help="datasets folder")
    parser.add_argument("--json", default=str(RESULTS), help="runs file")
    parser.add_argument("--markdown", default=str(ROOT / "docs" / "reproduction-table.md"), help="table file")
    parser.add_argument(
        "--ablations", action="store_true", help="run the WikiQA ablations instead (docs/ablations-table.md)"
    )
    parser.add_argument(
        "--report-only", action="store_true", help="rewrite the table and README summary from the runs file"
    )
    args = parser.parse_args()
    data = Path(args.data)
    if not (data / "wikiqa").is_dir():
        sys.exit(f"error: {data}: no datasets here; pass --data ../shared/datasets")
    if args.ablations:
        ablations(args, data)
        return
    out_json = Path(args.json)
    out_json.parent.mkdir(parents=True, exist_ok=True)
    # runs of earlier invocations are kept unless this one repeats them
    runs: list[dict[str, Any]] = json.loads(out_json.read_text())["runs"] if out_json.is_file() else []
    for dataset in [] if args.report_only else args.datasets.split(","):
        for model in args.models.split(","):
            for seed in (int(s) for s in args.seeds.split(",")):
                run = run_one(dataset, model, seed, args.epochs, data)
                runs = [r for r in runs if (r["dataset"], r["model"], r["seed"]) != (dataset, model, seed)] + [run]
                t = run["test"]
                print(
                    f"{dataset:13} {model:9} seed {seed}: test MAP {t['map']:.4f} MRR {t['mrr']:.4f} "
                    f"P@1 {t['p@1']:.4f}  dev MAP {run['dev']['map']:.4f}  epoch {run['best_epoch']}  "
                    f"{run['train_seconds_per_epoch']:.2f} s/epoch  {run['total_seconds']:.0f} s",
                    flush=True,
                )
                out_json.write_text(
                    json.dumps({"machine": platform.platform(), "epochs": args.epochs, "runs": runs}, indent=2) + "\n"
                )
    md = Path(args.markdown)
    md.parent.mkdir(parents=True, exist_ok=True)
    seeds = ", ".join(str(s) for s in sorted({r["seed"] for r in runs}))
    md.write_text(
        "<!-- generated by benchmarks/reproduce.py; do not edit by hand -->\n"
        f"Test split, exported ONNX models, mean ± std over seeds {seeds} (the seeds and epochs column say "
        "which each row ran), "
        f"{platform.machine()} CPU, {platform.python_version()}.\n\n" + table(runs) + "\n"
    )
    replace_section(README_SECTION, readme_body({"runs": runs}))
    print(table(runs))
    print(f"wrote {out_json}, {md} and the summary in README.md")


RESULTS = ROOT / "benchmarks" / "results" / "reproduction.json"
README_SECTION = "reproduction"


def readme_body(results: dict[str, Any]) -> str:
    """The README's summary table, rendered from a results file (also checked by tests/test_claims.py)."""
    runs = results["runs"]
    seeds = ", ".join(str(s) for s in sorted({r["seed"] for r in runs}))
    lines = [
        "| test MAP / MRR | HyperQA (ours) | CosineQA (ours) | paper HyperQA | MiniLM zero-shot |",
        "|---|---|---|---|---|",
    ]
    for dataset in SPLITS:
        cells = []
        for model in ("hyperqa", "cosineqa"):
            rs = [r for r in runs if r["dataset"] == dataset and r["model"] == model]
            mean_map = statistics.mean(r["test"]["map"] for r in rs) if rs else 0.0
            mean_mrr = statistics.mean(r["test"]["mrr"] for r in rs) if rs else 0.0
            cells.append(f"{mean_map:.3f} / {mean_mrr:.3f}" if rs else "not run")
        lines.append(
            f"| {dataset} | {cells[0]} | {cells[1]} | {PAPER[dataset][0]:.3f} / {PAPER[dataset][1]:.3f} | "
            f"{baseline(dataset, 'minilm')} |"
        )
    return "\n".join(lines) + f"\n\nMeans over seeds {seeds}; generated by `python benchmarks/reproduce.py`.\n"


def ablations(args: argparse.Namespace, data: Path) -> None:
    seeds = [int(x) for x in args.seeds.split(",")]
    rows = ["| variant (WikiQA) | test MAP | test MRR | dev MAP | s/epoch | seeds |", "|---|---|---|---|---|---|"]
    runs = []
    for label, settings in ABLATIONS.items():
        rs = [run_one("wikiqa", settings["model"], seed, args.epochs, data, settings) for seed in seeds]
        runs += [{"variant": label, **r} for r in rs]
        rows.append(
            f"| {label} | {fmt([r['test']['map'] for r in rs])} | {fmt([r['test']['mrr'] for r in rs])} | "
            f"{fmt([r['dev']['map'] for r in rs])} | {statistics.mean(r['train_seconds_per_epoch'] for r in rs):.2f} | "
            f"{len(rs)} |"
        )
        print(rows[-1], flush=True)
    out = ROOT / "benchmarks" / "results" / "ablations.json"
    out.write_text(json.dumps({"machine": platform.platform(), "epochs": args.epochs, "runs": runs}, indent=2) + "\n")
    md = ROOT / "docs" / "ablations-table.md"
    md.write_text(
        "<!-- generated by benchmarks/reproduce.py --ablations; do not edit by hand -->\n"
        f"WikiQA test.filtered, exported ONNX models, mean ± std over seeds {args.seeds}, {args.epochs} epochs.\n\n"
        + "\n".join(rows)
        + "\n"
    )
    print(f"wrote {out} and {md}")


if __name__ == "__main__":
    main()

"""Training seconds per epoch of every model of the reproduction table, on a GPU (or any device).

Run from the repository root, on the machine to measure::

    python -m benchmarks.speed.epoch_seconds --device cuda [--data DIR] [--budget-s 480]
    python -m benchmarks.speed.epoch_seconds --report-only     # rewrite docs/epoch-seconds-table.md

Each (dataset, model) of ``benchmarks.reproduction.reproduce.MODEL_SETTINGS`` trains ``--epochs`` epochs
(default 2) with the reproduction table's settings, seed 0 and 1 torch CPU thread, on
``--device``. A row keeps every epoch's training seconds (the loop's ``train_seconds``: negative
sampling and the optimiser steps, not the dev evaluation) and reports the median of the epochs
after the first, which pays CUDA's start-up (kernel loading, cuDNN's choice of algorithms). Each
trained model is then exported (``--no-export`` skips it), so the row also records that a model
trained on the device passes the torch-vs-onnxruntime parity check.

The CPU seconds of the reproduction table (``benchmarks/results/reproduction.json``: the best
run, 1 thread on a 2-core x86_64 machine) are copied into each row when it is measured,
so the table renders from this file alone. Rows are merged into ``--json`` by (dataset, model,
device); ``--budget-s`` stops starting new rows after that many seconds, so a run fits a lease.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.common import QA_DATASETS, ROOT, argument_parser, gpu_info, markdown_table, write_atomic, write_results
from benchmarks.reproduction.reproduce import MODEL_SETTINGS, SPLITS
from benchmarks.reproduction.reproduce import RESULTS as REPRODUCTION
from qaindex.errors import QAIndexError

RESULTS = ROOT / "benchmarks" / "results" / "epoch_seconds.json"
TABLE = ROOT / "docs" / "epoch-seconds-table.md"


def cpu_reference(reproduction: dict[str, Any], dataset: str, model: str) -> float | None:
    """The reproduction table's s/epoch cell for (dataset, model): its fastest run, or None."""
    seconds = [
        r["train_seconds_per_epoch"] for r in reproduction["runs"] if (r["dataset"], r["model"]) == (dataset, model)
    ]
    return min(seconds) if seconds else None


def machine() -> dict[str, Any]:
    """What the rows are measured on: platform, CPU count, torch, and the GPU torch sees, if any."""
    import torch

    return {
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "torch": torch.__version__,
        **gpu_info(),
    }


def measure(
    dataset: str, model: str, data: Path, *, device: str, epochs: int, export: bool, cpu: float | None
) -> dict[str, Any]:
    """Train one (dataset, model) for ``epochs`` epochs on ``device``; time each epoch; export it."""
    from qaindex_export.exporting.onnx_export import export_model
    from qaindex_export.training.train import TrainConfig, resolve_device, train

    train_file, dev_file, _ = (data / p for p in SPLITS[dataset])
    settings = {**MODEL_SETTINGS[model], "seed": 0, "epochs": epochs, "threads": 1, "device": device}
    started = time.perf_counter()
    result = train(TrainConfig.for_model(**settings), train_file, dev_file, log=None)
    seconds = [h["train_seconds"] for h in result.history]
    row: dict[str, Any] = {
        "dataset": dataset,
        "model": model,
        "device": str(resolve_device(device)),
        "epoch_seconds": seconds,
        "seconds_per_epoch": statistics.median(seconds[1:] or seconds),
        "cpu_seconds_per_epoch": cpu,
        "dev_map": [h["dev_map"] for h in result.history],
    }
    if export:
        with tempfile.TemporaryDirectory() as tmp:
            try:
                out = export_model(result, Path(tmp) / "model")
            except QAIndexError as exc:
                row["export_error"] = str(exc)
            else:
                manifest = json.loads((out / "manifest.json").read_text(encoding="utf-8"))
                row["parity_max_abs_diff"] = max(manifest["metrics"]["parity"].values())
    row["total_seconds"] = time.perf_counter() - started
    return row


def _cell(value: float | None, digits: int = 2) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


def table(rows: list[dict[str, Any]]) -> str:
    """One line per row: seconds per epoch on the device, the CPU's, the speed-up and the export check."""
    order = {(d, m): i for i, (d, m) in enumerate((d, m) for d in QA_DATASETS for m in MODEL_SETTINGS)}
    header = [
        "dataset",
        "model",
        "device",
        "s/epoch (epochs after the first)",
        "first epoch s",
        "CPU s/epoch (reproduction table)",
        "speed-up over the CPU",
        "export parity (max abs diff)",
    ]
    lines = []
    for r in sorted(rows, key=lambda r: (order.get((r["dataset"], r["model"]), len(order)), r["device"])):
        cpu, dev = r["cpu_seconds_per_epoch"], r["seconds_per_epoch"]
        speedup = "—" if cpu is None else f"{cpu / dev:.1f}x"
        parity = (
            f"passed ({r['parity_max_abs_diff']:.1e})"
            if "parity_max_abs_diff" in r
            else "failed"
            if "export_error" in r
            else "not exported"
        )
        lines.append(
            [
                r["dataset"],
                r["model"],
                r["device"],
                _cell(dev),
                _cell(r["epoch_seconds"][0]),
                _cell(cpu),
                speedup,
                parity,
            ]
        )
    return markdown_table(header, lines)


def render(results: dict[str, Any]) -> str:
    """docs/epoch-seconds-table.md, from the results file alone."""
    m = results["machine"]
    gpu = f"{m['gpu']} (CUDA {m['cuda']}), " if "gpu" in m else ""
    epochs = sorted({len(r["epoch_seconds"]) for r in results["rows"]})
    return (
        "<!-- generated by benchmarks/speed/epoch_seconds.py; do not edit by hand -->\n"
        f"Training seconds per epoch, measured {results['measured']} on {gpu}{m['cpus']} CPU cores, "
        f"torch {m['torch']}, Python {m['python']}: seed 0, the reproduction table's settings, 1 torch CPU thread, "
        f"{' or '.join(map(str, epochs))} epochs per row. Seconds are the training loop's (negative sampling and "
        "optimiser steps, not the dev evaluation); the first epoch also pays CUDA's start-up and is listed apart. "
        "The CPU column is the reproduction table's (its fastest run, 1 thread on 2 contended x86_64 cores, "
        "another machine), so the speed-up compares machines as well as devices. Export parity: the model "
        "trained in the row, exported, and the torch-vs-onnxruntime check's worst difference (it fails beyond "
        "1e-4 relative; a failure's message is in the results file).\n\n" + table(results["rows"]) + "\n"
    )


def main() -> None:
    parser = argument_parser(__doc__, data=True)
    parser.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"), help="where torch trains")
    parser.add_argument("--datasets", default=",".join(QA_DATASETS), help="comma-separated: " + ", ".join(SPLITS))
    parser.add_argument("--models", default=",".join(MODEL_SETTINGS), help="comma-separated model settings")
    parser.add_argument("--epochs", type=int, default=2, help="epochs per row (the first is listed apart)")
    parser.add_argument("--json", default=str(RESULTS), help="results file (rows are merged into it)")
    parser.add_argument("--markdown", default=str(TABLE), help="table file")
    parser.add_argument("--budget-s", type=float, default=None, help="start no new row after this many seconds")
    parser.add_argument("--no-export", action="store_true", help="skip exporting each trained model")
    parser.add_argument("--report-only", action="store_true", help="rewrite the table from the results file")
    args = parser.parse_args()
    out_json, data = Path(args.json), Path(args.data)
    if args.report_only and not out_json.is_file():
        sys.exit(f"error: {out_json}: no results file to report; measure first (--device cuda)")
    results: dict[str, Any] = json.loads(out_json.read_text()) if out_json.is_file() else {"rows": []}
    if not args.report_only:
        from qaindex_export.training.train import resolve_device

        if not (data / "wikiqa").is_dir():
            sys.exit(f"error: {data}: no datasets here; pass --data ../shared/datasets")
        device = str(resolve_device(args.device))
        reproduction = json.loads(REPRODUCTION.read_text(encoding="utf-8"))
        results.update(machine=machine(), measured=time.strftime("%Y-%m-%d", time.gmtime()))
        started = time.perf_counter()
        pairs = [(d, m) for d in args.datasets.split(",") for m in args.models.split(",")]
        for i, (dataset, model) in enumerate(pairs):
            if args.budget_s is not None and time.perf_counter() - started > args.budget_s:
                print(f"budget of {args.budget_s:.0f} s spent; not run: {', '.join('/'.join(p) for p in pairs[i:])}")
                break
            cpu = cpu_reference(reproduction, dataset, model)
            row = measure(dataset, model, data, device=device, epochs=args.epochs, export=not args.no_export, cpu=cpu)
            key = (row["dataset"], row["model"], row["device"])
            results["rows"] = [r for r in results["rows"] if (r["dataset"], r["model"], r["device"]) != key]
            results["rows"].append(row)
            write_results(out_json, results)
            print(
                f"{dataset:13} {model:17} {row['device']}: {row['seconds_per_epoch']:.2f} s/epoch "
                f"(first {row['epoch_seconds'][0]:.2f}; CPU {_cell(cpu)})  {row['total_seconds']:.0f} s",
                flush=True,
            )
    write_atomic(Path(args.markdown), render(results))
    print(table(results["rows"]))
    print(f"wrote {args.markdown}")


if __name__ == "__main__":
    main()

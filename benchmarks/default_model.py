"""Train, evaluate, choose and document the built-in default model (``qaindex/models/default``).

Two candidates are trained with the documented command, differing only in training data::

    qaindex train TRAIN.jsonl --dev ../shared/datasets/wikiqa/dev.filtered.jsonl \\
        --out DIR --name hyperqa-default --seed 0

- ``wikiqa``: TRAIN = ``wikiqa/train.jsonl``;
- ``wikiqa+trecqa``: TRAIN = ``wikiqa/train.jsonl`` and ``trecqa_raw/train.jsonl`` concatenated.

Both are evaluated (exported ONNX model, through the runtime) on the WikiQA and TrecQA test
splits and on the example FAQ (``examples/faq.jsonl``: each stored question ranks all 289
answers, the task a default model serves). The candidate with the better FAQ MRR becomes the
default; its FAQ numbers are therefore a selection score, not an unbiased estimate. Writes
``qaindex/models/default/`` with its ``MODEL_CARD.md``, and
``benchmarks/results/default_model.json``.

Usage::

    python benchmarks/default_model.py [--data ../shared/datasets]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from qaindex.datasets import read_labelled
from qaindex.evaluate import evaluate_model
from qaindex.model import DEFAULT_MODEL_DIR, Model

ROOT = Path(__file__).resolve().parents[1]
TESTS = {
    "WikiQA test.filtered": "wikiqa/test.filtered.jsonl",
    "TrecQA raw test": "trecqa_raw/test.jsonl",
    "TrecQA clean test": "trecqa_clean/test.jsonl",
}
FAQ = "examples/faq.jsonl (all answers)"
CANDIDATES = {
    "wikiqa": ["wikiqa/train.jsonl"],
    "wikiqa+trecqa": ["wikiqa/train.jsonl", "trecqa_raw/train.jsonl"],
}


def evaluate_all(model_dir: Path, data: Path) -> dict[str, dict[str, Any]]:
    """Metrics of an exported model on every test split and on the example FAQ."""
    model = Model.load(model_dir, threads=None)
    results = {label: evaluate_model(model, read_labelled(data / rel)) for label, rel in TESTS.items()}
    results[FAQ] = evaluate_model(model, read_labelled(ROOT / "examples" / "faq.jsonl"))
    return results


def train_candidate(name: str, data: Path, tmp: Path) -> tuple[Path, list[str]]:
    """Run the documented training command on the candidate's data; returns (model dir, command)."""
    train_file = tmp / f"{name}.jsonl"
    with open(train_file, "wb") as handle:
        for rel in CANDIDATES[name]:
            handle.write((data / rel).read_bytes())
    model_dir = tmp / name
    command = [
        "qaindex", "train", str(train_file),
        "--dev", str(data / "wikiqa/dev.filtered.jsonl"),
        "--out", str(model_dir), "--name", "hyperqa-default", "--seed", "0",
    ]  # fmt: skip
    cli = [sys.executable, "-m", "qaindex.cli", *command[1:], "--quiet"]
    subprocess.run(cli, check=True, stdout=subprocess.DEVNULL)
    return model_dir, command


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", default=str(ROOT.parent / "shared" / "datasets"), help="datasets folder")
    args = parser.parse_args()
    data = Path(args.data)
    out = DEFAULT_MODEL_DIR
    runs: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        for name in CANDIDATES:
            started = time.perf_counter()
            model_dir, _ = train_candidate(name, data, tmp)
            runs[name] = {
                "files": CANDIDATES[name],
                "seconds": time.perf_counter() - started,
                "results": evaluate_all(model_dir, data),
            }
            for label, r in runs[name]["results"].items():
                print(f"{name:14} {label:34} MAP {r['map']:.4f}  MRR {r['mrr']:.4f}  P@1 {r['p@1']:.4f}")
        chosen = max(runs, key=lambda n: runs[n]["results"][FAQ]["mrr"])
        staging = out.with_name(".default.tmp")
        shutil.rmtree(staging, ignore_errors=True)
        shutil.copytree(tmp / chosen, staging)
        shutil.rmtree(out, ignore_errors=True)
        os.replace(staging, out)
    write_card(out, chosen, runs)
    res = ROOT / "benchmarks" / "results" / "default_model.json"
    res.parent.mkdir(parents=True, exist_ok=True)
    res.write_text(json.dumps({"chosen": chosen, "candidates": runs}, indent=2) + "\n")
    print(f"chose {chosen}; wrote {out} (with MODEL_CARD.md) and {res}")


def write_card(out: Path, chosen: str, runs: dict[str, dict[str, Any]]) -> None:
    """Write MODEL_CARD.md beside the chosen model."""
    manifest = Model.read_manifest(out)
    size = sum(p.stat().st_size for p in out.iterdir() if p.is_file() and p.name != "MODEL_CARD.md")
    params = manifest["parameters"]
    dev = manifest["metrics"].get("dev", {})
    rows = "\n".join(
        f"| {name} | {label} | {r['map']:.3f} | {r['mrr']:.3f} | {r['p@1']:.3f} | {r['questions']} |"
        for name, run in runs.items()
        for label, r in run["results"].items()
    )
    sources = " + ".join(f"`{f}`" for f in CANDIDATES[chosen])
    card = f"""# Model card: `{manifest["name"]}` (qaindex built-in default)

<!-- generated by benchmarks/default_model.py; do not edit by hand -->

**What it is.** HyperQA (Tay et al., WSDM 2018): frozen all-MiniLM-L6-v2 WordPiece token
embeddings → a per-word projection `ReLU(W_p z + b_p)` (d = {manifest["dimension"]}) →
sum → mapped into the Poincaré ball (`{manifest["geometry"].get("ball_map")}`, radius
{manifest["geometry"]["max_norm"]}) → Poincaré distance → score `-(w_f·d + b_f)`, higher is
better. {params.get("trainable", 0):,} trainable parameters ({params.get("total", 0):,} with
the frozen embeddings); exported as a folded per-token table (ONNX, {size / 1e6:.1f} MB in all).

**Training data.** {sources} from `../shared/datasets` (WikiQA: Microsoft Research; TrecQA:
TREC QA tracks 8-13 as released by Wang et al.); best epoch by WikiQA dev.filtered MAP
({dev.get("map", float("nan")):.3f}). **Licence: research use only** (see each dataset's
`SOURCE.md`); the token embeddings come from all-MiniLM-L6-v2 (Apache-2.0). The model
inherits the datasets' research-only terms: do not use it commercially; train your own with
`qaindex train` on your data instead.

**How it was chosen and how to regenerate it.** `python benchmarks/default_model.py` trains
two candidates that differ only in training data (`wikiqa`, `wikiqa+trecqa`), each with

```
qaindex train TRAIN.jsonl --dev ../shared/datasets/wikiqa/dev.filtered.jsonl --out DIR --name hyperqa-default --seed 0
```

and keeps the one with the better MRR on the example FAQ (the task a default model serves: a
question against every answer of a corpus). Chosen: **{chosen}**. Rerunning the script
regenerates the model and this card.

**Metrics** (exported ONNX models through the runtime; ties broken by expectation):

| candidate | data | MAP | MRR | P@1 | questions |
|---|---|---|---|---|---|
{rows}

The FAQ rows rank all 289 answers of `examples/faq.jsonl` for each of its stored questions (a
harder task than ranking a question's own 10-30 candidates); they were used to choose, so they
are not an unbiased estimate. The TrecQA test rows are zero-shot only for `wikiqa`.

**Limits.** English only (uncased WordPiece); a bag of words, so word order is ignored;
trained on factoid questions about Wikipedia and news, so support corpora benefit from
`qaindex train` on their own question/answer pairs.
"""
    (out / "MODEL_CARD.md").write_text(card, encoding="utf-8")


if __name__ == "__main__":
    main()

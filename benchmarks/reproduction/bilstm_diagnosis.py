"""Why QA-biLSTM stayed at chance on WikiQA: short runs of optimiser settings on a train subset.

The reproduction's first QA-biLSTM run (AdaGrad, lr 0.1, the setting HyperQA and QA-CNN use)
scored test MAP 0.419 after 5 epochs, the constant baseline's level (0.399). This script trains
QA-biLSTM (MODEL_SETTINGS["qa-bilstm"]) on the first ``--questions`` WikiQA training questions
for ``--epochs`` epochs under each variant below, selects on the full dev.filtered split, and
records per epoch the training loss and dev MAP, plus, for the kept model, how saturated its
pooled vectors ``tanh(max_t h_t)`` are on dev answers (the pooled value of an LSTM is at most
tanh(1) ≈ 0.762) and how far apart a question's candidate scores are.

Usage::

    python -m benchmarks.reproduction.bilstm_diagnosis [--questions 200] [--epochs 2] [--threads 1]

Writes ``benchmarks/results/bilstm_diagnosis.json`` and prints one line per variant.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from benchmarks.common import ROOT, argument_parser
from benchmarks.reproduction.reproduce import MODEL_SETTINGS, SPLITS

VARIANTS: dict[str, dict[str, Any]] = {
    "adagrad lr 0.1 (first run)": {},
    "adagrad lr 0.01": {"lr": 0.01},
    "adam lr 0.001": {"optimizer": "adam", "lr": 0.001},
}


def pooled_stats(result: Any, groups: list[Any]) -> dict[str, float]:
    """Saturation of the pooled dev vectors and the spread of each question's candidate scores."""
    import numpy as np
    import torch

    model = result.model.to("cpu").eval()
    tok = result.tokenizer

    def encode(texts: list[str], limit: int) -> Any:
        ids, mask = tok.pad([tok.encode(t, max_tokens=limit) for t in texts])
        with torch.no_grad():
            return model.encoder(torch.from_numpy(ids), torch.from_numpy(mask)).numpy()

    answers = [c.answer for g in groups for c in g.candidates]
    pooled = encode(answers, result.config.max_answer_tokens)
    questions = encode([g.question for g in groups], result.config.max_question_tokens)
    unit = pooled / np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)
    qunit = questions / np.maximum(np.linalg.norm(questions, axis=1, keepdims=True), 1e-12)
    spreads, start = [], 0
    for i, g in enumerate(groups):
        scores = unit[start : start + len(g.candidates)] @ qunit[i]
        start += len(g.candidates)
        spreads.append(float(scores.max() - scores.min()))
    return {
        "mean_abs_pooled": float(np.abs(pooled).mean()),
        "share_pooled_above_0.7": float((np.abs(pooled) > 0.7).mean()),
        "mean_candidate_score_spread": statistics.mean(spreads),
        "mean_cosine": float((unit @ qunit.T).mean()),
    }


def main() -> None:
    parser = argument_parser(__doc__, data=True)
    parser.add_argument("--questions", type=int, default=200, help="training questions used (from the start)")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated names of VARIANTS")
    args = parser.parse_args()
    from qaindex_export.embeddings.spec import load_minilm
    from qaindex_export.training.train import TrainConfig, train

    from qaindex.eval.datasets import read_labelled

    data = Path(args.data)
    train_file, dev_file, _ = (data / p for p in SPLITS["wikiqa"])
    train_groups = [g for g in read_labelled(train_file) if g.has_positive][: args.questions]
    dev_groups = [g for g in read_labelled(dev_file) if g.has_positive]
    embeddings = load_minilm()
    rows = []
    for name in args.variants.split(","):
        settings = {**MODEL_SETTINGS["qa-bilstm"], **VARIANTS[name]}
        config = replace(TrainConfig(), seed=0, epochs=args.epochs, threads=args.threads, **settings)
        load = os.getloadavg()
        started = time.perf_counter()
        result = train(config, train_groups, dev_groups, log=None, embeddings=embeddings)
        row = {
            "variant": name,
            "settings": settings,
            "history": [{k: h[k] for k in ("epoch", "loss", "dev_map", "train_seconds")} for h in result.history],
            "best_epoch": result.best_epoch,
            "dev_map": result.dev["map"],
            "seconds": time.perf_counter() - started,
            "loadavg_before": list(load),
            **pooled_stats(result, dev_groups),
        }
        rows.append(row)
        print(
            f"{name:28} dev MAP by epoch {[round(h['dev_map'], 3) for h in row['history']]} "
            f"loss {[round(h['loss'], 3) for h in row['history']]} |pooled| {row['mean_abs_pooled']:.3f} "
            f">0.7 {row['share_pooled_above_0.7']:.2f} score spread {row['mean_candidate_score_spread']:.3f} "
            f"mean cos {row['mean_cosine']:.3f}  {row['seconds']:.0f} s",
            flush=True,
        )
    out = ROOT / "benchmarks" / "results" / "bilstm_diagnosis.json"
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(
        json.dumps(
            {
                "machine": platform.platform(),
                "train_questions": len(train_groups),
                "dev_questions": len(dev_groups),
                "epochs": args.epochs,
                "threads": args.threads,
                "rows": rows,
            },
            indent=2,
        )
        + "\n"
    )
    os.replace(tmp, out)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()

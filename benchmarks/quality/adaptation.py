"""Adaptation on users' corpora: the start model vs ``train --teacher`` vs supervised ``train``.

For each corpus, every distinct answer is the pool, and its questions (each with at least one
correct answer) are split once with a fixed seed:

- **labelled share** (``--label-share``, at most ``--max-labels`` questions): what supervised
  training may see (it holds out part of it again to choose its epoch);
- **test questions**: the rest; no system trains on them. Every figure is MRR@10 of these
  questions against the whole pool, through the real :class:`qaindex.Ranker` path
  (``qaindex.eval.evaluate.evaluate_pooled``) of the exported model directory.

Systems, in the same run:

- ``start``: the start model (the built-in default, or ``--start DIR``), untouched;
- ``train --teacher``: :func:`qaindex_export.adaptation.adapt.adapt_unlabelled` on the pool's answers
  against all-MiniLM-L6-v2 (no question seen) — ``qaindex train ANSWERS.jsonl --teacher minilm``;
- ``train``: :func:`qaindex_export.adaptation.adapt.adapt_supervised` on the labelled share, the start
  model as its own teacher — ``qaindex train LABELLED.jsonl --teacher none``;
- ``train + teacher``: :func:`qaindex_export.adaptation.stages.adapt_labelled` — first
  ``train --teacher`` on the pool's answers, then the labelled share from that model with MiniLM's
  soft targets mixed in — ``qaindex train LABELLED.jsonl`` (the default).

Corpora: every ``/work/evaldata``-style folder given with ``--evaldata`` (``NAME/answers.jsonl``
with ``id``/``answer`` and ``NAME/questions.jsonl`` with ``question`` and the id(s) of its
correct answer(s)), else WikiQA test and TrecQA clean test (``--data``; research licences:
evaluation only) and ``examples/faq.jsonl`` (its stored questions; note that the current default's
head was fine-tuned on these answers, without the questions).

Targets: ``train --teacher`` gains ≥ 0.05 MRR@10 over the start model; no mode ends below the
start model on the test questions.

Writes ``benchmarks/results/adaptation.json`` and the table in ``docs/adaptation.md``.

Usage::

    python -m benchmarks.quality.adaptation [--data DATASETS] [--evaldata DIR] [--start MODEL_DIR] [--corpus NAME ...]
    python -m benchmarks.quality.adaptation --render     # the docs table again, from the results file
    # a label-free variant:
    python -m benchmarks.quality.adaptation --teacher-only --settings '{"anchor": 0.001}' --out FILE
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from benchmarks.common import ROOT, argument_parser, write_results
from benchmarks.readme_markers import replace_section
from qaindex.corpus import read_json_lines
from qaindex.eval.calibration_fit import expected_calibration_error
from qaindex.eval.calibration_fit import measure as calibration_measure
from qaindex.eval.datasets import Candidate, QuestionGroup, read_labelled
from qaindex.eval.evaluate import evaluate_pooled
from qaindex.model import DEFAULT_MODEL_DIR, Model

RESULTS = ROOT / "benchmarks" / "results" / "adaptation.json"
DOC = ROOT / "docs" / "adaptation.md"
SHARED = {"WikiQA test": "wikiqa/test.filtered.jsonl", "TrecQA clean test": "trecqa_clean/test.jsonl"}
FAQ = "FAQ (examples/faq.jsonl)"
SYSTEMS = ("start", "train --teacher", "train", "train + teacher")
GAIN_TARGET = 0.05


# ------------------------------------------------------------------------ corpora


def _ids(value: Any) -> list[str]:
    if isinstance(value, list):
        return [str(v) for v in value]
    return [] if value is None else [str(value)]


def read_evaldata(folder: Path) -> tuple[dict[str, str], list[tuple[str, list[str]]]]:
    """``answers.jsonl`` (``id``, ``answer``) and ``questions.jsonl`` (``question`` and the
    correct answer id(s) under ``answer_ids``, ``answer_id``, ``aids`` or ``aid``)."""
    answers = {}
    for _, obj in read_json_lines(folder / "answers.jsonl"):
        answers[str(obj["id"])] = str(obj.get("answer", obj.get("text", "")))
    questions = []
    for _, obj in read_json_lines(folder / "questions.jsonl"):
        key = next((k for k in ("answers", "answer_ids", "answer_id", "aids", "aid") if k in obj), None)
        rel = [a for a in _ids(obj.get(key)) if a in answers] if key else []
        if rel:
            questions.append((str(obj["question"]), rel))
    return answers, questions


def from_groups(groups: list[QuestionGroup]) -> tuple[dict[str, str], list[tuple[str, list[str]]]]:
    """Pool (every distinct answer, keyed by aid and text) and questions with their correct keys."""
    answers: dict[str, str] = {}
    key_of: dict[tuple[str, str], str] = {}
    for g in groups:
        for c in g.candidates:
            if (c.aid, c.answer) not in key_of:
                key_of[(c.aid, c.answer)] = f"a{len(key_of)}"
                answers[key_of[(c.aid, c.answer)]] = c.answer
    questions = []
    for g in groups:
        rel = sorted({key_of[(c.aid, c.answer)] for c in g.candidates if c.label})
        if rel and g.question.strip():
            questions.append((g.question, rel))
    return answers, questions


def corpora(args: argparse.Namespace) -> dict[str, tuple[dict[str, str], list[tuple[str, list[str]]]]]:
    out = {}
    evaldata = Path(args.evaldata)
    if evaldata.is_dir():
        for folder in sorted(evaldata.iterdir()):
            if (folder / "answers.jsonl").is_file() and (folder / "questions.jsonl").is_file():
                out[folder.name] = read_evaldata(folder)
    if not out or args.shared:
        data = Path(args.data)
        for label, rel in SHARED.items():
            if (data / rel).is_file():
                out[label] = from_groups(read_labelled(data / rel))
        out[FAQ] = from_groups(read_labelled(ROOT / "examples" / "faq.jsonl"))
    if args.corpus:
        out = {k: v for k, v in out.items() if k in args.corpus}
    return out


def groups_of(answers: dict[str, str], questions: list[tuple[str, list[str]]], tag: str) -> list[QuestionGroup]:
    """Question groups whose candidates are the whole pool (corpus format), for training and evaluation."""
    keys = list(answers)
    base = [Candidate(k, answers[k], 0) for k in keys]
    index = {k: i for i, k in enumerate(keys)}
    groups = []
    for j, (question, rel) in enumerate(questions):
        cands = list(base)
        for k in rel:
            cands[index[k]] = Candidate(k, answers[k], 1)
        groups.append(QuestionGroup(f"{tag}{j}", question, tuple(cands)))
    return groups


# ------------------------------------------------------------------------ systems


def run_corpus(
    name: str,
    answers: dict[str, str],
    questions: list[tuple[str, list[str]]],
    args: argparse.Namespace,
    teacher: Any,
    tmp: Path,
) -> dict[str, Any]:
    from qaindex_export.adaptation.adapt import adapt_unlabelled
    from qaindex_export.adaptation.config import ADAPT_DEFAULTS, LABEL_FREE_DEFAULTS, AdaptConfig
    from qaindex_export.adaptation.stages import adapt_labelled
    from qaindex_export.config import TrainConfig
    from qaindex_export.exporting.onnx_export import export_model

    rng = np.random.default_rng(args.seed)
    order = rng.permutation(len(questions))
    n_label = min(args.max_labels, round(len(questions) * args.label_share))
    labelled = [questions[i] for i in order[:n_label]]
    test = [questions[i] for i in order[n_label:]]
    test_groups = groups_of(answers, test, "test")
    start_dir = Path(args.start) if args.start else DEFAULT_MODEL_DIR
    overrides = {k: v for k, v in (("lr", args.lr), ("epochs", args.epochs)) if v is not None}
    fixed = {"seed": args.seed, "device": "cpu", "threads": args.threads}
    config = TrainConfig(**{**ADAPT_DEFAULTS, **overrides, **fixed})
    label_free = TrainConfig(**{**LABEL_FREE_DEFAULTS, **overrides, **fixed})  # what `train --teacher` uses
    settings = AdaptConfig(start=str(start_dir), **json.loads(args.settings))
    out: dict[str, Any] = {"answers": len(answers), "labelled": len(labelled), "test_questions": len(test)}
    say = (lambda m: print(f"  {m}", flush=True)) if args.verbose else None

    def measure(system: str, model_dir: Path, result: Any = None, seconds: float = 0.0) -> None:
        model = Model.load(model_dir, threads=None)
        metrics = evaluate_pooled(model, test_groups, k=10)
        row: dict[str, Any] = {k: metrics[k] for k in ("mrr@10", "recall@10", "p@1")}
        raw, best, labels = calibration_measure(model, test_groups, depth=10)  # the test questions' top 10
        row["ece"] = expected_calibration_error(model.calibration(raw, best), labels)
        if result is not None:
            report = result.diagnostics["adaptation"]
            row.update(
                kept_epoch=report["kept_epoch"],
                held_out_start=report["start_metrics"]["mrr@10"],
                held_out_final=report["final_metrics"]["mrr@10"],
                answer_norm_std=report["answer_norms"]["final_std"],
                start_answer_norm_std=report["answer_norms"]["start_std"],
                why=report["why"],
                seconds=round(seconds, 1),
            )
        out[system] = row
        extra = f"  kept epoch {row.get('kept_epoch')}  norm std {row.get('answer_norm_std')}" if result else ""
        print(f"{name[:28]:28} {system:18} MRR@10 {row['mrr@10']:.4f}  P@1 {row['p@1']:.3f}{extra}", flush=True)

    def calibrate(model_dir: Path, texts: list[str] | None, judge: Any, groups: Any = ()) -> None:
        from qaindex_export.adaptation.calibrate import calibrate_trained

        calibrate_trained(
            model_dir, train_data=list(groups), dev_data=None, answers=texts, teacher=judge, seed=config.seed,
            dev_fraction=config.dev_fraction,
        )  # fmt: skip

    measure("start", start_dir)
    t0 = time.perf_counter()
    result = adapt_unlabelled(label_free, settings, list(answers.values()), teacher, log=say)
    export_model(result, tmp / f"{name}-teacher", name="adapted-teacher")
    calibrate(tmp / f"{name}-teacher", list(answers.values()), teacher)  # as `qaindex train --teacher` does
    measure("train --teacher", tmp / f"{name}-teacher", result, time.perf_counter() - t0)
    if len(labelled) >= 4 and not args.teacher_only:
        train_groups = groups_of(answers, labelled, "train")
        for system, mix in (("train", None), ("train + teacher", teacher)):
            t0 = time.perf_counter()
            result = adapt_labelled(config, settings, train_groups, teacher=mix, log=say, label_free=label_free)
            export_model(result, tmp / f"{name}-{system}", name="adapted-supervised")
            calibrate(tmp / f"{name}-{system}", None, None, train_groups)  # as `qaindex train` does
            measure(system, tmp / f"{name}-{system}", result, time.perf_counter() - t0)
    return out


# ------------------------------------------------------------------------ report


def table_markdown(results: dict[str, dict[str, Any]], start_name: str) -> str:
    lines = [
        "| corpus | answers | labelled (train) | test questions | start | train --teacher | train | train + teacher |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for corpus, r in results.items():
        base = r["start"]["mrr@10"]
        cells = []
        for system in SYSTEMS:
            if system not in r:
                cells.append("-")
                continue
            value = r[system]["mrr@10"]
            note = "" if system == "start" else f" ({value - base:+.3f}, epoch {r[system]['kept_epoch']})"
            cells.append(f"{value:.3f}{note}")
        lines.append(
            f"| {corpus} | {r['answers']} | {r['labelled']} | {r['test_questions']} | " + " | ".join(cells) + " |"
        )
    lines.append("")
    lines.append(
        f"Start model: `{start_name}`. MRR@10 of the test questions against every answer of the corpus; in brackets "
        "the change against the start model and the epoch that adaptation kept (0: the start model itself; for "
        "`train + teacher`, the epoch of its labelled stage, 0 being the model its label-free stage handed it)."
    )
    norms = [
        f"{corpus}: {r['train --teacher']['start_answer_norm_std']:.3f} → {r['train --teacher']['answer_norm_std']:.3f}"
        for corpus, r in results.items()
        if r.get("train --teacher", {}).get("answer_norm_std") is not None
    ]
    if norms:
        lines.append("")
        lines.append("Answer-norm standard deviation, start → after `train --teacher`: " + "; ".join(norms) + ".")
    eces = [
        f"{corpus}: "
        + ", ".join(f"{system} {r[system]['ece']:.3f}" for system in SYSTEMS if "ece" in r.get(system, {}))
        for corpus, r in results.items()
    ]
    if any("ece" in r.get("start", {}) for r in results.values()):
        lines.append("")
        lines.append(
            "Expected calibration error of `score` on the test questions' top 10 hits (every model calibrated as "
            "`qaindex train` calibrates it, on data it did not train on; the start model as shipped): "
            + "; ".join(eces) + "."
        )  # fmt: skip
    return "\n".join(lines)


def public_command(command: str) -> str:
    """``command`` as the docs show it: data folders as placeholders, corpus names quoted."""
    command = re.sub(r"--data[ =]\S+", "--data DATASETS", command)
    command = re.sub(r"--evaldata[ =]\S+", "--evaldata EVALDATA", command)
    return re.sub(r"--corpus ([^'-][^-]*?\S)(?= --|$)", lambda m: f"--corpus {shlex.quote(m.group(1))}", command)


def doc_body(out: dict[str, Any]) -> str:
    """The generated section of ``docs/adaptation.md``."""
    return (
        "<!-- generated by benchmarks/quality/adaptation.py; do not edit by hand -->\n\n"
        + table_markdown(out["results"], out["start_model"])
        + "\n\nGenerated by "
        + "; ".join(
            f"`{public_command(c)}`" for c in dict.fromkeys(out.get("commands", {}).values() or [out["command"]])
        )
        + ".\n"
    )


def main() -> None:
    parser = argument_parser(__doc__, data=True, out=RESULTS)
    parser.add_argument("--evaldata", default="/work/evaldata", help="folder of NAME/{answers,questions}.jsonl")
    parser.add_argument("--shared", action="store_true", help="also run the WikiQA/TrecQA/FAQ corpora")
    parser.add_argument("--start", default=None, help="start model directory (default: the built-in model)")
    parser.add_argument("--corpus", action="append", default=[], help="only these corpora (repeatable)")
    parser.add_argument("--label-share", type=float, default=0.5, help="share of questions supervised training sees")
    parser.add_argument("--max-labels", type=int, default=300, help="at most this many labelled questions")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--lr", type=float, default=None, help="learning rate (default: adaptation's)")
    parser.add_argument("--epochs", type=int, default=None, help="epochs (default: adaptation's)")
    parser.add_argument("--settings", default="{}", help="AdaptConfig fields as JSON, e.g. '{\"anchor\": 0.1}'")
    parser.add_argument("--teacher-only", action="store_true", help="only the start model and `train --teacher`")
    parser.add_argument("--render", action="store_true", help="only rewrite the docs table from the results file")
    parser.add_argument("--merge", action="store_true", help="keep the other corpora of the results file")
    parser.add_argument("--verbose", action="store_true", help="per-epoch progress")
    args = parser.parse_args()
    if args.render:
        replace_section("adaptation", doc_body(json.loads(Path(args.out).read_text())), DOC)
        return
    from qaindex_export.adaptation.config import TEACHER_TOKENS
    from qaindex_export.adaptation.teachers import remembering
    from qaindex_export.embeddings.distill import minilm_sentence_teacher

    teacher = remembering(minilm_sentence_teacher(max_tokens=TEACHER_TOKENS))  # each system embeds the same answers
    started = time.perf_counter()
    results: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory() as tmpdir:
        for name, (answers, questions) in corpora(args).items():
            results[name] = run_corpus(name, answers, questions, args, teacher, Path(tmpdir))
    start_name = Model.read_manifest(Path(args.start) if args.start else DEFAULT_MODEL_DIR)["name"]
    command = "python -m benchmarks.quality.adaptation " + shlex.join(sys.argv[1:])
    commands = {corpus: command.strip() for corpus in results}
    if args.merge and Path(args.out).is_file():  # keep other corpora of an earlier run (same start model)
        old = json.loads(Path(args.out).read_text())
        if old.get("start_model") == start_name:
            old_commands = old.get("commands") or {c: old["command"] for c in old["results"]}
            results = {**old["results"], **results}
            commands = {**old_commands, **commands}
    checks = {
        corpus: {
            "teacher_gain": r["train --teacher"]["mrr@10"] - r["start"]["mrr@10"],
            "teacher_gain_met": r["train --teacher"]["mrr@10"] - r["start"]["mrr@10"] >= GAIN_TARGET,
            "never_worse": {s: r[s]["mrr@10"] >= r["start"]["mrr@10"] for s in SYSTEMS[1:] if s in r},
        }
        for corpus, r in results.items()
    }
    out = {
        "start_model": start_name,
        "k": 10,
        "protocol": {"label_share": args.label_share, "max_labels": args.max_labels, "seed": args.seed},
        "results": results,
        "targets": {"teacher_gain": GAIN_TARGET, "checks": checks},
        "seconds": time.perf_counter() - started,
        "command": command.strip(),
        "commands": commands,
    }
    write_results(args.out, out)
    if Path(args.out).resolve() == RESULTS:
        replace_section("adaptation", doc_body(out), DOC)
    print(f"wrote {args.out} in {out['seconds']:.0f}s")


def readme_body(results: dict[str, Any]) -> str:
    """The generated section of ``docs/adaptation.md`` (checked by ``tests/docs/test_claims.py``)."""
    return doc_body(results)


if __name__ == "__main__":
    main()

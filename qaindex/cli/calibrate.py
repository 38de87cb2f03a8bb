"""``qaindex calibrate``: fit a model's score calibration (:mod:`qaindex.search.calibration`).

Also the lines ``qaindex info`` prints about hybrid search and scores.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click

from ..eval.calibration_fit import DEFAULT_DEPTH, calibrate_model, expected_calibration_error, measure
from ..search.calibration import CALIBRATION_METHODS

__all__ = ["calibrate_command", "calibration_line", "hybrid_line", "offtopic_questions"]


def offtopic_questions(path: Path | None, none: bool) -> tuple[list[str], str]:
    """The off-topic questions ``calibrate`` fits as not relevant, and their provenance:
    ``path``'s (every line), none, or the built-in set's ``fit`` split."""
    from ..eval.offtopic import BUILTIN_OFFTOPIC, read_offtopic

    if none:
        return [], ""
    if path is not None:
        return read_offtopic(path), path.name
    return read_offtopic(BUILTIN_OFFTOPIC, split="fit"), "built-in off-topic questions (fit split)"


def hybrid_line(hybrid: dict[str, Any] | None) -> str:
    """What ``info`` says about the index's lexical index."""
    if hybrid is None:
        return "no lexical index (dense search only; build with --hybrid for hybrid search)"
    return (
        f"BM25 index of {hybrid['terms']:,} terms (k1 {hybrid['k1']}, b {hybrid['b']}); "
        "searches fuse dense and BM25 rankings"
    )


def calibration_line(calibration: dict[str, Any]) -> str:
    """What ``info`` says about the model's score calibration."""
    if not calibration.get("calibrated"):
        return "uncalibrated: score = sigmoid(raw score), not a probability (run qaindex calibrate)"
    ece = calibration.get("ece")
    where = f" on {calibration['data']}" if calibration.get("data") else ""
    off = calibration.get("offtopic")
    return (
        f"calibrated ({calibration['method']}{where}, {calibration.get('labels', 'labelled')}"
        + (f", {off['questions']} off-topic questions" if isinstance(off, dict) and "questions" in off else "")
        + (f", ECE {ece:.3f}" if isinstance(ece, float) else "")
        + "): score estimates P(relevant)"
    )


@contextlib.contextmanager
def _model_to_calibrate(model_dir: str, out: Path | None, dry_run: bool) -> Iterator[Path]:
    """The directory whose manifest gets the calibration: MODEL_DIR itself, or (with ``--out``)
    a copy of it, moved to ``out`` only once calibrated (a failure leaves no ``out``). The
    built-in model (``default``) is never changed: it needs ``--out``."""
    from ..model import DEFAULT_MODEL_NAME, resolve_model_path

    source = resolve_model_path(model_dir)
    if not (source / "manifest.json").is_file():
        raise click.ClickException(f"{model_dir}: no such model directory")
    if out is None or dry_run:
        if model_dir == DEFAULT_MODEL_NAME and not dry_run:
            raise click.UsageError(
                "default is the built-in model, which calibrate never changes: pass --out DIR to write a "
                "calibrated copy (then use --model DIR), or --dry-run to fit and report only"
            )
        yield source
        return
    if out.exists() or out.is_symlink():
        raise click.ClickException(f"--out {out}: already exists; choose a new directory for the calibrated copy")
    out.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        shutil.copytree(source, work, dirs_exist_ok=True)
        yield work
        work.rename(out)
    finally:
        shutil.rmtree(work, ignore_errors=True)


@click.command("calibrate", epilog="MODEL_DIR may be the word `default`: the built-in model (with --out).")
@click.argument("model_dir", type=click.Path())  # kept as typed: "default" names the built-in model
@click.argument("data", type=click.Path(path_type=Path, dir_okay=False, exists=True))
@click.option(
    "--method",
    type=click.Choice(CALIBRATION_METHODS),
    default="platt",
    show_default=True,
    help="Platt scaling (a sigmoid of the raw score) or isotonic regression.",
)
@click.option(
    "--depth",
    type=click.IntRange(min=1),
    default=DEFAULT_DEPTH,
    show_default=True,
    help="Hits per question used as (score, relevant?) pairs.",
)
@click.option(
    "--teacher",
    type=click.Choice(["minilm"]),
    default=None,
    help="DATA is a corpus of answers (no labels needed): pseudo-questions are cut from them and "
    "all-MiniLM-L6-v2 judges which answer is relevant (needs the train extra).",
)
@click.option(
    "--per-answer",
    type=click.IntRange(min=1),
    default=2,
    show_default=True,
    help="With --teacher: pseudo-questions cut from each answer.",
)
@click.option(
    "--check",
    "checks",
    multiple=True,
    type=click.Path(path_type=Path, dir_okay=False, exists=True),
    help="Held-out labelled data (repeatable) to report expected calibration error on after fitting.",
)
@click.option(
    "--offtopic",
    type=click.Path(path_type=Path, dir_okay=False, exists=True),
    default=None,
    help='JSONL of questions DATA does not answer, one {"question": ...} per line: their top hits are '
    "fitted as not relevant, so that off-topic questions score low. Default: the built-in set of general "
    "off-topic questions (docs/scores.md).",
)
@click.option("--no-offtopic", is_flag=True, help="Fit on DATA's questions only, without off-topic questions.")
@click.option(
    "--hybrid-score/--no-hybrid-score",
    default=None,
    help="Also calibrate hybrid hits (the default search) on their fused value (fusion.fused_score in the "
    "manifest; needs the hybrid extra). Default: on for labelled DATA where the hybrid extra is installed, "
    "off with --teacher: fit it on questions like your users', not on pseudo-questions (docs/scores.md).",
)
@click.option("--dry-run", is_flag=True, help="Fit and report, but leave the model directory unchanged.")
@click.option(
    "--out",
    type=click.Path(path_type=Path, file_okay=False),
    default=None,
    help="Write a calibrated copy of MODEL_DIR to this new directory and leave MODEL_DIR unchanged "
    "(needed for `default`, the built-in model).",
)
def calibrate_command(
    model_dir: str,
    data: Path,
    method: str,
    depth: int,
    teacher: str | None,
    per_answer: int,
    checks: tuple[Path, ...],
    offtopic: Path | None,
    no_offtopic: bool,
    hybrid_score: bool | None,
    dry_run: bool,
    out: Path | None,
) -> None:
    """Calibrate MODEL_DIR's scores on held-out DATA (JSONL) and store the calibration in its manifest.

    DATA is labelled (benchmark format, or a corpus with questions) and must not be what the
    model was trained on; with --teacher it is a corpus of answers judged by the teacher.
    Hits then get score = estimated probability of relevance (docs/scores.md). The top hits
    of off-topic questions (--offtopic, or a built-in set) are fitted as not relevant.
    """
    if offtopic is not None and no_offtopic:
        raise click.UsageError("--offtopic and --no-offtopic exclude each other; give one")
    off_questions, off_source = offtopic_questions(offtopic, no_offtopic)
    if hybrid_score is None:  # the default search is hybrid: its score is refitted with the model's
        from ..text.lexical import tokenizer_available

        hybrid_score = teacher is None and tokenizer_available()
    with _model_to_calibrate(model_dir, out, dry_run) as target:
        report = _calibrate(
            target, data, method, depth, teacher, per_answer, checks, off_questions, off_source, hybrid_score, dry_run
        )
    report["model"] = str(out if out is not None and not dry_run else target)
    click.echo(json.dumps(report, indent=2))


def _calibrate(
    target: Path,
    data: Path,
    method: str,
    depth: int,
    teacher: str | None,
    per_answer: int,
    checks: tuple[Path, ...],
    off_questions: list[str],
    off_source: str,
    hybrid_score: bool,
    dry_run: bool,
) -> dict[str, Any]:
    """Fit the calibration of the model in ``target`` (written there unless ``dry_run``); the report."""
    from ..eval.datasets import read_labelled
    from ..model import Model

    if teacher is not None:
        from ..corpus import read_corpus
        from .train import _require_torch

        _require_torch()
        from qaindex_export.adaptation.calibrate import teacher_calibration_data
        from qaindex_export.embeddings.distill import minilm_sentence_teacher

        answers = [r.answer for r in read_corpus(data)]
        given = len(off_questions)
        groups, off_questions = teacher_calibration_data(
            answers, minilm_sentence_teacher(), off_questions, per_answer=per_answer
        )
        if len(off_questions) < given:
            off_source += f"; {given - len(off_questions)} of {given} left out, close to an answer for the teacher"
        labels = "teacher: all-MiniLM-L6-v2 top-1 on pseudo-questions cut from the answers"
    else:
        groups = read_labelled(data)
        labels = "labelled"
    stored = calibrate_model(
        target,
        groups,
        method=method,
        depth=depth,
        source=data.name,
        labels=labels,
        write=not dry_run,
        offtopic=off_questions,
        offtopic_source=off_source,
        hybrid=hybrid_score,
    )
    report: dict[str, Any] = {"model": str(target), "written": not dry_run, "calibration": stored}
    if checks:
        model = Model.load(target)
        from ..search.calibration import Calibration

        fitted = Calibration.from_manifest(stored)
        report["checks"] = {}
        for path in checks:
            raw, best, y = measure(model, read_labelled(path), depth=depth)
            report["checks"][str(path)] = {  # as given: two test.jsonl of different folders stay apart
                "pairs": len(y),
                "relevant": round(float(y.mean()), 4),
                "ece": round(expected_calibration_error(fitted(raw, best), y), 4),
            }
    return report

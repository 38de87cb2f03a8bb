"""Labelled adaptation with a sentence teacher, in two stages: the corpus's answers first, without
their labels (:func:`.adapt.adapt_unlabelled`), then the labels, from there (:func:`.adapt.adapt_supervised`).

Label-free adaptation fits every answer of the corpus to the teacher; a few hundred labels name
only the answers their questions ask for. Trained from the start model with the teacher's soft
targets mixed into the labels' loss, the labels reached less than label-free adaptation alone
(docs/adaptation.md). In two stages they can only add to it:

1. the start model is adapted label-free on the answers of the labelled data (its questions are
   not read), with label-free adaptation's own guard (held-out pseudo-questions);
2. that model becomes the start of supervised adaptation only if it ranks the labelled questions
   (which it never saw) at least as well as the start model does (MRR@10); supervised adaptation
   then keeps its start unless an epoch beats it on held-out labelled questions beyond noise.

Example
-------
>>> result = adapt_labelled(TrainConfig(), AdaptConfig(), "faq.jsonl", teacher=teacher)  # doctest: +SKIP
>>> result.diagnostics["adaptation"]["label_free"]["used"]  # doctest: +SKIP
True
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np

from qaindex.eval.datasets import QuestionGroup
from qaindex.eval.evaluate import evaluate_pooled
from qaindex.model import Model

from ..config import TrainConfig
from ..exporting.onnx_export import export_model
from ..training.data import load_groups
from ..training.loop import Log
from ..training.result import TrainResult
from .adapt import adapt_supervised, adapt_unlabelled
from .config import LABEL_FREE_DEFAULTS, AdaptConfig
from .start import StartPoint, load_start
from .teachers import remembering

__all__ = ["adapt_labelled"]

Data = str | os.PathLike[str] | Sequence[QuestionGroup]
MIN_ANSWERS = 4  # what label-free adaptation needs to split its answers


def adapt_labelled(
    config: TrainConfig,
    settings: AdaptConfig,
    train_data: Data,
    dev_data: Data | None = None,
    *,
    teacher: Callable[[Sequence[str]], np.ndarray] | None = None,
    start: StartPoint | str | os.PathLike[str] | None = None,
    log: Log | None = None,
    label_free: TrainConfig | None = None,
) -> TrainResult:
    """Supervised adaptation (:func:`.adapt.adapt_supervised`); with a sentence ``teacher``, after
    label-free adaptation of the start model on the labelled data's answers (module docstring).

    Parameters
    ----------
    config : TrainConfig
        The supervised stage's settings.
    settings, train_data, dev_data, teacher, start, log
        As :func:`.adapt.adapt_supervised`.
    label_free : TrainConfig, keyword-only, optional
        The label-free stage's settings (default: ``config`` with
        :data:`~.config.LABEL_FREE_DEFAULTS`' step size and epochs).

    Returns
    -------
    TrainResult
        The supervised stage's, its report (``diagnostics["adaptation"]``) naming the original
        start and, under ``label_free``, the first stage: its kept epoch and why, both models'
        MRR@10 on the labelled questions and whether it was used.
    """
    if teacher is None:
        return adapt_supervised(config, settings, train_data, dev_data, start=start, log=log)
    say: Log = log if log is not None else (lambda _m: None)
    teacher = remembering(teacher)  # both stages embed the answers: once
    origin = start if isinstance(start, StartPoint) else load_start(start if start is not None else settings.start)
    groups = [g for g in load_groups(train_data)[0] if g.has_positive]
    answers = list(dict.fromkeys(c.answer for g in groups for c in g.candidates if c.answer.strip()))
    if len(answers) < MIN_ANSWERS:
        why = f"no label-free stage: {len(answers)} distinct answers, fewer than {MIN_ANSWERS}"
        say(f"[adapt] {why}")
        result = adapt_supervised(config, settings, train_data, dev_data, teacher=teacher, start=origin, log=log)
        skipped = {"kept_epoch": 0, "why": why, "held_out": None, "labelled_mrr@10": None, "used": False}
        result.diagnostics["adaptation"]["label_free"] = skipped
        return result
    say(f"[adapt] stage 1: label-free on the {len(answers)} answers of the labelled data")
    if label_free is None:
        label_free = replace(config, lr=LABEL_FREE_DEFAULTS["lr"], epochs=LABEL_FREE_DEFAULTS["epochs"])
    first = adapt_unlabelled(label_free, settings, answers, teacher, start=origin, log=log)
    first_report = first.diagnostics["adaptation"]
    with tempfile.TemporaryDirectory(prefix="qaindex-stage1-") as tmp:
        stage = export_model(first, Path(tmp) / "label-free", name=f"{origin.manifest.get('name', 'start')}-label-free")
        mrr = {
            "start": _mrr10(origin.directory, groups),
            "label_free": _mrr10(Path(stage), groups),
        }
        used = first_report["kept_epoch"] > 0 and mrr["label_free"] >= mrr["start"]
        say(
            f"[adapt] stage 2: labels, from the {'label-free model' if used else 'start model'} (MRR@10 on the "
            f"labelled questions: start {mrr['start']:.4f}, label-free {mrr['label_free']:.4f})"
        )
        second_start = load_start(stage) if used else origin
        result = adapt_supervised(config, settings, train_data, dev_data, teacher=teacher, start=second_start, log=log)
    report = result.diagnostics["adaptation"]
    if used:  # the labelled stage's "start model" is the label-free one
        report["why"] = (
            f"the label-free stage's epoch {first_report['kept_epoch']} started the labelled stage; " + report["why"]
        )
    report["start"] = {"directory": str(origin.directory), "name": origin.manifest.get("name")}
    report["label_free"] = {
        "kept_epoch": first_report["kept_epoch"],
        "why": first_report["why"],
        "held_out": first_report["held_out"],
        "labelled_mrr@10": mrr,
        "used": used,
    }
    return result


def _mrr10(model_dir: Path, groups: list[QuestionGroup]) -> float:
    """MRR@10 of ``groups`` ranked by the model in ``model_dir`` among every answer they name."""
    return float(evaluate_pooled(Model.load(model_dir, threads=None), groups, k=10)["mrr@10"])

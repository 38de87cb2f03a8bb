"""``qaindex train``: train HyperQA / CosineQA with PyTorch and export an ONNX model directory.

The command is loaded by the ``qaindex`` group when it is named (:mod:`.app`). torch
and the training package (``qaindex_export``) are imported only when the command runs, so the
runtime CLI works without the ``train`` extra.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from dataclasses import Field, fields
from pathlib import Path
from typing import Any, TypeVar

import click
from qaindex_export.adaptation.config import (
    ADAPT_DEFAULTS,
    LABEL_FREE_DEFAULTS,
    QUICK_ANSWERS,
    TEACHER_TOKENS,
    AdaptConfig,
)
from qaindex_export.config import TrainConfig, read_config_file

from ..errors import MissingDependencyError, QAIndexError
from .options import torch_extra_hint

__all__ = ["adapt_to_corpus", "train"]

# Training without labels (--teacher on a corpus without questions) starts from these settings
# (a bag-of-words table fitted to a teacher's sentence vectors); options and --config override them.
UNLABELLED_DEFAULTS = {"lr": 0.02, "optimizer": "adam", "batch_size": 64, "epochs": 20}

TORCH_HINT = f"training needs the train extra: {torch_extra_hint('train')}"


def _require_torch() -> None:
    """Import torch, or raise :class:`MissingDependencyError` naming the extra to install."""
    try:
        import torch  # noqa: F401
    except ImportError:
        raise MissingDependencyError(TORCH_HINT) from None


def _no_labels(train_file: Path, out: Path) -> QAIndexError:
    """The error for labelled training on a corpus without questions: it points at --teacher."""
    return QAIndexError(
        f"{train_file}: no questions found, so there are no labels to train on; train without labels "
        f"against the MiniLM teacher: qaindex train {train_file} --teacher minilm --out {out} "
        '(or give the answers "question"/"questions" fields)'
    )


def _answers_without_questions(train_file: Path, *, strict: bool = True) -> list[str] | None:
    """The answers of a corpus that has no question at all (None when it has questions).

    Not ``strict``: None too when the file is not a valid corpus (training's own reader then
    says what is wrong with it).
    """
    from ..corpus import read_corpus
    from ..errors import CorpusError

    try:
        records = read_corpus(train_file)
    except CorpusError:
        if strict:
            raise
        return None
    if any(r.questions for r in records):
        return None
    return [r.answer for r in records]


def _train_with_teacher(config: Any, answers: list[str], device: str, log: Any) -> Any:
    """Unlabelled training against all-MiniLM-L6-v2 (see qaindex_export.training.unlabelled.train_unlabelled)."""
    from qaindex_export.training.unlabelled import train_unlabelled

    return train_unlabelled(config, answers, _sentence_teacher(device, max_tokens=None), log=log)


# TrainConfig fields adaptation uses; any other one shapes a new model (so it implies --from-scratch).
ADAPT_USES = frozenset({"lr", "optimizer", "batch_size", "negatives", "epochs", "seed", "device", "threads"})


def _adapting(values: dict[str, Any], adapt: dict[str, Any]) -> tuple[bool, str]:
    """Whether this run adapts a start model, and why (or why not)."""
    shaping = sorted(k for k in values if k not in ADAPT_USES)
    if adapt.get("from_scratch"):
        if adapt.get("start") is not None:
            raise click.UsageError("--start and --from-scratch exclude each other: adapt a model or train a new one")
        return False, "--from-scratch"
    if shaping:
        flags = ", ".join("--" + k.replace("_", "-") for k in shaping)
        if adapt.get("start") is not None:
            raise click.UsageError(
                f"{flags}: the start model fixes its form; drop {flags}, or train a new model with --from-scratch "
                "instead of --start"
            )
        return False, f"{flags} shape a new model (implies --from-scratch)"
    return True, f"adapting {adapt.get('start') or 'the built-in model'}"


def _adapt(
    train_file: Path,
    dev_file: Path | None,
    sentence_teacher: Any,
    config: Any,
    answers: list[str] | None,
    settings: AdaptConfig,
    log: Any,
) -> Any:
    """Adaptation of the start model (qaindex_export.adaptation.adapt): label-free on ``answers`` (a corpus
    without questions, with a teacher), else supervised on the corpus's questions. ``sentence_teacher``:
    :func:`_sentence_teacher`'s, or None (labels alone); ``settings``: validated."""
    from qaindex_export.adaptation.adapt import adapt_unlabelled
    from qaindex_export.adaptation.stages import adapt_labelled

    if answers is not None:
        assert sentence_teacher is not None
        return adapt_unlabelled(config, settings, answers, sentence_teacher, log=log)
    return adapt_labelled(config, settings, train_file, dev_file, teacher=sentence_teacher, log=log)


def adapt_to_corpus(corpus: Path, out: Path, *, start: str | None, device: str, log: Any) -> dict[str, Any]:
    """What ``qaindex build --adapt`` runs before it builds: the start model adapted to ``corpus``
    and written, calibrated, to ``out``, as ``qaindex train --teacher minilm`` does with its
    defaults, on a smaller sample of the answers.

    Label-free against the all-MiniLM-L6-v2 teacher on a sample of at most :data:`QUICK_ANSWERS`
    of the corpus's answers; then, when records
    have stored questions (``question``/``questions``), on those as labels from the label-free
    model, epochs chosen by k-fold over them
    (:func:`qaindex_export.adaptation.stages.adapt_labelled`). Each stage keeps its start when
    no epoch beats it beyond noise.

    Returns
    -------
    dict
        ``{"mode", "kept_epoch", "why", "label_free_used", "calibration"}``.
    """
    from qaindex_export.exporting.onnx_export import export_model

    answers = _answers_without_questions(corpus)
    defaults = LABEL_FREE_DEFAULTS if answers is not None else ADAPT_DEFAULTS
    config = TrainConfig(**{**defaults, "device": device}).validate()
    settings = AdaptConfig(start=None if start in (None, "default") else start, max_answers=QUICK_ANSWERS).validate()
    teacher = _sentence_teacher(config.device)  # one MiniLM for the adaptation and the calibration
    result = _adapt(corpus, None, teacher, config, answers, settings, log)
    path = export_model(result, out, dev_data=None)
    calibration = _calibrate(path, corpus, None, answers, config, config.device, result.dev_groups, teacher=teacher)
    report = result.diagnostics["adaptation"]
    stage = report.get("label_free")
    mode = "without labels, against all-MiniLM-L6-v2"
    if stage is not None:
        if stage["used"]:
            first = f"its epoch {stage['kept_epoch']} used"
        elif stage["labelled_mrr@10"] is None:
            first = "none: too few answers"
        elif stage["kept_epoch"] == 0:
            first = "it kept the start model"
        else:
            first = "not used: below the start model on the stored questions"
        mode = f"against all-MiniLM-L6-v2 without labels ({first}), then on the corpus's stored questions"
    return {
        "mode": mode,
        "kept_epoch": report["kept_epoch"],
        "why": report["why"],
        "label_free_used": bool(stage is not None and stage["used"]),
        "calibration": calibration,
    }


def _sentence_teacher(device: str, *, max_tokens: int | None = TEACHER_TOKENS) -> Any:
    """all-MiniLM-L6-v2 on the training device (``auto``: CUDA when present), reading at most
    ``max_tokens`` word pieces of a text (adaptation's :data:`TEACHER_TOKENS`; None: its own 256)."""
    from qaindex_export.embeddings.distill import minilm_sentence_teacher

    teacher_device = "cuda" if device == "cuda" else None
    if device == "auto":
        import torch

        teacher_device = "cuda" if torch.cuda.is_available() else None
    return minilm_sentence_teacher(device=teacher_device, max_tokens=max_tokens)


def _adaptation_summary(result: Any) -> dict[str, Any] | None:
    report = (result.diagnostics or {}).get("adaptation")
    if report is None:
        return None
    return {
        "start": report["start"]["name"],
        "held_out": report["held_out"],
        "start_mrr@10": report["start_metrics"]["mrr@10"],
        "final_mrr@10": report["final_metrics"]["mrr@10"],
        "kept_epoch": report["kept_epoch"],
        "why": report["why"],
        "stopping": report["stopping"],
        "answer_norm_std": {"start": report["answer_norms"]["start_std"], "final": report["answer_norms"]["final_std"]},
        **({"label_free": _stage_summary(report["label_free"])} if "label_free" in report else {}),
    }


def _stage_summary(stage: dict[str, Any]) -> dict[str, Any]:
    """The label-free first stage of labelled adaptation with a teacher, as the summary shows it."""
    return {"kept_epoch": stage["kept_epoch"], "used": stage["used"], "labelled_mrr@10": stage["labelled_mrr@10"]}


def _calibrate(
    path: Path,
    train_file: Path,
    dev_file: Path | None,
    answers: list[str] | None,
    config: Any,
    device: str,
    held_out: Any = None,
    *,
    teacher: Any = None,
) -> dict[str, Any]:
    """Calibrate the exported model's scores on held-out data (:mod:`qaindex.search.calibration`);
    a model that cannot be calibrated (e.g. no irrelevant hit) stays uncalibrated, said in the summary.
    Without labels (``answers``) the teacher judges the pseudo-questions: ``teacher``, the one the
    adaptation used, or a new one."""
    from qaindex_export.adaptation.calibrate import calibrate_trained

    if answers is None:
        teacher = None
    elif teacher is None:
        teacher = _sentence_teacher(device)
    try:
        stored = calibrate_trained(
            path,
            train_data=train_file,
            dev_data=dev_file,
            answers=answers,
            teacher=teacher,
            seed=config.seed,
            dev_fraction=config.dev_fraction,
            held_out=held_out,
        )
    except QAIndexError as exc:
        return {"calibrated": False, "why": str(exc)}
    return {"calibrated": True, **{k: stored[k] for k in ("method", "data", "pairs", "ece")}}


# The settings `train --help` shows; every other one (research settings) is listed by --help-all
# and can also go in a --config file.
FIRST_SETTINGS = frozenset({"start", "from_scratch", "model", "epochs", "seed", "device"})


def _option_for(setting: Field[Any]) -> Callable[[F], F]:
    """The click option of one :class:`TrainConfig` field: ``--batch-size`` for ``batch_size``.

    Its help text and choices come from the field's metadata; it has no click default (a
    value counts only when given), so ``--config FILE`` and the dataclass supply the rest.
    Hidden from ``--help`` (shown by ``--help-all``) unless in :data:`FIRST_SETTINGS`.
    """
    flag = "--" + setting.name.replace("_", "-")
    help_text = f"{setting.metadata['help']} [default: {default_text(setting.name, setting.default)}]"
    hidden = setting.name not in FIRST_SETTINGS
    kind = str(setting.type).replace(" ", "")
    if kind.startswith("bool"):
        no = "--freeze-embeddings" if setting.name == "train_embeddings" else f"--no-{flag[2:]}"
        return click.option(f"{flag}/{no}", setting.name, default=None, help=help_text, hidden=hidden)
    choices = setting.metadata.get("choices")
    param: Any = click.Choice(choices) if choices else {"int": int, "float": float}.get(kind.split("|")[0], str)
    return click.option(flag, setting.name, type=param, default=None, help=help_text, hidden=hidden)


def default_text(name: str, default: Any) -> str:
    """A setting's default as ``--help`` shows it: adaptation (the default mode) and training
    from scratch start from different values for the settings both use.

    Example
    -------
    >>> default_text("epochs", 25)
    '12 when adapting (20 without labels), 25 from scratch (20 with --teacher and no questions)'
    >>> default_text("dim", 300), default_text("threads", None)
    ('300', 'auto')
    """
    shown = "auto" if default is None else str(default)
    if name not in ADAPT_DEFAULTS:
        return shown
    adapt, free = ADAPT_DEFAULTS[name], LABEL_FREE_DEFAULTS[name]
    text = f"{adapt} when adapting" + (f" ({free} without labels)" if free != adapt else "")
    scratch = f"{shown} from scratch"
    if UNLABELLED_DEFAULTS.get(name, default) != default:
        scratch += f" ({UNLABELLED_DEFAULTS[name]} with --teacher and no questions)"
    return f"{text}, {scratch}"


def _help_all(ctx: click.Context, param: click.Parameter, value: bool) -> None:
    """``--help-all``: the help with every option, the hidden research settings included."""
    if not value or ctx.resilient_parsing:
        return
    hidden = [p for p in ctx.command.params if getattr(p, "hidden", False)]
    for p in hidden:
        p.hidden = False  # type: ignore[attr-defined]
    try:
        click.echo(ctx.get_help())
    finally:
        for p in hidden:
            p.hidden = True  # type: ignore[attr-defined]
    ctx.exit()


F = TypeVar("F", bound=Callable[..., Any])


def _config_options(f: F) -> F:
    for setting in reversed(fields(TrainConfig)):
        f = _option_for(setting)(f)
    return f


def _adapt_options(f: F) -> F:
    for setting in reversed(fields(AdaptConfig)):
        f = _option_for(setting)(f)
    return f


@click.command("train")
@click.argument("train_file", metavar="TRAIN.jsonl", type=click.Path(path_type=Path, dir_okay=False))
@click.option(
    "--dev",
    "dev_file",
    type=click.Path(path_type=Path, dir_okay=False),
    default=None,
    help="Labelled dev file for choosing the best epoch (default: hold out --dev-fraction of the training questions).",
)
@click.option(
    "--out",
    "out",
    type=click.Path(path_type=Path, file_okay=False),
    required=True,
    help="Model directory to write (an existing model directory there is replaced).",
)
@click.option(
    "--config",
    "config_file",
    type=click.Path(path_type=Path, dir_okay=False),
    default=None,
    help="Training settings from a JSON (.json) or TOML file, keys named like the options below "
    "(batch_size or batch-size); options given on the command line win.",
)
@click.option(
    "--teacher",
    type=click.Choice(["minilm", "none"]),
    default=None,
    help="The sentence-transformer teacher (all-MiniLM-L6-v2, offline). Adapting with questions, it is the "
    "default: adaptation runs without labels on the answers first, then on the labels from there, the teacher's "
    "soft targets mixed into their loss (--teacher-weight); none: the labels alone, the start model as its own "
    "teacher. A corpus without any question needs minilm: pseudo-questions are cut from the answers and the "
    "teacher decides which answers they match. From scratch, the usual hinge training runs on the distilled table.",
)
@_adapt_options
@_config_options
@click.option(
    "--table-dtype",
    type=click.Choice(["auto", "float32", "float16"]),
    default="auto",
    show_default=True,
    hidden=True,
    help="Storage of the exported per-token table; auto picks float16 only when float32 would exceed 20 MB.",
)
@click.option("--name", default=None, help="Model name in the manifest (default: derived from the settings).")
@click.option(
    "--checkpoint",
    type=click.Path(path_type=Path, file_okay=False),
    default=None,
    hidden=True,
    help="Also save the best checkpoint to this directory (weights.safetensors + checkpoint.json; no pickle).",
)
@click.option("--quiet", is_flag=True, help="No per-epoch progress on stderr.")
@click.option(
    "--help-all",
    is_flag=True,
    is_eager=True,
    expose_value=False,
    callback=_help_all,
    help="Show every option, the research settings (loss, geometry, negatives, adaptation weights...) included.",
)
def train(
    train_file: Path,
    dev_file: Path | None,
    out: Path,
    config_file: Path | None,
    teacher: str | None,
    table_dtype: str,
    name: str | None,
    checkpoint: Path | None,
    quiet: bool,
    **options: Any,
) -> None:
    """Train a model on TRAIN.jsonl and export it to --out as a qaindex model directory.

    By default training adapts a start model (the built-in one, or --start DIR) to the data and
    never ends worse than it on held-out questions of the same data: part of the questions (or,
    without labels, of the answers' pseudo-questions) is held out, the start model is evaluated
    on it as epoch 0, and the best epoch, epoch 0 included, is kept. --from-scratch (or any option
    that shapes a new model, such as --model, --embeddings or --dim) trains a new model instead.

    TRAIN.jsonl (and --dev) are benchmark-format lines {"qid", "question", "aid", "answer",
    "label"} or a corpus with "question"/"questions" fields (negatives then come from the
    other answers). Progress goes to stderr; a JSON summary to stdout.

    With --teacher minilm, TRAIN.jsonl may be a plain corpus of answers with no questions at
    all: the model is then fine-tuned against the teacher's sentence embeddings of the
    answers (no labels needed; pseudo-questions cut from them are the held-out split).
    Adaptation defaults to Adam, lr 0.005, batch 64, 12 epochs (without labels: lr 0.002,
    20 epochs); from scratch with --teacher on answers alone, to the recipe of the built-in
    model (Adam, lr 0.02, batch 64, 20 epochs).

    The options below are the ones most runs need; --help-all lists every setting (loss,
    geometry, negatives, adaptation weights...), each of which can also go in a --config file.
    """
    try:
        _require_torch()
        try:
            from qaindex_export.exporting.onnx_export import export_model
            from qaindex_export.training.train import save_checkpoint
            from qaindex_export.training.train import train as run_training
        except ImportError as exc:
            raise MissingDependencyError(f"{TORCH_HINT} ({exc})") from None
        adapt_names = {f.name for f in fields(AdaptConfig)}
        adapt = {k: v for k, v in options.items() if k in adapt_names and v is not None}
        settings = {k: v for k, v in options.items() if k not in adapt_names}
        values = read_config_file(config_file) if config_file is not None else {}
        values.update({key: value for key, value in settings.items() if value is not None})
        adapting, mode = _adapting(values, adapt)
        log = None if quiet else (lambda message: click.echo(message, err=True))
        labels_alone = teacher == "none"
        teacher = None if labels_alone else teacher
        if adapting:
            # the corpus is read once: label-free answers with a teacher; without one, only to say
            # that a corpus without questions needs --teacher
            answers = _answers_without_questions(train_file, strict=teacher is not None)
            if teacher is None and answers is not None:
                raise _no_labels(train_file, out)
            if teacher is None and not labels_alone:  # labels: answers first, then the labels (stages.py)
                teacher = "minilm"
            if checkpoint is not None:
                raise click.UsageError("--checkpoint saves models trained from scratch; add --from-scratch")
            try:
                defaults = LABEL_FREE_DEFAULTS if answers is not None else ADAPT_DEFAULTS
                config = TrainConfig(**{**defaults, **values}).validate()
                adapt_settings = AdaptConfig(**adapt).validate()  # bad settings fail before the teacher loads
                sentence_teacher = _sentence_teacher(config.device) if teacher is not None else None
                result = _adapt(train_file, dev_file, sentence_teacher, config, answers, adapt_settings, log)
            except TypeError as exc:  # a wrongly typed value from a config file
                raise QAIndexError(f"{config_file}: invalid settings ({exc})") from None
            path = export_model(result, out, name=name, table_dtype=table_dtype, dev_data=None)
            calibration = _calibrate(
                path, train_file, dev_file, answers, config, config.device, result.dev_groups, teacher=sentence_teacher
            )
            _echo_summary(path, result, mode, calibration)
            return
        if "embeddings" not in values:
            values["embeddings"] = "distilled" if teacher is not None else "minilm"
        answers = _answers_without_questions(train_file, strict=teacher is not None)
        if answers is not None and teacher is None:
            raise _no_labels(train_file, out)
        if answers is not None:  # the unlabelled recipe (UNLABELLED_DEFAULTS)
            values = {**UNLABELLED_DEFAULTS, **values}
        try:
            config = TrainConfig.for_model(**values).validate()
        except TypeError as exc:  # a wrongly typed value from a config file
            raise QAIndexError(f"{config_file}: invalid settings ({exc})") from None
        device = config.device
        if answers is not None:
            result = _train_with_teacher(config, answers, device, log)
            dev_file = None  # selection used the teacher's pseudo-questions
        else:
            result = run_training(config, train_file, dev_file, log=log)
        if checkpoint is not None:
            save_checkpoint(result, checkpoint)
        dev_data = dev_file if dev_file is not None else result.dev_groups  # the held-out split, if any
        path = export_model(result, out, name=name, table_dtype=table_dtype, dev_data=dev_data)
        calibration = _calibrate(path, train_file, dev_file, answers, config, device)
    except QAIndexError as exc:
        raise click.ClickException(str(exc)) from None
    except ValueError as exc:  # invalid settings
        raise click.ClickException(str(exc)) from None
    _echo_summary(path, result, mode, calibration)


def _echo_summary(path: Any, result: Any, mode: str, calibration: dict[str, Any]) -> None:
    manifest = json.loads((Path(path) / "manifest.json").read_text(encoding="utf-8"))
    size = sum(p.stat().st_size for p in Path(path).rglob("*") if p.is_file())
    summary = {
        "model": str(path),
        "name": manifest["name"],
        "geometry": manifest["geometry"],
        "best_epoch": result.best_epoch,
        "dev": {k: manifest["metrics"]["dev"].get(k) for k in ("map", "mrr", "p@1", "questions")},
        "dev_onnx": {k: v for k, v in manifest["metrics"].get("dev_onnx", {}).items() if k in ("map", "mrr")},
        "parameters": manifest["parameters"],
        "bytes": size,
        "seconds": round(result.seconds, 2),
        "mode": mode,
        "calibration": calibration,
    }
    adaptation = _adaptation_summary(result)
    if adaptation is not None:  # held-out metrics of the kept epoch: MRR@10, not MAP (no separate ONNX run)
        del summary["dev_onnx"]
        summary["dev"] = {k: manifest["metrics"]["dev"].get(k) for k in ("mrr@10", "recall@10", "p@1", "questions")}
        summary["adaptation"] = adaptation
    click.echo(json.dumps(summary, indent=2))
    sys.stdout.flush()

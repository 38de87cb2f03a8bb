"""``qaindex train``: train HyperQA / CosineQA with PyTorch and export an ONNX model directory.

The command is registered into the ``qaindex`` group with ``main.add_command(train)``. torch
and the training package (``qaindex_export``) are imported only when the command runs, so the
runtime CLI works without the ``train`` extra.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click

from .cli_options import device_option
from .errors import MissingDependencyError, QAIndexError

__all__ = ["train"]

TORCH_HINT = "training needs the train extra: pip install 'qaindex[train]' (and torch==2.13.0 for the CPU build)"


def _require_torch() -> None:
    """Import torch, or raise :class:`MissingDependencyError` naming the extra to install."""
    try:
        import torch  # noqa: F401
    except ImportError:
        raise MissingDependencyError(TORCH_HINT) from None


def _answers_without_questions(train_file: Path) -> list[str] | None:
    """The answers of a corpus that has no question at all (None when it has questions)."""
    from .corpus import read_corpus

    records = read_corpus(train_file)
    if any(r.questions for r in records):
        return None
    return [r.answer for r in records]


def _train_with_teacher(config: Any, answers: list[str], device: str, log: Any) -> Any:
    """Unlabelled training against all-MiniLM-L6-v2 (see qaindex_export.train.train_unlabelled)."""
    from qaindex_export.distill import minilm_sentence_teacher
    from qaindex_export.train import train_unlabelled

    teacher_device = "cuda" if device == "cuda" else None
    if device == "auto":
        import torch

        teacher_device = "cuda" if torch.cuda.is_available() else None
    return train_unlabelled(config, answers, minilm_sentence_teacher(device=teacher_device), log=log)


@click.command("train")
@click.argument("train_file", metavar="TRAIN.jsonl", type=click.Path(path_type=Path, dir_okay=False))
@click.option(
    "--dev",
    "dev_file",
    type=click.Path(path_type=Path, dir_okay=False),
    default=None,
    help="Labelled dev file for choosing the best epoch (default: hold out 10% of the training questions).",
)
@click.option(
    "--out",
    "out",
    type=click.Path(path_type=Path, file_okay=False),
    required=True,
    help="Model directory to write (an existing model directory there is replaced).",
)
@click.option(
    "--model",
    "model_kind",
    type=click.Choice(["hyperqa", "cosineqa"]),
    default="hyperqa",
    show_default=True,
    help="HyperQA (Poincaré distance) or CosineQA (the paper's cosine ablation).",
)
@click.option(
    "--embeddings",
    default=None,
    help="Word embeddings: minilm (frozen all-MiniLM-L6-v2 token embeddings), distilled (a table distilled "
    "from MiniLM's outputs, cached after first use) or distilled:PATH, glove:PATH, word2vec:PATH, or none "
    "(trained from random initialisation). Default: distilled with --teacher, else minilm.",
)
@click.option(
    "--teacher",
    type=click.Choice(["minilm"]),
    default=None,
    help="Train against a sentence-transformer teacher (all-MiniLM-L6-v2, offline). A corpus without any "
    "question trains without labels: pseudo-questions are cut from the answers and the teacher decides which "
    "answers they match. With questions, the usual hinge training runs on the distilled table.",
)
@click.option("--epochs", type=click.IntRange(min=1), default=25, show_default=True, help="Training epochs.")
@click.option("--seed", type=int, default=0, show_default=True, help="Random seed (same seed, same model).")
@device_option("Where torch trains: auto uses CUDA when torch sees a GPU.")
@click.option(
    "--lr", type=click.FloatRange(min=0, min_open=True), default=0.1, show_default=True, help="Learning rate."
)
@click.option("--margin", type=click.FloatRange(min=0), default=1.0, show_default=True, help="Hinge-loss margin λ.")
@click.option(
    "--batch-size",
    type=click.IntRange(min=1),
    default=100,
    show_default=True,
    help="(question, correct answer) pairs per step; each brings --negatives triples.",
)
@click.option(
    "--negatives", type=click.IntRange(min=1), default=8, show_default=True, help="Wrong answers per correct answer."
)
@click.option(
    "--sampling",
    type=click.Choice(["random", "mix"]),
    default="mix",
    show_default=True,
    help="Negatives: random (own wrong candidates and other answers), or mix (half of them the hardest "
    "under the current model, re-mined every epoch).",
)
@click.option(
    "--optimizer",
    type=click.Choice(["adagrad", "adam", "sgd"]),
    default="adagrad",
    show_default=True,
    help="Optimizer (the paper uses AdaGrad).",
)
@click.option("--l2", type=click.FloatRange(min=0), default=1e-5, show_default=True, help="L2 weight decay.")
@click.option("--dim", type=click.IntRange(min=1), default=300, show_default=True, help="Projection size d.")
@click.option(
    "--ball",
    type=click.Choice(["auto", "clip", "radius", "expmap", "weighted"]),
    default="auto",
    show_default=True,
    help="How sums enter the Poincaré ball: clip (the paper: onto the sphere of radius 0.999), radius "
    "(the sum's direction at a learned radius), expmap (tanh(α|y|)·y/|y|), weighted (norm from learned "
    "per-token depth), or auto (train clip and radius, keep the better by dev MAP; with --teacher on "
    "answers only: weighted).",
)
@click.option(
    "--init-norm",
    type=click.FloatRange(min=0, max=0.999, min_open=True, max_open=True),
    default=0.9,
    show_default=True,
    help="Starting norm of radius points (and of the median expmap point).",
)
@click.option(
    "--alpha",
    type=click.FloatRange(min=0, min_open=True),
    default=None,
    help="Initial α of expmap, then learned (default: chosen from the data, see --init-norm).",
)
@click.option(
    "--riemannian/--no-riemannian",
    default=False,
    show_default=True,
    help="Rescale gradients at the ball points by (1-|x|²)²/4 (the paper's eq. 8; off by default, it hurt on WikiQA).",
)
@click.option(
    "--hard-fraction",
    type=click.FloatRange(min=0, max=1),
    default=0.5,
    show_default=True,
    help="Share of hard negatives with --sampling mix.",
)
@click.option(
    "--threads",
    type=click.IntRange(min=0),
    default=2,
    show_default=True,
    help="torch CPU threads while training (0: torch's default).",
)
@click.option(
    "--max-question-tokens", type=click.IntRange(min=1), default=40, show_default=True, help="Question truncation."
)
@click.option(
    "--max-answer-tokens", type=click.IntRange(min=1), default=128, show_default=True, help="Answer truncation."
)
@click.option(
    "--patience",
    type=click.IntRange(min=1),
    default=None,
    help="Stop after this many epochs without a better dev MAP (default: run every epoch).",
)
@click.option(
    "--table-dtype",
    type=click.Choice(["auto", "float32", "float16"]),
    default="auto",
    show_default=True,
    help="Storage of the exported per-token table; auto picks float16 only when float32 would exceed 20 MB.",
)
@click.option("--name", default=None, help="Model name in the manifest (default: derived from the settings).")
@click.option(
    "--checkpoint",
    type=click.Path(path_type=Path, file_okay=False),
    default=None,
    help="Also save the best checkpoint to this directory (weights.safetensors + checkpoint.json; no pickle).",
)
@click.option("--quiet", is_flag=True, help="No per-epoch progress on stderr.")
def train(
    train_file: Path,
    dev_file: Path | None,
    out: Path,
    model_kind: str,
    embeddings: str | None,
    teacher: str | None,
    epochs: int,
    seed: int,
    device: str,
    lr: float,
    margin: float,
    batch_size: int,
    negatives: int,
    sampling: str,
    optimizer: str,
    l2: float,
    dim: int,
    ball: str,
    init_norm: float,
    alpha: float | None,
    riemannian: bool,
    hard_fraction: float,
    threads: int,
    max_question_tokens: int,
    max_answer_tokens: int,
    patience: int | None,
    table_dtype: str,
    name: str | None,
    checkpoint: Path | None,
    quiet: bool,
) -> None:
    """Train a model on TRAIN.jsonl and export it to --out as a qaindex model directory.

    TRAIN.jsonl (and --dev) are benchmark-format lines {"qid", "question", "aid", "answer",
    "label"} or a corpus with "question"/"questions" fields (negatives then come from the
    other answers). Progress goes to stderr; a JSON summary to stdout.

    With --teacher minilm, TRAIN.jsonl may be a plain corpus of answers with no questions at
    all: the model is then fine-tuned against the teacher's sentence embeddings of the
    answers and of pseudo-questions cut from them (no labels needed).
    """
    try:
        _require_torch()
        try:
            from qaindex_export.onnx_export import export_model
            from qaindex_export.train import TrainConfig, save_checkpoint
            from qaindex_export.train import train as run_training
        except ImportError as exc:
            raise MissingDependencyError(f"{TORCH_HINT} ({exc})") from None
        if embeddings is None:
            embeddings = "distilled" if teacher is not None else "minilm"
        config = TrainConfig(
            model=model_kind,
            embeddings=embeddings,
            epochs=epochs,
            seed=seed,
            device=device,
            lr=lr,
            margin=margin,
            batch_size=batch_size,
            negatives=negatives,
            sampling=sampling,
            optimizer=optimizer,
            l2=l2,
            dim=dim,
            ball=ball,
            init_norm=init_norm,
            alpha=alpha,
            riemannian=riemannian,
            hard_fraction=hard_fraction,
            threads=threads,
            max_question_tokens=max_question_tokens,
            max_answer_tokens=max_answer_tokens,
            patience=patience,
        )
        log = None if quiet else (lambda message: click.echo(message, err=True))
        answers = _answers_without_questions(train_file) if teacher is not None else None
        if answers is not None:
            result = _train_with_teacher(config, answers, device, log)
            dev_file = None  # selection used the teacher's pseudo-questions
        else:
            result = run_training(config, train_file, dev_file, log=log)
        if checkpoint is not None:
            save_checkpoint(result, checkpoint)
        path = export_model(result, out, name=name, table_dtype=table_dtype, dev_data=dev_file)
    except QAIndexError as exc:
        raise click.ClickException(str(exc)) from None
    except ValueError as exc:  # invalid settings
        raise click.ClickException(str(exc)) from None
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
    }
    click.echo(json.dumps(summary, indent=2))
    sys.stdout.flush()

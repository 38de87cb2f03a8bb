"""Training settings: :class:`TrainConfig`, the one definition of every training option.

Torch-free, so the ``qaindex train`` command line is generated from it (each field becomes an
option with its ``metadata["help"]`` and, where given, ``metadata["choices"]``) without
importing torch, and a ``--config FILE`` (JSON or TOML) sets the same fields by name. Stored
in checkpoints and in the exported model's manifest.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from qaindex.errors import QAIndexError
from qaindex.geometry.hyperbolic import RANKINGS, max_norm_for

__all__ = [
    "BALL_CHOICES",
    "BALL_MAPS",
    "CHUNKINGS",
    "DEVICES",
    "LOSSES",
    "LR_SCHEDULES",
    "MODEL_DEFAULTS",
    "MODEL_KINDS",
    "OPTIMIZERS",
    "RANKINGS",
    "RECURRENT_KINDS",
    "SAMPLINGS",
    "TrainConfig",
    "read_config_file",
]

MODEL_KINDS = (
    "hyperqa",
    "cosineqa",
    "qa-cnn",
    "qa-bilstm",
    "ap-cnn",
    "ap-bilstm",
    "rde",
    "rde-ltc",
    "hrde",
    "hrde-ltc",
)
RECURRENT_KINDS = ("rde", "rde-ltc", "hrde", "hrde-ltc")
LOSSES = ("hinge", "cross-entropy")
CHUNKINGS = ("sentences", "length")
BALL_MAPS = ("clip", "expmap", "radius", "weighted", "lognorm")
BALL_CHOICES = (*BALL_MAPS, "auto")
OPTIMIZERS = ("adagrad", "adam", "sgd")
LR_SCHEDULES = ("constant", "inverse-epoch")
SAMPLINGS = ("random", "mix")
DEVICES = ("auto", "cpu", "cuda")


# Settings that differ by model from the field defaults, measured in docs/reproduction.md: at
# AdaGrad lr 0.1 (HyperQA's) QA-biLSTM stays at chance and QA-CNN, AP-CNN and AP-biLSTM lose
# 0.04 MAP on WikiQA. The RDE family trains with Adam at 0.005, the reproduction's settings:
# AdaGrad's first steps move every weight by about lr, which at 0.1 grows the GRUs' recurrent
# matrices to spectral norms of 30 or more, a recurrence that amplifies float32 rounding so
# that no export (nor torch itself in float64) reproduces the trained vectors.
# Applied by TrainConfig.for_model and by `qaindex train`.
MODEL_DEFAULTS: dict[str, dict[str, Any]] = {
    **{kind: {"lr": 0.01} for kind in ("qa-cnn", "qa-bilstm", "ap-cnn", "ap-bilstm")},
    **{kind: {"optimizer": "adam", "lr": 0.005} for kind in RECURRENT_KINDS},
}


def _setting(default: Any, help: str, *, choices: tuple[str, ...] | None = None) -> Any:
    """A :class:`TrainConfig` field whose metadata carries its CLI help (and choices)."""
    return field(default=default, metadata={"help": help, "choices": choices})


@dataclass
class TrainConfig:
    """Every setting of a training run; stored in checkpoints and the model manifest.

    Each field's ``metadata["help"]`` says what it does (``qaindex train --help`` shows the
    same text, one option per field).

    Example
    -------
    >>> TrainConfig(epochs=3, ball="clip").validate().epochs
    3
    """

    model: str = _setting(
        "hyperqa",
        "HyperQA (Poincaré ball), CosineQA (the paper's cosine ablation), or the attentive-pooling "
        "paper's QA-CNN / QA-biLSTM (convolution or biLSTM, max-pooling + tanh, cosine; --dim is the "
        "number of filters c, or 2H for the biLSTM), its AP-CNN / AP-biLSTM (attentive pooling: a joint "
        "scorer, exported as a reranker model directory for `qaindex search --rerank`), or the HRDE-LTC "
        "paper's GRU dual encoders RDE / RDE-LTC / HRDE / HRDE-LTC (bilinear score sigmoid(q'M a + b); "
        "--dim is the GRU size).",
        choices=MODEL_KINDS,
    )
    loss: str | None = _setting(
        None,
        "Training loss: hinge (pairwise, margin --margin) or cross-entropy (binary, correct answer 1, "
        "wrong answers 0). Default: cross-entropy for the rde family, hinge for the others.",
        choices=LOSSES,
    )
    topics: int = _setting(
        3,
        "Latent topics K of LTC (rde-ltc, hrde-ltc; the paper: 3 for Ubuntu, 4 for Samsung QA).",
    )
    chunking: str = _setting(
        "sentences",
        "How HRDE splits answers into chunks: sentences (after . ! ? tokens, and at --max-chunk-tokens) "
        "or length (every --max-chunk-tokens tokens).",
        choices=CHUNKINGS,
    )
    max_chunks: int = _setting(
        8,
        "HRDE: chunks kept per answer (the first ones; also used by the runtime).",
    )
    max_chunk_tokens: int = _setting(
        32,
        "HRDE: longest chunk in tokens (also used by the runtime).",
    )
    embeddings: str = _setting(
        "minilm",
        "Word embeddings: minilm (frozen all-MiniLM-L6-v2 token embeddings), minilm-words (the same "
        "vectors averaged over whole words), distilled (a table "
        "distilled from MiniLM's outputs, cached after first use) or distilled:PATH, glove:PATH, "
        "word2vec:PATH, or none (trained from random initialisation). Default with --teacher: "
        "distilled.",
    )
    train_embeddings: bool | None = _setting(
        None,
        "Update the embeddings while training (default: only when there are no pretrained ones, as in the paper).",
    )
    embed_dim: int = _setting(
        300,
        "Width of random embeddings (--embeddings none).",
    )
    max_vocab: int = _setting(
        30000,
        "Word vocabulary limit (none), or file words kept besides the training words (glove/word2vec).",
    )
    dim: int = _setting(
        300,
        "Projection size d (the paper: 100-400, 300 for WikiQA).",
    )
    window: int = _setting(
        4,
        "QA-CNN's context window k in words (the paper: 4 for WikiQA and TrecQA).",
    )
    ranking: str = _setting(
        "relative",
        "HyperQA's ranking rule: relative scores d(q,a) - d(0,a), so answers near the ball's "
        "centre can never be hubs; distance is the paper's plain d (ablation).",
        choices=RANKINGS,
    )
    ball: str = _setting(
        "auto",
        "How sums enter the Poincaré ball: clip (the paper: onto the sphere of radius 0.999), "
        "radius (the sum's direction at a learned radius), expmap (tanh(α|y|)·y/|y|), weighted "
        "(norm from learned per-token depth), lognorm (max_norm·sigmoid(a·log|y| + b)·y/|y|: radius from the "
        "log of the sum's length), or auto (train clip and radius, keep the better by "
        "dev MAP; with --teacher on answers only: weighted).",
        choices=BALL_CHOICES,
    )
    alpha: float | None = _setting(
        None,
        "Initial α of expmap (default: chosen so the median training text starts at --init-norm).",
    )
    learn_alpha: bool = _setting(
        True,
        "Learn α of expmap.",
    )
    init_norm: float = _setting(
        0.9,
        "Starting norm of radius points (and of the median expmap point).",
    )
    max_norm: float = _setting(
        max_norm_for("float32"),
        "Ball radius (0.999 in float32: 1 - |x|² keeps 4-5 significant digits).",
    )
    margin: float = _setting(
        1.0,
        "Hinge-loss margin λ.",
    )
    lr: float = _setting(
        0.1,
        "Learning rate (qaindex train: 0.01 for qa-cnn, qa-bilstm, ap-cnn and ap-bilstm, 0.005 for rde, "
        "rde-ltc, hrde and hrde-ltc unless given).",
    )
    optimizer: str = _setting(
        "adagrad",
        "Optimizer (the paper uses AdaGrad; qaindex train: adam for rde, rde-ltc, hrde and hrde-ltc unless given).",
        choices=OPTIMIZERS,
    )
    lr_schedule: str = _setting(
        "constant",
        "Learning-rate schedule: constant, or inverse-epoch (epoch t trains at lr / t; the attentive-pooling "
        "paper's schedule, used there with SGD).",
        choices=LR_SCHEDULES,
    )
    adagrad_init: float = _setting(
        0.0,
        "AdaGrad's initial accumulator (torch's default 0; TensorFlow's 0.1 learned slower here).",
    )
    l2: float = _setting(
        1e-5,
        "L2 weight decay of weight matrices (not biases or scalars).",
    )
    riemannian: bool = _setting(
        False,
        "Rescale gradients at the ball points by (1-|x|²)²/4 (the paper's eq. 8; off by default, it hurt on WikiQA).",
    )
    batch_size: int = _setting(
        100,
        "(question, correct answer) pairs per step; each brings --negatives triples.",
    )
    negatives: int = _setting(
        8,
        "Wrong answers per correct answer (the paper: 2-8).",
    )
    sampling: str = _setting(
        "mix",
        "Negatives: random (own wrong candidates and other answers), or mix (part of them the "
        "hardest under the current model, re-mined every epoch).",
        choices=SAMPLINGS,
    )
    negative_pool: int | None = _setting(
        None,
        "Draw this many random negatives per pair at every step, score them with the current model "
        "and train on the highest-scoring --negatives of them (the QA-CNN paper: 50, with --negatives "
        "1); replaces --sampling. Default: 50 for qa-cnn, qa-bilstm, ap-cnn and ap-bilstm, off (0) for the others.",
    )
    own_negative_prob: float = _setting(
        0.5,
        "Chance that a random negative is one of the question's own wrong candidates.",
    )
    hard_fraction: float = _setting(
        0.5,
        "Share of hard negatives with --sampling mix.",
    )
    hard_pool: int = _setting(
        32,
        "Random answers added to the own wrong candidates when mining hard negatives.",
    )
    epochs: int = _setting(
        25,
        "Training epochs.",
    )
    patience: int | None = _setting(
        None,
        "Stop after this many epochs without a better dev MAP (default: run every epoch).",
    )
    seed: int = _setting(
        0,
        "Random seed (same seed, same model).",
    )
    device: str = _setting(
        "auto",
        "Where torch trains: auto uses CUDA when torch sees a GPU.",
        choices=DEVICES,
    )
    threads: int = _setting(
        2,
        "torch CPU threads while training (0: torch's default).",
    )
    max_question_tokens: int = _setting(
        40,
        "Question truncation in tokens (also used by the runtime).",
    )
    max_answer_tokens: int = _setting(
        128,
        "Answer truncation in tokens (also used by the runtime).",
    )
    dev_fraction: float = _setting(
        0.1,
        "Share of training questions held out to choose the best epoch when no --dev file is given.",
    )

    @classmethod
    def for_model(cls, model: str = "hyperqa", **settings: Any) -> TrainConfig:
        """A config for ``model`` with its defaults from :data:`MODEL_DEFAULTS`; ``settings`` win.

        Example
        -------
        >>> TrainConfig.for_model("qa-cnn").lr, TrainConfig.for_model("qa-cnn", lr=0.1).lr
        (0.01, 0.1)
        >>> TrainConfig.for_model().lr
        0.1
        >>> TrainConfig.for_model("hrde-ltc").optimizer, TrainConfig.for_model("hrde-ltc").lr
        ('adam', 0.005)
        """
        return cls(**{"model": model, **MODEL_DEFAULTS.get(model, {}), **settings})

    def validate(self) -> TrainConfig:
        """Raise :class:`ValueError` naming the first bad setting; returns self."""
        if self.model not in MODEL_KINDS:
            raise ValueError(f"model must be one of {MODEL_KINDS}, got {self.model!r}")
        if self.ball not in BALL_CHOICES:
            raise ValueError(f"ball must be one of {BALL_CHOICES}, got {self.ball!r}")
        if self.ranking not in RANKINGS:
            raise ValueError(f"ranking must be one of {RANKINGS}, got {self.ranking!r}")
        if self.optimizer not in OPTIMIZERS:
            raise ValueError(f"optimizer must be one of {OPTIMIZERS}, got {self.optimizer!r}")
        if self.lr_schedule not in LR_SCHEDULES:
            raise ValueError(f"lr_schedule must be one of {LR_SCHEDULES}, got {self.lr_schedule!r}")
        if self.sampling not in SAMPLINGS:
            raise ValueError(f"sampling must be one of {SAMPLINGS}, got {self.sampling!r}")
        if self.device not in ("auto", "cpu", "cuda"):
            raise ValueError(f"device must be auto, cpu or cuda, got {self.device!r}")
        if not 0.0 < self.max_norm < 1.0:
            raise ValueError(f"max_norm must be in (0, 1), got {self.max_norm}")
        for name in (
            "dim",
            "batch_size",
            "negatives",
            "epochs",
            "max_question_tokens",
            "max_answer_tokens",
            "embed_dim",
            "topics",
            "max_chunks",
            "max_chunk_tokens",
        ):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")
        if self.window < 1:
            raise ValueError(f"window must be at least 1, got {self.window}")
        if self.model in ("qa-bilstm", "ap-bilstm") and self.dim % 2:
            raise ValueError(
                f"dim of {self.model} is 2H (two directions of H units) and must be even, got {self.dim}; "
                "pass an even --dim"
            )
        if self.loss is not None and self.loss not in LOSSES:
            raise ValueError(f"loss must be one of {LOSSES}, got {self.loss!r}")
        if self.chunking not in CHUNKINGS:
            raise ValueError(f"chunking must be one of {CHUNKINGS}, got {self.chunking!r}")
        pool = self.effective_negative_pool
        if pool and pool < self.negatives:
            raise ValueError(f"negative_pool ({pool}) must be at least negatives ({self.negatives}), or 0 for off")
        for name in ("own_negative_prob", "hard_fraction"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"{name} must be in [0, 1], got {getattr(self, name)}")
        if not 0.0 < self.dev_fraction < 1.0:
            raise ValueError(f"dev_fraction must be in (0, 1), got {self.dev_fraction}")
        if self.lr <= 0 or self.margin < 0 or self.l2 < 0:
            raise ValueError("lr must be positive, margin and l2 non-negative")
        if self.alpha is not None and self.alpha <= 0:
            raise ValueError(f"alpha must be positive, got {self.alpha}")
        return self

    @property
    def effective_negative_pool(self) -> int:
        """``negative_pool``, or its default for the model (50 for QA-CNN/QA-biLSTM, else 0: off).

        Example
        -------
        >>> TrainConfig(model="qa-cnn").effective_negative_pool, TrainConfig().effective_negative_pool
        (50, 0)
        """
        if self.negative_pool is not None:
            return max(0, int(self.negative_pool))
        return 50 if self.model in ("qa-cnn", "qa-bilstm", "ap-cnn", "ap-bilstm") else 0

    @property
    def effective_loss(self) -> str:
        """``loss``, or its default for the model (cross-entropy for the rde family, else hinge).

        Example
        -------
        >>> TrainConfig(model="hrde").effective_loss, TrainConfig().effective_loss
        ('cross-entropy', 'hinge')
        """
        if self.loss is not None:
            return self.loss
        return "cross-entropy" if self.model in RECURRENT_KINDS else "hinge"

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable settings.

        Example
        -------
        >>> TrainConfig(epochs=3).to_dict()["epochs"]
        3
        """
        return asdict(self)

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> TrainConfig:
        """Inverse of :meth:`to_dict` (unknown keys are ignored).

        Example
        -------
        >>> TrainConfig.from_dict({"seed": 4, "unknown": 1}).seed
        4
        """
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in values.items() if k in names})


def read_config_file(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Training settings from a JSON (``.json``) or TOML (any other name) file.

    Keys are :class:`TrainConfig` field names (``batch_size`` or ``batch-size``); an unknown
    key, or a file that cannot be read, is a :class:`~qaindex.QAIndexError` naming it.

    Example
    -------
    >>> import tempfile, pathlib
    >>> p = pathlib.Path(tempfile.mkdtemp()) / "train.toml"
    >>> _ = p.write_text('epochs = 5\\nball = "clip"\\n')
    >>> read_config_file(p)
    {'epochs': 5, 'ball': 'clip'}
    """
    source = Path(path)
    try:
        text = source.read_text(encoding="utf-8")
        values = json.loads(text) if source.suffix == ".json" else _toml(text)
    except OSError as exc:
        raise QAIndexError(f"{source}: cannot be read ({exc.strerror}); check the --config path") from None
    except (ValueError, UnicodeDecodeError) as exc:
        kind = "JSON" if source.suffix == ".json" else "TOML"
        raise QAIndexError(f"{source}: not valid {kind} ({exc})") from None
    if not isinstance(values, dict):
        raise QAIndexError(f"{source}: expected a table of settings, got {type(values).__name__}")
    return checked_settings(values, str(source))


def checked_settings(values: dict[Any, Any], source: str) -> dict[str, Any]:
    """``values`` keyed by :class:`TrainConfig` field name, each checked against its field's type.

    ``batch-size`` is read as ``batch_size``; an unknown name or a value of the wrong type is a
    :class:`~qaindex.QAIndexError` that starts with ``source`` (a file, an option).

    Example
    -------
    >>> checked_settings({"batch-size": 32, "ball": "clip"}, "--set")
    {'batch_size': 32, 'ball': 'clip'}
    """
    types = {f.name: str(f.type) for f in fields(TrainConfig)}
    out: dict[str, Any] = {}
    for key, value in values.items():
        name = str(key).replace("-", "_")
        if name not in types:
            raise QAIndexError(
                f"{source}: unknown setting {key!r}; settings are the options of `qaindex train --help-all` "
                f"without the leading dashes ({', '.join(sorted(types))})"
            )
        problem = setting_type_problem(value, types[name])
        if problem is not None:
            raise QAIndexError(f"{source}: setting {key!r} must be {problem}, got {_shown(value)}")
        out[name] = value
    return out


_TYPE_WORDS = {"int": "an integer", "float": "a number", "bool": "true or false", "str": "a string", "None": None}


def setting_type_problem(value: Any, annotation: str) -> str | None:
    """What a setting's value should be when it does not match ``annotation``; None when it does.

    ``annotation`` is a :class:`TrainConfig` field's type as written (``"int"``,
    ``"float | None"``); an integer is a valid ``float``, a boolean is never a number.

    Example
    -------
    >>> setting_type_problem("three", "int"), setting_type_problem(3, "float"), setting_type_problem(None, "int | None")
    ('an integer', None, None)
    """
    allowed = [part.strip() for part in annotation.split("|")]
    if "None" in allowed and value is None:
        return None
    is_number = isinstance(value, int | float) and not isinstance(value, bool)
    checks = {
        "int": isinstance(value, int) and not isinstance(value, bool),
        "float": is_number,
        "bool": isinstance(value, bool),
        "str": isinstance(value, str),
    }
    if any(checks.get(part, part not in _TYPE_WORDS) for part in allowed):
        return None
    words = [_TYPE_WORDS[part] or "absent" for part in allowed if part in _TYPE_WORDS and part != "None"]
    return " or ".join(words)


def _shown(value: Any) -> str:
    kind = {bool: "a boolean", int: "an integer", float: "a number", str: "a string"}.get(type(value))
    text = json.dumps(value, ensure_ascii=False) if kind is not None else type(value).__name__
    return f"{text} ({kind})" if kind is not None else f"a {text}"


def _toml(text: str) -> Any:
    """Parse TOML with the standard library's ``tomllib`` (Python 3.11+) or, before 3.11, with
    ``tomli`` (the same parser, a dependency there); both raise ``ValueError`` subclasses."""
    if sys.version_info >= (3, 11):
        import tomllib

        return tomllib.loads(text)
    import tomli

    return tomli.loads(text)

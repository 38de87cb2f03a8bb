"""Settings of adaptation (:mod:`.adapt`): training that starts from a model directory.

Torch-free, like :mod:`qaindex_export.config`, so ``qaindex train`` builds its options from the
fields (``metadata["help"]``) without importing torch.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["ADAPT_DEFAULTS", "LABEL_FREE_DEFAULTS", "QUICK_ANSWERS", "TEACHER_TOKENS", "AdaptConfig"]

# TrainConfig values adaptation uses unless the user gives them (optimizer, step size, batch, epochs).
ADAPT_DEFAULTS: dict[str, Any] = {"optimizer": "adam", "lr": 0.005, "batch_size": 64, "epochs": 12, "negatives": 32}
# ... and what label-free adaptation (``train --teacher`` on answers alone) changes in them: smaller
# steps for more epochs (on the measured corpora the held-out curve rises more smoothly and ends higher)
LABEL_FREE_DEFAULTS: dict[str, Any] = {**ADAPT_DEFAULTS, "lr": 0.002, "epochs": 20}
# word pieces the adaptation teacher (all-MiniLM-L6-v2) reads of a text: the length it was trained on;
# its default 256 doubles the teacher's time on long answers
TEACHER_TOKENS = 128
# the label-free sample of `qaindex build --adapt`: ten thousand answers adapted and indexed within two
# minutes on two cores (benchmarks/speed/adapt_build.py)
QUICK_ANSWERS = 2000


def _setting(default: Any, help: str) -> Any:
    return field(default=default, metadata={"help": help})


@dataclass
class AdaptConfig:
    """How a start model is adapted to a corpus; stored in the adapted model's manifest.

    Example
    -------
    >>> AdaptConfig(holdout=0.3).validate().holdout
    0.3
    """

    start: str | None = _setting(
        None,
        "Model directory training starts from (default: the built-in model). Training keeps the start model "
        "when no epoch beats it on held-out questions.",
    )
    from_scratch: bool = _setting(
        False,
        "Train a new model from the embeddings instead of adapting --start (the behaviour before adaptation; "
        "not protected against ending worse than the built-in model).",
    )
    holdout: float = _setting(
        0.2,
        "Share of the labelled questions (or, without labels, of the answers whose pseudo-questions are the "
        "held-out split) kept out of training to choose the epoch; epoch 0 is the start model.",
    )
    folds: int = _setting(
        5,
        "Without --dev: choose the number of epochs by k-fold over all labelled questions (each fold trains on "
        "the others and is judged on itself; every question is judged once per epoch), then train that many "
        "epochs on all of them. 1: a single held-out split of --holdout instead. Fewer folds are used when "
        "there are fewer than 4 questions per fold. The folds stop together after --adapt-patience epochs "
        "without a better pooled mean.",
    )
    anchor: float | None = _setting(
        None,
        "Weight of the L2 pull of every adapted weight towards its value in the start model; auto: 0.001 with "
        "labels, 0 without (on the measured corpora the pull lowered label-free adaptation's gains).",
    )
    teacher_weight: float = _setting(
        0.5,
        "Share of the distillation loss in supervised adaptation (the rest is the labels' cross-entropy); the "
        "teacher is --teacher's model, else the start model itself.",
    )
    norm_spread: float = _setting(
        0.08,
        "Poincaré models: the norm term penalises a spread (standard deviation) of a step's answer norms below "
        "this, and asks the norms to follow the teacher's specificity of each answer (generic answers nearer "
        "the centre, specific ones outwards). 0: no norm term.",
    )
    norm_weight: float = _setting(
        1.0,
        "Weight of the norm term.",
    )
    cosine_weight: float = _setting(
        1.0,
        "With a sentence teacher (--teacher): weight of the term that fits the table rows so that each text's "
        "summed vector points where the teacher's sentence vector points (centred, in the start model's space: "
        "the objective the built-in model was trained with). 0: off.",
    )
    pseudo_questions: int = _setting(
        0,
        "Without labels: pseudo-questions (sentences or word spans) cut from each training answer and fitted "
        "with the answers by the cosine term (and the ranking term). 0: the answers alone (on every corpus "
        "measured, fitting the cut spans lowered real questions' MRR@10).",
    )
    max_answers: int = _setting(
        10_000,
        "Without labels: adapt on a fixed-seed sample of at most this many of the corpus's answers (the teacher "
        "embeds only these; `build --adapt` takes 2,000). The token table is shared by every answer, so a sample "
        "teaches the tokens the corpus uses, but a larger one gains more; its teacher time grows in proportion. "
        "0: every answer.",
    )
    pair_weight: float = _setting(
        0.0,
        "Without labels: weight of the pseudo-question -> answer ranking term (cross-entropy to the teacher's "
        "softmax over each step's answers). 0: off (the cosine term alone).",
    )
    significance: float = _setting(
        0.05,
        "An epoch replaces the start model only when its held-out gain is beyond noise: one-sided sign test "
        "(better vs worse held-out questions) and paired bootstrap both at this level or below.",
    )
    adapt_patience: int = _setting(
        3,
        "Stop after this many epochs without a better held-out MRR@10.",
    )

    def anchor_for(self, labelled: bool) -> float:
        """The L2 pull's weight: ``anchor``, or its automatic value (0.001 with labels, 0 without).

        Example
        -------
        >>> AdaptConfig().anchor_for(labelled=True), AdaptConfig().anchor_for(labelled=False)
        (0.001, 0.0)
        """
        if self.anchor is not None:
            return float(self.anchor)
        return 0.001 if labelled else 0.0

    def validate(self) -> AdaptConfig:
        """Raise :class:`ValueError` naming the first bad setting; returns self."""
        if not 0.0 < self.holdout < 1.0:
            raise ValueError(f"holdout must be in (0, 1), got {self.holdout}")
        if self.folds < 1:
            raise ValueError(f"folds must be at least 1, got {self.folds}")
        if not 0.0 <= self.teacher_weight <= 1.0:
            raise ValueError(f"teacher_weight must be in [0, 1], got {self.teacher_weight}")
        if not 0.0 < self.significance <= 1.0:
            raise ValueError(f"significance must be in (0, 1], got {self.significance}")
        if self.anchor is not None and self.anchor < 0:
            raise ValueError(f"anchor must be non-negative, got {self.anchor}")
        for name in ("norm_spread", "norm_weight", "cosine_weight", "pair_weight"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be non-negative, got {getattr(self, name)}")
        if self.max_answers < 0 or 0 < self.max_answers < 4:
            raise ValueError(f"max_answers must be 0 (every answer) or at least 4, got {self.max_answers}")
        if self.pseudo_questions < 0:
            raise ValueError(f"pseudo_questions must be non-negative, got {self.pseudo_questions}")
        if self.pair_weight > 0 and self.pseudo_questions < 1:
            raise ValueError(
                f"pair_weight {self.pair_weight} ranks pseudo-questions: set pseudo_questions to 1 or more"
            )
        if self.adapt_patience < 1:
            raise ValueError(f"adapt_patience must be at least 1, got {self.adapt_patience}")
        return self

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable settings.

        Example
        -------
        >>> AdaptConfig().to_dict()["holdout"]
        0.2
        """
        return asdict(self)

"""What training returns: :class:`TrainResult` (the model at its best epoch and its provenance).

Shared by the trainers (:mod:`.train`, :mod:`.unlabelled`, :mod:`qaindex_export.adaptation.adapt`), checkpoints
(:mod:`.checkpoints`) and the exporters (:mod:`qaindex_export.exporting.onnx_export`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from qaindex.eval.datasets import QuestionGroup
from qaindex.text.tokenizer import Tokenizer

from ..config import TrainConfig
from ..networks.models import DualEncoderQA

__all__ = ["TrainResult"]


@dataclass
class TrainResult:
    """A trained model (at its best dev epoch) with everything the exporter records."""

    model: DualEncoderQA
    tokenizer: Tokenizer
    config: TrainConfig
    best_epoch: int
    dev: dict[str, Any]
    history: list[dict[str, Any]]
    norms: dict[str, Any] | None
    data: dict[str, Any]
    embeddings: dict[str, Any]
    seconds: float
    selection: dict[str, Any] | None = None
    diagnostics: dict[str, Any] = field(default_factory=dict)
    device: str = "cpu"
    # The dev questions held out of the training data when no dev file was given (not saved in
    # checkpoints): the exporter evaluates the ONNX model on them too (``metrics.dev_onnx``).
    dev_groups: list[QuestionGroup] | None = None

    def provenance(self, **extra: Any) -> dict[str, Any]:
        """The manifest's ``training`` record: config, data, embeddings, epochs, then ``extra``."""
        return {
            "config": self.config.to_dict(),
            "data": self.data,
            "embeddings": self.embeddings,
            "best_epoch": self.best_epoch,
            "epochs_run": len(self.history),
            "history": self.history,
            "seconds": self.seconds,
            **extra,
        }

    @property
    def max_tokens(self) -> dict[str, int]:
        return {"question": self.config.max_question_tokens, "answer": self.config.max_answer_tokens}

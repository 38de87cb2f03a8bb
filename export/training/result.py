"""What training returns: :class:`TrainResult` (the model at its best epoch and its provenance).

Shared by the training loops (:mod:`.train`, :mod:`.unlabelled`), checkpoints
(:mod:`.checkpoints`) and the exporters (:mod:`qaindex_export.exporting.onnx_export`).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from qaindex.errors import QAIndexError
from qaindex.eval.datasets import QuestionGroup
from qaindex.text.tokenizer import Tokenizer

from ..config import TrainConfig
from ..networks.models import DualEncoderQA

__all__ = ["Log", "TrainResult", "resolve_device", "stderr_log"]

Log = Callable[[str], None]


def stderr_log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


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


# ------------------------------------------------------------------------ helpers


def resolve_device(device: str) -> torch.device:
    """``"auto"`` → cuda when ``torch.cuda.is_available()``, else cpu.

    Example
    -------
    >>> resolve_device("cpu").type
    'cpu'
    """
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        raise QAIndexError("device 'cuda' was requested but torch sees no CUDA device; use --device cpu or auto")
    return torch.device(device)

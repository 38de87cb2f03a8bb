"""The one epoch loop every trainer runs: labelled training (:mod:`.train`), training against a
sentence teacher (:mod:`.unlabelled`), adaptation (:mod:`qaindex_export.adaptation.adapt`) and the
token-learned table (:mod:`qaindex_export.training.tokenlearn`).

A trainer describes its job as a :class:`Job` (the model, its optimizers, the batches of an
epoch, the loss of one batch, the evaluation of an epoch) and :func:`run` does the rest, read
top to bottom::

    [epoch 0: evaluate the start]                  (LoopConfig.evaluate_start)
    for epoch in 1 .. epochs:
        batches = job.begin_epoch(epoch)          learning rate, negatives, order
        for batch in batches:
            loss = job.loss(batch)                None skips the batch
            zero_grad; backward; clip; step
        verdict = job.evaluate(epoch)             a score, its history row, keep or not
        keep the state of the best epoch; log one line; stop after `patience` epochs
        without progress
    load the kept state

The job owns every random choice: it draws from the generator :func:`seeded` returns, in the
order it always did, so a seed gives the same run through this loop as through a hand-written
one. :func:`torch_settings` sets torch's threads (and deterministic algorithms) for the run and
restores them after; :func:`resolve_device` chooses the device.

Example
-------
>>> class Fit:  # least squares on one weight: y = 2x, two batches of one point
...     def __init__(self):
...         self.model = torch.nn.Linear(1, 1, bias=False)
...         self.optimizers = [torch.optim.SGD(self.model.parameters(), lr=0.1)]
...         self.x = torch.tensor([[1.0], [2.0]])
...     def begin_epoch(self, epoch):
...         return [0, 1], {}
...     def loss(self, batch):
...         x = self.x[batch]
...         return ((self.model(x) - 2 * x) ** 2).mean()
...     def evaluate(self, epoch):
...         w = self.model.weight.item()
...         return Verdict(score=-abs(w - 2.0), row={"w": w}, summary=f"w {w:.3f}")
>>> _ = seeded(0)
>>> outcome = run(LoopConfig(epochs=5, tag="fit"), Fit(), log=None)
>>> outcome.best_epoch, [round(row["w"], 2) for row in outcome.history]
(5, [1.68, 1.95, 1.99, 2.0, 2.0])
"""

from __future__ import annotations

import copy
import math
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import torch

from qaindex.errors import QAIndexError

__all__ = [
    "Job",
    "Log",
    "LoopConfig",
    "Outcome",
    "Verdict",
    "resolve_device",
    "run",
    "seeded",
    "stderr_log",
    "torch_settings",
]

Log = Callable[[str], None]


def stderr_log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


@dataclass(frozen=True)
class LoopConfig:
    """How :func:`run` drives a job (the job's own settings stay with the job)."""

    epochs: int
    tag: str = "train"  # the prefix of every progress line: "[tag] epoch 3/10 ..."
    evaluate_start: bool = False  # evaluate before any step as epoch 0, a candidate like any epoch
    start_label: str = "the start"  # epoch 0's name in its progress line
    keep_best: bool = True  # end at the kept epoch's state (False: at the last epoch's)
    patience: int | None = None  # stop after this many epochs without progress (None: never)
    measure: str = "score"  # what the score is, for the early-stop line
    clip_norm: float | None = None  # clip the gradients' total norm before every step


@dataclass(frozen=True)
class Verdict:
    """What the evaluation of one epoch says.

    ``keep`` None keeps the epoch when its score beats the kept one's (ties keep the earlier);
    ``progress`` None counts the epoch as progress (for ``patience``) when it is kept.
    ``detail`` is the trainer's own record of the epoch (e.g. every dev figure), handed back
    with the kept epoch (:attr:`Outcome.best`) and left out of the history.
    """

    score: float  # higher is better
    row: dict[str, Any]  # the epoch's figures for the history
    summary: str  # the figures in the progress line
    keep: bool | None = None
    progress: bool | None = None
    detail: Any = None


class Job(Protocol):
    """What a trainer gives :func:`run`: its model and optimizers, and three methods."""

    @property
    def model(self) -> torch.nn.Module: ...

    @property
    def optimizers(self) -> Sequence[torch.optim.Optimizer]: ...

    def begin_epoch(self, epoch: int) -> tuple[Iterable[Any], dict[str, Any]]:
        """Prepare ``epoch`` (learning rate, negatives, order); return its batches and the
        fields it adds to the epoch's history row (e.g. ``{"lr": 0.1}``)."""
        ...

    def loss(self, batch: Any) -> torch.Tensor | None:
        """The loss of one batch (None: nothing to learn from it; the batch is skipped)."""
        ...

    def evaluate(self, epoch: int) -> Verdict:
        """Evaluate the model after ``epoch`` (0: before training)."""
        ...


@dataclass
class Outcome:
    """What :func:`run` returns; the model holds the kept state (with ``keep_best``)."""

    best_epoch: int
    best_state: dict[str, Any] | None  # the kept epoch's state_dict (None: no epoch ran or was kept)
    best: Verdict | None
    history: list[dict[str, Any]] = field(default_factory=list)
    stopped: str = "every epoch ran"


def run(config: LoopConfig, job: Job, *, log: Log | None = stderr_log) -> Outcome:
    """Train ``job`` for ``config.epochs`` epochs, keeping the best epoch; see the module docstring."""
    say: Log = log if log is not None else (lambda _m: None)
    model, tag = job.model, config.tag
    best_score, best_epoch, best_state, best = -math.inf, 0, None, None
    history: list[dict[str, Any]] = []
    if config.evaluate_start:
        t0 = time.perf_counter()
        best = job.evaluate(0)
        best_score, best_state = best.score, copy.deepcopy(model.state_dict())
        history.append({"epoch": 0, "loss": None, **best.row, "seconds": time.perf_counter() - t0})
        say(f"[{tag}] epoch 0 ({config.start_label})  {best.summary}")
    since_progress, stopped = 0, "every epoch ran"
    for epoch in range(1, config.epochs + 1):
        t0 = time.perf_counter()
        batches, epoch_fields = job.begin_epoch(epoch)
        # -- one pass over the epoch's batches
        model.train()
        total, steps = 0.0, 0
        for batch in batches:
            loss = job.loss(batch)
            if loss is None:
                continue
            for optimizer in job.optimizers:
                optimizer.zero_grad(set_to_none=True)
            loss.backward()
            if config.clip_norm is not None:
                torch.nn.utils.clip_grad_norm_(model.parameters(), config.clip_norm)
            for optimizer in job.optimizers:
                optimizer.step()
            total += float(loss.item())
            steps += 1
        train_seconds = time.perf_counter() - t0
        # -- evaluate; keep the best epoch
        verdict = job.evaluate(epoch)
        seconds = time.perf_counter() - t0
        keep = verdict.keep if verdict.keep is not None else verdict.score > best_score
        if keep:
            best_score, best_epoch, best = verdict.score, epoch, verdict
            best_state = copy.deepcopy(model.state_dict())
        progress = verdict.progress if verdict.progress is not None else keep
        since_progress = 0 if progress else since_progress + 1
        row = {"epoch": epoch, "loss": total / max(1, steps), **epoch_fields, **verdict.row}
        history.append(row | {"train_seconds": train_seconds, "seconds": seconds})
        say(
            f"[{tag}] epoch {epoch}/{config.epochs}  loss {row['loss']:.4f}  {verdict.summary}  "
            f"{seconds:.2f}s (train {train_seconds:.2f}s){'  *best' if keep else ''}"
        )
        if config.patience is not None and since_progress >= config.patience:
            stopped = f"stopped early: no better {config.measure} for {config.patience} epochs"
            say(f"[{tag}] {stopped}")
            break
    if config.keep_best and best_state is not None:
        model.load_state_dict(best_state)
    return Outcome(best_epoch, best_state, best, history, stopped)


# ------------------------------------------------------------------------ device, seeds, threads


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


def seeded(seed: int) -> np.random.Generator:
    """Seed torch (``torch.manual_seed``) and return the numpy generator a job draws from.

    Example
    -------
    >>> a, b = seeded(3), seeded(3)
    >>> int(a.integers(100)) == int(b.integers(100))
    True
    """
    torch.manual_seed(seed)
    return np.random.default_rng(seed)


@contextmanager
def torch_settings(threads: int = 0, *, deterministic: bool = False) -> Iterator[None]:
    """Run with ``threads`` torch threads (0: leave as is) and, with ``deterministic``, torch's
    deterministic algorithms (warnings only where none exists); both restored after.

    Example
    -------
    >>> before = torch.get_num_threads()
    >>> with torch_settings(1):
    ...     torch.get_num_threads()
    1
    >>> torch.get_num_threads() == before
    True
    """
    old_threads = torch.get_num_threads()
    old_deterministic = torch.are_deterministic_algorithms_enabled()
    if threads > 0:
        torch.set_num_threads(threads)
    if deterministic:
        torch.use_deterministic_algorithms(True, warn_only=True)
    try:
        yield
    finally:
        torch.set_num_threads(old_threads)
        if deterministic:
            torch.use_deterministic_algorithms(old_deterministic)

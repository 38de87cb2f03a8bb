"""Adaptation: fine-tune an existing model directory on a user's corpus without ending worse.

Both training modes of ``qaindex train`` start from a model directory (the built-in default
unless told otherwise) instead of from random weights:

- **label-free** (:func:`adapt_unlabelled`): a corpus's answers and a sentence teacher. The
  table is fitted so that each answer's summed vector points where the teacher's sentence
  vector points (the cosine term); optionally (``pseudo_questions``, ``pair_weight``) also
  pseudo-questions cut from the answers, and a ranking term: the cross-entropy between the
  teacher's ``softmax(cos / τ)`` over a step's candidate answers and the student's
  ``softmax(score)``;
- **supervised** (:func:`adapt_supervised`): labelled questions. The loss mixes the labels'
  cross-entropy (``1 - teacher_weight``) with the same distillation loss
  (``teacher_weight``), the teacher being MiniLM when given, else the start model itself
  (its own scores as soft targets: a few hundred labels then move the model only as far as
  they agree with what it already knew).

What keeps the result from ending worse than the start:

1. **a held-out split of the same corpus**: a share of the labelled questions, or (without
   labels) the pseudo-questions of a share of the answers, whose correct answer is the
   teacher's top answer over the whole corpus (the teacher's ranking is the target);
2. **epoch 0 is the start model**: it is evaluated on that split before any step, every
   epoch after it is compared with it, and the best one is kept (ties keep the earlier, so
   the start model wins unless training beats it); training stops after ``adapt_patience``
   epochs without a better MRR@10;
3. **an L2 pull towards the start point** (with labels; off by default without): ``anchor ·
   Σ_p |θ_p - θ_p⁰|²`` over every adapted weight.

What is adapted: the start model's per-token table ``T`` (read from its ``encoder.onnx``),
as ``x_t = (I + M)(T_t + Δ_t)`` with a shared linear map ``M`` (generalises to words that
training never saw) and per-row changes ``Δ`` for the tokens of the training texts; the ball
map's own weights; and the score's ``w_f``, ``b_f``. At the start ``M = 0`` and ``Δ = 0``, so
the model is exactly the start model; the export folds ``M`` and ``Δ`` back into one table.

Norms (Poincaré models): with ``norm_spread > 0`` a term asks the answer norms to spread
around the start model's mean norm by the teacher's judgement of each answer's specificity
(``-mean cos`` to the other answers, standardised): generic answers move towards the centre,
specific ones outwards, so the radius stays informative instead of saturating at the clip.

Example
-------
>>> from qaindex_export.adaptation.adapt import adapt_unlabelled
>>> from qaindex_export.adaptation.config import AdaptConfig
>>> from qaindex_export.embeddings.distill import minilm_sentence_teacher
>>> result = adapt_unlabelled(TrainConfig(), AdaptConfig(), answers, minilm_sentence_teacher())  # doctest: +SKIP
>>> result.diagnostics["adaptation"]["kept_epoch"]  # doctest: +SKIP
3
"""

from __future__ import annotations

import copy
import math
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, cast

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from qaindex.eval.datasets import QuestionGroup
from qaindex.eval.evaluate import pooled_metrics

from ..config import TrainConfig
from ..networks.families import start_epoch
from ..networks.models import BagOfWords, DualEncoderQA, norm_statistics
from ..training.data import TextTable
from ..training.data import load_groups as _load
from ..training.evaluation import encode_texts
from ..training.loop import Log, LoopConfig, Verdict, resolve_device, run, seeded, torch_settings
from ..training.result import TrainResult
from ..training.unlabelled import answer_sample, pseudo_questions
from .config import AdaptConfig
from .selection import Selection, gain_summary, paired_gain_test, reciprocal_ranks, selection_why, versus_start
from .start import AdaptedTable, StartError, StartPoint, load_start
from .teachers import Teacher, self_teacher, sentence_teacher, teacher_alignment

__all__ = [
    "AdaptedTable",
    "StartError",
    "StartPoint",
    "adapt_supervised",
    "adapt_unlabelled",
    "load_start",
    "paired_gain_test",
    "teacher_alignment",
]

K = 10


# ------------------------------------------------------------------------ the task and its loop


@dataclass
class _Task:
    """Training items (query row, its positive answer rows) and the held-out split, as text rows."""

    table: TextTable
    pool: np.ndarray  # answer rows every query competes over
    query: np.ndarray  # (P,) training query rows
    positives: list[np.ndarray]  # per training item: correct answer rows (label-free: the source answer)
    dev_query: np.ndarray
    dev_relevant: list[np.ndarray]  # per dev query: positions in ``pool`` that are correct
    dev_candidates: list[np.ndarray] | None  # per dev query: positions in ``pool`` it ranks (None: all)
    teacher: Teacher
    teacher_weight: float
    mode: str
    data: dict[str, Any]
    targets: Tensor | None = None  # (len(table), dim): the teacher's aligned sentence targets (cosine term)
    cos_rows: np.ndarray | None = None  # text rows the cosine term fits (never a held-out query)
    alignment: dict[str, Any] | None = None


@torch.no_grad()
def _student_sums(model: DualEncoderQA, table: TextTable, rows: np.ndarray, device: torch.device) -> Tensor:
    """The encoder's summed vectors of ``rows`` (direction columns only), in chunks."""
    encoder = cast(AdaptedTable, model.encoder)
    parts = []
    for i in range(0, len(rows), 1024):
        flat, offsets = table.gather(rows[i : i + 1024])
        parts.append(encoder.bags(torch.from_numpy(flat).to(device), torch.from_numpy(offsets).to(device)))
    return torch.cat(parts)[:, : encoder.dim]


def _with_targets(task: _Task, model: DualEncoderQA, rows: np.ndarray, device: torch.device) -> _Task:
    """``task`` with the cosine term's targets: the teacher's vectors of ``rows``, centred and
    aligned to the start model (:func:`teacher_alignment`)."""
    sums = _student_sums(model, task.table, rows, cast(AdaptedTable, model.encoder).base.device)
    teacher = task.teacher.vectors[torch.from_numpy(rows)].cpu().numpy()
    mu, q = teacher_alignment(sums.cpu().numpy(), teacher)
    aligned = torch.from_numpy((teacher - mu) @ q.T).float()
    targets = torch.zeros(len(task.table), aligned.shape[1])
    targets[torch.from_numpy(rows)] = aligned
    start_cos = float(F.cosine_similarity(sums.cpu(), aligned, dim=-1).mean())
    info = {
        "space": "the teacher's vectors of the user's texts, centred on their mean and rotated onto the start "
        "model's summed vectors (orthogonal Procrustes)",
        "texts": len(rows),
        "start_cosine": round(start_cos, 4),
    }
    return replace(task, targets=targets.to(device), cos_rows=np.asarray(rows, np.int64), alignment=info)


def _held_out_metrics(model: DualEncoderQA, task: _Task, device: torch.device) -> dict[str, Any]:
    """MRR@10, recall@10 and P@1 of the held-out queries over the pool (or their own candidates);
    ``"rr"``: each query's reciprocal rank (0 outside the top 10)."""
    model.eval()
    rows = np.unique(np.concatenate([task.pool, task.dev_query]))
    vectors = encode_texts(model, task.table, rows, device)
    assert isinstance(vectors, Tensor)
    where = np.zeros(len(task.table), dtype=np.int64)
    where[rows] = np.arange(len(rows))
    pv = vectors[torch.from_numpy(where[task.pool]).to(device)]
    qv = vectors[torch.from_numpy(where[task.dev_query]).to(device)]
    ranked: list[np.ndarray] = []
    with torch.no_grad():
        for start in range(0, len(qv), 64):
            q = qv[start : start + 64]
            s = model.score(q[:, None, :], pv[None, :, :].expand(len(q), -1, -1))[0]
            if task.dev_candidates is not None:
                allowed = torch.zeros_like(s, dtype=torch.bool)
                for i, cand in enumerate(task.dev_candidates[start : start + 64]):
                    allowed[i, torch.from_numpy(cand).to(device)] = True
                s = s.masked_fill(~allowed, -math.inf)
            top = torch.topk(s, k=min(K, s.shape[1]), dim=1)
            ids = top.indices.cpu().numpy()
            ranked.extend(np.where(np.isfinite(top.values.cpu().numpy()), ids, -1))
    return {**pooled_metrics(ranked, task.dev_relevant, K), "rr": reciprocal_ranks(ranked, task.dev_relevant)}


def _answer_norms(model: DualEncoderQA, task: _Task, device: torch.device) -> dict[str, Any] | None:
    if model.geometry != "poincare":
        return None
    vectors, sums = encode_texts(model, task.table, task.pool, device, with_sums=True)
    return norm_statistics(sums, vectors, model.ball.max_norm)


def _norm_term(points: Tensor, specificity: Tensor, spread: float) -> Tensor:
    """``(relu(spread - std|v|) / spread)² + (1 - corr(|v|, specificity)) / 10`` over a step's answers.

    The first part keeps the answer norms from collapsing onto one radius (or saturating at
    the clip, where every norm is the same); the second decides *which* answers move
    outwards: the specific ones (low mean similarity to the corpus under the teacher).
    """
    norms = points.norm(dim=-1)
    std = norms.std()
    centred, z = norms - norms.mean(), specificity - specificity.mean()
    corr = (centred * z).sum() / (centred.norm() * z.norm()).clamp(min=1e-12)
    return (F.relu(spread - std) / spread) ** 2 + (1.0 - corr) / 10.0


class _AdaptJob:
    """Adaptation for :func:`qaindex_export.training.loop.run`: the ranking terms over a step's
    candidates, the cosine term towards the teacher, the norm term and the pull towards the
    start; an epoch is kept only when its held-out gain over the start model is beyond noise."""

    def __init__(
        self,
        model: DualEncoderQA,
        task: _Task,
        config: TrainConfig,
        settings: AdaptConfig,
        device: torch.device,
        *,
        keep_last: bool = False,
    ) -> None:
        self.model, self.task, self.config, self.settings, self.device = model, task, config, settings, device
        self.keep_last = keep_last  # the number of epochs was chosen beforehand (k-fold): keep the last
        self.rng = seeded(config.seed)
        self.initial = {name: p.detach().clone() for name, p in model.named_parameters()}
        for p in model.parameters():
            p.requires_grad_(True)
        params = [p for p in model.parameters() if p.requires_grad]
        self.optimizer = (
            torch.optim.Adam(params, lr=config.lr)
            if config.optimizer == "adam"
            else torch.optim.SGD(params, lr=config.lr)
        )
        self.optimizers = [self.optimizer]
        # the norm term: per text, the teacher's specificity (standardised -mean cos to the corpus)
        self.specificity: Tensor | None = None
        if model.geometry == "poincare" and settings.norm_spread > 0 and settings.norm_weight > 0:
            self.specificity = torch.zeros(len(task.table), device=device)
            z = torch.from_numpy(task.teacher.specificity(task.pool)).float().to(device)
            self.specificity[torch.from_numpy(task.pool).to(device)] = z
        self.positive_sets = [set(p.tolist()) for p in task.positives]
        self.anchor = settings.anchor_for(labelled=task.mode != "teacher")
        # the ranking terms: label-free, the teacher's soft targets weighted by pair_weight;
        # supervised, labels + teacher
        self.beta = task.teacher_weight
        self.rank_weight = settings.pair_weight if task.mode == "teacher" else 1.0
        self.cosine = task.targets is not None and task.cos_rows is not None and settings.cosine_weight > 0
        self.cos_rows = task.cos_rows if task.cos_rows is not None else np.zeros(0, np.int64)
        self.item_steps = math.ceil(len(task.query) / config.batch_size) if self.rank_weight > 0 else 0
        self.cos_steps = math.ceil(len(self.cos_rows) / config.batch_size) if self.cosine else 0
        self.order = self.cos_order = np.zeros(0, dtype=np.int64)
        # the selection: each epoch's per-question reciprocal ranks, tested against epoch 0's
        self.per_question: dict[int, np.ndarray] = {}
        self.tests: dict[int, dict[str, Any]] = {}
        self.selection = Selection()

    def begin_epoch(self, epoch: int) -> tuple[range, dict[str, Any]]:
        start_epoch(self.optimizer, self.config, epoch)
        self.order, self.cos_order = (
            self.rng.permutation(len(self.task.query)),
            self.rng.permutation(len(self.cos_rows)),
        )
        return range(max(self.item_steps, self.cos_steps)), {}  # the shorter stream cycles

    def loss(self, step: int) -> Tensor | None:
        model, task, settings, device, size = self.model, self.task, self.settings, self.device, self.config.batch_size
        loss = torch.zeros((), device=device)
        if self.item_steps:
            begin = (step % self.item_steps) * size
            idx = self.order[begin : begin + size]
            if len(idx) >= 2:
                q = task.query[idx]
                own = np.concatenate([task.positives[i] for i in idx])
                extra = task.pool[self.rng.integers(0, len(task.pool), size=min(self.config.negatives, len(task.pool)))]
                cands = np.unique(np.concatenate([own, extra]))
                rows, inverse = np.unique(np.concatenate([q, cands]), return_inverse=True)
                flat, offsets = task.table.gather(rows)
                vectors = model.encode_bags(torch.from_numpy(flat).to(device), torch.from_numpy(offsets).to(device))
                inv = torch.from_numpy(inverse).to(device)
                b = len(idx)
                qv, cv = vectors[inv[:b]], vectors[inv[b:]]
                log_p = torch.log_softmax(model.score(qv[:, None, :], cv[None, :, :].expand(b, -1, -1))[0], dim=1)
                if self.beta < 1.0:
                    mask = np.array([[c in self.positive_sets[i] for c in cands.tolist()] for i in idx], dtype=bool)
                    mask_t = torch.from_numpy(mask).to(device)
                    supervised = -torch.logsumexp(log_p.masked_fill(~mask_t, -math.inf), dim=1).mean()
                    loss = loss + self.rank_weight * (1.0 - self.beta) * supervised
                if self.beta > 0.0:
                    q_t, c_t = torch.from_numpy(q).to(device), torch.from_numpy(cands).to(device)
                    target = torch.softmax(task.teacher.logits(q_t, c_t), dim=1)
                    loss = loss + self.rank_weight * self.beta * -(target * log_p).sum(dim=1).mean()
                if self.specificity is not None:
                    z = self.specificity[torch.from_numpy(cands).to(device)]
                    loss = loss + settings.norm_weight * _norm_term(cv, z, settings.norm_spread)
        if self.cos_steps:
            begin = (step % self.cos_steps) * size
            chosen = self.cos_rows[self.cos_order[begin : begin + size]]
            encoder = cast(AdaptedTable, model.encoder)
            flat, offsets = task.table.gather(chosen)
            sums = encoder.bags(torch.from_numpy(flat).to(device), torch.from_numpy(offsets).to(device))
            target_t = cast(Tensor, task.targets)[torch.from_numpy(chosen).to(device)]
            fit = (1.0 - F.cosine_similarity(sums[:, : encoder.dim], target_t, dim=-1)).mean()
            loss = loss + settings.cosine_weight * fit
        if not loss.requires_grad:
            return None
        if self.anchor > 0:
            pull = sum(((p - self.initial[name]) ** 2).sum() for name, p in model.named_parameters())
            loss = loss + self.anchor * cast(Tensor, pull)
        return loss

    def evaluate(self, epoch: int) -> Verdict:
        metrics = _held_out_metrics(self.model, self.task, self.device)
        self.per_question[epoch] = metrics.pop("rr")
        row: dict[str, Any] = {"held_out": metrics}
        norms = _answer_norms(self.model, self.task, self.device)
        if norms is not None:
            row["answer_norm_mean"] = norms["ball"]["median"]
            row["answer_norm_std"] = norms["ball_std"]
        score = metrics["mrr@10"]
        norm_note = f"  answer-norm std {row['answer_norm_std']:.3f}" if "answer_norm_std" in row else ""
        if epoch == 0:
            self.selection.start(score)
            summary = f"held-out MRR@10 {score:.4f}  P@1 {metrics['p@1']:.4f}  ({metrics['questions']} queries)"
            return Verdict(score, row, summary)
        if self.keep_last:
            return Verdict(score, row, f"MRR@10 on the training questions {score:.4f}", keep=True, progress=True)
        test = versus_start(
            self.per_question[0],
            self.per_question[epoch],
            seed=self.config.seed + epoch,
            alpha=self.settings.significance,
        )
        self.tests[epoch] = row["versus_start"] = test
        keep, progress = self.selection.judge(score, test)
        summary = gain_summary("held-out MRR@10", score, test) + norm_note
        return Verdict(score, row, summary, keep=keep, progress=progress)


def _fit(
    start: StartPoint,
    task: _Task,
    config: TrainConfig,
    settings: AdaptConfig,
    device: torch.device,
    say: Log,
    chosen: dict[str, Any] | None = None,
) -> TrainResult:
    """Adapt ``start`` on ``task`` through the one training loop, then report what was kept and why.

    ``chosen``: the k-fold selection (:func:`_pooled_selection`); ``config.epochs`` epochs are
    then trained and the last one kept."""
    model = start.model.to(device)
    job = _AdaptJob(model, task, config, settings, device, keep_last=chosen is not None)
    loop = LoopConfig(
        epochs=config.epochs,
        tag=f"adapt/{task.mode}",
        evaluate_start=True,
        start_label="the start model",
        patience=None if chosen is not None else settings.adapt_patience,
        measure="held-out MRR@10",
    )
    outcome = run(loop, job, log=say)
    history, best_epoch = outcome.history, outcome.best_epoch
    model.eval()
    start_metrics, final = history[0]["held_out"], history[best_epoch]["held_out"]
    start_score = start_metrics["mrr@10"]
    if chosen is not None:
        why = chosen["why"]
    else:
        why = selection_why(best_epoch, job.tests, start_score, final["mrr@10"], settings.significance)
    say(f"[adapt/{task.mode}] kept epoch {best_epoch}: {why}; {outcome.stopped}")
    norms = _answer_norms(model, task, device)
    report = {
        "mode": task.mode,
        "start": {"directory": str(start.directory), "name": start.manifest.get("name")},
        "held_out": task.data["held_out"],
        "start_metrics": start_metrics,
        "final_metrics": final,
        "kept_epoch": best_epoch,
        "why": why,
        "selection": chosen["selection"]
        if chosen is not None
        else {
            "rule": "keep the best epoch whose held-out gain over the start model passes a one-sided sign test and "
            f"a paired bootstrap at p <= {settings.significance:g}; else keep the start model",
            "epochs": [{"epoch": e, **t} for e, t in job.tests.items()],
        },
        "stopping": outcome.stopped,
        "teacher": task.teacher.describe,
        "teacher_weight": task.teacher_weight,
        "cosine_term": task.alignment if job.cosine else None,
        "settings": {**settings.to_dict(), "anchor": job.anchor},
        "answer_norms": {
            "start_std": history[0].get("answer_norm_std"),
            "final_std": norms["ball_std"] if norms else None,
            "final_median": norms["ball"]["median"] if norms else None,
        },
    }
    dev = dict(final)  # held-out MRR@10, recall@10, P@1 of the kept epoch
    return TrainResult(
        model=model,
        tokenizer=start.tokenizer,
        config=config,
        best_epoch=best_epoch,
        dev=dev,
        history=history,
        norms=norms,
        data=task.data,
        embeddings={"source": f"start model {start.manifest.get('name')}", "kind": start.tokenizer.kind},
        seconds=0.0,
        selection={"by": "held-out MRR@10, epoch 0 (the start model) included", "adaptation": report},
        diagnostics={"adaptation": report},
        device=device.type,
    )


def _prepare(
    config: TrainConfig, settings: AdaptConfig, start: StartPoint | str | os.PathLike[str] | None
) -> tuple[TrainConfig, AdaptConfig, StartPoint]:
    settings = settings.validate()
    if not isinstance(start, StartPoint):
        start = load_start(start if start is not None else settings.start)
    fixed = start.config
    config = replace(
        config,
        model=fixed.model,
        embeddings=fixed.embeddings,
        dim=fixed.dim,
        ball=fixed.ball,
        ranking=fixed.ranking,
        max_norm=fixed.max_norm,
        max_question_tokens=fixed.max_question_tokens,
        max_answer_tokens=fixed.max_answer_tokens,
    ).validate()
    return config, settings, start


def _with_rows(start: StartPoint, table: TextTable) -> StartPoint:
    """``start`` whose encoder gets a row change for every token of the table's texts."""
    ids = table.all_token_ids()
    old = cast(AdaptedTable, start.model.encoder)
    encoder = AdaptedTable(old.base, ids, depth=old.depth_column)
    model = copy.deepcopy(start.model)
    model.encoder = cast(BagOfWords, encoder)
    return replace(start, model=model)


def _run(config: TrainConfig, work: Callable[[torch.device], TrainResult]) -> TrainResult:
    """``work`` on the configured device under the configured threads, its wall seconds recorded."""
    started = time.perf_counter()
    device = resolve_device(config.device)
    with torch_settings(config.threads):
        result = work(device)
    result.seconds = time.perf_counter() - started
    return result


def adapt_unlabelled(
    config: TrainConfig,
    settings: AdaptConfig,
    answers: Sequence[str],
    teacher: Callable[[Sequence[str]], np.ndarray],
    *,
    start: StartPoint | str | os.PathLike[str] | None = None,
    log: Log | None = None,
    dev_per_answer: int = 2,
    max_dev: int = 400,
    neighbours: bool = True,
) -> TrainResult:
    """Adapt a start model to a corpus's answers against a sentence teacher (no labels).

    The answers (a fixed-seed sample of at most ``settings.max_answers`` of them: the token
    table they teach is shared by every answer) are split: the pseudo-questions of
    ``settings.holdout`` of them (``dev_per_answer`` each, at most ``max_dev``) are the
    held-out split, each one's correct answer being the
    teacher's top answer among the *other* answers (``neighbours``; the answer it was cut from
    is left out of its pool, so a lexical copy cannot score and the split measures whether the
    model ranks like the teacher), else over the whole corpus. With ``settings.cosine_weight > 0``
    every answer (held-out ones included: only their pseudo-questions are held out) is fitted by
    the cosine term (the teacher's sentence vector, centred and aligned to the start:
    :func:`teacher_alignment`), and so are ``settings.pseudo_questions`` pseudo-questions of
    each training answer (default 0: on every corpus measured, fitting the cut spans lowered
    real questions' MRR@10); with ``settings.pair_weight > 0`` those pseudo-questions also
    train the ranking term.

    Parameters
    ----------
    config : TrainConfig
        ``lr``, ``optimizer``, ``batch_size``, ``epochs``, ``negatives`` (random extra candidates
        per step), ``seed``, ``device``, ``threads``; the model's form comes from the start.
    settings : AdaptConfig
    answers : sequence of str
    teacher : callable
        Texts → sentence embeddings (e.g. :func:`qaindex_export.embeddings.distill.minilm_sentence_teacher`).
    start : StartPoint or path, keyword-only, optional
        Default: ``settings.start``, else the built-in model.
    log : callable, keyword-only, optional

    Returns
    -------
    TrainResult
        At the kept epoch; ``diagnostics["adaptation"]`` has start vs final on the held-out
        split, the kept epoch and why.

    Example
    -------
    >>> r = adapt_unlabelled(TrainConfig(), AdaptConfig(), answers, teacher)  # doctest: +SKIP
    """
    say: Log = log if log is not None else (lambda _m: None)
    texts = list(dict.fromkeys(a for a in answers if a.strip()))
    if len(texts) < 4:
        raise ValueError("adapting without labels needs at least four distinct non-empty answers")
    config, settings, start_point = _prepare(config, settings, start)
    corpus_answers = len(texts)
    texts = answer_sample(texts, settings.max_answers, config.seed)
    if len(texts) < corpus_answers:
        say(f"[adapt] adapting on a sample of {len(texts)} of the corpus's {corpus_answers} answers")

    def build(device: torch.device) -> tuple[StartPoint, _Task]:
        rng = np.random.default_rng(config.seed)
        table = TextTable(start_point.tokenizer, start_point.max_tokens)
        pool = np.array([table.add(t, "answer") for t in texts], dtype=np.int64)
        n = len(texts)
        n_dev = min(n - 2, max(2, round(n * settings.holdout)))
        held = np.zeros(n, dtype=bool)
        held[rng.choice(n, size=n_dev, replace=False)] = True
        query, positives = [], []
        for i in np.flatnonzero(~held):
            for pq in pseudo_questions(texts[i], rng, settings.pseudo_questions):
                query.append(table.add(pq, "question"))
                positives.append(pool[i : i + 1])
        dev_rng = np.random.default_rng(config.seed + 1)
        source_of: dict[int, int] = {}  # held-out pseudo-question row -> position of the answer it was cut from
        for i in np.flatnonzero(held):
            for pq in pseudo_questions(texts[i], dev_rng, dev_per_answer):
                source_of.setdefault(table.add(pq, "question"), int(i))
        dev_query = list(source_of)[:max_dev]
        all_rows = np.unique(np.concatenate([pool, np.array(query, dtype=np.int64), np.array(dev_query, np.int64)]))
        teach = sentence_teacher(teacher, table, all_rows, say)
        dev_q = np.array(dev_query, dtype=np.int64)
        t_pool = teach.vectors[torch.from_numpy(pool)]
        sims = teach.vectors[torch.from_numpy(dev_q)] @ t_pool.T
        candidates: list[np.ndarray] | None = None
        if neighbours:  # the source answer is out of the query's pool: the teacher's nearest *other* answer is right
            sources = np.array([source_of[r] for r in dev_query], dtype=np.int64)
            sims[torch.arange(len(dev_q)), torch.from_numpy(sources)] = -math.inf
            everyone = np.arange(n)
            candidates = [everyone[everyone != s] for s in sources]
        best = sims.argmax(dim=1).numpy()
        task = _Task(
            table=table,
            pool=pool,
            query=np.array(query, dtype=np.int64),
            positives=positives,
            dev_query=dev_q,
            dev_relevant=[np.array([b]) for b in best],
            dev_candidates=candidates,
            teacher=teach,
            teacher_weight=1.0,
            mode="teacher",
            data={
                "train": {
                    "answers": n,
                    "corpus_answers": corpus_answers,
                    "pseudo_questions": len(query),
                    "labels": None,
                },
                "held_out": {
                    "answers": int(n_dev),
                    "pseudo_questions": len(dev_query),
                    "correct": "the teacher's top answer among the corpus's other answers (the source answer "
                    "left out of the query's pool)"
                    if neighbours
                    else "the teacher's top answer over the whole corpus",
                },
            },
        )
        adapted = _with_rows(start_point, table)
        if settings.cosine_weight > 0:  # answers and training pseudo-questions; never a held-out query
            task = _with_targets(task, adapted.model, np.unique(np.concatenate([pool, task.query])), device)
        return adapted, task

    return _run(config, lambda device: _fit(*build(device), config, settings, device, say))


def adapt_supervised(
    config: TrainConfig,
    settings: AdaptConfig,
    train_data: str | os.PathLike[str] | Sequence[QuestionGroup],
    dev_data: str | os.PathLike[str] | Sequence[QuestionGroup] | None = None,
    *,
    teacher: Callable[[Sequence[str]], np.ndarray] | None = None,
    start: StartPoint | str | os.PathLike[str] | None = None,
    log: Log | None = None,
) -> TrainResult:
    """Adapt a start model to labelled questions, mixing in a teacher's soft targets.

    How the number of epochs is chosen (epoch 0 is the start model, kept unless an epoch beats
    it beyond noise):

    - with ``dev_data``: the best epoch on it;
    - else by k-fold (``settings.folds``): each fold of the questions is held out once while
      the others train, every question's reciprocal rank is recorded per epoch, and the epoch
      is chosen on all the questions at once (a gain on a hundred questions can pass the noise
      test where one on a 20-question split cannot); then that many epochs are trained on all
      the labelled questions;
    - with ``settings.folds`` 1 (or too few questions for two folds of 4): ``settings.holdout``
      of the questions (chosen with the seed) are held out, and the best epoch on them is kept.

    The loss is ``(1 - w)`` times the labels' cross-entropy over each step's candidates (the
    batch's correct answers and ``config.negatives`` random answers of the pool) plus ``w =
    settings.teacher_weight`` times the cross-entropy to the teacher's soft targets over the
    same candidates (``teacher``, else the start model itself).

    Parameters
    ----------
    config, settings
        As :func:`adapt_unlabelled`.
    train_data, dev_data : path or sequence of QuestionGroup
        Corpus- or benchmark-format labelled data (``qaindex.eval.datasets.read_labelled``).
    teacher : callable, keyword-only, optional
    start : StartPoint or path, keyword-only, optional
    log : callable, keyword-only, optional

    Returns
    -------
    TrainResult

    Example
    -------
    >>> r = adapt_supervised(TrainConfig(), AdaptConfig(), "faq.jsonl")  # doctest: +SKIP
    >>> r.diagnostics["adaptation"]["why"]  # doctest: +SKIP
    'epoch 2 had the best MRR@10 beyond noise over 5 folds of the labelled questions (...)'
    """
    say: Log = log if log is not None else (lambda _m: None)
    groups, info = _load(train_data)
    groups = [g for g in groups if g.has_positive]
    folds = 0
    if dev_data is None:
        if len(groups) < 4:
            raise ValueError("too few labelled questions to hold out a split (need at least 4); pass a dev file")
        folds = min(settings.folds, len(groups) // 4)
        if folds >= 2:
            order = np.random.default_rng(config.seed).permutation(len(groups))
            parts = [np.sort(order[f::folds]) for f in range(folds)]
            ordered = groups
            train_idx = dev_idx = np.arange(len(groups))
            dev_info: dict[str, Any] = {"k_fold": folds, "questions": len(groups)}
        else:
            rng = np.random.default_rng(config.seed)
            n_dev = min(len(groups) - 2, max(2, round(len(groups) * settings.holdout)))
            held = set(rng.choice(len(groups), size=n_dev, replace=False).tolist())
            kept_in = [g for i, g in enumerate(groups) if i not in held]
            ordered = [*kept_in, *(g for i, g in enumerate(groups) if i in held)]
            train_idx, dev_idx = np.arange(len(kept_in)), np.arange(len(kept_in), len(groups))
            dev_info = {"held_out_from_train": True, "questions": len(dev_idx)}
    else:
        dev_groups, dev_info = _load(dev_data)
        dev_groups = [g for g in dev_groups if g.has_positive]
        if not groups or not dev_groups:
            raise ValueError("adaptation needs labelled questions to train on and to hold out")
        ordered = [*groups, *dev_groups]
        train_idx, dev_idx = np.arange(len(groups)), np.arange(len(groups), len(ordered))
    config, settings, start_point = _prepare(config, settings, start)
    data = {"train": {**info, "questions": len(train_idx)}, "dev": dev_info, "held_out": dev_info}

    def work(device: torch.device) -> TrainResult:
        labelled = _Labelled(ordered, start_point)
        adapted = _with_rows(start_point, labelled.table)
        teach = labelled.teacher(start_point, teacher, device, say)

        def task(train: np.ndarray, dev: np.ndarray) -> _Task:
            return labelled.task(train, dev, adapted, teach, settings, data, device, sentence=teacher is not None)

        if folds < 2:
            result = _fit(adapted, task(train_idx, dev_idx), config, settings, device, say)
            if dev_data is None:  # what calibration may use: the questions training never saw
                result.dev_groups = [labelled.groups[i] for i in dev_idx.tolist()]
            return result
        jobs = []
        for part in parts:
            fold_task = task(np.setdiff1d(train_idx, part), part)
            jobs.append(_AdaptJob(copy.deepcopy(adapted.model).to(device), fold_task, config, settings, device))
        say(f"[adapt/supervised] {folds} folds of {', '.join(str(len(p)) for p in parts)} held-out questions")
        selection = _select_by_folds(_FoldsJob(jobs, config, settings), config, settings, say)
        say(f"[adapt/supervised] {selection['why']}")
        final = replace(config, epochs=selection["epochs"])
        result = _fit(adapted, task(train_idx, dev_idx), final, settings, device, say, chosen=selection)
        # what calibration may use: nothing when every labelled question was trained on, all
        # of them when the start model was kept (no step was taken)
        result.dev_groups = [] if selection["epochs"] else list(labelled.groups)
        return result

    return _run(config, work)


class _Labelled:
    """Labelled questions and their answers as rows of one text table (answers first, then the
    questions in order), so that any split of the questions (a dev file, a held-out share, the
    folds) is a choice of row indices."""

    def __init__(self, groups: Sequence[QuestionGroup], start_point: StartPoint) -> None:
        self.groups = list(groups)
        self.table = TextTable(start_point.tokenizer, start_point.max_tokens)
        self.answers: dict[tuple[str, str], int] = {}
        for g in self.groups:
            for c in g.candidates:
                self.answers.setdefault((c.aid, c.answer), self.table.add(c.answer, "answer"))
        self.pool = np.array(sorted(set(self.answers.values())), dtype=np.int64)
        self.query = np.array([self.table.add(g.question, "question") for g in self.groups], dtype=np.int64)

    def teacher(
        self,
        start_point: StartPoint,
        teacher: Callable[[Sequence[str]], np.ndarray] | None,
        device: torch.device,
        say: Log,
    ) -> Teacher:
        """The teacher over every text: the sentence ``teacher``, else the start model itself."""
        rows = np.unique(np.concatenate([self.pool, self.query]))
        if teacher is not None:
            return sentence_teacher(teacher, self.table, rows, say)
        return self_teacher(copy.deepcopy(start_point.model).to(device), self.table, rows, device)

    def task(
        self,
        train: np.ndarray,
        dev: np.ndarray,
        adapted: StartPoint,
        teach: Teacher,
        settings: AdaptConfig,
        data: dict[str, Any],
        device: torch.device,
        *,
        sentence: bool,
    ) -> _Task:
        """Training items ``train`` and held-out questions ``dev`` (indices into the groups)."""
        position = {int(r): i for i, r in enumerate(self.pool)}
        dev_groups = [self.groups[i] for i in dev.tolist()]

        def rows_of(g: QuestionGroup, labelled: bool) -> list[int]:
            return sorted({self.answers[(c.aid, c.answer)] for c in g.candidates if c.label or not labelled})

        shared = all(len(g.candidates) == len(self.pool) for g in dev_groups)  # corpus format: every answer
        task = _Task(
            table=self.table,
            pool=self.pool,
            query=self.query[train],
            positives=[np.array(rows_of(self.groups[i], True)) for i in train.tolist()],
            dev_query=self.query[dev],
            dev_relevant=[np.array(sorted(position[r] for r in rows_of(g, True))) for g in dev_groups],
            dev_candidates=None
            if shared
            else [np.array(sorted(position[r] for r in rows_of(g, False))) for g in dev_groups],
            teacher=teach,
            teacher_weight=settings.teacher_weight,
            mode="supervised",
            data=data,
        )
        if sentence and settings.cosine_weight > 0:  # answers and training questions
            cos_rows = np.unique(np.concatenate([self.pool, self.query[train]]))
            task = _with_targets(task, adapted.model, cos_rows, device)
        return task


class _FoldsJob:
    """k-fold selection as one job of the training loop: at every step each fold's model takes a
    step on its own training questions (the models share no weight, so one summed loss trains
    each on its own); after every epoch each fold ranks its held-out questions, and the
    reciprocal ranks of all the labelled questions, pooled, are tested against the start
    model's (epoch 0), so that the loop's patience counts pooled progress."""

    def __init__(self, jobs: list[_AdaptJob], config: TrainConfig, settings: AdaptConfig) -> None:
        self.jobs, self.config, self.settings = jobs, config, settings
        self.model = torch.nn.ModuleList([job.model for job in jobs])
        self.optimizers = [opt for job in jobs for opt in job.optimizers]
        self.steps = [0] * len(jobs)
        self.start = np.zeros(0)
        self.tests: dict[int, dict[str, Any]] = {}
        self.selection = Selection()

    def begin_epoch(self, epoch: int) -> tuple[range, dict[str, Any]]:
        self.steps = [len(job.begin_epoch(epoch)[0]) for job in self.jobs]
        return range(max(self.steps)), {}

    def loss(self, step: int) -> Tensor | None:
        losses = [
            loss
            for job, n in zip(self.jobs, self.steps, strict=True)
            if step < n and (loss := job.loss(step)) is not None
        ]
        return cast(Tensor, sum(losses)) if losses else None

    def evaluate(self, epoch: int) -> Verdict:
        for job in self.jobs:
            job.evaluate(epoch)
        rr = np.concatenate([job.per_question[epoch] for job in self.jobs])
        score = float(rr.mean())
        row: dict[str, Any] = {"held_out": {"mrr@10": score, "questions": len(rr)}}
        if epoch == 0:
            self.start = rr
            self.selection.start(score)
            return Verdict(score, row, f"out-of-fold MRR@10 {score:.4f} ({len(rr)} questions)")
        test = versus_start(self.start, rr, seed=self.config.seed + epoch, alpha=self.settings.significance)
        self.tests[epoch] = row["versus_start"] = test
        keep, progress = self.selection.judge(score, test)
        return Verdict(score, row, gain_summary("out-of-fold MRR@10", score, test), keep=keep, progress=progress)


def _select_by_folds(job: _FoldsJob, config: TrainConfig, settings: AdaptConfig, say: Log) -> dict[str, Any]:
    """The number of epochs to train on all the labels: the epoch whose out-of-fold MRR@10, over
    every labelled question, beats the start model's beyond noise by the most (0: none); the
    folds stop together after ``adapt_patience`` epochs without a better pooled mean."""
    loop = LoopConfig(
        epochs=config.epochs,
        tag="adapt/folds",
        evaluate_start=True,
        start_label="the start model",
        keep_best=False,
        patience=settings.adapt_patience,
        measure="out-of-fold MRR@10",
    )
    outcome = run(loop, job, log=say)
    best, start_mrr = outcome.best_epoch, float(job.start.mean())
    best_mrr = start_mrr + (job.tests[best]["gain"] if best else 0.0)
    why = selection_why(best, job.tests, start_mrr, best_mrr, settings.significance)
    folds = len(job.jobs)
    return {
        "epochs": best,
        "why": f"{why} (out-of-fold, {folds} folds of the labelled questions"
        + ("; then trained on all of them)" if best else ")"),
        "selection": {
            "rule": f"{folds}-fold: every labelled question held out once; keep the number of epochs whose "
            "out-of-fold gain over the start model passes a one-sided sign test and a paired bootstrap at "
            f"p <= {settings.significance:g}, then train that many epochs on all the labelled questions",
            "start_mrr": round(start_mrr, 6),
            "stopping": outcome.stopped,
            "epochs": [{"epoch": e, "mrr@10": round(start_mrr + t["gain"], 6), **t} for e, t in job.tests.items()],
        },
    }

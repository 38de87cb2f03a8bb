"""Training without labels: the head fine-tuned on answers alone, against a sentence teacher.

:func:`train_unlabelled` cuts pseudo-questions from the answers (:func:`pseudo_questions`) and
matches the student's in-batch softmax to the teacher's (see its docstring).
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import numpy as np
import torch

from qaindex.eval.datasets import Candidate, QuestionGroup

from ..config import TrainConfig
from ..embeddings.spec import Embeddings, build_embeddings
from ..networks.families import build_model, make_optimizer, start_epoch
from ..networks.models import DualEncoderQA
from .data import Split, TextTable, split_groups
from .evaluation import best_result, evaluate
from .loop import Log, LoopConfig, Verdict, resolve_device, run, seeded, stderr_log, torch_settings
from .result import TrainResult

__all__ = ["answer_sample", "pseudo_questions", "train_unlabelled", "unit_rows"]


_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


def answer_sample(texts: Sequence[str], limit: int, seed: int) -> list[str]:
    """At most ``limit`` of ``texts`` (0: all), drawn with ``seed``, in their corpus order.

    Example
    -------
    >>> answer_sample(["a", "b", "c", "d", "e"], 3, 0) == answer_sample(["a", "b", "c", "d", "e"], 3, 0)
    True
    >>> len(answer_sample(["a", "b", "c"], 0, 0))
    3
    """
    if limit <= 0 or len(texts) <= limit:
        return list(texts)
    keep = np.sort(np.random.default_rng(seed).choice(len(texts), size=limit, replace=False))
    return [texts[i] for i in keep.tolist()]


def pseudo_questions(answer: str, rng: np.random.Generator, count: int) -> list[str]:
    """``count`` pseudo-questions cut from ``answer``: a random sentence, or a random span of words.

    Half of them (on average) are one of the answer's sentences (when it has several), the
    rest a span of 3-12 consecutive words; an answer of at most 3 words is its own
    pseudo-question.

    Example
    -------
    >>> rng = np.random.default_rng(0)
    >>> text = "Open Settings. Choose Reset password and follow the link."
    >>> qs = pseudo_questions(text, rng, 3)
    >>> len(qs), all(q and set(q.split()) <= set(text.split()) for q in qs)
    (3, True)
    """
    words = answer.split()
    sentences = [s for s in _SENTENCE_END.split(answer.strip()) if len(s.split()) >= 3]
    out: list[str] = []
    for _ in range(count):
        if len(words) <= 3:
            out.append(answer.strip())
            continue
        if len(sentences) > 1 and rng.random() < 0.5:
            out.append(sentences[int(rng.integers(len(sentences)))])
            continue
        length = int(rng.integers(3, min(12, len(words)) + 1))
        start = int(rng.integers(0, len(words) - length + 1))
        out.append(" ".join(words[start : start + length]))
    return out


def unit_rows(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float32)
    return x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)


def init_identity_head(model: DualEncoderQA, scale: float) -> None:
    """``W_p = scale·[I; −I]`` on the table's first ``h = min(width, dim // 2)`` components, ``b_p = 0``.

    ``ReLU`` then keeps the positive and the negative half of each of those components, so
    the untrained head is the (leading part of the) table itself; other weights start at 0.
    """
    proj = model.encoder.proj
    dim, width = proj.weight.shape
    h = min(width, dim // 2)
    with torch.no_grad():
        proj.weight.zero_()
        eye = torch.eye(h, dtype=proj.weight.dtype) * scale
        proj.weight[:h, :h] = eye
        proj.weight[h : 2 * h, :h] = -eye
        proj.bias.zero_()


def train_unlabelled(
    config: TrainConfig,
    answers: Sequence[str],
    teacher: Callable[[Sequence[str]], np.ndarray],
    *,
    embeddings: Embeddings | None = None,
    log: Log | None = stderr_log,
    pseudo_per_answer: int = 4,
    temperature: float = 0.05,
    dev_questions: int = 300,
    dev_candidates: int = 100,
    init_scale: float = 4.0,
    hyperqa_scale: float | None = 0.5,
) -> TrainResult:
    """Fine-tune the HyperQA / CosineQA head on answers alone, against a sentence teacher.

    No question is needed. Each answer gets ``pseudo_per_answer`` pseudo-questions
    (:func:`pseudo_questions`); the teacher embeds answers and pseudo-questions. A step
    takes ``batch_size`` answers and one pseudo-question of each, and minimises the
    cross-entropy between the teacher's distribution over the batch's answers
    (``softmax(cos / temperature)``: the teacher decides which answers are positives) and
    the student's ``softmax(score)``. The embedding table stays frozen; the head starts as
    ``scale·[I; −I]`` on the table's leading ``dim // 2`` components (PCA order), i.e. from
    the table itself.

    Model selection: held-out pseudo-questions (cut with another seed), each ranking up to
    ``dev_candidates`` answers of which the teacher's top answer is the correct one; the best
    epoch by that MAP is kept, epoch 0 (the untrained head) included.

    Parameters
    ----------
    config : TrainConfig
        ``model``, ``ball`` (``auto`` means ``weighted``: norms from learned per-token depth, so
        with the ``relative`` ranking low-information answers sit near the centre and score
        worst), ``ranking``, ``embeddings`` (default
        ``"distilled"``), ``lr``, ``optimizer``, ``batch_size``, ``epochs``, ``seed``,
        ``device``, ``threads``, ``dim`` and truncation are used.
    answers : sequence of str
        The user's answers (duplicates are dropped).
    teacher : callable
        Texts → sentence embeddings (e.g. :func:`qaindex_export.embeddings.distill.minilm_sentence_teacher`).
    embeddings : Embeddings, optional
        The frozen table (default: built from ``config.embeddings``).
    log : callable or None
    pseudo_per_answer, temperature, dev_questions, dev_candidates, init_scale
        See above.
    hyperqa_scale : float or None
        HyperQA starts at ``w_f = hyperqa_scale / temperature`` (None: ``w_f = 1``). Near the
        boundary an answer's relative score is about ``-log|ξ - q|²`` (``ξ`` its direction), a
        spread of a few units: ``w_f = 1`` starts far softer than the teacher's distribution
        (on the FAQ answers, 0.5 trained for all 10 epochs instead of peaking at epoch 1).

    Returns
    -------
    TrainResult

    Example
    -------
    >>> from qaindex_export.embeddings.distill import minilm_sentence_teacher
    >>> cfg = TrainConfig(embeddings="distilled", epochs=5)
    >>> result = train_unlabelled(cfg, answers, minilm_sentence_teacher())  # doctest: +SKIP
    """
    started = time.perf_counter()
    say: Log = log if log is not None else (lambda _m: None)
    texts = list(dict.fromkeys(a for a in answers if a.strip()))
    if len(texts) < 2:
        raise ValueError("training without labels needs at least two distinct non-empty answers")
    if embeddings is None:
        embeddings = build_embeddings(config.embeddings, texts, max_vocab=config.max_vocab)
    if embeddings.vectors is None:
        raise ValueError("training without labels needs a pretrained table (--embeddings distilled or minilm)")
    width = int(embeddings.vectors.shape[1])
    ball = "weighted" if config.ball == "auto" else config.ball
    config = replace(config, ball=ball, train_embeddings=False).validate()
    device = resolve_device(config.device)
    with torch_settings(config.threads):
        rng = seeded(config.seed)
        tokenizer = embeddings.tokenizer()
        table = TextTable(tokenizer, {"question": config.max_question_tokens, "answer": config.max_answer_tokens})
        n = len(texts)
        pseudo = [pseudo_questions(t, rng, pseudo_per_answer) for t in texts]
        dev_rng = np.random.default_rng(config.seed + 1)
        dev_owner = np.sort(dev_rng.choice(n, size=min(n, dev_questions), replace=False))
        dev_texts = [pseudo_questions(texts[i], dev_rng, 1)[0] for i in dev_owner]
        say(f"[teacher] embedding {n} answers and {n * pseudo_per_answer + len(dev_texts)} pseudo-questions")
        t_answers = unit_rows(teacher(texts))
        t_pseudo = unit_rows(teacher([q for qs in pseudo for q in qs])).reshape(n, pseudo_per_answer, -1)
        t_dev = unit_rows(teacher(dev_texts))
        answer_rows = np.array([table.add(t, "answer") for t in texts], dtype=np.int64)
        pseudo_rows = np.array([[table.add(q, "question") for q in qs] for qs in pseudo], dtype=np.int64)
        # dev groups: the teacher's best answer is the correct one among dev_candidates answers
        groups = []
        for j, text in enumerate(dev_texts):
            sims = t_answers @ t_dev[j]
            best = int(np.argmax(sims))
            others = np.delete(np.arange(n), best)
            if len(others) > dev_candidates - 1:
                others = dev_rng.choice(others, size=dev_candidates - 1, replace=False)
            cands = [Candidate(str(best), texts[best], 1)] + [Candidate(str(i), texts[i], 0) for i in others]
            groups.append(QuestionGroup(f"pseudo#{j}", text, tuple(cands)))
        dev_split = split_groups(groups, table)

        model = build_model(
            config.model,
            len(tokenizer.vocab),
            dim=config.dim,
            embeddings=embeddings.vectors,
            train_embeddings=False,
            ball=ball if config.model == "hyperqa" else "clip",
            max_norm=config.max_norm,
            init_norm=config.init_norm,
            ranking=config.ranking,
        ).to(device)
        init_identity_head(model, init_scale)
        if config.model == "cosineqa":  # cosines live in [-1, 1]: start at the teacher's temperature
            with torch.no_grad():
                model.w_raw.fill_(math.log(math.expm1(1.0 / temperature)))
        elif hyperqa_scale is not None:  # start w_f at hyperqa_scale / temperature
            with torch.no_grad():
                model.w_raw.fill_(math.log(math.expm1(hyperqa_scale / temperature)))
        job = _TeacherJob(
            config,
            model,
            table,
            dev_split,
            answer_rows,
            pseudo_rows,
            torch.from_numpy(t_answers).to(device),
            torch.from_numpy(t_pseudo).to(device),
            temperature,
            device,
            rng,
        )
        tag = f"{config.model}/{model.ball.kind}/teacher" if config.model == "hyperqa" else f"{config.model}/teacher"
        loop = LoopConfig(epochs=config.epochs, tag=tag, evaluate_start=True, start_label="untrained head")
        outcome = run(loop, job, log=say)
        assert outcome.best_state is not None and outcome.best is not None
        return best_result(
            model,
            outcome.best_state,
            dev_split,
            table,
            device,
            tokenizer=tokenizer,
            config=config,
            best_epoch=outcome.best_epoch,
            dev=outcome.best.detail,
            history=outcome.history,
            data={
                "train": {"answers": n, "pseudo_questions": n * pseudo_per_answer, "labels": None},
                "dev": {"pseudo_questions": len(dev_texts), "candidates": dev_candidates, "positive": "teacher top-1"},
            },
            embeddings={
                "source": embeddings.source,
                "kind": embeddings.kind,
                "vocab_size": len(embeddings.vocab),
                "dim": width,
                "pretrained_rows": embeddings.found,
            },
            seconds=time.perf_counter() - started,
            selection={
                "by": "dev MAP on held-out pseudo-questions (teacher top-1 is correct)",
                "method": "unlabelled: cross-entropy to the teacher's softmax over in-batch answers",
                "temperature": temperature,
                "pseudo_per_answer": pseudo_per_answer,
                "head_init": f"{init_scale}·[I; -I]",
            },
            dev_groups=groups,
        )


class _TeacherJob:
    """Training against a teacher for :func:`.loop.run`: a step takes a batch of answers and one
    pseudo-question of each, and matches the student's softmax over the batch's answers to the
    teacher's; dev MAP on the held-out pseudo-questions chooses the epoch."""

    def __init__(
        self,
        config: TrainConfig,
        model: DualEncoderQA,
        table: TextTable,
        dev_split: Split,
        answer_rows: np.ndarray,
        pseudo_rows: np.ndarray,
        t_answers: torch.Tensor,
        t_pseudo: torch.Tensor,
        temperature: float,
        device: torch.device,
        rng: np.random.Generator,
    ) -> None:
        self.config, self.model, self.table, self.dev_split = config, model, table, dev_split
        self.answer_rows, self.pseudo_rows = answer_rows, pseudo_rows
        self.t_answers, self.t_pseudo, self.temperature = t_answers, t_pseudo, temperature
        self.device, self.rng = device, rng
        self.optimizer = make_optimizer(model, config)
        self.optimizers = [self.optimizer]
        self.pick = np.zeros(0, dtype=np.int64)

    def begin_epoch(self, epoch: int) -> tuple[list[np.ndarray], dict[str, Any]]:
        n, size = len(self.answer_rows), self.config.batch_size
        start_epoch(self.optimizer, self.config, epoch)
        order = self.rng.permutation(n)
        self.pick = self.rng.integers(0, self.pseudo_rows.shape[1], size=n)  # each answer's pseudo-question
        batches = [order[start : start + size] for start in range(0, n, size)]
        return [idx for idx in batches if len(idx) >= 2], {}

    def loss(self, idx: np.ndarray) -> torch.Tensor:
        model, device, b = self.model, self.device, len(idx)
        q_rows = self.pseudo_rows[idx, self.pick[idx]]
        rows, inverse = np.unique(np.concatenate([q_rows, self.answer_rows[idx]]), return_inverse=True)
        flat, offsets = self.table.gather(rows)
        vectors = model.encode_bags(torch.from_numpy(flat).to(device), torch.from_numpy(offsets).to(device))
        inv = torch.from_numpy(inverse).to(device)
        qv, av = vectors[inv[:b]], vectors[inv[b:]]
        student, _ = model.score(qv[:, None, :], av[None, :, :].expand(b, b, -1))
        idx_t = torch.from_numpy(idx).to(device)
        tq = self.t_pseudo[idx_t, torch.from_numpy(self.pick[idx]).to(device)]
        target = torch.softmax(tq @ self.t_answers[idx_t].T / self.temperature, dim=1)
        return -(target * torch.log_softmax(student, dim=1)).sum(dim=1).mean()

    def evaluate(self, epoch: int) -> Verdict:
        dev = evaluate(self.model, self.dev_split, self.table, self.device)
        row = {"dev_map": dev["map"], "dev_mrr": dev["mrr"]}
        if epoch > 0:
            row["w_f"] = self.model.w_f.item()
        return Verdict(dev["map"], row, f"dev MAP {dev['map']:.4f}  MRR {dev['mrr']:.4f}", detail=dev)

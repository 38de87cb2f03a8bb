"""Sentence-level distillation (qaindex_export.training.tokenlearn) and the lognorm ball map."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from qaindex_export.exporting.table_export import export_tokenlearn_model, read_tokenlearn_model  # noqa: E402
from qaindex_export.networks.models import BallMap  # noqa: E402
from qaindex_export.training.tokenlearn import (  # noqa: E402
    StaticStudent,
    TokenizedTexts,
    TokenlearnConfig,
    encode_sums,
    evidence_weights,
    fit_ball,
    info_nce,
    teacher_readout,
    train_tokenlearn,
)

from qaindex import Model  # noqa: E402
from qaindex.geometry import hyperbolic  # noqa: E402
from qaindex.text.tokenizer import Tokenizer  # noqa: E402

VOCAB, WIDTH = 60, 8


def planted(seed: int = 0, texts: int = 3000) -> tuple[TokenizedTexts, np.ndarray, np.ndarray]:
    """Random texts over a small vocabulary and a planted linear teacher: the sum of fixed,
    zero-mean token vectors (token 0 is padding and never used)."""
    rng = np.random.default_rng(seed)
    vectors = rng.normal(size=(VOCAB, WIDTH))
    vectors -= vectors[1:].mean(axis=0)
    vectors[0] = 0.0
    ids = [rng.integers(1, VOCAB, size=rng.integers(2, 9)).tolist() for _ in range(texts)]
    tokens = TokenizedTexts.from_lists(ids)
    teacher = np.stack([vectors[x].sum(axis=0) for x in ids]).astype(np.float32)
    return tokens, teacher, vectors


def mean_cosine(a: np.ndarray, b: np.ndarray) -> float:
    a = a / np.linalg.norm(a, axis=1, keepdims=True)
    b = b / np.linalg.norm(b, axis=1, keepdims=True)
    return float((a * b).sum(axis=1).mean())


def test_distillation_reproduces_a_planted_linear_teacher() -> None:
    tokens, teacher, _ = planted()
    train, held = np.arange(2500), np.arange(2500, 3000)
    init = np.random.default_rng(1).normal(size=(VOCAB, WIDTH)).astype(np.float32)
    config = TokenlearnConfig(dim=WIDTH, epochs=30, batch_size=100, lr=0.02, threads=1)
    result = train_tokenlearn(config, tokens, teacher[train], init_table=init, teacher_rows=train)
    # the student is compared in the teacher's centred PCA space (a rotation here: dim == D)
    target = (teacher[held] - result.mean) @ result.components.T
    before = mean_cosine(encode_sums(StaticStudent(init), tokens, held), target)
    after = mean_cosine(encode_sums(result.model, tokens, held), target)
    assert before < 0.3
    assert after > 0.98, (before, after)
    assert result.history[-1]["loss"] < result.history[1]["loss"]


def test_trained_vectors_are_isotropic_and_their_norms_spread() -> None:
    tokens, teacher, _ = planted(seed=2)
    rows = np.arange(len(tokens))
    pairs = np.stack([rows[:1000], rows[1000:2000]], axis=1)  # arbitrary pairs: only the ball fit uses them
    init = np.abs(np.random.default_rng(3).normal(size=(VOCAB, WIDTH))).astype(np.float32)  # a positive cone
    config = TokenlearnConfig(dim=WIDTH, epochs=20, batch_size=100, lr=0.02, pair_weight=0.0, threads=1)
    result = train_tokenlearn(config, tokens, teacher, init_table=init, pairs=pairs)

    def pairwise(x: np.ndarray) -> float:
        unit = x / np.linalg.norm(x, axis=1, keepdims=True)
        gram = unit @ unit.T
        return float((gram.sum() - np.trace(gram)) / (len(x) * (len(x) - 1)))

    sample = rows[2000:2500]
    assert pairwise(encode_sums(StaticStudent(init), tokens, sample)) > 0.8  # the cone it started in
    assert pairwise(encode_sums(result.model, tokens, sample)) < 0.1
    sums = encode_sums(result.model, tokens, sample)
    evidence = tokens.lengths()[sample].astype(np.float32)[:, None]  # one unit of evidence per token
    fit = fit_ball(sums[:250], evidence[:250], sums[250:], evidence[250:])
    assert fit.answer_norm_std >= 0.05
    norms = np.linalg.norm(hyperbolic.lognorm_map(sums, evidence, fit.a, fit.b, max_norm=0.999), axis=1)
    # more evidence, further out: the longest texts sit further out than the shortest
    assert norms[evidence[:, 0] >= 7].mean() > norms[evidence[:, 0] <= 3].mean() + 0.05


def test_info_nce_prefers_the_right_pairing_and_masks_duplicates() -> None:
    q = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    assert info_nce(q, q, 0.1).item() < info_nce(q, q.flip(0), 0.1).item()
    same = torch.tensor([[True, True], [True, True]])  # both answers are the same text
    assert info_nce(q, q.flip(0), 0.1, same).item() == pytest.approx(0.0, abs=1e-6)


def test_lognorm_map_numpy_and_torch_agree_and_send_little_evidence_inward() -> None:
    rng = np.random.default_rng(0)
    v = rng.normal(size=(50, 6))
    w = rng.uniform(0.0, 30.0, size=(50, 1))
    w[0] = 0.0
    ball = BallMap("lognorm", max_norm=0.999, lognorm=(1.5, -2.0))
    got_torch = ball(torch.from_numpy(np.concatenate([v, w], axis=1)).float()).detach().numpy()
    got_numpy = hyperbolic.lognorm_map(v.astype(np.float32), w.astype(np.float32), 1.5, -2.0, max_norm=0.999)
    np.testing.assert_allclose(got_torch, got_numpy, atol=1e-6)
    norms = np.linalg.norm(got_numpy, axis=1)
    assert norms[0] < 1e-12 and norms.max() < 0.999  # no evidence: the centre
    order = np.argsort(w[:, 0])  # the radius grows with the evidence, the direction is kept
    assert np.all(np.diff(norms[order]) >= -1e-7)
    unit = v[1:] / np.linalg.norm(v[1:], axis=1, keepdims=True)
    np.testing.assert_allclose(got_numpy[1:] / norms[1:, None], unit, atol=1e-5)
    zero = torch.zeros(1, 7, requires_grad=True)  # the gradient stays finite at the empty sum
    ball(zero).sum().backward()
    assert zero.grad is not None and torch.isfinite(zero.grad).all()
    assert ball.describe()["formula"].startswith("max_norm * sigmoid(a * log(w) + b) * y/|y|")


def test_evidence_is_zero_for_junk_tokens() -> None:
    vocab = ["[PAD]", "[UNK]", "!", "0", "a", "the", "of", "2024", "##ж", "##s", "zebra", "pass", "##word"]
    w = evidence_weights(vocab)
    # special tokens, punctuation, digits, numbers, single letters and pieces: no evidence
    assert [float(w[i]) for i in (0, 1, 2, 3, 4, 7, 8, 9)] == [0.0] * 8
    # words: frequent ones (the, of) almost none, rare ones more
    assert 0.0 < w[5] < w[6] < w[10] < w[11] < w[12] <= 1.0


def test_exported_model_matches_the_runtime_formula(tmp_path: Path) -> None:
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", ".", "the", "reset", "password", "refund"]
    rng = np.random.default_rng(0)
    table = rng.normal(size=(len(vocab), 6)).astype(np.float32)
    evidence = evidence_weights(vocab)
    sums = rng.normal(size=(40, 6)) * 5
    weights = rng.uniform(1.0, 5.0, size=(40, 1))
    fit = fit_ball(sums[:20], weights[:20], sums[20:], weights[20:])
    path = export_tokenlearn_model(table, evidence, fit, Tokenizer(vocab, kind="wordpiece"), tmp_path / "m")
    manifest = json.loads((path / "manifest.json").read_text())
    assert manifest["geometry"]["ball_map"] == "lognorm" and manifest["geometry"]["ranking"] == "relative"
    assert manifest["geometry"]["a"] == pytest.approx(fit.a) and manifest["geometry"]["b"] == pytest.approx(fit.b)
    assert manifest["dimension"] == 6
    model = Model.load(path)
    got = model.encode(["reset the password", "refund", "", ".", "the the"], role="answer")
    half = table.astype(np.float16).astype(np.float32)
    w16 = evidence.astype(np.float16).astype(np.float32)
    ids = [[6, 5, 7], [8], [], [4], [5, 5]]
    v = np.stack([half[i].sum(axis=0) for i in ids])
    w = np.array([[w16[i].sum()] for i in ids], dtype=np.float32)
    want = hyperbolic.lognorm_map(v, w, fit.a, fit.b, max_norm=0.999)
    np.testing.assert_allclose(got, want, atol=1e-5)
    norms = np.linalg.norm(got, axis=1)
    assert norms[2] == 0.0 and norms[3] == 0.0  # no evidence (empty, punctuation): the centre
    assert norms[4] < norms[0]  # a stop word alone: little evidence


def test_old_model_directories_still_load(tmp_path: Path) -> None:
    from qaindex_export.embeddings.distill import DistilledTable
    from qaindex_export.exporting.table_export import export_table_model

    vocab = ["[PAD]", "[UNK]", "reset", "password"]
    table = DistilledTable(vocab, np.random.default_rng(0).normal(size=(4, 3)).astype(np.float32))
    path = export_table_model(table, tmp_path / "old", geometry="poincare", ranking="relative")
    model = Model.load(path)
    assert model.manifest["geometry"]["ball_map"] == "clip"
    assert np.linalg.norm(model.encode(["reset password"], role="answer")) == pytest.approx(0.999, abs=1e-4)


def test_an_epoch_sees_every_training_pair_when_pairs_outnumber_teacher_texts() -> None:
    # 8 texts with a teacher vector (one step of 8) but 40 pairs of distinct tokens (10 batches of 4):
    # an epoch must take 10 steps, so every pair's tokens move, not only the first batch's
    teacher_ids = [[1, 2]] * 8
    pair_ids = [[10 + 2 * i] for i in range(40)] + [[11 + 2 * i] for i in range(40)]
    tokens = TokenizedTexts.from_lists(teacher_ids + pair_ids)
    teacher = np.random.default_rng(0).normal(size=(8, WIDTH)).astype(np.float32)
    pairs = np.stack([8 + np.arange(40), 48 + np.arange(40)], axis=1)
    vocab = 10 + 2 * 40
    init = np.random.default_rng(1).normal(size=(vocab, WIDTH)).astype(np.float32)
    config = TokenlearnConfig(dim=WIDTH, epochs=1, batch_size=8, pair_batch=4, clusters=1, dev_pairs=0, threads=1)
    result = train_tokenlearn(config, tokens, teacher, init_table=init, teacher_rows=np.arange(8), pairs=pairs)
    moved = np.abs(result.model.table.detach().numpy() - init).max(axis=1) > 0
    assert moved[10:].all()


def test_teacher_weight_zero_trains_on_the_pairs_alone() -> None:
    tokens, teacher, _ = planted(texts=200)
    pairs = np.stack([np.arange(0, 100), np.arange(100, 200)], axis=1)
    init = np.random.default_rng(1).normal(size=(VOCAB, WIDTH)).astype(np.float32)
    config = TokenlearnConfig(dim=WIDTH, epochs=2, batch_size=50, pair_batch=20, clusters=1, dev_pairs=0, threads=1)
    with_teacher = train_tokenlearn(config, tokens, teacher, init_table=init, pairs=pairs).table
    pairs_only = train_tokenlearn(
        replace(config, teacher_weight=0.0), tokens, teacher * 0 + 1, init_table=init, pairs=pairs
    ).table
    # the teacher's vectors are ignored at weight 0: any teacher gives the same table
    other = train_tokenlearn(replace(config, teacher_weight=0.0), tokens, -teacher, init_table=init, pairs=pairs).table
    np.testing.assert_array_equal(pairs_only, other)
    assert not np.array_equal(pairs_only, with_teacher)


def test_a_written_model_reads_back_as_its_table_evidence_and_ball(tmp_path: Path) -> None:
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", ".", "the", "reset", "password", "refund"]
    rng = np.random.default_rng(0)
    table = rng.normal(size=(len(vocab), 6)).astype(np.float32)
    evidence = evidence_weights(vocab)
    fit = fit_ball(
        rng.normal(size=(20, 6)), rng.uniform(1, 5, (20, 1)), rng.normal(size=(20, 6)), rng.uniform(1, 5, (20, 1))
    )
    path = export_tokenlearn_model(table, evidence, fit, Tokenizer(vocab, kind="wordpiece"), tmp_path / "m")
    got_table, got_evidence, ball = read_tokenlearn_model(path)
    np.testing.assert_array_equal(got_table, table.astype(np.float16).astype(np.float32))
    np.testing.assert_array_equal(got_evidence, evidence.astype(np.float16).astype(np.float32))
    assert (ball.a, ball.b, ball.max_norm) == pytest.approx((fit.a, fit.b, fit.max_norm))
    assert ball.dev_mrr == pytest.approx(fit.dev_mrr)


def test_continuing_from_a_table_keeps_unseen_rows_and_starts_at_the_readout() -> None:
    # a start table that already matches a planted teacher up to a linear map: the readout targets
    # are its own centred directions, and training on texts of tokens 1..29 leaves 30.. untouched
    tokens, teacher, vectors = planted(texts=600)
    ids = [tokens.flat[tokens.offsets[i] : tokens.offsets[i + 1]] for i in range(len(tokens))]
    rows = np.array([i for i, x in enumerate(ids) if x.max() < 30])
    rng = np.random.default_rng(3)
    start = (vectors @ rng.normal(size=(WIDTH, WIDTH))).astype(np.float32)
    start[30:] = rng.normal(size=(VOCAB - 30, WIDTH))
    targets = teacher_readout(encode_sums(StaticStudent(start), tokens, rows), teacher[rows])
    space = (np.zeros(WIDTH, np.float32), np.eye(WIDTH, dtype=np.float32))
    config = TokenlearnConfig(dim=WIDTH, epochs=2, batch_size=50, dev_pairs=0, threads=1, train_mix=False, lr=1e-2)
    result = train_tokenlearn(config, tokens, targets, init_table=start, teacher_rows=rows, space=space)
    np.testing.assert_array_equal(result.table[30:], start[30:])
    np.testing.assert_array_equal(result.model.mix.detach().numpy(), np.eye(WIDTH, dtype=np.float32))
    sums = encode_sums(StaticStudent(start), tokens, rows)
    unit = sums / np.linalg.norm(sums, axis=1, keepdims=True)
    assert mean_cosine(unit - unit.mean(axis=0), targets) > 0.99  # the start's own (centred) directions
    # a planted teacher the start does not match: training moves the seen rows towards it
    other = teacher_readout(rng.normal(size=(len(rows), WIDTH)) + sums, teacher[rows])
    moved = train_tokenlearn(config, tokens, other, init_table=start, teacher_rows=rows, space=space).table
    assert mean_cosine(encode_sums(StaticStudent(moved), tokens, rows), other) > mean_cosine(sums, other)
    np.testing.assert_array_equal(moved[30:], start[30:])

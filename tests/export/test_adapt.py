"""Adaptation from a start model directory: reading it back, epoch 0, never ending worse than
the start on held-out questions (planted tasks where training hurts), norms after label-free
adaptation, and `qaindex train --start`."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from helpers.trained import planted_teacher_task

torch = pytest.importorskip("torch")

from click.testing import CliRunner  # noqa: E402
from qaindex_export.adaptation.adapt import AdaptedTable, StartError, adapt_supervised, adapt_unlabelled, load_start  # noqa: E402
from qaindex_export.adaptation.config import AdaptConfig  # noqa: E402
from qaindex_export.exporting.onnx_export import export_model  # noqa: E402
from qaindex_export.networks.families import build_model  # noqa: E402
from qaindex_export.training.train import TrainConfig, TrainResult  # noqa: E402

from qaindex.cli import main  # noqa: E402
from qaindex.eval.datasets import Candidate, QuestionGroup  # noqa: E402
from qaindex.model import Model  # noqa: E402
from qaindex.text.tokenizer import Tokenizer  # noqa: E402

TOPICS = [f"t{i}" for i in range(30)]
FILLER = [f"f{i}" for i in range(6)]
VOCAB = ["[PAD]", "[UNK]", *FILLER, *TOPICS]
FAST = {"epochs": 4, "batch_size": 16, "lr": 0.01, "optimizer": "adam", "negatives": 8, "seed": 0, "threads": 1,
        "device": "cpu"}  # fmt: skip


def write_start(directory: Path, table: np.ndarray, *, ball: str = "radius") -> Path:
    """A model directory as today's exporter writes it: HyperQA, table → ReLU(I z) → sum → ball map."""
    width = table.shape[1]
    model = build_model("hyperqa", len(VOCAB), dim=width, embeddings=table, ball=ball, init_norm=0.8)
    with torch.no_grad():
        model.encoder.proj.weight.copy_(torch.eye(width))
        model.encoder.proj.bias.zero_()
        if ball == "radius":
            model.ball.radius_w.copy_(torch.from_numpy(np.linspace(-1, 1, width).astype(np.float32)))
        model.w_raw.fill_(2.0)
    tok = Tokenizer(VOCAB, kind="word")
    config = TrainConfig(model="hyperqa", embeddings="none", dim=width, ball=ball)
    result = TrainResult(model.eval(), tok, config, 0, {"map": 0.0}, [], None, {}, {}, 0.0)
    return Path(export_model(result, directory, name="start"))


def topic_table() -> np.ndarray:
    """A start model that already ranks the planted task well: each topic word its own axis."""
    rng = np.random.default_rng(0)
    table = np.zeros((len(VOCAB), len(TOPICS) + 2), np.float32)
    for i, _ in enumerate(TOPICS):
        table[VOCAB.index(TOPICS[i]), i] = 3.0
    table[2 : 2 + len(FILLER), -2:] = rng.uniform(0.1, 0.3, size=(len(FILLER), 2))
    return table


def answers_and_questions(rng: np.random.Generator) -> tuple[list[str], list[tuple[str, int]]]:
    answers = [" ".join([t, *rng.choice(FILLER, 4).tolist()]) for t in TOPICS]
    questions = [
        (" ".join([TOPICS[i], *rng.choice(FILLER, 2).tolist()]), i) for i in range(len(TOPICS)) for _ in (0, 1)
    ]
    return answers, questions


def groups(answers: list[str], questions: list[tuple[str, int]], tag: str) -> list[QuestionGroup]:
    out = []
    for j, (q, right) in enumerate(questions):
        cands = tuple(Candidate(f"a{i}", a, int(i == right)) for i, a in enumerate(answers))
        out.append(QuestionGroup(f"{tag}{j}", q, cands))
    return out


def write_faq(path: Path, answers: list[str], questions: list[tuple[str, int]]) -> Path:
    """A corpus-format FAQ: each answer with its questions stored on it."""
    rows = [
        {"id": f"a{i}", "answer": a, "questions": [q for q, j in questions if j == i]} for i, a in enumerate(answers)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture(scope="module")
def start_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_start(tmp_path_factory.mktemp("start") / "model", topic_table())


def brute_force_mrr10(model_dir: Path, answers: list[str], questions: list[tuple[str, int]]) -> float:
    """MRR@10 of ``questions`` over ``answers`` with the ONNX model (independent of the trainer)."""
    model = Model.load(model_dir)
    av = model.encode(answers, role="answer")
    qv = model.encode([q for q, _ in questions], role="question")
    scores, _ = model.score(qv, np.broadcast_to(av, (len(qv), *av.shape)))
    rr = []
    for row, (_, right) in zip(scores, questions, strict=True):
        rank = int((row > row[right]).sum())  # the correct answer's 0-based rank
        rr.append(1.0 / (rank + 1) if rank < 10 else 0.0)
    return float(np.mean(rr))


# -- the start point --------------------------------------------------------------------------------------------


def test_load_start_reads_an_exported_model_back(start_dir: Path) -> None:
    start = load_start(start_dir)
    texts = ["t3 f1 f2", "t7", "f0 f0 t12 t13", "unknownword"]
    ids, mask = start.tokenizer.encode_batch(texts, 16)
    with torch.no_grad():
        mine = start.model(torch.from_numpy(ids), torch.from_numpy(mask)).numpy()
    np.testing.assert_allclose(mine, Model.load(start_dir).encode(texts, role="answer"), atol=1e-5)
    assert start.model.ball.kind == "radius" and start.config.dim == len(TOPICS) + 2
    assert start.model.w_f.item() == pytest.approx(float(torch.nn.functional.softplus(torch.tensor(2.0))), rel=1e-5)


def test_load_start_reads_the_built_in_model() -> None:
    """The shipped default (lognorm ball: per-token evidence column, weights partly folded into
    constants by the exporter and read from the manifest) is what `qaindex train` adapts."""
    from qaindex.model import DEFAULT_MODEL_DIR

    start = load_start(DEFAULT_MODEL_DIR)  # checks torch against onnxruntime itself
    texts = ["How do I reset my password?", "refund", "!!!", ""]
    ids, mask = start.tokenizer.encode_batch(texts, 40)
    with torch.no_grad():
        mine = start.model(torch.from_numpy(ids), torch.from_numpy(mask)).numpy()
    np.testing.assert_allclose(mine, Model.load(DEFAULT_MODEL_DIR).encode(texts, role="answer"), atol=1e-4)
    assert start.model.ball.kind == "lognorm"


def test_load_start_reads_an_old_format_directory(tmp_path: Path) -> None:
    """A directory exported before the ranking rule existed (clip ball map, no ``geometry.ranking``:
    the plain distance) is read back with the rule it was served with, and scores as the runtime does."""
    old = write_start(tmp_path / "new", topic_table(), ball="clip")
    manifest = json.loads((old / "manifest.json").read_text())
    del manifest["geometry"]["ranking"]
    manifest["score"]["formula"] = "-(w_f * d + b_f)"
    from qaindex_export.exporting.export_forms import PoincareScorer
    from qaindex_export.exporting.onnx_export import export_scorer

    params = manifest["score"]["parameters"]
    graph = export_scorer(PoincareScorer(params["w_f"], params["b_f"], "distance"), manifest["dimension"])
    (old / manifest["graphs"]["scorer"]).write_bytes(graph)
    from qaindex.store.atomic_files import file_entry

    manifest["files"][manifest["graphs"]["scorer"]] = file_entry(old / manifest["graphs"]["scorer"])
    (old / "manifest.json").write_text(json.dumps(manifest))
    start = load_start(old)
    assert start.config.ranking == "distance" and start.model.ball.kind == "clip"
    runtime = Model.load(old)
    texts = ["t1 f0", "t2 t3", "f1 f2 f3", "t9"]
    v = runtime.encode(texts, role="answer")
    want, _ = runtime.score(v[:1], v[None, :, :])
    with torch.no_grad():
        got, _ = start.model.score(torch.from_numpy(v[:1])[:, None, :], torch.from_numpy(v)[None])
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-4, atol=1e-4)


def test_load_start_refuses_what_it_cannot_adapt(tmp_path: Path, start_dir: Path) -> None:
    with pytest.raises(StartError, match=r"no per-token table .* train with --from-scratch"):
        import shutil

        broken = tmp_path / "broken"
        shutil.copytree(start_dir, broken)
        graph = Model.read_manifest(broken)["graphs"]["answer_encoder"]
        import onnx

        proto = onnx.load(str(broken / graph))
        for init in proto.graph.initializer:
            if init.name == "table":
                init.name = "something_else"
                for node in proto.graph.node:
                    node.input[:] = ["something_else" if i == "table" else i for i in node.input]
        onnx.save(proto, str(broken / graph))
        manifest = json.loads((broken / "manifest.json").read_text())
        from qaindex.store.atomic_files import file_entry

        manifest["files"][graph] = file_entry(broken / graph)
        (broken / "manifest.json").write_text(json.dumps(manifest))
        load_start(broken)


def test_adapted_table_is_the_start_until_trained_and_folds_exactly() -> None:
    base = torch.from_numpy(np.random.default_rng(1).normal(size=(6, 3)).astype(np.float32))
    enc = AdaptedTable(base, np.array([2, 4]), depth=False)
    ids, mask = torch.tensor([[2, 3, 0], [4, 1, 5]]), torch.tensor([[1, 1, 0], [1, 1, 1]])
    want = (base[ids] * mask[..., None]).sum(1)
    torch.testing.assert_close(enc(ids, mask), want)
    with torch.no_grad():
        enc.delta.add_(1.0)
        enc.mix.copy_(torch.eye(3) * 0.5)
    folded = enc.folded_table()
    expected = base.clone()
    expected[[2, 4]] += 1.0
    torch.testing.assert_close(folded, expected * 1.5)  # (I + M)(T + Δ), rows without Δ unchanged but mixed
    torch.testing.assert_close(enc(ids, mask), (folded[ids] * mask[..., None]).sum(1))


# -- never worse than the start ---------------------------------------------------------------------------------


def test_mislabelled_supervision_keeps_the_start_model(start_dir: Path) -> None:
    """Every training label points at the wrong answer: training can only hurt, so epoch 0 (the
    start model) must be kept and the result equals the start on the held-out questions."""
    rng = np.random.default_rng(5)
    answers, questions = answers_and_questions(rng)
    wrong = [(q, (i + 7) % len(answers)) for q, i in questions]
    dev = [(" ".join([TOPICS[i], "f3"]), i) for i in range(0, len(TOPICS), 2)]
    result = adapt_supervised(
        TrainConfig(**{**FAST, "lr": 0.05, "epochs": 6}), AdaptConfig(teacher_weight=0.0, anchor=0.0, adapt_patience=6),
        groups(answers, wrong, "w"),
        groups(answers, dev, "d"), start=start_dir,
    )  # fmt: skip
    report = result.diagnostics["adaptation"]
    start_mrr = brute_force_mrr10(start_dir, answers, dev)
    # epoch 0 is the start model, measured on the held-out split (independently recomputed here)
    assert result.history[0]["epoch"] == 0 and result.history[0]["loss"] is None
    assert result.history[0]["held_out"]["mrr@10"] == pytest.approx(start_mrr, abs=1e-6)
    # training on the wrong labels does hurt ...
    assert min(h["held_out"]["mrr@10"] for h in result.history[1:]) < start_mrr
    # ... so the start model is kept, unchanged
    assert result.best_epoch == 0 and report["kept_epoch"] == 0
    assert (
        report["final_metrics"]["mrr@10"]
        == report["start_metrics"]["mrr@10"]
        == result.history[0]["held_out"]["mrr@10"]
    )
    assert "no epoch beat the start model" in report["why"]
    start = load_start(start_dir)
    for name, value in start.model.state_dict().items():
        if name in ("encoder.delta", "encoder.slot"):  # row changes: checked below
            continue
        torch.testing.assert_close(result.model.state_dict()[name], value)
    assert float(result.model.encoder.delta.detach().abs().max()) == 0.0


def test_tiny_noisy_supervision_never_ends_below_the_start(start_dir: Path, tmp_path: Path) -> None:
    """Four labelled questions, half of them wrong, held-out split chosen by the trainer: whatever
    epoch is kept, its held-out MRR@10 is at least the start model's, and so is the exported model's."""
    rng = np.random.default_rng(9)
    answers, questions = answers_and_questions(rng)
    labelled = [(q, i if k % 2 else (i + 3) % len(answers)) for k, (q, i) in enumerate(questions[:12])]
    result = adapt_supervised(
        TrainConfig(**FAST), AdaptConfig(holdout=0.5, folds=1), groups(answers, labelled, "n"), start=start_dir
    )
    report = result.diagnostics["adaptation"]
    assert report["final_metrics"]["mrr@10"] >= report["start_metrics"]["mrr@10"]
    assert report["final_metrics"] == result.history[result.best_epoch]["held_out"]
    kept = [e["epoch"] for e in report["selection"]["epochs"] if e["significant"]]
    assert result.best_epoch == (max(kept, key=lambda e: result.history[e]["held_out"]["mrr@10"]) if kept else 0)
    assert report["teacher"] == "the start model's own softmax(score)"


# -- label-free adaptation: helps a weak start, keeps norms informative -------------------------------------------


def planted_teacher() -> tuple[np.ndarray, list[str], object]:
    """A weak start (a random table dominated by filler words) and a teacher that only sees topics."""
    table, answers, teacher = planted_teacher_task(VOCAB, TOPICS, FILLER, width=24, filler_scale=5.0)
    return np.abs(table), answers, teacher


@pytest.mark.slow  # a minute of training on two cores: CI runs it (QAINDEX_SLOW=1)
def test_label_free_adaptation_improves_a_weak_start_and_spreads_norms(tmp_path: Path) -> None:
    table, answers, teacher = planted_teacher()
    start = write_start(tmp_path / "weak", table)
    config = TrainConfig(**{**FAST, "epochs": 10, "lr": 0.02})
    # the ranking term on the pseudo-questions (with its norm term) on, as well as the cosine term
    settings = AdaptConfig(pair_weight=1.0, pseudo_questions=4)
    result = adapt_unlabelled(config, settings, answers, teacher, start=start)
    report = result.diagnostics["adaptation"]
    assert result.history[0]["epoch"] == 0 and report["kept_epoch"] > 0
    assert report["final_metrics"]["mrr@10"] > report["start_metrics"]["mrr@10"] + 0.1
    # the norms neither saturate at the clip nor collapse: std >= 0.05, none at the boundary
    assert report["answer_norms"]["final_std"] >= 0.05, report["answer_norms"]
    assert result.norms is not None and result.norms["at_clip"] == 0.0
    # the export is the adapted model (parity is checked on export) and loads
    out = export_model(result, tmp_path / "adapted")
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["metrics"]["adaptation"]["kept_epoch"] == report["kept_epoch"]
    vectors = Model.load(out).encode(answers, role="answer")
    assert float(np.linalg.norm(vectors, axis=1).std()) >= 0.05


# -- the CLI ------------------------------------------------------------------------------------------------------


def test_cli_train_starts_from_an_exported_model_directory(start_dir: Path, tmp_path: Path) -> None:
    answers, questions = answers_and_questions(np.random.default_rng(2))
    corpus = write_faq(tmp_path / "faq.jsonl", answers, questions)
    out = tmp_path / "adapted"
    runner = CliRunner()
    res = runner.invoke(
        main,
        ["train", str(corpus), "--start", str(start_dir), "--out", str(out), "--epochs", "2", "--threads", "1",
         "--device", "cpu", "--quiet"],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    summary = json.loads(res.stdout)
    adaptation = summary["adaptation"]
    assert summary["mode"] == f"adapting {start_dir}"
    assert adaptation["final_mrr@10"] >= adaptation["start_mrr@10"]
    assert adaptation["kept_epoch"] in (0, 1, 2) and adaptation["why"]
    assert Model.load(out).dimension == len(TOPICS) + 2
    # options that shape a new model cannot be combined with --start ...
    res = runner.invoke(main, ["train", str(corpus), "--start", str(start_dir), "--out", str(out), "--dim", "8"])
    assert res.exit_code == 2
    assert "--dim: the start model fixes its form; drop --dim, or train a new model with --from-scratch" in res.output
    res = runner.invoke(main, ["train", str(corpus), "--start", str(start_dir), "--from-scratch", "--out", str(out)])
    assert res.exit_code == 2 and "--start and --from-scratch exclude each other" in res.output
    # ... and a start directory that is not a model is a clear error
    res = runner.invoke(main, ["train", str(corpus), "--start", str(tmp_path / "nothing"), "--out", str(out)])
    assert res.exit_code == 1 and str(tmp_path / "nothing") in res.output


# -- static-table starts (the built-in model's form): the teacher's objective, and noise-proof selection ----------

WORDS = [f"top{a}{b}" for a in "abcdef" for b in "abcde"]  # 30 topic words
FILL = ["thex", "andx", "withx", "fromx", "intox", "ontox"]
STATIC_VOCAB = ["[PAD]", "[UNK]", *FILL, *WORDS]


def write_static_start(directory: Path, seed: int = 3) -> Path:
    """A weak static start in the built-in model's form (table + evidence column, lognorm ball,
    relative ranking): random rows, the filler words' rows five times longer than the topics'."""
    from qaindex_export.exporting.table_export import export_tokenlearn_model
    from qaindex_export.training.tokenlearn import BallFit

    rng = np.random.default_rng(seed)
    table = rng.normal(size=(len(STATIC_VOCAB), 12)).astype(np.float32)
    table[0] = 0.0
    table[2 : 2 + len(FILL)] *= 5.0
    evidence = np.ones(len(STATIC_VOCAB), np.float32)
    evidence[:2] = 0.0
    fit = BallFit(a=1.0, b=-1.0, max_norm=0.999, dev_mrr=0.0, answer_norm_std=0.0, answer_norm_median=0.0)
    return Path(export_tokenlearn_model(table, evidence, fit, Tokenizer(STATIC_VOCAB, kind="word"), directory))


def topic_teacher(seed: int = 4) -> Callable[[list[str]], np.ndarray]:
    """A fake sentence teacher that sees only topics: a text's vector is the sum of its topic words' hidden
    vectors (plus a common offset, which the alignment's centring must remove)."""
    rng = np.random.default_rng(seed)
    hidden = {w: rng.normal(size=10) for w in WORDS}
    offset = 3.0 * rng.normal(size=10)

    def teacher(texts: list[str]) -> np.ndarray:
        return np.stack([offset + sum((hidden[w] for w in t.split() if w in hidden), np.zeros(10)) for t in texts])

    return teacher


def static_corpus(rng: np.random.Generator) -> tuple[list[str], list[tuple[str, int]]]:
    answers = [
        " ".join(rng.permutation([*rng.choice(WORDS, 2, replace=False), *rng.choice(FILL, 6)]).tolist())
        for _ in range(60)
    ]
    questions = [(" ".join([a.split()[[w in WORDS for w in a.split()].index(True)], *rng.choice(FILL, 2)]), i)
                 for i, a in enumerate(answers)]  # fmt: skip
    return answers, questions


def varied_corpus(rng: np.random.Generator, n: int = 120) -> tuple[list[str], list[tuple[str, int]]]:
    """Like :func:`static_corpus`, with 0-6 filler words per answer: the answers alone (what
    label-free adaptation fits by default) then tell the filler words' rows from the topics'."""
    answers = [
        " ".join(rng.permutation([*rng.choice(WORDS, 2, replace=False), *rng.choice(FILL, int(rng.integers(0, 7)))]))
        for _ in range(n)
    ]
    questions = [(" ".join([a.split()[[w in WORDS for w in a.split()].index(True)], *rng.choice(FILL, 2)]), i)
                 for i, a in enumerate(answers)]  # fmt: skip
    return answers, questions


def test_teacher_alignment_recovers_a_rotated_centred_space() -> None:
    from qaindex_export.adaptation.adapt import teacher_alignment

    rng = np.random.default_rng(1)
    teacher = rng.normal(size=(300, 8)) + 4.0
    q0 = np.linalg.qr(rng.normal(size=(8, 8)))[0]  # a rotation
    sums = ((teacher - teacher.mean(axis=0)) @ q0.T) * rng.uniform(0.5, 3.0, size=(300, 1))  # any per-text scale
    mu, q = teacher_alignment(sums, teacher)
    np.testing.assert_allclose(mu, teacher.mean(axis=0), atol=1e-5)
    np.testing.assert_allclose(q, q0, atol=1e-5)


@pytest.mark.slow  # a minute of training on two cores: CI runs it (QAINDEX_SLOW=1)
def test_label_free_adaptation_moves_a_static_start_towards_the_teacher(tmp_path: Path) -> None:
    rng = np.random.default_rng(7)
    answers, questions = varied_corpus(rng)
    start = write_static_start(tmp_path / "start")
    config = TrainConfig(**{**FAST, "epochs": 12, "lr": 0.1, "batch_size": 32})
    result = adapt_unlabelled(config, AdaptConfig(), answers, topic_teacher(), start=start)
    report = result.diagnostics["adaptation"]
    # by default the cosine term fits the answers alone (the pseudo-questions are only the held-out split)
    assert report["cosine_term"]["texts"] == len(answers) and 0.0 < report["cosine_term"]["start_cosine"] < 0.9
    assert report["held_out"]["pseudo_questions"] > 0 and report["settings"]["anchor"] == 0.0
    assert report["kept_epoch"] > 0, report["why"]
    assert report["final_metrics"]["mrr@10"] > report["start_metrics"]["mrr@10"] + 0.1
    chosen = report["selection"]["epochs"][report["kept_epoch"] - 1]
    assert chosen["significant"] and chosen["sign_p"] <= 0.05 and chosen["bootstrap_p"] <= 0.05
    assert report["why"] == (
        f"epoch {report['kept_epoch']} had the best held-out MRR@10 beyond noise "
        f"({report['final_metrics']['mrr@10']:.4f} against the start model's {report['start_metrics']['mrr@10']:.4f}; "
        f"{chosen['better']} of {chosen['questions']} held-out questions better, {chosen['worse']} worse, "
        f"sign-test p {chosen['sign_p']:.3g}, bootstrap p {chosen['bootstrap_p']:.3g})"
    )
    # real questions (never seen: neither they nor their words' labels), through the exported model
    out = export_model(result, tmp_path / "adapted")
    assert brute_force_mrr10(out, answers, questions) > brute_force_mrr10(start, answers, questions) + 0.1


def test_label_free_adaptation_on_a_sample_of_the_answers_teaches_the_whole_corpus(tmp_path: Path) -> None:
    rng = np.random.default_rng(7)
    answers, questions = varied_corpus(rng, n=160)
    start = write_static_start(tmp_path / "start")
    taught: list[str] = []
    topics = topic_teacher()

    def teacher(texts: list[str]) -> np.ndarray:
        taught.extend(texts)
        return topics(texts)

    config = TrainConfig(**{**FAST, "epochs": 12, "lr": 0.1, "batch_size": 32})
    result = adapt_unlabelled(config, AdaptConfig(max_answers=80), answers, teacher, start=start)
    assert result.data["train"]["answers"] == 80 and result.data["train"]["corpus_answers"] == len(set(answers))
    sample = set(taught) & set(answers)
    assert len(sample) == 80  # the teacher embedded the sampled answers only (and pseudo-questions cut from them)
    report = result.diagnostics["adaptation"]
    assert report["kept_epoch"] > 0, report["why"]
    # the token table is shared: questions whose answer was never sampled gain too, over the whole corpus
    out = export_model(result, tmp_path / "adapted")
    unseen = [(q, i) for q, i in questions if answers[i] not in sample]
    assert len(unseen) >= 60
    assert brute_force_mrr10(out, answers, unseen) > brute_force_mrr10(start, answers, unseen) + 0.1


def test_adapt_config_refuses_a_sample_too_small_to_split() -> None:
    with pytest.raises(ValueError, match="max_answers must be 0 \\(every answer\\) or at least 4, got 3"):
        AdaptConfig(max_answers=3).validate()
    assert AdaptConfig(max_answers=0).validate().max_answers == 0


def test_labelled_adaptation_with_a_teacher_starts_from_the_label_free_model_and_never_ends_below_it(
    tmp_path: Path,
) -> None:
    from qaindex_export.adaptation.stages import adapt_labelled

    rng = np.random.default_rng(7)
    answers, questions = varied_corpus(rng)
    labelled, test = questions[::2], questions[1::2]
    start = write_static_start(tmp_path / "start")
    config = TrainConfig(**{**FAST, "epochs": 6, "lr": 0.05, "batch_size": 32})
    label_free = TrainConfig(**{**FAST, "epochs": 12, "lr": 0.1, "batch_size": 32})
    result = adapt_labelled(config, AdaptConfig(folds=3), groups(answers, labelled, "l"), teacher=topic_teacher(),
                            start=start, label_free=label_free)  # fmt: skip
    report = result.diagnostics["adaptation"]
    stage = report["label_free"]
    assert report["start"]["directory"] == str(start) and stage["kept_epoch"] > 0, stage["why"]
    # stage 1 read the answers only: it is exactly label-free adaptation of the start on them
    alone = export_model(adapt_unlabelled(label_free, AdaptConfig(folds=3), list(dict.fromkeys(answers)),
                                          topic_teacher(), start=start), tmp_path / "label-free")  # fmt: skip
    assert stage["labelled_mrr@10"]["label_free"] == pytest.approx(
        brute_force_mrr10(alone, answers, labelled), abs=0.02
    )
    assert stage["used"] == (stage["labelled_mrr@10"]["label_free"] >= stage["labelled_mrr@10"]["start"]) is True
    # labelled >= label-free >= start on questions no stage saw
    final = export_model(result, tmp_path / "final")
    ranks = [brute_force_mrr10(d, answers, test) for d in (start, alone, final)]
    assert ranks[0] + 0.1 < ranks[1] <= ranks[2] + 0.02, ranks


def test_labelled_adaptation_skips_a_label_free_stage_that_kept_its_start(tmp_path: Path) -> None:
    from qaindex_export.adaptation.stages import adapt_labelled

    rng = np.random.default_rng(7)
    answers, questions = varied_corpus(rng, n=60)
    start = write_static_start(tmp_path / "start")
    config = TrainConfig(**{**FAST, "epochs": 3, "lr": 0.05, "batch_size": 32})
    result = adapt_labelled(config, AdaptConfig(folds=3, adapt_patience=2), groups(answers, questions, "l"),
                            teacher=noise_teacher(), start=start, label_free=config)  # fmt: skip
    stage = result.diagnostics["adaptation"]["label_free"]
    assert stage["kept_epoch"] == 0 and stage["used"] is False
    assert stage["labelled_mrr@10"]["label_free"] == pytest.approx(stage["labelled_mrr@10"]["start"], abs=1e-6)


def test_labelled_adaptation_with_too_few_answers_for_a_label_free_stage_runs_the_labels_alone(
    start_dir: Path,
) -> None:
    from qaindex_export.adaptation.stages import adapt_labelled

    answers, questions = answers_and_questions(np.random.default_rng(2))
    few = [(q, i) for q, i in questions if i < 3]
    config = TrainConfig(**{**FAST, "epochs": 2})
    result = adapt_labelled(config, AdaptConfig(folds=1), groups(answers[:3], few, "l"), teacher=topic_axes,
                            start=start_dir)  # fmt: skip
    stage = result.diagnostics["adaptation"]["label_free"]
    assert stage == {"kept_epoch": 0, "why": "no label-free stage: 3 distinct answers, fewer than 4", "held_out": None,
                     "labelled_mrr@10": None, "used": False}  # fmt: skip


def noise_teacher(seed: int = 5) -> Callable[[list[str]], np.ndarray]:
    """A fake sentence teacher that knows nothing: each text's vector is random (fixed per text)."""
    memory: dict[str, np.ndarray] = {}
    rng = np.random.default_rng(seed)

    def teacher(texts: list[str]) -> np.ndarray:
        return np.stack([memory.setdefault(t, rng.normal(size=10)) for t in texts])

    return teacher


def test_label_free_adaptation_keeps_the_start_when_the_teacher_is_noise(tmp_path: Path) -> None:
    """Fitting a noise teacher moves the model (held-out ranks change at every epoch) but never
    beyond noise on the held-out split: the start model is handed back unchanged."""
    rng = np.random.default_rng(7)
    answers, questions = varied_corpus(rng)
    start = write_static_start(tmp_path / "start")
    config = TrainConfig(**{**FAST, "epochs": 12, "lr": 0.1, "batch_size": 32})
    result = adapt_unlabelled(config, AdaptConfig(adapt_patience=12), answers, noise_teacher(), start=start)
    report = result.diagnostics["adaptation"]
    epochs = report["selection"]["epochs"]
    assert len(epochs) == 12 and all(e["better"] + e["worse"] > 0 for e in epochs)  # training did move it
    assert not any(e["significant"] for e in epochs)
    assert report["kept_epoch"] == 0 and result.best_epoch == 0
    assert report["final_metrics"] == report["start_metrics"]
    assert report["why"].endswith("so the start model is kept unchanged")
    # what is exported is the start model: the same vectors, the same ranking of real questions
    out = export_model(result, tmp_path / "kept")
    texts = [*answers[:5], *(q for q, _ in questions[:5])]
    np.testing.assert_allclose(
        Model.load(out).encode(texts, role="answer"), Model.load(start).encode(texts, role="answer"), atol=1e-5
    )
    assert brute_force_mrr10(out, answers, questions) == pytest.approx(brute_force_mrr10(start, answers, questions))


def test_adapt_config_refuses_a_ranking_term_without_pseudo_questions() -> None:
    with pytest.raises(ValueError, match=r"pair_weight 1\.0 ranks pseudo-questions: set pseudo_questions to 1 or more"):
        AdaptConfig(pair_weight=1.0).validate()
    assert AdaptConfig(pair_weight=1.0, pseudo_questions=2).validate().pseudo_questions == 2


def test_paired_gain_test_counts_and_p_values() -> None:
    from qaindex_export.adaptation.adapt import paired_gain_test

    t = paired_gain_test(np.zeros(6), np.array([1.0, 0.5, 0.5, 0.0, 0.0, -0.5]))
    assert (t["better"], t["worse"]) == (3, 1)
    assert t["sign_p"] == pytest.approx(5 / 16)  # P(Bin(4, 1/2) >= 3)
    assert t["gain"] == pytest.approx(0.25) and 0.0 < t["bootstrap_p"] < 0.5
    all_up = paired_gain_test(np.zeros(6), np.full(6, 0.5))
    assert all_up["sign_p"] == pytest.approx(1 / 64) and all_up["bootstrap_p"] == 0.0
    assert paired_gain_test(np.ones(3), np.ones(3))["sign_p"] == 1.0


def test_a_noisy_gain_on_a_tiny_held_out_split_keeps_the_start(tmp_path: Path) -> None:
    """Six held-out questions, half the training labels wrong: some epoch beats the start model
    on the held-out mean by chance (so a best-mean rule would keep it), but not beyond noise."""
    rng = np.random.default_rng(2)
    answers, questions = static_corpus(rng)
    labelled = [(q, i if k % 2 else (i + 5) % len(answers)) for k, (q, i) in enumerate(questions[:30])]
    start = write_static_start(tmp_path / "start")
    config = TrainConfig(**{**FAST, "epochs": 6, "lr": 0.05, "seed": 2})
    train = groups(answers, labelled, "n")
    loose = adapt_supervised(
        config, AdaptConfig(holdout=0.2, folds=1, significance=1.0, adapt_patience=6), train, start=start
    )
    report = loose.diagnostics["adaptation"]
    assert report["held_out"]["questions"] == 6
    assert report["kept_epoch"] > 0  # any gain counts: a noisy epoch is kept
    result = adapt_supervised(config, AdaptConfig(holdout=0.2, folds=1, adapt_patience=6), train, start=start)
    report = result.diagnostics["adaptation"]
    assert report["kept_epoch"] == 0 and result.best_epoch == 0
    assert report["final_metrics"] == report["start_metrics"]
    gaining = [e for e in report["selection"]["epochs"] if e["gain"] > 0]
    assert gaining and not any(e["significant"] for e in report["selection"]["epochs"])
    best = max(gaining, key=lambda e: (e["gain"], -e["epoch"]))
    start_mrr = report["start_metrics"]["mrr@10"]
    assert report["why"] == (
        f"no epoch beat the start model on the held-out split beyond noise (best: epoch {best['epoch']}, MRR@10 "
        f"{start_mrr + best['gain']:.4f} against {start_mrr:.4f}; {best['better']} of 6 held-out questions better, "
        f"{best['worse']} worse, sign-test p {best['sign_p']:.3g}, bootstrap p {best['bootstrap_p']:.3g}; needed both "
        "p <= 0.05), so the start model is kept unchanged"
    )


@pytest.mark.slow  # a minute of training on two cores: CI runs it (QAINDEX_SLOW=1)
def test_cli_train_without_labels_uses_the_label_free_defaults(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import qaindex_export.adaptation.calibrate as calibrate
    import qaindex_export.embeddings.distill as distill
    from qaindex_export.adaptation.config import TEACHER_TOKENS

    made: list[tuple[dict[str, object], list[list[str]]]] = []  # per teacher made: its options, the texts of each call

    def recording_teacher(**options: object) -> Callable[[list[str]], np.ndarray]:
        calls: list[list[str]] = []
        made.append((options, calls))
        topics = topic_teacher()
        return lambda texts: calls.append(list(texts)) or topics(texts)

    monkeypatch.setattr(distill, "minilm_sentence_teacher", recording_teacher)
    monkeypatch.setattr(calibrate, "CALIBRATION_ANSWERS", 10)
    calls_before_calibration: list[int] = []
    calibrate_trained = calibrate.calibrate_trained

    def counting_calibration(*args: object, **kwargs: object) -> object:
        calls_before_calibration.append(len(made[0][1]))
        return calibrate_trained(*args, **kwargs)

    monkeypatch.setattr(calibrate, "calibrate_trained", counting_calibration)
    answers, _ = varied_corpus(np.random.default_rng(7), n=40)
    corpus = tmp_path / "answers.jsonl"
    corpus.write_text("".join(json.dumps({"id": f"a{i}", "answer": a}) + "\n" for i, a in enumerate(answers)))
    start = write_static_start(tmp_path / "start")
    out = tmp_path / "adapted"
    common = ["train", str(corpus), "--teacher", "minilm", "--start", str(start), "--out", str(out), "--epochs", "2",
              "--threads", "1", "--device", "cpu", "--quiet"]  # fmt: skip
    res = CliRunner().invoke(main, common)
    assert res.exit_code == 0, res.output
    manifest = json.loads((out / "manifest.json").read_text())
    config = manifest["training"]["config"]
    assert (config["lr"], config["epochs"]) == (0.002, 2)  # label-free step size; --epochs given wins
    settings = manifest["metrics"]["adaptation"]["settings"]
    assert (settings["anchor"], settings["pseudo_questions"]) == (0.0, 0)
    # one teacher (MiniLM loaded once) adapts, then labels the calibration; it reads at most TEACHER_TOKENS
    # word pieces, and the calibration judges a sample of CALIBRATION_ANSWERS answers
    assert [options["max_tokens"] for options, _ in made] == [TEACHER_TOKENS]
    sample = made[0][1][calls_before_calibration[0]]
    assert len(sample) == 10 and set(sample) <= set(answers)
    res = CliRunner().invoke(main, [*common, "--pair-weight", "1"])
    assert res.exit_code == 1
    assert "pair_weight 1.0 ranks pseudo-questions: set pseudo_questions to 1 or more" in res.output


@pytest.mark.slow
def test_the_readme_training_example_does_what_it_says(tmp_path: Path) -> None:
    """The README says what `qaindex train examples/faq.jsonl` does on the small FAQ: the label-free first
    stage ranks the FAQ's questions better than the built-in model and no labelled epoch beats it, so the
    result is that stage's model, within 0.01 MRR of the built-in model on examples/faq-test.jsonl."""
    root = Path(__file__).resolve().parents[2]
    readme = " ".join((root / "README.md").read_text(encoding="utf-8").split())
    assert (
        "On the small example FAQ the first stage ranks the FAQ's own questions better than the built-in model "
        "and no labelled epoch beats it beyond noise, so `my-model` is the first stage's model; on "
        "`examples/faq-test.jsonl` it scores within 0.01 MRR of the built-in model"
    ) in readme
    faq, held_out = root / "examples" / "faq.jsonl", root / "examples" / "faq-test.jsonl"
    res = CliRunner().invoke(main, ["train", str(faq), "--out", str(tmp_path / "my-model")])
    assert res.exit_code == 0, res.output
    summary = json.loads(res.stdout)["adaptation"]
    first = summary["label_free"]
    assert first["used"] and first["labelled_mrr@10"]["label_free"] > first["labelled_mrr@10"]["start"]
    assert summary["kept_epoch"] == 0 and "the start model is kept unchanged" in summary["why"]
    scores = [
        json.loads(CliRunner().invoke(main, ["eval", model, str(held_out), "--json"]).stdout)
        for model in (str(tmp_path / "my-model"), "default")
    ]
    assert scores[0]["mrr"] == pytest.approx(scores[1]["mrr"], abs=0.01)


def test_k_fold_judges_every_labelled_question_once_then_trains_on_all(tmp_path: Path) -> None:
    """A weak random start, two labelled questions per answer: each of 4 folds is held out once,
    the number of epochs is chosen on all 60 questions' out-of-fold ranks, and the model is then
    trained that many epochs on all of them (its history is that run: epoch 0 plus the chosen
    epochs)."""
    rng = np.random.default_rng(1)
    table = rng.normal(size=(len(VOCAB), len(TOPICS) + 2)).astype(np.float32)
    table[2 : 2 + len(FILLER)] *= 3.0
    start = write_start(tmp_path / "start", table)
    answers, questions = answers_and_questions(rng)
    config = TrainConfig(**{**FAST, "epochs": 5, "lr": 0.05, "seed": 1})
    result = adapt_supervised(config, AdaptConfig(folds=4), groups(answers, questions, "k"), start=start)
    report = result.diagnostics["adaptation"]
    assert report["held_out"] == {"k_fold": 4, "questions": 60}
    epochs = report["selection"]["epochs"]
    assert [e["epoch"] for e in epochs] == list(range(1, len(epochs) + 1)) and all(e["questions"] == 60 for e in epochs)
    start_mrr = report["selection"]["start_mrr"]
    assert start_mrr == pytest.approx(brute_force_mrr10(start, answers, questions), abs=1e-6)  # out-of-fold = all
    significant = [e for e in epochs if e["significant"]]
    assert significant, "on this seed some epoch gains beyond noise over the 60 questions"
    chosen = max(significant, key=lambda e: (e["mrr@10"], -e["epoch"]))["epoch"]
    assert result.best_epoch == report["kept_epoch"] == chosen
    assert [h["epoch"] for h in result.history] == list(range(chosen + 1))
    assert report["why"].startswith(f"epoch {chosen} had the best held-out MRR@10 beyond noise")
    assert report["why"].endswith("(out-of-fold, 4 folds of the labelled questions; then trained on all of them)")
    out = Path(export_model(result, tmp_path / "out"))
    assert brute_force_mrr10(out, answers, questions) > start_mrr


def test_adapt_config_refuses_zero_folds() -> None:
    with pytest.raises(ValueError, match=r"folds must be at least 1, got 0"):
        AdaptConfig(folds=0).validate()


def topic_axes(texts: list[str]) -> np.ndarray:
    """A fake sentence teacher that knows the topics of :data:`TOPICS`: each text's vector is its topic's axis."""
    none = len(TOPICS)
    return np.stack([np.eye(none + 1)[next((TOPICS.index(w) for w in t.split() if w in TOPICS), none)] for t in texts])


@pytest.fixture
def topic_faq(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[list[str], list[tuple[str, int]], Path]:
    """A topic FAQ with its questions stored (answers, questions, corpus file), MiniLM replaced by :func:`topic_axes`."""
    import qaindex_export.embeddings.distill as distill

    monkeypatch.setattr(distill, "minilm_sentence_teacher", lambda **_kw: topic_axes)
    answers, questions = answers_and_questions(np.random.default_rng(2))
    return answers, questions, write_faq(tmp_path / "faq.jsonl", answers, questions)


@pytest.mark.slow  # two stages of adaptation and calibration on two cores (CI: QAINDEX_SLOW=1)
def test_cli_train_with_labels_and_a_teacher_reports_both_stages(
    start_dir: Path, tmp_path: Path, topic_faq: tuple[list[str], list[tuple[str, int]], Path]
) -> None:
    answers, questions, corpus = topic_faq
    out = tmp_path / "adapted"
    args = ["train", str(corpus), "--teacher", "minilm", "--start", str(start_dir), "--out", str(out), "--epochs", "2",
            "--threads", "1", "--device", "cpu", "--quiet"]  # fmt: skip
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 0, res.output
    summary = json.loads(res.stdout)["adaptation"]
    stage = summary["label_free"]
    assert set(stage) == {"kept_epoch", "used", "labelled_mrr@10"}
    mrr = stage["labelled_mrr@10"]
    assert stage["used"] == (stage["kept_epoch"] > 0 and mrr["label_free"] >= mrr["start"])
    assert mrr["start"] == pytest.approx(brute_force_mrr10(start_dir, answers, questions), abs=1e-6)
    report = json.loads((out / "manifest.json").read_text())["metrics"]["adaptation"]
    assert report["start"]["directory"] == str(start_dir) and report["label_free"]["used"] == stage["used"]
    # the teacher is the default with labels; --teacher none trains on the labels alone
    args[args.index("--teacher") + 1] = "none"
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 0, res.output
    assert "label_free" not in json.loads(res.stdout)["adaptation"]
    default = CliRunner().invoke(main, [a for a in args if a not in ("--teacher", "none")])
    assert default.exit_code == 0, default.output
    assert json.loads(default.stdout)["adaptation"]["label_free"] == stage


@pytest.mark.slow  # adaptation's default epochs, k-fold, calibration: minutes on two cores (CI: QAINDEX_SLOW=1)
def test_cli_build_adapt_adapts_on_the_stored_questions_then_indexes_with_that_model(
    start_dir: Path, tmp_path: Path, topic_faq: tuple[list[str], list[tuple[str, int]], Path]
) -> None:
    answers, _, corpus = topic_faq
    index = tmp_path / "index"
    args = ["build", str(corpus), "--model", str(start_dir), "--index", str(index), "--device", "cpu", "--adapt"]
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 0, res.output
    line = next(x for x in res.stdout.splitlines() if x.startswith("adapted:    "))
    kept = int(line.split("; kept epoch ")[1].split(":")[0])
    assert line.startswith("adapted:    against all-MiniLM-L6-v2 without labels (")
    first_used = "(its epoch " in line
    assert ", then on the corpus's stored questions; kept epoch " in line
    assert "(out-of-fold, 5 folds of the labelled questions" in line
    assert f"indexed {len(answers)} answers into {index}" in res.stdout
    from qaindex import Ranker

    ranker = Ranker.load(index)
    served = ranker.state().model
    assert served.calibration.calibrated  # written like every model qaindex writes
    same = np.allclose(served.encode(answers, role="answer"), Model.load(start_dir).encode(answers, role="answer"))
    assert same == (kept == 0 and not first_used)  # the start model unchanged exactly when neither stage changed it
    from qaindex_export.adaptation.config import QUICK_ANSWERS

    settings = served.manifest["metrics"]["adaptation"]["settings"]
    assert settings["max_answers"] == QUICK_ANSWERS < AdaptConfig().max_answers  # build's quicker label-free sample


def test_cli_build_adapt_without_the_train_extra_says_what_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "qaindex.cli.train", None)  # as if torch were missing
    corpus = tmp_path / "faq.jsonl"
    corpus.write_text(json.dumps({"id": "a", "answer": "Yes.", "questions": ["Really?"]}) + "\n")
    res = CliRunner().invoke(main, ["build", str(corpus), "--index", str(tmp_path / "i"), "--adapt"])
    assert res.exit_code == 1
    assert "build --adapt trains: pip install 'qaindex[train]' (and torch==2.13.0 for the CPU build)" in res.output
    assert not (tmp_path / "i").exists()

"""AP-CNN and AP-biLSTM: the attentive pooling, learning a planted task, the two-input ONNX
reranker graph (parity on varied batches and lengths), reranker model directories and their
errors, the reranking stage of ``Ranker`` (only the order of the first stage's candidates
changes) and the CLI (``build --reranker``, ``search --rerank``, ``eval``)."""

from __future__ import annotations

import itertools
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from helpers.trained import record_tracers, trained_model_fixtures

torch = pytest.importorskip("torch")
onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from click.testing import CliRunner  # noqa: E402
from qaindex_export.config import MODEL_DEFAULTS, TrainConfig  # noqa: E402
from qaindex_export.exporting.attentive_export import check_reranker_parity, export_module, export_reranker_graph  # noqa: E402
from qaindex_export.exporting.onnx_export import ExportError, export_model  # noqa: E402
from qaindex_export.networks.attentive import AttentiveQA, build_attentive_model  # noqa: E402
from qaindex_export.training.negatives import max_of_pool as _max_of_pool  # noqa: E402
from qaindex_export.training.train import TextTable, load_checkpoint, save_checkpoint, train  # noqa: E402

from qaindex import Model, ModelFormatError, QueryError, Ranker  # noqa: E402
from qaindex.cli import main  # noqa: E402
from qaindex.errors import IndexFormatError  # noqa: E402
from qaindex.eval.datasets import read_labelled  # noqa: E402
from qaindex.eval.evaluate import evaluate_model, evaluate_via_index  # noqa: E402
from qaindex.reranker import Reranker  # noqa: E402

pytestmark = pytest.mark.torch

KINDS = ("ap-cnn", "ap-bilstm")
SMALL = dict(
    embeddings="none", dim=32, embed_dim=16, batch_size=20, negatives=1, negative_pool=10, margin=0.2,
    threads=1, device="cpu", epochs=10, seed=0,
)  # fmt: skip


data, trained, exported = trained_model_fixtures(KINDS, SMALL, folder="rerankers")


@pytest.fixture(scope="module")
def first_stage(data: dict, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small dual encoder (CosineQA) for the first stage, trained on the same planted task."""
    config = TrainConfig(model="cosineqa", embeddings="none", dim=16, embed_dim=16, epochs=3, threads=1, device="cpu")
    result = train(config, data["train"], data["dev"], log=None)
    return export_model(result, tmp_path_factory.mktemp("first") / "cosineqa")


def _score(model: AttentiveQA, q: list[list[int]], a: list[list[int]]) -> np.ndarray:
    def pad(rows: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
        width = max(1, *map(len, rows))
        ids = torch.tensor([r + [0] * (width - len(r)) for r in rows])
        return ids, (ids > 0).long() if rows else ids

    with torch.no_grad():
        return model(*pad(q), *pad(a)).numpy()


# ------------------------------------------------------------------------ the network


def test_attentive_pooling_follows_the_formula() -> None:
    """score = cos(Q softmax(rowmax G), A softmax(colmax G)), G = tanh(Q U A^T), in numpy."""
    torch.manual_seed(0)
    model = build_attentive_model("ap-cnn", 12, dim=5, embed_dim=4, window=3).eval()
    q_ids, a_ids = [2, 5, 7], [3, 4, 9, 10, 11]
    with torch.no_grad():
        Q = model.features(torch.tensor([q_ids]), torch.ones(1, 3))[0][0].numpy()  # (M, c)
        A = model.features(torch.tensor([a_ids]), torch.ones(1, 5))[0][0].numpy()  # (L, c)
    U = model.attention.U.detach().numpy()
    G = np.tanh(Q @ U @ A.T)

    def softmax(x: np.ndarray) -> np.ndarray:
        e = np.exp(x - x.max())
        return e / e.sum()

    r_q, r_a = Q.T @ softmax(G.max(axis=1)), A.T @ softmax(G.max(axis=0))
    want = r_q @ r_a / np.linalg.norm(r_q) / np.linalg.norm(r_a)
    assert _score(model, [q_ids], [a_ids])[0] == pytest.approx(want, abs=1e-5)


@pytest.mark.parametrize("kind", KINDS)
def test_padding_and_batch_mates_do_not_change_a_score(kind: str) -> None:
    torch.manual_seed(1)
    model = build_attentive_model(kind, 30, dim=8, embed_dim=5, window=4).eval()
    alone = _score(model, [[3, 4, 5]], [[6, 7]])[0]
    q = [[3, 4, 5], [8, 9], [3, 4, 5], [10]]
    a = [[6, 7], [11, 12, 13, 14, 15, 16], [], [17]]
    batch = _score(model, q, a)
    assert batch[0] == pytest.approx(alone, abs=1e-6)
    assert batch[2] == 0.0  # an empty answer scores 0
    assert np.all(np.abs(batch) <= 1.0 + 1e-6)
    # the question's padding does not matter either, whatever ids lie under a zero mask
    q_ids = torch.tensor([[3, 4, 5, 29, 29]])
    q_mask = torch.tensor([[1, 1, 1, 0, 0]])
    with torch.no_grad():
        padded = model(q_ids, q_mask, torch.tensor([[6, 7]]), torch.ones(1, 2, dtype=torch.long)).item()
    assert padded == pytest.approx(alone, abs=1e-6)


def test_settings_and_checkpoint_kinds() -> None:
    assert TrainConfig(model="ap-cnn").effective_negative_pool == 50
    with pytest.raises(ValueError, match=r"dim of ap-bilstm is 2H \(two directions of H units\) and must be even"):
        TrainConfig(model="ap-bilstm", dim=7).validate()
    with pytest.raises(ValueError, match="unknown attentive model 'ap-x'"):
        build_attentive_model("ap-x", 10)


def test_max_of_pool_picks_the_highest_joint_scores(data: dict) -> None:
    torch.manual_seed(3)
    model = build_attentive_model("ap-cnn", 50, dim=8, embed_dim=6).eval()
    from qaindex.text.tokenizer import Tokenizer

    tok = Tokenizer(["[PAD]", "[UNK]", *[f"w{i}" for i in range(48)]], kind="word")
    table = TextTable(tok, {"question": 10, "answer": 10})
    rng = np.random.default_rng(0)
    texts = [" ".join(f"w{i}" for i in rng.integers(0, 48, size=rng.integers(1, 8))) for _ in range(30)]
    rows = np.array([table.add(t, "answer") for t in texts])
    questions = rows[:4]
    pool = rng.choice(rows[4:], size=(4, 9))
    chosen = _max_of_pool(model, table, questions, pool, 2, len(table), torch.device("cpu"))
    for q, cand, pick in zip(questions, pool, chosen, strict=True):
        ids = [tok.encode(texts[int(np.flatnonzero(rows == q)[0])], 10)]
        scores = _score(
            model, ids * len(cand), [tok.encode(texts[int(np.flatnonzero(rows == c)[0])], 10) for c in cand]
        )
        best = cand[np.argsort(-scores, kind="stable")[:2]]
        assert list(pick) == list(best)


# ------------------------------------------------------------------------ training and export


def test_learns_the_planted_task(trained) -> None:
    assert trained.dev["map"] >= 0.9, trained.history
    assert trained.history[0]["dev_map"] < trained.dev["map"]


def test_checkpoint_round_trip(trained, tmp_path: Path, data: dict) -> None:
    loaded = load_checkpoint(save_checkpoint(trained, tmp_path / "ckpt"))
    assert isinstance(loaded.model, AttentiveQA) and loaded.config.model == trained.config.model
    ids, mask = torch.tensor([[5, 6, 7]]), torch.ones(1, 3, dtype=torch.long)
    with torch.no_grad():
        assert loaded.model(ids, mask, ids, mask).item() == pytest.approx(trained.model(ids, mask, ids, mask).item())


def test_reranker_directory_and_symbolic_axes(exported: Path, trained) -> None:
    manifest = json.loads((exported / "manifest.json").read_text())
    assert manifest["kind"] == "reranker" and manifest["graphs"] == {"reranker": "reranker.onnx"}
    assert manifest["metrics"]["dev_onnx"]["map"] == pytest.approx(trained.dev["map"], abs=1e-6)
    assert manifest["metrics"]["parity"]["reranker_max_abs_diff"] <= 1e-4
    graph = onnx.load(str(exported / "reranker.onnx"))
    dims = {i.name: [d.dim_param for d in i.type.tensor_type.shape.dim] for i in graph.graph.input}
    assert dims["question_ids"][0] == dims["answer_ids"][0] != ""  # one n
    assert dims["question_ids"][1] and dims["answer_ids"][1] and dims["question_ids"][1] != dims["answer_ids"][1]


def test_export_parity_varied_batches_and_lengths(exported: Path, trained) -> None:
    session = ort.InferenceSession(str(exported / "reranker.onnx"), providers=["CPUExecutionProvider"])
    model = trained.model.cpu().eval()
    rng = np.random.default_rng(5)
    vocab = model.encoder.embedding.shape[0]
    for n, m, length in ((1, 1, 1), (1, 6, 30), (4, 2, 9), (7, 13, 3)):
        q_ids = rng.integers(1, vocab, size=(n, m))
        a_ids = rng.integers(1, vocab, size=(n, length))
        q_mask = (np.arange(m)[None] < rng.integers(1, m + 1, size=(n, 1))).astype(np.int64)
        a_mask = (np.arange(length)[None] < rng.integers(1, length + 1, size=(n, 1))).astype(np.int64)
        q_ids, a_ids = q_ids * q_mask, a_ids * a_mask
        feeds = {"question_ids": q_ids, "question_mask": q_mask, "answer_ids": a_ids, "answer_mask": a_mask}
        (got,) = session.run(["scores"], feeds)
        with torch.no_grad():
            want = model(*(torch.from_numpy(x) for x in (q_ids, q_mask, a_ids, a_mask))).numpy()
        assert got.shape == (n,)
        np.testing.assert_allclose(got, want, atol=1e-5)


def test_ap_bilstm_is_traced_by_torchscript(trained, monkeypatch: pytest.MonkeyPatch) -> None:
    """torch 2.11's dynamo exporter pinned AP-biLSTM's sequence length even in a fresh process: its
    graph goes through the TorchScript exporter, AP-CNN's through dynamo, both with symbolic axes."""
    seen = record_tracers(monkeypatch)
    module = export_module(trained.model)
    check_reranker_parity(module, export_reranker_graph(module))
    lstm = trained.config.model == "ap-bilstm"
    assert seen == {"dynamo": [] if lstm else ["AttentiveQA"], "torchscript": ["AttentiveQA"] if lstm else []}


def test_parity_check_catches_an_unfaithful_graph(trained) -> None:
    module = export_module(trained.model)
    graph = export_reranker_graph(module)
    with torch.no_grad():
        module.attention.U.mul_(-1.0)  # the graph no longer computes this module
    with pytest.raises(ExportError, match="parity check failed: reranker scores differ by"):
        check_reranker_parity(module, graph)


def test_served_scores_equal_torch(exported: Path, trained, data: dict) -> None:
    reranker = Reranker.load(exported)
    model = trained.model.cpu().eval()
    tok = trained.tokenizer
    for group in data["dev_groups"][:5]:
        answers = [c.answer for c in group.candidates] + ["", "unknownword " * 300]
        got = reranker.score(group.question, answers)
        q = tok.encode(group.question, trained.config.max_question_tokens)
        a = [tok.encode(t, trained.config.max_answer_tokens) for t in answers]
        np.testing.assert_allclose(got, _score(model, [q] * len(a), a), atol=1e-5)
    assert reranker.score("anything", []).shape == (0,)
    result = evaluate_model(reranker, read_labelled(data["dev"]))
    assert result["map"] == pytest.approx(trained.dev["map"], abs=1e-6)
    with pytest.raises(QueryError) as caught:
        evaluate_via_index(reranker, read_labelled(data["dev"]))  # type: ignore[arg-type]
    assert str(caught.value) == "a Reranker scores pairs and cannot index answers; use evaluate_model, or pass a Model"


# ------------------------------------------------------------------------ format errors


def test_reranker_and_dual_encoder_directories_are_not_interchangeable(exported: Path, first_stage: Path) -> None:
    with pytest.raises(ModelFormatError) as caught:
        Model.load(exported)
    assert str(caught.value) == (
        f'{exported / "manifest.json"}: is a reranker model (kind "reranker"), which scores question-answer pairs '
        f"and cannot encode answers; pass it to `qaindex search --rerank {exported}` or `qaindex build --reranker "
        f"{exported}` (Python: Reranker.load), and give --model a dual-encoder model directory"
    )
    with pytest.raises(ModelFormatError) as caught:
        Reranker.load(first_stage)
    assert str(caught.value) == (
        f'{first_stage / "manifest.json"}: is a dual-encoder model (kind "dual_encoder"), not a reranker; pass it '
        "as --model (Python: Model.load), and give --rerank/--reranker a directory exported by "
        "`qaindex train --model ap-cnn` or `--model ap-bilstm`"
    )
    with pytest.raises(ModelFormatError, match="is a reranker model"):
        Ranker.build(read_labelled_corpus_dicts(), model=exported)


def read_labelled_corpus_dicts() -> list[dict]:
    return [{"id": "a", "answer": "topic1 fill2"}]


def test_missing_or_corrupt_reranker_graph(exported: Path, tmp_path: Path) -> None:
    broken = tmp_path / "rr"
    shutil.copytree(exported, broken)
    (broken / "reranker.onnx").write_bytes(b"not an onnx graph")
    with pytest.raises(ModelFormatError) as caught:
        Reranker.load(broken)
    assert str(caught.value).startswith(f"{broken / 'reranker.onnx'}: has 17 bytes, the manifest says ")
    with pytest.raises(
        ModelFormatError, match=r"reranker\.onnx: onnxruntime cannot load it \(.*\); re-export the model"
    ):
        Reranker.load(broken, verify=False)
    (broken / "reranker.onnx").unlink()
    with pytest.raises(ModelFormatError) as caught:
        Reranker.load(broken)
    assert str(caught.value) == f"{broken / 'reranker.onnx'}: missing; the model directory is incomplete, rebuild it"
    manifest = json.loads((exported / "manifest.json").read_text())
    del manifest["graphs"]["reranker"]
    (broken / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(ModelFormatError) as caught:
        Reranker.load(broken)
    assert str(caught.value) == f'{broken / "manifest.json"}: "graphs.reranker" is missing; re-export the model'


# ------------------------------------------------------------------------ the reranking stage


def test_reranking_changes_only_the_order(exported: Path, first_stage: Path, data: dict) -> None:
    ranker = Ranker.build(data["corpus"], model=first_stage)
    reranker = Reranker.load(exported)
    depth = 12
    for group in data["dev_groups"][:6]:
        first = ranker.search(group.question, k=depth)
        reranked = ranker.search(group.question, k=depth, rerank=reranker, depth=depth)
        assert sorted(str(h.id) for h in reranked) == sorted(str(h.id) for h in first)  # same candidates
        want = reranker.score(group.question, [h.answer for h in first])
        by_id = {str(h.id): float(s) for h, s in zip(first, want, strict=True)}
        assert [h.raw_score for h in reranked] == [by_id[str(h.id)] for h in reranked]  # the reranker's scores
        # its probabilities (a reranker exported without a calibration: sigmoid of its score)
        assert [h.score for h in reranked] == pytest.approx([1 / (1 + np.exp(-h.raw_score)) for h in reranked])
        assert all(a.score >= b.score for a, b in itertools.pairwise(reranked))  # ordered by them
        first_distance = {str(h.id): h.distance for h in first}
        assert all(h.distance == first_distance[str(h.id)] for h in reranked)
        top = ranker.search(group.question, k=3, rerank=reranker, depth=depth)
        assert [h.id for h in top] == [h.id for h in reranked[:3]]  # k <= depth: the reranked list's head
        cut = ranker.search(group.question, k=depth, rerank=reranker, depth=depth, min_score=0.5)
        assert [h.id for h in cut] == [h.id for h in reranked if h.score >= 0.5]
    assert ranker.search("topic1", k=5, rerank=reranker, depth=2) == ranker.search(
        "topic1", k=5, rerank=reranker, depth=5
    )  # depth is at least k
    with pytest.raises(QueryError, match="rerank must be a Reranker, a reranker directory, None"):
        ranker.search("topic1", rerank=3)


def test_reranker_stored_in_the_index(exported: Path, first_stage: Path, data: dict, tmp_path: Path) -> None:
    index = tmp_path / "index"
    Ranker.build(data["corpus"], model=first_stage, reranker=exported).save(index)
    manifest = json.loads((index / "manifest.json").read_text())
    assert manifest["reranker"]["directory"] == "reranker"
    assert any(name.startswith("reranker/") for name in manifest["files"])
    loaded = Ranker.load(index)
    assert loaded.reranker is not None and loaded.reranker.name == Reranker.load(exported).name
    question = data["dev_groups"][0].question
    explicit = loaded.search(question, k=5, rerank=Reranker.load(exported))
    assert loaded.search(question, k=5) == explicit  # the stored reranker is the default
    assert loaded.search(question, k=5, rerank=False) == Ranker.build(data["corpus"], model=first_stage).search(
        question, k=5
    )
    # saved again (e.g. after an add), the reranker stays with the index
    loaded.add([{"id": "extra", "answer": "topic3 fill1"}])
    loaded.save(index)
    assert Ranker.load(index).reranker is not None
    snap = index / json.loads((index / "manifest.json").read_text())["snapshot"]
    (snap / "reranker" / "reranker.onnx").write_bytes(b"corrupt")
    with pytest.raises(IndexFormatError, match=r"reranker\.onnx: has 7 bytes, the manifest says"):
        Ranker.load(index)


# ------------------------------------------------------------------------ command line


def test_cli_build_with_reranker_search_and_eval(exported: Path, first_stage: Path, data: dict, tmp_path: Path) -> None:
    runner = CliRunner()
    index = tmp_path / "index"
    question = data["dev_groups"][1].question
    res = runner.invoke(main, ["build", str(data["corpus"]), "--model", str(first_stage), "--index", str(index)])
    assert res.exit_code == 0, res.output
    res = runner.invoke(main, ["search", question, "--index", str(index), "-k", "3", "--json"])
    plain = json.loads(res.output)["hits"]
    res = runner.invoke(
        main, ["search", question, "--index", str(index), "-k", "3", "--json", "--rerank", str(exported),
               "--rerank-depth", "10"],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    hits = json.loads(res.output)["hits"]
    want = Ranker.load(index).search(question, k=3, rerank=Reranker.load(exported), depth=10)
    assert [h["id"] for h in hits] == [h.id for h in want]
    assert [h["score"] for h in hits] == pytest.approx([h.score for h in want], abs=1e-6)
    assert hits != plain
    stored = tmp_path / "stored"
    res = runner.invoke(
        main, ["build", str(data["corpus"]), "--model", str(first_stage), "--index", str(stored),
               "--reranker", str(exported)],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    res = runner.invoke(main, ["search", question, "--index", str(stored), "-k", "3", "--json", "--rerank-depth", "10"])
    assert json.loads(res.output)["hits"] == hits  # the stored reranker by default
    res = runner.invoke(main, ["search", question, "--index", str(stored), "-k", "3", "--json", "--no-rerank"])
    assert json.loads(res.output)["hits"] == plain
    res = runner.invoke(main, ["search", question, "--index", str(index), "--rerank", str(first_stage)])
    assert res.exit_code == 1
    assert res.output.count("\n") == 1 and "is a dual-encoder model" in res.output
    res = runner.invoke(main, ["build", str(data["corpus"]), "--model", str(exported), "--index", str(tmp_path / "x")])
    assert res.exit_code == 1 and "is a reranker model" in res.output and res.output.count("\n") == 1
    res = runner.invoke(main, ["eval", str(exported), str(data["dev"]), "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.output)["map"] == pytest.approx(
        evaluate_model(Reranker.load(exported), read_labelled(data["dev"]))["map"]
    )
    res = runner.invoke(main, ["eval", str(exported), str(data["dev"]), "--pool"])
    assert res.exit_code == 2 and "is a reranker, which cannot index answers" in res.output


def test_cli_train_ap_cnn_writes_a_reranker(data: dict, tmp_path: Path) -> None:
    out = tmp_path / "ap"
    args = ["train", str(data["train"]), "--dev", str(data["dev"]), "--out", str(out), "--model", "ap-cnn",
            "--embeddings", "none", "--dim", "8", "--embed-dim", "8", "--epochs", "2", "--negative-pool", "4", "--negatives", "1",
            "--threads", "1", "--device", "cpu", "--quiet"]  # fmt: skip
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 0, res.output
    summary = json.loads(res.output)
    assert summary["dev_onnx"]["map"] == pytest.approx(summary["dev"]["map"], abs=1e-6)
    config = Reranker.load(out).manifest["training"]["config"]
    assert config["model"] == "ap-cnn"
    assert config["lr"] == MODEL_DEFAULTS["ap-cnn"]["lr"] == 0.01  # the model's default rate, not HyperQA's 0.1
    with pytest.raises(ModelFormatError, match="is a reranker model"):
        Model.load(out)
    # a rate given on the command line wins over the model's default
    res = CliRunner().invoke(main, [*args[:-1], "--lr", "0.05", "--out", str(tmp_path / "ap2"), "--quiet"])
    assert res.exit_code == 0, res.output
    assert Reranker.load(tmp_path / "ap2").manifest["training"]["config"]["lr"] == 0.05


def test_reranker_follows_the_device_policy(exported: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Under auto with working CUDA, one question's few candidates run on the CPU, many on CUDA."""
    from helpers.fake_gpu import simulate_gpu

    from qaindex import devices

    simulate_gpu(lambda obj, name, value: monkeypatch.setattr(obj, name, value, raising=False))
    reranker = Reranker.load(exported, device="auto")
    assert reranker.providers == {"reranker": "CPUExecutionProvider"}
    pair = reranker._sessions
    assert pair.bulk.get_providers()[0] == "CUDAExecutionProvider"
    calls = {"small": 0, "bulk": 0}

    def counting(name: str, session: object) -> object:
        class Counted:
            def run(self, *args: object, **kwargs: object) -> object:
                calls[name] += 1
                return session.run(*args, **kwargs)  # type: ignore[attr-defined]

        return Counted()

    monkeypatch.setattr(
        reranker,
        "_sessions",
        devices.SessionPair(counting("small", pair.small), counting("bulk", pair.bulk), pair.bulk_from, pair.why),
    )
    few = reranker.score("alpha beta", ["alpha beta gamma"] * 3)
    many = reranker.score("alpha beta", ["alpha beta gamma"] * devices.GPU_MIN_BATCH)
    assert calls == {"small": 1, "bulk": 1}
    np.testing.assert_allclose(many[:3], few, rtol=1e-5, atol=1e-6)
    assert Reranker.load(exported, device="cpu").providers == {"reranker": "CPUExecutionProvider"}

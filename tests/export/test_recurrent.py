"""RDE, RDE-LTC, HRDE and HRDE-LTC: masking, chunking, learning a planted task, ONNX parity,
the bilinear geometry's format and coarse search, and the served ranking (``qaindex.Ranker``,
flat and hnsw) equal to a brute-force ranking by the torch model's score."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from helpers.trained import trained_model_fixtures

torch = pytest.importorskip("torch")
onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from qaindex_export.config import TrainConfig  # noqa: E402
from qaindex_export.exporting.onnx_export import ExportError  # noqa: E402
from qaindex_export.exporting.recurrent_export import check_recurrent_parity, export_graph  # noqa: E402
from qaindex_export.networks.recurrent import RecurrentQA, cross_entropy_loss, last_state  # noqa: E402

from qaindex import Model, ModelFormatError, Ranker  # noqa: E402
from qaindex.eval.evaluate import evaluate_model  # noqa: E402
from qaindex.geometry import bilinear  # noqa: E402
from qaindex.text.chunking import Chunking  # noqa: E402
from qaindex.vector_index import CoarseIndex, exact_search  # noqa: E402

pytestmark = pytest.mark.torch

KINDS = ("rde", "rde-ltc", "hrde", "hrde-ltc")
SMALL = dict(
    embeddings="none", dim=32, embed_dim=16, batch_size=20, negatives=4, threads=1, device="cpu", epochs=15,
    seed=0, optimizer="adam", lr=0.02, sampling="random", topics=3, max_chunk_tokens=4,
)  # fmt: skip


data, trained, exported = trained_model_fixtures(KINDS, SMALL)


def _torch_vectors(model: RecurrentQA, tok, texts: list[str], role: str, max_tokens: int) -> np.ndarray:
    """What the runtime must reproduce: tokenize, (chunk,) encode with the torch model."""
    rows = [tok.encode(t, max_tokens) for t in texts]
    if role == "answer" and model.hierarchical:
        ids, mask = model.chunking.pad(rows)
    else:
        ids, mask = tok.pad(rows)
    encode = model.encode_answer if role == "answer" else model.encode_question
    with torch.no_grad():
        return encode(torch.from_numpy(ids), torch.from_numpy(mask)).numpy()


# ------------------------------------------------------------------------ the networks


@pytest.mark.parametrize("kind", KINDS)
def test_padding_and_batch_mates_do_not_change_a_vector(kind: str) -> None:
    torch.manual_seed(0)
    model = RecurrentQA(kind, 30, hidden=6, embed_dim=4, topics=2).eval()
    ids = np.array([[3, 4, 5, 0, 0, 0], [7, 8, 9, 10, 11, 12], [6, 0, 0, 0, 0, 0], [0] * 6])
    mask = (ids > 0).astype(np.int64)
    ids[0, 3:] = 17  # ids under a zero mask are ignored, whatever they are
    with torch.no_grad():
        alone = model.encode_question(torch.tensor([[3, 4, 5]]), torch.ones(1, 3, dtype=torch.int64))
        batch = model.encode_question(torch.from_numpy(ids), torch.from_numpy(mask))
        assert torch.abs(batch[0] - alone[0]).max() <= 1e-6
        assert torch.all(batch[3] == 0.0)  # an empty question is the zero vector
        if model.hierarchical:  # answers: padding chunks and chunk tails change nothing either
            a_ids = torch.tensor([[[3, 4, 0], [5, 0, 0], [0, 0, 0]], [[0, 0, 0], [0, 0, 0], [0, 0, 0]]])
            a_alone = model.encode_answer(torch.tensor([[[3, 4], [5, 0]]]), torch.tensor([[[1, 1], [1, 0]]]))
            a_batch = model.encode_answer(a_ids, (a_ids > 0).long())
            assert torch.abs(a_batch[0] - a_alone[0]).max() <= 1e-6
        else:
            a_alone = model.encode_answer(torch.tensor([[3, 4, 5]]), torch.ones(1, 3, dtype=torch.int64))
            a_batch = model.encode_answer(torch.from_numpy(ids), torch.from_numpy(mask))
            assert torch.abs(a_batch[0] - a_alone[0]).max() <= 1e-6


def test_rde_is_the_gru_last_state_and_the_bilinear_form() -> None:
    torch.manual_seed(1)
    model = RecurrentQA("rde", 12, hidden=5, embed_dim=4).eval()
    with torch.no_grad():
        model.M.copy_(torch.randn(5, 5))
        model.b.fill_(0.3)
        z = torch.nn.functional.embedding(torch.tensor([[2, 5, 7]]), model.embedding)
        _, h_n = model.word(z)
        q = model.encode_question(torch.tensor([[2, 5, 7, 0]]), torch.tensor([[1, 1, 1, 0]]))
        assert torch.allclose(q[0], h_n[0, 0], atol=1e-6)  # the last real token's state
        a = model.encode_answer(torch.tensor([[2, 5, 7]]), torch.ones(1, 3, dtype=torch.int64))
        assert torch.allclose(a[0], model.M @ h_n[0, 0], atol=1e-6)  # M folded into the answer side
        logit, distance = model.score(q, a)
        assert logit.item() == pytest.approx((h_n[0, 0] @ model.M @ h_n[0, 0]).item() + 0.3, abs=1e-5)
        assert distance.item() == pytest.approx(-(q * a).sum().item(), abs=1e-6)


def test_ltc_concatenates_the_topic_mixture() -> None:
    torch.manual_seed(2)
    model = RecurrentQA("rde-ltc", 12, hidden=4, embed_dim=3, topics=3).eval()
    ids, mask = torch.tensor([[2, 5]]), torch.ones(1, 2, dtype=torch.int64)
    with torch.no_grad():
        x = model.encode_question(ids, mask)  # the shared GRU's last state: the same x
        p = torch.softmax(x @ model.memory.t(), dim=-1)
        e = model.answer_features(ids, mask)
    assert e.shape == (1, 8) and model.M.shape == (4, 8)
    assert torch.allclose(e, torch.cat([x, p @ model.memory], dim=-1), atol=1e-6)


def test_hrde_reads_chunks_with_a_chunk_level_gru() -> None:
    torch.manual_seed(3)
    model = RecurrentQA("hrde", 12, hidden=4, embed_dim=3).eval()
    with torch.no_grad():
        h1 = model._words(torch.tensor([[2, 3]]), torch.ones(1, 2, dtype=torch.int64))
        h2 = model._words(torch.tensor([[4]]), torch.ones(1, 1, dtype=torch.int64))
        _, u = model.chunk(torch.stack([h1, h2], dim=1))
        got = model.answer_features(torch.tensor([[[2, 3], [4, 0]]]), torch.tensor([[[1, 1], [1, 0]]]))
        assert torch.allclose(got[0], u[0, 0], atol=1e-6)
        q = model.encode_question(torch.tensor([[2, 3]]), torch.ones(1, 2, dtype=torch.int64))
        one = model.answer_features(torch.tensor([[[2, 3]]]), torch.ones(1, 1, 2, dtype=torch.int64))
        assert torch.allclose(q, one, atol=1e-6)  # a question is one chunk


def test_last_state_and_cross_entropy() -> None:
    out = torch.arange(12.0).view(2, 3, 2)
    assert last_state(out, torch.tensor([[1, 1, 0], [0, 0, 0]])).tolist() == [[2.0, 3.0], [0.0, 0.0]]
    pos, neg = torch.tensor([2.0]), torch.tensor([[-1.0, 0.5]])
    want = -np.log(1 / (1 + np.exp(-2.0))) + np.mean(
        [-np.log(1 - 1 / (1 + np.exp(1.0))), -np.log(1 - 1 / (1 + np.exp(-0.5)))]
    )
    assert cross_entropy_loss(pos, neg).item() == pytest.approx(want, rel=1e-6)


def test_chunking_rules() -> None:
    c = Chunking(frozenset({9}), max_chunks=3, max_chunk_tokens=3)
    assert c.split([]) == []
    assert c.split([1, 9, 2, 2]) == [[1, 9], [2, 2]]  # after a sentence end
    assert c.split([1, 9, 9, 2]) == [[1, 9, 9], [2]]  # a run of sentence ends ends one chunk
    assert c.split([1, 2, 3, 4, 5, 6, 7, 8, 1, 2]) == [[1, 2, 3], [4, 5, 6], [7, 8, 1]]  # length, max chunks
    ids, mask = c.pad([[1, 9, 2], [], [5]])
    assert ids.tolist() == [[[1, 9], [2, 0]], [[0, 0], [0, 0]], [[5, 0], [0, 0]]]
    assert np.array_equal(mask, (ids > 0).astype(np.int64))
    assert c.pad([[]])[0].shape == (1, 1, 1)  # never an empty axis


def test_settings_defaults_and_errors() -> None:
    assert TrainConfig(model="hrde-ltc").effective_loss == "cross-entropy"
    assert TrainConfig(model="hyperqa").effective_loss == "hinge"
    assert TrainConfig(model="rde", loss="hinge").effective_loss == "hinge"
    with pytest.raises(ValueError, match=r"^topics must be at least 1, got 0$"):
        TrainConfig(model="rde-ltc", topics=0).validate()
    with pytest.raises(ValueError, match=r"^loss must be one of \('hinge', 'cross-entropy'\), got 'l2'$"):
        TrainConfig(model="rde", loss="l2").validate()


# ------------------------------------------------------------------------ training


def test_learns_the_planted_task(trained) -> None:
    # chance on 6 candidates with one correct is MAP ≈ 0.41; the planted topic word decides
    assert trained.dev["map"] >= 0.65, trained.history
    assert trained.history[0]["dev_map"] < trained.dev["map"]
    assert trained.model.kind == trained.config.model and trained.config.effective_loss == "cross-entropy"


# ------------------------------------------------------------------------ export


def test_export_manifest_graphs_and_parity(exported: Path, trained) -> None:
    manifest = json.loads((exported / "manifest.json").read_text())
    model = trained.model.cpu().eval()
    assert manifest["geometry"] == {"name": "bilinear", "bias": pytest.approx(model.bias)}
    assert manifest["graphs"] == {
        "question_encoder": "encoder.onnx", "answer_encoder": "answer_encoder.onnx", "scorer": "scorer.onnx"
    }  # fmt: skip
    assert manifest["dimension"] == 32
    assert all(v <= 1e-5 for v in manifest["metrics"]["parity"].values()), manifest["metrics"]["parity"]
    # the dev set through the runtime (tokenizer, chunking, ONNX) gives the torch model's MAP
    assert manifest["metrics"]["dev_onnx"]["map"] == pytest.approx(trained.dev["map"], abs=1e-6)
    rank = 3 if model.hierarchical else 2
    assert ("chunking" in manifest) == model.hierarchical
    # the word-embedding table is stored once, shared by both encoder graphs as external data
    table = model.embedding.detach().numpy()
    assert (exported / "embeddings.data").read_bytes() == table.astype("<f4").tobytes()
    for name in ("encoder.onnx", "answer_encoder.onnx"):
        proto = onnx.load(str(exported / name), load_external_data=False)
        external = [i for i in proto.graph.initializer if i.data_location == onnx.TensorProto.EXTERNAL]
        assert [tuple(i.dims) for i in external] == [table.shape]
        assert {e.key: e.value for e in external[0].external_data}["location"] == "embeddings.data"
    for name, want in (("encoder.onnx", 2), ("answer_encoder.onnx", rank)):
        proto = onnx.load(str(exported / name))
        for value in proto.graph.input:
            dims = value.type.tensor_type.shape.dim
            assert len(dims) == want and all(d.dim_param and not d.HasField("dim_value") for d in dims)


@pytest.mark.parametrize("kind", ["rde", "hrde-ltc"])
def test_parity_check_catches_a_wrong_graph(kind: str) -> None:
    from qaindex_export.exporting.recurrent_export import _export_torchscript

    torch.manual_seed(4)
    model, other = (RecurrentQA(kind, 20, hidden=6, embed_dim=4, topics=2).eval() for _ in range(2))
    question, scorer = _export_torchscript(model, "question"), export_graph(model, "scorer")
    assert (
        check_recurrent_parity(model, question, _export_torchscript(model, "answer"), scorer)["answer_max_abs_diff"]
        < 1e-5
    )
    with pytest.raises(ExportError, match=r"^parity check failed: answer differs by .* between onnxruntime and torch"):
        check_recurrent_parity(model, question, _export_torchscript(other, "answer"), scorer)


def test_parity_check_names_a_numerically_unstable_model() -> None:
    # large recurrent weights (spectral norm ~11) amplify float32 rounding along a text: torch in
    # float32, torch in float64 and onnxruntime disagree, a property of the weights, not the export
    from qaindex_export.exporting.recurrent_export import _export_torchscript

    torch.manual_seed(0)
    model = RecurrentQA("rde", 50, hidden=32, embed_dim=8).eval()
    with torch.no_grad():
        model.word.weight_hh_l0.normal_(0.0, 1.0)
    graphs = [_export_torchscript(model, "question"), _export_torchscript(model, "answer")]
    with pytest.raises(
        ExportError,
        match=r"^parity check failed: the trained rde model is numerically unstable \(its GRU amplifies rounding: "
        r"torch's own float32 and float64 question vectors differ by [0-9.e-]+, tolerance 0.0001\), so no export "
        r"can reproduce it; train again with a lower --lr or --optimizer adam$",
    ):
        check_recurrent_parity(model, *graphs, export_graph(model, "scorer"))
    with torch.no_grad():  # the same model with its initial (orthogonal) recurrence exports faithfully
        model.word.weight_hh_l0.copy_(RecurrentQA("rde", 50, hidden=32, embed_dim=8).word.weight_hh_l0)
    graphs = [_export_torchscript(model, "question"), _export_torchscript(model, "answer")]
    assert max(check_recurrent_parity(model, *graphs, export_graph(model, "scorer")).values()) < 1e-5


def test_recurrent_models_default_to_adam() -> None:
    for kind in KINDS:  # qaindex train's defaults (AdaGrad at 0.1 grew unstable GRUs on WikiQA)
        config = TrainConfig.for_model(kind)
        assert (config.optimizer, config.lr) == ("adam", 0.005)
    assert TrainConfig.for_model("rde", lr=0.1, optimizer="adagrad").optimizer == "adagrad"


def test_runtime_encodes_like_torch(exported: Path, trained) -> None:
    model = trained.model.cpu().eval()
    served = Model.load(exported, device="cpu")
    texts = [
        "topic3", "", "what about topic3 fill2. and fill7 ! fill1 topic9?", "fill1 " * 60 + "topic7",
        "unknownword topic1", "a. b. c. d. e. f. g. h. i. j. k.",
    ]  # fmt: skip
    for role in ("question", "answer"):
        for batch in (texts[:1], texts, texts[2:4], texts[5:]):
            got = served.encode(batch, role=role)
            want = _torch_vectors(model, trained.tokenizer, batch, role, served.max_tokens[role])
            assert got.shape == want.shape and np.abs(got - want).max() <= 1e-5


@pytest.mark.parametrize("kind", ["flat", "hnsw"])
def test_served_ranking_equals_torch_brute_force(exported: Path, trained, data: dict, kind: str) -> None:
    answers = {c.aid: c.answer for g in data["dev_groups"] for c in g.candidates}
    keys = list(answers)
    ranker = Ranker.build(
        [{"id": k, "answer": v} for k, v in answers.items()], model=exported, device="cpu", index_kind=kind,
        hybrid=False,
    )  # fmt: skip
    model = trained.model.cpu().eval()
    tok = trained.tokenizer
    a_vec = torch.from_numpy(_torch_vectors(model, tok, list(answers.values()), "answer", 128))
    for g in data["dev_groups"][:12]:
        hits = ranker.search(g.question, k=10)
        q_vec = torch.from_numpy(_torch_vectors(model, tok, [g.question], "question", 40))
        with torch.no_grad():
            logit = model.score(q_vec, a_vec)[0].numpy().astype(np.float64)
        order = np.argsort(-logit, kind="stable")
        assert [h.id for h in hits] == [keys[i] for i in order[:10]]
        for h in hits:  # the model's raw score is σ(q·Ma + b)
            assert h.raw_score == pytest.approx(1 / (1 + np.exp(-logit[keys.index(h.id)])), abs=1e-5)
            assert h.distance == pytest.approx(-(logit[keys.index(h.id)] - model.bias), abs=1e-4)


def test_evaluate_model_matches_torch_dev_map(exported: Path, trained, data: dict) -> None:
    served = Model.load(exported, device="cpu")
    assert evaluate_model(served, data["dev_groups"])["map"] == pytest.approx(trained.dev["map"], abs=1e-6)


# ------------------------------------------------------------------------ format


def _copy_with(exported: Path, tmp_path: Path, edit) -> Path:
    target = tmp_path / "model"
    shutil.copytree(exported, target)
    manifest = json.loads((target / "manifest.json").read_text())
    edit(manifest)
    (target / "manifest.json").write_text(json.dumps(manifest))
    return target


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (
            lambda m: m["geometry"].update(bias="0.5"),
            "geometry \"bias\" must be a finite number, got '0.5'; re-export the model",
        ),
        (lambda m: m["geometry"].pop("bias"), 'geometry "bias" must be a finite number, got None; re-export the model'),
        (
            lambda m: m["geometry"].update(name="bilinear2"),
            "geometry 'bilinear2' is not supported (supported: poincare, cosine, bilinear); upgrade qaindex",
        ),
        (
            lambda m: m.update(chunking={"answer": {"method": "words", "max_chunks": 2, "max_chunk_tokens": 3}}),
            "field \"chunking.answer.method\" must be sentences or length, got 'words'; re-export the model",
        ),
        (
            lambda m: m.update(chunking={"answer": {"method": "length", "max_chunks": 0, "max_chunk_tokens": 3}}),
            'field "chunking.answer.max_chunks" must be a positive integer, got 0; re-export the model',
        ),
        (
            lambda m: m.update(chunking={"reranker": {}}),
            "field \"chunking\" must be keyed by roles among ['question', 'answer'], got 'reranker'; re-export the model",
        ),
    ],
)
def test_bilinear_format_errors(exported: Path, tmp_path: Path, edit, message: str) -> None:
    target = _copy_with(exported, tmp_path, edit)
    with pytest.raises(ModelFormatError) as info:
        Model.load(target, device="cpu")
    assert str(info.value) == f"{target / 'manifest.json'}: {message}"


def test_chunking_must_match_the_graph_rank(exported: Path, tmp_path: Path, trained) -> None:
    spec = {"method": "length", "sentence_end": [], "max_chunks": 2, "max_chunk_tokens": 3}
    target = _copy_with(exported, tmp_path, lambda m: m.update(chunking={"question": spec}))
    with pytest.raises(ModelFormatError) as info:
        Model.load(target, device="cpu")
    assert str(info.value) == (
        f'{target / "encoder.onnx"}: the question encoder takes 2-D input_ids, the manifest\'s "chunking" '
        "field implies 3-D; re-export the model"
    )


def test_existing_format_models_still_load() -> None:
    model = Model.load(device="cpu")  # the built-in default: a Poincaré model without the new fields
    assert model.geometry == "poincare" and model.chunking == {} and "chunking" not in model.manifest
    q = model.encode(["how do I reset my password?"], role="question")
    assert q.shape == (1, model.dimension)


# ------------------------------------------------------------------------ coarse search


def test_mips_lift_orders_l2_like_the_inner_product() -> None:
    rng = np.random.default_rng(0)
    db = rng.normal(size=(300, 8)) * rng.uniform(0.1, 3.0, size=(300, 1))
    q = rng.normal(size=(5, 8))
    bound = bilinear.mips_bound(db)
    lifted, lq = bilinear.mips_lift(db, bound), bilinear.mips_query(q)
    assert np.allclose(np.sum(lifted.astype(np.float64) ** 2, axis=1), bound, rtol=1e-5)
    l2 = ((lq[:, None, :].astype(np.float64) - lifted[None, :, :]) ** 2).sum(-1)
    assert np.array_equal(np.argsort(l2, axis=1)[:, :20], np.argsort(-(q @ db.T), axis=1)[:, :20])
    assert bilinear.mips_lift(np.array([[10.0, 0.0]]), 50.0)[0, 2] == 0.0  # beyond the bound: no padding


@pytest.mark.parametrize("kind", ["flat", "hnsw"])
def test_coarse_index_bilinear_equals_exact_search_and_survives_save_load(kind: str, tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    db = (rng.normal(size=(500, 6)) * rng.uniform(0.2, 2.0, size=(500, 1))).astype(np.float32)
    q = rng.normal(size=(20, 6)).astype(np.float32)
    index = CoarseIndex("bilinear", 6, kind, {"ef_search": 500} if kind == "hnsw" else None)
    index.add(db[:400])
    index.save(tmp_path / "coarse.faiss")
    loaded = CoarseIndex.load(
        tmp_path / "coarse.faiss", geometry="bilinear", dimension=6, kind=kind,
        params={"ef_search": 500} if kind == "hnsw" else None, count=400,
    )  # fmt: skip
    loaded.add(db[400:])  # padded to the bound recovered from the stored vectors
    _, truth = exact_search(q, db, 10, geometry="bilinear")
    assert np.array_equal(truth, np.argsort(-(q.astype(np.float64) @ db.T.astype(np.float64)), axis=1)[:, :10])
    got = loaded.search(q, 10)
    recall = np.mean([len(set(got[i]) & set(truth[i])) / 10 for i in range(len(q))])
    assert recall == 1.0 if kind == "flat" else recall >= 0.95


def test_ranker_save_load_add_keeps_bilinear_search(exported: Path, trained, data: dict, tmp_path: Path) -> None:
    answers = {c.aid: c.answer for g in data["dev_groups"] for c in g.candidates}
    items = list(answers.items())
    ranker = Ranker.build(
        [{"id": k, "answer": v} for k, v in items[:150]], model=exported, device="cpu", index_kind="hnsw"
    )
    ranker.save(tmp_path / "index")
    with Ranker.edit(tmp_path / "index") as r:
        r.add([{"id": k, "answer": v} for k, v in items[150:]])
    again = Ranker.load(tmp_path / "index", device="cpu")
    assert len(again) == len(items)
    assert again.recall(k=5)["recall"] == 1.0


def test_checkpoint_round_trip(trained, tmp_path: Path) -> None:
    from qaindex_export.training.train import load_checkpoint, save_checkpoint

    loaded = load_checkpoint(save_checkpoint(trained, tmp_path / "ckpt"))
    texts = ["what about topic3 fill2. fill1", "topic7", ""]
    for role in ("question", "answer"):
        want = _torch_vectors(trained.model.cpu().eval(), trained.tokenizer, texts, role, 40)
        got = _torch_vectors(loaded.model, loaded.tokenizer, texts, role, 40)
        assert np.array_equal(got, want)
    assert loaded.model.kind == trained.config.model

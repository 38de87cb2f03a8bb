"""ONNX export: graph contracts, torch/onnxruntime parity, float16 tables, the manifest, and
a trained model served by ``qaindex.Ranker`` with the same ranking as torch."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from qaindex_export.exporting.export_forms import FoldedEncoder, PoincareScorer  # noqa: E402
from qaindex_export.exporting.onnx_export import (  # noqa: E402
    ExportError,
    check_parity,
    export_encoder,
    export_model,
    export_scorer,
    folded_encoder,
    scorer_module,
)
from qaindex_export.networks.models import BagOfWords, BallMap, CosineQA, HyperQA  # noqa: E402
from qaindex_export.training.synthetic import planted_word_groups, write_benchmark  # noqa: E402
from qaindex_export.training.train import TrainConfig, sha256_file, train  # noqa: E402

from qaindex import Model, Ranker  # noqa: E402
from qaindex.geometry.hyperbolic import project  # noqa: E402

pytestmark = pytest.mark.torch

SMALL = dict(embeddings="none", dim=24, embed_dim=24, batch_size=32, negatives=4, threads=1, device="cpu")


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> dict:
    root = tmp_path_factory.mktemp("data")
    train_groups = planted_word_groups(200, seed=1)
    dev_groups = planted_word_groups(40, seed=2, prefix="d")
    return {
        "train": write_benchmark(train_groups, root / "train.jsonl"),
        "dev": write_benchmark(dev_groups, root / "dev.jsonl"),
        "dev_groups": dev_groups,
    }


@pytest.fixture(scope="module")
def trained(data: dict):
    return train(TrainConfig(**SMALL, ball="radius", epochs=5, seed=0), data["train"], data["dev"], log=None)


@pytest.fixture(scope="module")
def exported(trained, data: dict, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return export_model(trained, tmp_path_factory.mktemp("models") / "hyperqa", dev_data=data["dev"])


def _symbolic(path: Path) -> dict[str, list[str | int]]:
    proto = onnx.load(str(path))
    return {
        v.name: [d.dim_param or d.dim_value for d in v.type.tensor_type.shape.dim]
        for v in [*proto.graph.input, *proto.graph.output]
    }


def test_manifest(exported: Path, trained, data: dict) -> None:
    manifest = json.loads((exported / "manifest.json").read_text())
    assert manifest["geometry"]["name"] == "poincare" and manifest["geometry"]["ball_map"] == "radius"
    assert manifest["geometry"]["max_norm"] == pytest.approx(0.999)
    assert manifest["geometry"]["ranking"] == "relative" == Model.load(exported).ranking
    score = manifest["score"]
    assert score["formula"] == "-(w_f * f + b_f), f = d(q, a) - d(0, a)" and score["higher_is_better"] is True
    assert score["parameters"]["w_f"] > 0 and set(score["parameters"]) == {"w_f", "b_f"}
    training = manifest["training"]
    assert training["config"] == trained.config.to_dict()
    assert training["data"]["train"]["sha256"] == sha256_file(data["train"])
    assert training["data"]["dev"]["sha256"] == sha256_file(data["dev"])
    assert training["best_epoch"] == trained.best_epoch
    metrics = manifest["metrics"]
    assert metrics["dev"]["map"] == pytest.approx(trained.dev["map"])
    # the exported graphs reproduce the torch dev metrics through onnxruntime
    assert metrics["dev_onnx"]["map"] == pytest.approx(trained.dev["map"], abs=1e-6)
    assert metrics["norms_dev"]["count"] > 0 and "at_clip" in metrics["norms_dev"]
    params = manifest["parameters"]
    assert params["trainable"] == sum(p.numel() for p in trained.model.parameters() if p.requires_grad)
    assert params["total"] >= params["trainable"] and params["exported_table"]["dtype"] == "float32"
    assert manifest["max_tokens"] == {"question": 40, "answer": 128}


def test_graphs_have_dynamic_axes(exported: Path) -> None:
    enc = _symbolic(exported / "encoder.onnx")
    assert all(isinstance(d, str) for d in enc["input_ids"] + enc["attention_mask"])
    assert isinstance(enc["vectors"][0], str) and enc["vectors"][1] == 24
    sc = _symbolic(exported / "scorer.onnx")
    assert isinstance(sc["query"][0], str) and all(isinstance(d, str) for d in sc["candidates"][:2])


def test_parity_varied_batches_and_lengths(exported: Path, trained) -> None:
    model = trained.model.cpu().eval()
    enc = ort.InferenceSession(str(exported / "encoder.onnx"), providers=["CPUExecutionProvider"])
    scorer = ort.InferenceSession(str(exported / "scorer.onnx"), providers=["CPUExecutionProvider"])
    tok = trained.tokenizer
    texts = ["topic3", "what about topic3 fill2", "", "fill1 " * 30 + "topic7", "unknownword topic1"]
    for batch in (texts[:1], texts[:2], texts, texts[2:4]):
        ids, mask = tok.encode_batch(batch, 40)
        got = enc.run(["vectors"], {"input_ids": ids, "attention_mask": mask})[0]
        with torch.no_grad():
            want = model(torch.from_numpy(ids), torch.from_numpy(mask)).numpy()
        assert got.shape == want.shape
        assert np.abs(got - want).max() <= 1e-4
    # a length-1 batch of length-1 texts, and padding that must not change the vector
    ids = np.array([[tok.encode("topic3")[0]]], dtype=np.int64)
    one = enc.run(["vectors"], {"input_ids": ids, "attention_mask": np.ones_like(ids)})[0]
    padded = enc.run(
        ["vectors"], {"input_ids": np.array([[ids[0, 0], 0, 0]]), "attention_mask": np.array([[1, 0, 0]])}
    )[0]
    assert np.abs(one - padded).max() <= 1e-6
    q = enc.run(["vectors"], {"input_ids": ids, "attention_mask": np.ones_like(ids)})[0]
    c_ids, c_mask = tok.encode_batch(texts, 128)
    c = enc.run(["vectors"], {"input_ids": c_ids, "attention_mask": c_mask})[0]
    score, dist = scorer.run(["score", "distance"], {"query": q, "candidates": c[None]})
    with torch.no_grad():
        ws, wd = model.score(torch.from_numpy(q)[:, None, :], torch.from_numpy(c)[None])
    assert np.abs(score - ws.numpy()).max() <= 1e-4 and np.abs(dist - wd.numpy()).max() <= 1e-4


def test_ranker_search_matches_torch(exported: Path, trained, data: dict) -> None:
    groups = data["dev_groups"]
    answers = {c.aid: c.answer for g in groups for c in g.candidates}
    records = [{"id": aid, "answer": text} for aid, text in answers.items()]
    ranker = Ranker.build(records, model=exported, device="cpu", hybrid=False)  # the model's own ranking
    model = trained.model.cpu().eval()
    tok = trained.tokenizer
    a_ids, a_mask = tok.encode_batch(list(answers.values()), 128)
    with torch.no_grad():
        a_vec = model(torch.from_numpy(a_ids), torch.from_numpy(a_mask))
    keys = list(answers)
    for g in groups[:10]:
        hits = ranker.search(g.question, k=5)
        q_ids, q_mask = tok.encode_batch([g.question], 40)
        with torch.no_grad():
            q_vec = model(torch.from_numpy(q_ids), torch.from_numpy(q_mask))
            s, _ = model.score(q_vec, a_vec)
        s = s.numpy().astype(np.float64)
        order = np.argsort(-s, kind="stable")
        assert hits[0].id == keys[order[0]] or s[order[0]] - s[order[1]] < 1e-4
        for h in hits:
            assert h.raw_score == pytest.approx(s[keys.index(h.id)], abs=1e-4)
        top = [keys[i] for i in order[:5]]
        clear = [i for i in range(4) if s[order[i]] - s[order[i + 1]] > 1e-4]
        assert all([h.id for h in hits][i] == top[i] for i in clear)


def test_model_load_encode_matches_torch(exported: Path, trained) -> None:
    loaded = Model.load(exported, device="cpu")
    texts = ["what about topic3 fill2", "topic7 fill1"]
    got = loaded.encode(texts, role="question")
    ids, mask = trained.tokenizer.encode_batch(texts, 40)
    with torch.no_grad():
        want = trained.model.cpu()(torch.from_numpy(ids), torch.from_numpy(mask)).numpy()
    assert np.abs(got - project(want, max_norm=0.999)).max() <= 1e-5


def test_cosineqa_float16_export(data: dict, tmp_path: Path) -> None:
    result = train(TrainConfig(**SMALL, model="cosineqa", epochs=3, seed=1), data["train"], data["dev"], log=None)
    path = export_model(result, tmp_path / "cos", table_dtype="float16", dev_data=data["dev"])
    manifest = json.loads((path / "manifest.json").read_text())
    assert manifest["geometry"] == {"name": "cosine"}
    assert manifest["score"]["formula"] == "w_f * cos + b_f" and manifest["score"]["higher_is_better"] is True
    assert manifest["parameters"]["exported_table"]["dtype"] == "float16"
    proto = onnx.load(str(path / "encoder.onnx"))
    assert any(t.data_type == onnx.TensorProto.FLOAT16 for t in proto.graph.initializer)
    parity = manifest["metrics"]["parity"]
    assert parity["encoder_max_abs_diff"] <= 1e-4  # against the fp16-rounded torch table
    assert parity["fold_max_abs_diff"] > 0.0  # fp16 rounding is visible against float32
    assert abs(manifest["metrics"]["dev_onnx"]["map"] - result.dev["map"]) < 0.05
    ranker = Ranker.build([{"id": "a", "answer": "topic1 fill2"}, {"id": "b", "answer": "topic2"}], model=path)
    assert ranker.search("what about topic2", k=1)[0].id == "b"


@pytest.mark.parametrize("ranking", ["relative", "distance"])
@pytest.mark.parametrize("ball", ["clip", "expmap", "weighted", "lognorm"])
def test_other_ball_maps_export(ball: str, ranking: str) -> None:
    torch.manual_seed(0)
    depth = ball in ("weighted", "lognorm")
    model = HyperQA(BagOfWords(30, 8, embed_dim=5, depth=depth), BallMap(ball, alpha=0.3), ranking=ranking)
    encoder = folded_encoder(model)
    assert tuple(encoder.table.shape) == (30, 9 if depth else 8)  # weighted, lognorm: + depth column
    graph = export_encoder(encoder)
    scorer = scorer_module(model)
    assert scorer.ranking == ranking
    parity = check_parity(model, graph, export_scorer(scorer, 8))
    assert parity["encoder_max_abs_diff"] <= 1e-5 and parity["fold_max_abs_diff"] <= 1e-5


def test_weighted_norm_follows_token_weights() -> None:
    torch.manual_seed(0)
    model = HyperQA(BagOfWords(30, 8, embed_dim=5, depth=True), BallMap("weighted"))
    with torch.no_grad():
        model.encoder.proj.bias.fill_(0.5)  # every token has a direction
        model.encoder.depth.weight.zero_()
        model.encoder.depth.bias.fill_(-3.0)
    ids = torch.tensor([[2, 3, 4, 0], [2, 0, 0, 0], [5, 0, 0, 0]])
    mask = torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0], [0, 0, 0, 0]])
    v = model(ids, mask)
    w = torch.nn.functional.softplus(torch.tensor(-3.0))
    want = 0.999 * torch.tanh(torch.tensor([3.0, 1.0, 0.0]) * w)
    assert torch.allclose(v.norm(dim=-1), want, atol=1e-6)  # the empty text sits at the centre


def test_relative_scorer_graph_matches_formula() -> None:
    rng = np.random.default_rng(0)
    q = (rng.normal(size=(3, 6)) * 0.15).astype(np.float32)
    c = (rng.normal(size=(3, 5, 6)) * 0.15).astype(np.float32)
    c[:, 0] = 0.0
    c[:, 1] = c[:, 1] / np.linalg.norm(c[:, 1], axis=-1, keepdims=True) * 0.999
    sess = ort.InferenceSession(
        export_scorer(PoincareScorer(2.0, 0.5, "relative"), 6), providers=["CPUExecutionProvider"]
    )
    score, dist = sess.run(["score", "distance"], {"query": q, "candidates": c})
    from qaindex.geometry import hyperbolic as H

    d = H.distance(q[:, None, :].astype(np.float64), c.astype(np.float64))
    np.testing.assert_allclose(dist, d, rtol=1e-4, atol=1e-5)  # the plain distance, as documented
    f = d - H.origin_distance(c.astype(np.float64))
    np.testing.assert_allclose(score, -(2.0 * f + 0.5), rtol=1e-4, atol=1e-4)
    assert np.all(score[:, 0] <= score.min(axis=1) + 1e-5)  # the centre scores worst


def test_set_ranking_rewrites_scorer_and_manifest(exported: Path, tmp_path: Path) -> None:
    import shutil

    from qaindex_export.exporting.onnx_export import set_ranking

    path = tmp_path / "m"
    shutil.copytree(exported, path)
    before = json.loads((path / "manifest.json").read_text())
    set_ranking(path, "distance")
    model = Model.load(path)  # checksums of the rewritten files verify
    assert model.ranking == "distance" and model.manifest["score"]["formula"] == "-(w_f * d + b_f)"
    assert model.manifest["score"]["parameters"] == before["score"]["parameters"]
    assert model.manifest["files"]["encoder.onnx"] == before["files"]["encoder.onnx"]
    rng = np.random.default_rng(1)
    q = (rng.normal(size=(2, 24)) * 0.1).astype(np.float32)
    c = (rng.normal(size=(2, 4, 24)) * 0.1).astype(np.float32)
    score, dist = model.score(q, c)
    p = before["score"]["parameters"]
    np.testing.assert_allclose(score, -(p["w_f"] * dist + p["b_f"]), rtol=1e-5, atol=1e-5)
    set_ranking(path, "relative")
    assert json.loads((path / "manifest.json").read_text())["files"] == before["files"]  # same bytes back
    with pytest.raises(ValueError, match="ranking must be one of"):
        set_ranking(path, "cosine")


def test_parity_check_catches_a_wrong_graph() -> None:
    torch.manual_seed(0)
    model = HyperQA(BagOfWords(30, 8, embed_dim=5), BallMap("radius", dim=8))
    other = CosineQA(BagOfWords(30, 8, embed_dim=5), BallMap("none"))
    encoder_graph = export_encoder(FoldedEncoder(model.encoder.folded_table(), model.ball))
    with pytest.raises(ExportError, match="parity check failed: score"):
        check_parity(model, encoder_graph, export_scorer(PoincareScorer(model.w_f.item() * 2, 0.0), 8))
    with pytest.raises(ExportError, match="parity check failed: encoder"):
        check_parity(other, encoder_graph, export_scorer(scorer_module(other), 8))


def test_both_exporters_give_the_same_encoder_and_an_unknown_one_is_refused() -> None:
    """``export_traced`` behind ``export_encoder``: dynamo and TorchScript graphs compute the same
    vectors on any batch and length (symbolic axes are checked inside); other names are refused."""
    from qaindex_export.exporting.onnx_graph import session

    torch.manual_seed(0)
    encoder = folded_encoder(HyperQA(BagOfWords(30, 8, embed_dim=5), BallMap("clip")))
    rng = np.random.default_rng(0)
    ids = rng.integers(1, 30, size=(5, 11))
    mask = (np.arange(11)[None] < rng.integers(1, 12, size=(5, 1))).astype(np.int64)
    ids = ids * mask
    outputs = [
        session(export_encoder(encoder, exporter=name)).run(["vectors"], {"input_ids": ids, "attention_mask": mask})[0]
        for name in ("dynamo", "torchscript")
    ]
    np.testing.assert_allclose(outputs[0], outputs[1], atol=1e-6)
    with pytest.raises(ValueError, match=r"^exporter must be one of \('dynamo', 'torchscript'\), got 'jit'$"):
        export_encoder(encoder, exporter="jit")

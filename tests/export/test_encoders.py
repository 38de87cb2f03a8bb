"""QA-CNN and QA-biLSTM: masking, learning a planted task, max-of-K negatives, ONNX parity
on varied batches and lengths, and the served ranking (``qaindex.Ranker``) equal to torch's."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from helpers.trained import record_tracers, trained_model_fixtures

torch = pytest.importorskip("torch")
onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from qaindex_export.config import TrainConfig  # noqa: E402
from qaindex_export.networks.encoders import SequenceQA, build_sequence_model, pad_ragged  # noqa: E402
from qaindex_export.training.negatives import max_of_pool as _max_of_pool  # noqa: E402
from qaindex_export.training.train import (  # noqa: E402
    TextTable,
    encode_texts,
    load_checkpoint,
    save_checkpoint,
)

from qaindex import Model, Ranker  # noqa: E402
from qaindex.text.tokenizer import Tokenizer  # noqa: E402

pytestmark = pytest.mark.torch

KINDS = ("qa-cnn", "qa-bilstm")
SMALL = dict(
    embeddings="none", dim=32, embed_dim=16, batch_size=20, negatives=1, negative_pool=10, margin=0.2,
    threads=1, device="cpu", epochs=10, seed=0,
)  # fmt: skip


data, trained, exported = trained_model_fixtures(KINDS, SMALL)


def _vectors(model: SequenceQA, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
    with torch.no_grad():
        return model(torch.from_numpy(ids), torch.from_numpy(mask)).numpy()


# ------------------------------------------------------------------------ the networks


@pytest.mark.parametrize("kind", KINDS)
def test_padding_and_batch_mates_do_not_change_a_vector(kind: str) -> None:
    torch.manual_seed(0)
    model = build_sequence_model(kind, 30, dim=8, embed_dim=5, window=4).eval()
    alone = _vectors(model, np.array([[3, 4, 5]]), np.ones((1, 3), np.int64))
    ids = np.array([[3, 4, 5, 0, 0, 0], [7, 8, 9, 10, 11, 12], [6, 0, 0, 0, 0, 0], [0] * 6])
    mask = (ids > 0).astype(np.int64)
    ids[0, 3:] = 17  # ids under a zero mask are ignored, whatever they are
    batch = _vectors(model, ids, mask)
    assert np.abs(batch[0] - alone[0]).max() <= 1e-6
    assert np.all(batch[3] == 0.0)  # an empty text is the zero vector
    assert np.all(np.abs(batch[:3]) < 1.0) and np.abs(batch[:3]).min() >= 0.0  # tanh of the max-pool


def test_cnn_max_pools_the_windows() -> None:
    """QA-CNN's vector is tanh of the column-wise max of W_1 [z_{t-1}; z_t; z_{t+1}] + b_1 (zeros outside)."""
    torch.manual_seed(1)
    model = build_sequence_model("qa-cnn", 12, dim=5, embed_dim=4, window=3).eval()
    ids = [2, 5, 7, 3]
    emb = model.encoder.embedding.detach().numpy()[ids]
    padded = np.concatenate([np.zeros((1, 4)), emb, np.zeros((1, 4))])
    weight = model.encoder.conv.weight.detach().numpy()  # (c, e, k)
    bias = model.encoder.conv.bias.detach().numpy()
    columns = np.stack([np.einsum("cek,ke->c", weight, padded[t : t + 3]) + bias for t in range(len(ids))])
    want = np.tanh(columns.max(axis=0))
    got = _vectors(model, np.array([ids]), np.ones((1, 4), np.int64))[0]
    np.testing.assert_allclose(got, want, atol=1e-5)


def test_bilstm_backward_direction_reads_the_text_reversed() -> None:
    torch.manual_seed(2)
    model = build_sequence_model("qa-bilstm", 12, dim=6, embed_dim=4).eval()
    enc = model.encoder
    ids = torch.tensor([[2, 5, 7, 0, 0]])
    mask = torch.tensor([[1, 1, 1, 0, 0]])
    z = torch.nn.functional.embedding(ids[:, :3], enc.embedding)
    with torch.no_grad():
        fwd, _ = enc.forward_lstm(z)
        bwd, _ = enc.backward_lstm(z.flip(1))
        h = torch.cat([fwd, bwd.flip(1)], dim=-1)
        want = torch.tanh(h.max(dim=1).values)
        got = model(ids, mask)
    assert torch.allclose(got, want, atol=1e-6)


def test_pad_ragged_and_bags_match_forward() -> None:
    ids, mask = pad_ragged(torch.tensor([4, 5, 6, 7]), torch.tensor([0, 1, 1, 4]))
    assert ids.tolist() == [[4, 0, 0], [0, 0, 0], [5, 6, 7], [0, 0, 0]]
    assert mask.tolist() == [[1, 0, 0], [0, 0, 0], [1, 1, 1], [0, 0, 0]]
    model = build_sequence_model("qa-bilstm", 10, dim=4, embed_dim=3).eval()
    with torch.no_grad():
        assert torch.allclose(
            model.encode_bags(torch.tensor([4, 5, 6, 7]), torch.tensor([0, 1, 1, 4])), model(ids, mask)
        )


def test_cosine_score_is_the_plain_cosine() -> None:
    model = build_sequence_model("qa-cnn", 10, dim=4, embed_dim=3)
    q, a = torch.tensor([[1.0, 0.0, 0.0, 0.0]]), torch.tensor([[[1.0, 1.0, 0.0, 0.0], [0.0, 0.0, 2.0, 0.0]]])
    score, distance = model.score(q[:, None, :], a)
    assert score.tolist()[0] == pytest.approx([2**-0.5, 0.0], abs=1e-6)
    assert distance.tolist()[0] == pytest.approx([1 - 2**-0.5, 1.0], abs=1e-6)
    assert not model.w_raw.requires_grad and not model.b_f.requires_grad


def test_settings_defaults_and_errors() -> None:
    assert TrainConfig(model="qa-cnn").effective_negative_pool == 50
    assert TrainConfig(model="qa-bilstm", negative_pool=0).effective_negative_pool == 0
    assert TrainConfig(model="hyperqa").effective_negative_pool == 0
    with pytest.raises(ValueError, match=r"^negative_pool \(4\) must be at least negatives \(8\), or 0 for off$"):
        TrainConfig(model="qa-cnn", negative_pool=4, negatives=8).validate()
    with pytest.raises(
        ValueError,
        match=r"^dim of qa-bilstm is 2H \(two directions of H units\) and must be even, got 7; pass an even --dim$",
    ):
        TrainConfig(model="qa-bilstm", dim=7).validate()


def test_max_of_pool_picks_the_highest_scoring_negatives() -> None:
    tok = Tokenizer(["[PAD]", "[UNK]", *[f"w{i}" for i in range(20)]], kind="word")
    table = TextTable(tok, {"question": 8, "answer": 8})
    rng = np.random.default_rng(0)
    rows = np.array([table.add(" ".join(f"w{i}" for i in rng.integers(0, 20, size=4)), "answer") for _ in range(30)])
    questions = np.array([table.add("w1 w2", "question"), table.add("w3 w4 w5", "question")])
    torch.manual_seed(0)
    model = build_sequence_model("qa-cnn", len(tok.vocab), dim=8, embed_dim=5, window=2)
    pool = rng.choice(rows, size=(2, 12))
    chosen = _max_of_pool(model, table, questions, pool, 3, len(table), torch.device("cpu"))
    vectors = encode_texts(model, table, np.arange(len(table)), torch.device("cpu"))
    for i, q in enumerate(questions):
        with torch.no_grad():
            s, _ = model.score(vectors[q][None, None, :], vectors[torch.from_numpy(pool[i])][None])
        best = pool[i][np.argsort(-s[0].numpy(), kind="stable")[:3]]
        assert sorted(chosen[i].tolist()) == sorted(best.tolist())
    assert model.training  # left in training mode


# ------------------------------------------------------------------------ training


def test_learns_the_planted_task(trained) -> None:
    # chance on 6 candidates with one correct is MAP ≈ 0.41; the planted word decides
    assert trained.dev["map"] >= 0.9, trained.history
    assert trained.history[0]["dev_map"] < trained.dev["map"]
    assert isinstance(trained.model, SequenceQA) and trained.model.kind == trained.config.model


def test_checkpoint_round_trip(trained, tmp_path: Path) -> None:
    loaded = load_checkpoint(save_checkpoint(trained, tmp_path / "ckpt"))
    ids, mask = trained.tokenizer.encode_batch(["what about topic3 fill2", "topic7"], 40)
    assert np.array_equal(_vectors(loaded.model, ids, mask), _vectors(trained.model.cpu().eval(), ids, mask))


# ------------------------------------------------------------------------ export and serving


def test_export_manifest_and_dynamic_axes(exported: Path, trained) -> None:
    manifest = json.loads((exported / "manifest.json").read_text())
    assert manifest["geometry"] == {"name": "cosine"} and manifest["dimension"] == 32
    assert manifest["training"]["encoder"]["model"] == trained.config.model
    assert manifest["metrics"]["dev_onnx"]["map"] == pytest.approx(trained.dev["map"], abs=1e-6)
    proto = onnx.load(str(exported / "encoder.onnx"))
    for value in proto.graph.input:
        assert all(d.dim_param and not d.HasField("dim_value") for d in value.type.tensor_type.shape.dim)


def test_export_parity_varied_batches_and_lengths(exported: Path, trained) -> None:
    model = trained.model.cpu().eval()
    enc = ort.InferenceSession(str(exported / "encoder.onnx"), providers=["CPUExecutionProvider"])
    tok = trained.tokenizer
    texts = ["topic3", "what about topic3 fill2", "", "fill1 " * 30 + "topic7", "unknownword topic1", "fill9"]
    for batch in (texts[:1], texts[1:2], texts[:2], texts, texts[2:4], texts[3:]):
        ids, mask = tok.encode_batch(batch, 40)
        got = enc.run(["vectors"], {"input_ids": ids, "attention_mask": mask})[0]
        want = _vectors(model, ids, mask)
        assert got.shape == want.shape and np.abs(got - want).max() <= 1e-5
    ids = np.array([[tok.encode("topic3")[0]]], dtype=np.int64)  # batch 1, length 1
    one = enc.run(["vectors"], {"input_ids": ids, "attention_mask": np.ones_like(ids)})[0]
    padded = enc.run(
        ["vectors"], {"input_ids": np.array([[ids[0, 0], 0, 0, 0]]), "attention_mask": np.array([[1, 0, 0, 0]])}
    )[0]
    assert np.abs(one - padded).max() <= 1e-6
    assert np.abs(one - _vectors(model, ids, np.ones_like(ids))).max() <= 1e-5


def test_served_ranking_equals_torch(exported: Path, trained, data: dict) -> None:
    answers = {c.aid: c.answer for g in data["dev_groups"] for c in g.candidates}
    ranker = Ranker.build(
        [{"id": k, "answer": v} for k, v in answers.items()], model=exported, device="cpu", hybrid=False
    )  # the model's own ranking
    assert Model.load(exported, device="cpu").geometry == "cosine"
    model = trained.model.cpu().eval()
    tok = trained.tokenizer
    keys = list(answers)
    a_vec = torch.from_numpy(_vectors(model, *tok.encode_batch(list(answers.values()), 128)))
    for g in data["dev_groups"][:10]:
        hits = ranker.search(g.question, k=5)
        q_vec = torch.from_numpy(_vectors(model, *tok.encode_batch([g.question], 40)))
        with torch.no_grad():
            s = model.score(q_vec, a_vec)[0].numpy().astype(np.float64)
        order = np.argsort(-s, kind="stable")
        for h in hits:
            assert h.raw_score == pytest.approx(s[keys.index(h.id)], abs=1e-5)
        clear = [i for i in range(4) if s[order[i]] - s[order[i + 1]] > 1e-5]
        assert all(hits[i].id == keys[order[i]] for i in clear)
        assert len(clear) >= 1


def test_lstm_graphs_are_traced_by_torchscript(trained, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """torch 2.11's dynamo exporter pinned QA-biLSTM's sequence length (a static axis 1), so every
    LSTM graph goes through the TorchScript exporter; QA-CNN's encoder and every scorer through dynamo."""
    from qaindex_export.exporting.onnx_export import export_model

    seen = record_tracers(monkeypatch)
    export_model(trained, tmp_path / "model")
    scorers = [name for name in seen["dynamo"] if name.endswith("Scorer")]
    encoders = [name for name in seen["dynamo"] + seen["torchscript"] if not name.endswith("Scorer")]
    assert len(scorers) == 1 and len(encoders) == 1, seen
    assert seen["torchscript"] == (encoders if trained.config.model == "qa-bilstm" else []), seen

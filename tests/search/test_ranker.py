"""Ranker: exact search against brute force, recall, persistence, updates, atomic saves."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from helpers.onnx_models import point_model, random_ball

from qaindex import IndexFormatError, QAIndexError, QueryError, Ranker
from qaindex.errors import CorpusError, ModelFormatError


def brute_force(queries: np.ndarray, points: np.ndarray) -> np.ndarray:
    """Poincaré distances in float64, written independently of qaindex.geometry.hyperbolic."""
    q = queries.astype(np.float64)[:, None, :]
    p = points.astype(np.float64)[None, :, :]
    sq = ((q - p) ** 2).sum(-1)
    den = (1 - (q**2).sum(-1)) * (1 - (p**2).sum(-1))
    return np.arccosh(1 + 2 * sq / den)


@pytest.fixture(scope="module")
def points_ranker(tmp_path_factory: pytest.TempPathFactory) -> tuple[Ranker, np.ndarray, list[str]]:
    rng = np.random.default_rng(7)
    points = random_ball(rng, 3000, 12)
    mdir, words = point_model(tmp_path_factory.mktemp("m") / "points", points)
    ranker = Ranker.build([{"id": w, "answer": w} for w in words], model=mdir, index_kind="flat")
    return ranker, points, words


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_flat_search_equals_brute_force(points_ranker: tuple[Ranker, np.ndarray, list[str]], seed: int) -> None:
    ranker, points, _ = points_ranker
    rng = np.random.default_rng(seed)
    # queries: random ball points, some near the boundary, some inside the tight boundary cluster
    queries = np.concatenate([random_ball(rng, 40, 12), points[-20:] + rng.normal(scale=2e-4, size=(20, 12))])
    queries = (queries * np.minimum(1, 0.999 / np.linalg.norm(queries, axis=1, keepdims=True))).astype(np.float32)
    k = 10
    scores, dists, rows = ranker.search_vectors(queries, k)
    truth = brute_force(queries, points)
    order = np.argsort(truth, axis=1, kind="stable")[:, :k]
    # the k best distances are found (ids may swap only between float32-indistinguishable ties)
    got = np.take_along_axis(truth, rows, axis=1)
    want = np.take_along_axis(truth, order, axis=1)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6)
    agree = np.mean([len(set(r) & set(o)) / k for r, o in zip(rows, order, strict=True)])
    assert agree >= 0.99
    np.testing.assert_allclose(dists, got, rtol=2e-3, atol=1e-4)
    np.testing.assert_allclose(scores, -dists, rtol=1e-6)
    assert np.all(np.diff(scores, axis=1) <= 0)


def test_hnsw_recall_is_measured_against_exact(
    points_ranker: tuple[Ranker, np.ndarray, list[str]], tmp_path: Path
) -> None:
    ranker, points, words = points_ranker
    hnsw = Ranker.build(
        [{"id": w, "answer": w} for w in words],
        model=ranker.model,
        index_kind="hnsw",
        hnsw={"M": 8, "ef_construction": 40, "ef_search": 16},
        overfetch=2,
    )
    report = hnsw.recall(10, questions=words[::30])
    assert report["queries"] == 100 and report["candidates"] == 20 and report["k"] == 10
    # independent check of the pipeline's recall
    qv = points[::30]
    _, _, rows = hnsw.search_vectors(qv, 10)
    truth = np.argsort(brute_force(qv, points), axis=1, kind="stable")[:, :10]
    expect = np.mean([len(set(r) & set(t)) / 10 for r, t in zip(rows, truth, strict=True)])
    assert report["recall"] == pytest.approx(expect, abs=0.011)
    assert 0.5 < report["recall"] <= 1.0
    assert report["coarse_recall"] <= 1.0
    exact = ranker.recall(10, questions=words[::30])
    assert exact["recall"] == 1.0


def test_small_index_bounds_k_by_its_size(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    pts = random_ball(rng, 4, 3)
    mdir, words = point_model(tmp_path / "m", pts)
    ranker = Ranker.build([{"answer": w} for w in words], model=mdir)
    for k in (6, 10**30):  # columns are min(k, len(index)); a huge k allocates nothing more
        scores, dists, rows = ranker.search_vectors(pts[:2], k)
        assert rows.shape == (2, 4) and scores.shape == (2, 4) and dists.shape == (2, 4)
        assert sorted(rows[0].tolist()) == [0, 1, 2, 3] and np.all(np.isfinite(scores))
    assert len(ranker.search("p0", k=6)) == 4


def test_save_load_round_trip_gives_identical_results(faq_model: Path, faq_file: Path, tmp_path: Path) -> None:
    ranker = Ranker.build(faq_file, model=faq_model)
    questions = ["how do I reset my password", "refund please", "unknown words 🙂 ☕", "export markdown"]
    before = ranker.search_batch(questions, k=3)
    ranker.save(tmp_path / "ix")
    loaded = Ranker.load(tmp_path / "ix", device="cpu")  # info() below names the devices
    assert loaded.search_batch(questions, k=3) == before
    assert len(loaded) == 5 and loaded.get(7).answer.startswith("Two-factor")
    assert loaded.get("reset").questions == ("how do I reset my password",)
    assert before[0][0].metadata in (
        {"category": "account"},
        {"category": "billing"},
        {"category": "data"},
        {"category": "security"},
        {},
    )
    info = loaded.info()
    assert info["answers"] == 5 and info["index"]["kind"] == "flat" and info["devices"]["faiss"] == "cpu"
    assert set(info["devices"]["onnxruntime"].values()) == {"CPUExecutionProvider"}
    manifest = json.loads((tmp_path / "ix" / "manifest.json").read_text())
    assert manifest["format"] == "qaindex-index" and manifest["format_version"] == 1 and manifest["count"] == 5
    assert set(manifest["files"]) >= {
        "records.jsonl",
        "records.offsets.npy",
        "vectors.npy",
        "coarse.faiss",
        "model/manifest.json",
        "model/encoder.onnx",
    }
    loaded.verify()


def test_hits_are_sorted_and_scores_match_model(faq_model: Path, faq_file: Path) -> None:
    ranker = Ranker.build(faq_file, model=faq_model, question_keys=False)  # answers' scores only
    hits = ranker.search("reset my password", k=5)
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    qv = ranker.model.encode(["reset my password"], role="question")
    av = ranker.model.encode([h.answer for h in hits], role="answer")
    s, d = ranker.model.score(qv, av[None])
    np.testing.assert_allclose(s[0], [h.raw_score for h in hits], rtol=1e-5)
    np.testing.assert_allclose(d[0], [h.distance for h in hits], rtol=1e-5)
    # an uncalibrated model (no "calibration" in its manifest): score = sigmoid(raw_score)
    np.testing.assert_allclose([h.score for h in hits], [1 / (1 + np.exp(-h.raw_score)) for h in hits], rtol=1e-12)


def test_add_and_remove(faq_model: Path, faq_file: Path, tmp_path: Path) -> None:
    ranker = Ranker.build(faq_file, model=faq_model)
    assert ranker.add([{"id": "new", "answer": "Reset password link by email settings."}]) == 1
    assert len(ranker) == 6
    ids = [h.id for h in ranker.search("reset password email settings", k=6)]
    assert "new" in ids
    with pytest.raises(CorpusError) as info:
        ranker.add([{"id": "new", "answer": "again"}])
    assert str(info.value) == 'records[1]: id "new" is already in the index; remove it first or use another id'
    assert ranker.remove(["new", "7"]) == 2
    assert len(ranker) == 4
    for q in ["reset password email settings", "two-factor login"]:
        assert {h.id for h in ranker.search(q, k=10)} == {"reset", "refund", "export", 5}
    with pytest.raises(QueryError) as info2:
        ranker.remove(["reset", "ghost", 99])
    assert str(info2.value) == 'no answer with id "ghost", 99 in the index; nothing was removed'
    assert len(ranker) == 4
    ranker.save(tmp_path / "ix")
    again = Ranker.load(tmp_path / "ix")
    assert {h.id for h in again.search("anything", k=10)} == {"reset", "refund", "export", 5}
    again.add([{"id": "late", "answer": "Sync runs every five minutes."}])
    again.save(tmp_path / "ix")
    assert len(Ranker.load(tmp_path / "ix")) == 5


def test_remove_everything_is_refused(faq_model: Path, faq_file: Path) -> None:
    ranker = Ranker.build(faq_file, model=faq_model)
    with pytest.raises(QueryError, match="removing every answer would leave an empty index"):
        ranker.remove(["reset", "refund", "export", 7, 5])


def test_query_errors(faq_model: Path, faq_file: Path) -> None:
    ranker = Ranker.build(faq_file, model=faq_model)
    with pytest.raises(QueryError) as e1:
        ranker.search("   ")
    assert str(e1.value) == "the question is empty; ask a question with at least one word"
    with pytest.raises(QueryError) as e2:
        ranker.search_batch(["ok", ""])
    assert str(e2.value) == "question 2 is empty; ask a question with at least one word"
    with pytest.raises(QueryError, match=r"^k must be a positive integer, got 0$"):
        ranker.search("ok", k=0)
    assert ranker.search_batch([], k=3) == []


def test_interrupted_save_keeps_previous_index(
    faq_model: Path, faq_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "ix"
    first = Ranker.build(faq_file, model=faq_model)
    first.save(target)
    expected = Ranker.load(target).search("refund", k=5)

    bigger = Ranker.build(faq_file, model=faq_model)
    bigger.add([{"id": "extra", "answer": "More text here."}])
    import qaindex.snapshot as snapshot

    def crash(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    # crash while writing the snapshot's files
    monkeypatch.setattr(snapshot.CoarseIndex, "save", crash)
    with pytest.raises(KeyboardInterrupt):
        bigger.save(target, overwrite=True)
    monkeypatch.undo()
    assert Ranker.load(target).search("refund", k=5) == expected
    # crash after the snapshot is complete, before the manifest is replaced
    monkeypatch.setattr(snapshot, "write_json_atomic", crash)
    with pytest.raises(KeyboardInterrupt):
        bigger.save(target, overwrite=True)
    monkeypatch.undo()
    assert len(Ranker.load(target)) == 5
    assert Ranker.load(target).search("refund", k=5) == expected
    # the next good save cleans up every leftover snapshot
    bigger.save(target, overwrite=True)
    assert len(Ranker.load(target)) == 6
    assert sorted(p.name.split("-")[0] for p in target.iterdir()) == ["data", "manifest.json"]


def test_load_errors(faq_model: Path, faq_file: Path, tmp_path: Path) -> None:
    with pytest.raises(IndexFormatError) as e:
        Ranker.load(tmp_path / "none")
    assert (
        str(e.value)
        == f"{tmp_path / 'none'}: no index here; build one with `qaindex build CORPUS.jsonl --index {tmp_path / 'none'}`"
    )
    target = tmp_path / "ix"
    Ranker.build(faq_file, model=faq_model).save(target)
    manifest = json.loads((target / "manifest.json").read_text())
    snap = target / manifest["snapshot"]
    # corrupted vectors: same size, different bytes
    vec = snap / "vectors.npy"
    data = bytearray(vec.read_bytes())
    data[-1] ^= 0xFF
    vec.write_bytes(bytes(data))
    with pytest.raises(IndexFormatError) as e2:
        Ranker.load(target, verify="full")
    assert str(e2.value) == f"{vec}: checksum does not match the manifest; the index is corrupted, rebuild it"
    lazy = Ranker.load(target)  # the vectors are verified as they are read: the last chunk on a search
    with pytest.raises(IndexFormatError) as e2:
        lazy.search("password", k=len(lazy))
    assert str(e2.value).startswith(f"{vec}: bytes ") and str(e2.value).endswith(
        "do not match their checksum in vectors.npy.chunks; the index is corrupted, rebuild it"
    )
    vec.write_bytes(bytes(data[:-4]))
    with pytest.raises(
        IndexFormatError,
        match=r"vectors.npy: has \d+ bytes, the manifest says \d+; the index is corrupted, rebuild it$",
    ):
        Ranker.load(target)
    manifest["format_version"] = 99
    (target / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(IndexFormatError) as e3:
        Ranker.load(target)
    assert str(e3.value) == (
        f"{target / 'manifest.json'}: index format version 99 is not supported by this qaindex "
        "(it reads version 1); upgrade qaindex or rebuild the index"
    )
    (target / "manifest.json").write_text("{not json")
    with pytest.raises(
        IndexFormatError, match=r"manifest.json: not valid JSON \(.*\); the index is corrupted, rebuild it$"
    ):
        Ranker.load(target)


def test_save_refuses_foreign_directory(faq_model: Path, faq_file: Path, tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "thesis.txt").write_text("precious")
    ranker = Ranker.build(faq_file, model=faq_model)
    with pytest.raises(IndexFormatError) as e:
        ranker.save(tmp_path / "docs")
    assert str(e.value) == (
        f"{tmp_path / 'docs'}: exists and is not a qaindex index (it holds 'thesis.txt', which qaindex did not "
        "write); qaindex writes only into a new or empty directory or an existing qaindex index, and never deletes "
        "or overwrites files it did not write; choose another --index path, or empty the directory"
    )
    assert (tmp_path / "docs" / "thesis.txt").read_text() == "precious"


def test_model_errors(tmp_path: Path, faq_model: Path) -> None:
    with pytest.raises(ModelFormatError, match=r"nowhere: no such model directory$"):
        Ranker.build([{"answer": "x"}], model=tmp_path / "nowhere")
    import shutil

    bad = tmp_path / "model"
    shutil.copytree(faq_model, bad)
    manifest = json.loads((bad / "manifest.json").read_text())
    manifest["format_version"] = 2
    (bad / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(ModelFormatError) as e:
        Ranker.build([{"answer": "x"}], model=bad)
    assert str(e.value) == (
        f"{bad / 'manifest.json'}: model format version 2 is not supported by this qaindex "
        "(it reads version 1); upgrade qaindex or re-export the model"
    )
    manifest["format_version"] = 1
    manifest["kind"] = "cross_encoder"
    (bad / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(
        ModelFormatError,
        match=r"model kind 'cross_encoder' is not supported by this qaindex \(supported: dual_encoder, reranker\); upgrade qaindex$",
    ):
        Ranker.build([{"answer": "x"}], model=bad)


def test_cosine_geometry(tmp_path: Path) -> None:
    from helpers.onnx_models import make_model

    rng = np.random.default_rng(5)
    vocab = ["[PAD]", "[UNK]"] + [f"w{i}" for i in range(300)]
    emb = rng.normal(size=(len(vocab), 8)).astype(np.float32)
    mdir = make_model(tmp_path / "cos", vocab, emb, geometry="cosine")
    ranker = Ranker.build([{"answer": f"w{i}"} for i in range(300)], model=mdir, index_kind="flat")
    qv = rng.normal(size=(20, 8)).astype(np.float32)
    _, dists, rows = ranker.search_vectors(qv, 5)
    u = emb[2:] / np.linalg.norm(emb[2:], axis=1, keepdims=True)
    cos = (qv / np.linalg.norm(qv, axis=1, keepdims=True)) @ u.T
    np.testing.assert_array_equal(rows, np.argsort(-cos, axis=1, kind="stable")[:, :5])
    np.testing.assert_allclose(dists, 1 - np.take_along_axis(cos, rows, axis=1), atol=1e-5)


def test_load_retries_when_a_save_replaces_the_snapshot(
    faq_model: Path, faq_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "ix"
    Ranker.build(faq_file, model=faq_model).save(target)
    newer = Ranker.build(faq_file, model=faq_model)
    newer.add([{"id": "late", "answer": "Added while a reader was opening the index."}])
    original = Ranker._open_snapshot.__func__  # type: ignore[attr-defined]
    calls = []

    def racing(cls: type[Ranker], root: Path, manifest: dict, **kwargs: object) -> Ranker:
        calls.append(manifest["snapshot"])
        if len(calls) == 1:
            newer.save(target, overwrite=True)  # the writer wins the race: the snapshot just read is deleted
        return original(cls, root, manifest, **kwargs)

    monkeypatch.setattr(Ranker, "_open_snapshot", classmethod(racing))
    loaded = Ranker.load(target)
    assert len(calls) == 2 and calls[0] != calls[1]
    assert len(loaded) == 6 and loaded.get("late").answer.startswith("Added")


def test_configure_trades_speed_for_recall_and_is_saved(
    points_ranker: tuple[Ranker, np.ndarray, list[str]], tmp_path: Path
) -> None:
    ranker, _, words = points_ranker
    hnsw = Ranker.build(
        [{"id": w, "answer": w} for w in words],
        model=ranker.model,
        index_kind="hnsw",
        hnsw={"M": 4, "ef_construction": 16, "ef_search": 4},
        overfetch=1,
    )
    low = hnsw.recall(10, questions=words[::15])["recall"]
    hnsw.configure(ef_search=400, overfetch=4)
    high = hnsw.recall(10, questions=words[::15])["recall"]
    assert high > low + 0.1  # overfetch 1 still ranks the pool floor of 100 candidates
    hnsw.save(tmp_path / "ix")
    loaded = Ranker.load(tmp_path / "ix")
    assert loaded.info()["index"]["params"]["ef_search"] == 400 and loaded.overfetch == 4
    with pytest.raises(QAIndexError, match=r"^ef_search must be a positive integer, got 0$"):
        hnsw.configure(ef_search=0)


def test_upsert_adds_and_replaces_by_id_like_a_fresh_build(faq_model: Path, faq_file: Path, tmp_path: Path) -> None:
    """After an upsert the index answers exactly as one built from the final records."""
    import json

    ranker = Ranker.build(faq_file, model=faq_model)
    changes = [
        {"id": "refund", "answer": "Refunds are paid within 30 days.", "category": "billing-v2"},
        {"id": "7", "answer": "Two-factor login uses a hardware key."},  # "7" is the stored id 7, as in add
        {"id": "fresh", "answer": "Sync runs every five minutes."},
    ]
    assert ranker.upsert(changes) == 3
    final = {str(r.id): r for r in Ranker.build(faq_file, model=faq_model).records()}
    for record in Ranker.build(changes, model=faq_model).records():
        final[str(record.id)] = record
    assert sorted(str(r.id) for r in ranker.records()) == sorted(final)
    assert ranker.get("refund").metadata == {"category": "billing-v2"}
    truth = Ranker.build(list(final.values()), model=faq_model)
    for question in ["refund days", "two-factor hardware key", "sync minutes", "reset password"]:
        got, want = ranker.search(question, k=10), truth.search(question, k=10)
        assert [h.id for h in got] == [h.id for h in want], question
        np.testing.assert_allclose([h.raw_score for h in got], [h.raw_score for h in want], rtol=1e-4)
    # from a file, saved and reloaded
    ranker.save(tmp_path / "ix")
    update = tmp_path / "update.jsonl"
    update.write_text(json.dumps({"id": "fresh", "answer": "Sync runs hourly."}) + "\n", encoding="utf-8")
    with Ranker.edit(tmp_path / "ix") as edited:
        assert edited.upsert(update) == 1
    assert Ranker.load(tmp_path / "ix").get("fresh").answer == "Sync runs hourly."
    assert len(Ranker.load(tmp_path / "ix")) == len(final)


def test_upsert_is_all_or_nothing(
    faq_model: Path, faq_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from qaindex.indexing import updates

    ranker = Ranker.build(faq_file, model=faq_model)
    before = [(r.id, r.answer) for r in ranker.records()]
    with pytest.raises(CorpusError) as info:
        ranker.upsert([{"id": "refund", "answer": "changed"}, {"answer": "no id"}])
    assert str(info.value) == (
        'records[2]: upsert replaces answers by id; give this answer an "id", or add it with `add`'
    )
    with pytest.raises(CorpusError, match=r'records\[2\]: field "answer" is empty'):
        ranker.upsert([{"id": "refund", "answer": "changed"}, {"id": "x", "answer": ""}])
    lines = tmp_path / "lines.jsonl"
    lines.write_text('{"id": "refund", "answer": "changed"}\n{"answer": "no id"}\n', encoding="utf-8")
    with pytest.raises(CorpusError, match=rf"^{lines}:2: upsert replaces answers by id"):
        ranker.upsert(lines)

    def broken(*args: object, **kwargs: object) -> None:
        raise MemoryError("encoder")

    monkeypatch.setattr(updates, "encode_answers", broken)
    with pytest.raises(MemoryError):
        ranker.upsert([{"id": "refund", "answer": "changed"}])
    assert [(r.id, r.answer) for r in ranker.records()] == before
    monkeypatch.undo()
    every = [{"id": r.id, "answer": f"new {r.answer}"} for r in ranker.records()]
    assert ranker.upsert(every) == len(before)  # replacing every answer never empties the index
    assert [r.answer for r in ranker.records()] == [f"new {a}" for _, a in before]


def test_recall_after_remove_uses_the_remaining_answers(
    points_ranker: tuple[Ranker, np.ndarray, list[str]],
) -> None:
    # recall() must bring the coarse index up to date after remove(), as search does: a stale
    # coarse index recalls rows that no longer exist (wrong figures, or an IndexError)
    ranker, points, words = points_ranker
    flat = Ranker.build([{"id": w, "answer": w} for w in words[:600]], model=ranker.model, index_kind="flat")
    gone = words[:600:2]
    flat.remove(gone)
    kept = points[1:600:2]
    questions = words[1:600:20]
    report = flat.recall(10, questions=questions)
    assert report["k"] == 10 and report["queries"] == len(questions)
    # brute-force ground truth over the answers left, against the pipeline's own rows
    qv = points[1:600:20]
    truth = np.argsort(brute_force(qv, kept), axis=1, kind="stable")[:, :10]
    _, _, rows = flat.search_vectors(qv, 10)
    expect = np.mean([len(set(r) & set(t)) / 10 for r, t in zip(rows, truth, strict=True)])
    assert expect == 1.0
    assert report["recall"] == expect and report["coarse_recall"] == 1.0

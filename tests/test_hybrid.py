"""Hybrid lexical + dense search: BM25 against bm25s, fused ranking against a brute-force fusion
computed here, persistence / add / remove / verify round trips, corruption of the lexical files."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner

from qaindex import IndexFormatError, MissingDependencyError, QueryError, Ranker
from qaindex.cli import main
from qaindex.search.fusion import DEFAULT_FUSION, Fusion, fuse
from qaindex.text.lexical import LexicalIndex, top_rows

bm25s = pytest.importorskip("bm25s")
Stemmer = pytest.importorskip("Stemmer")

ROOT = Path(__file__).resolve().parents[1]
FAQ_PATH = ROOT / "examples" / "faq.jsonl"
RECORDS = [json.loads(line) for line in FAQ_PATH.read_text(encoding="utf-8").splitlines() if line.strip()]
ANSWERS = [r["answer"] for r in RECORDS]
QUESTIONS = [
    *[q for r in RECORDS for q in r.get("questions", [])][::25],
    "refund refund", "xylophone", "how long does shipping take to canada?",
]  # fmt: skip


def _bm25s_scores(texts: list[str], questions: list[str]) -> np.ndarray:
    """BM25 of every text for every question, by bm25s itself (Lucene variant, English stopwords, stemmer)."""
    stemmer = Stemmer.Stemmer("english")
    retriever = bm25s.BM25()
    retriever.index(bm25s.tokenize(texts, stopwords="en", stemmer=stemmer, show_progress=False), show_progress=False)
    out = []
    for q in questions:
        tokens = bm25s.tokenize([q], stopwords="en", stemmer=stemmer, show_progress=False, return_ids=False)[0]
        out.append(retriever.get_scores(tokens))
    return np.asarray(out, dtype=np.float64)


def _top(values: np.ndarray, m: int, rows: np.ndarray | None = None) -> set[int]:
    """Rows of the m highest values (ties: lower rows); positive only when ``rows`` is None (BM25)."""
    idx = np.arange(len(values)) if rows is None else rows
    order = sorted(range(len(values)), key=lambda i: (-values[i], idx[i]))
    if rows is None:
        order = [i for i in order if values[i] > 0]
    return {int(idx[i]) for i in order[:m]}


def _brute_force(
    ranker: Ranker, question: str, k: int, m: int, fusion: Fusion, lexical: np.ndarray, dense_rows: set[int]
) -> list[str]:
    """The fused top k, computed without qaindex.search.fusion: union, exact model scores, ranks, fusion."""
    answers = [r.answer for r in ranker.records()]
    ids = [r.id for r in ranker.records()]
    cand = sorted(dense_rows | _top(lexical, m))
    model = ranker.model
    qv = model.encode([question], role="question")
    av = model.encode([answers[i] for i in cand], role="answer")
    s, _ = model.score(qv, av[None])
    s = s[0].astype(np.float64)
    lx = lexical[cand]
    if fusion.rule == "rrf":
        rank_d = {c: r + 1 for r, c in enumerate(sorted(range(len(cand)), key=lambda i: (-s[i], cand[i])))}
        rank_l = {c: r + 1 for r, c in enumerate(sorted(range(len(cand)), key=lambda i: (-lx[i], cand[i])))}
        fused = [
            1 / (fusion.c + rank_d[i]) + (1 / (fusion.c + rank_l[i]) if lx[i] > 0 else 0) for i in range(len(cand))
        ]
    else:
        dn = (s - s.min()) / (s.max() - s.min())
        ln = lx / lx.max() if lx.max() > 0 else np.zeros_like(lx)
        fused = list(fusion.weight * dn + (1 - fusion.weight) * ln)
    order = sorted(range(len(cand)), key=lambda i: (-fused[i], -s[i], cand[i]))[:k]
    return [ids[cand[i]] for i in order]


@pytest.fixture(scope="module")
def faq_hybrid() -> Ranker:
    return Ranker.build(FAQ_PATH, hybrid=True, overfetch=3, index_kind="flat")


# -- the lexical index -------------------------------------------------------------------------
def test_bm25_scores_equal_bm25s() -> None:
    lex = LexicalIndex.from_texts(ANSWERS)
    ours = np.asarray([lex.scores(q) for q in QUESTIONS], dtype=np.float64)
    np.testing.assert_allclose(ours, _bm25s_scores(ANSWERS, QUESTIONS), rtol=1e-5, atol=1e-5)


def test_add_and_remove_give_the_index_of_a_fresh_build() -> None:
    lex = LexicalIndex.from_texts(ANSWERS[:100]).appended(ANSWERS[100:200])
    rng = np.random.default_rng(0)
    keep = np.sort(rng.choice(200, size=150, replace=False))
    updated = lex.kept(keep)
    fresh = LexicalIndex.from_texts([ANSWERS[i] for i in keep])
    for q in QUESTIONS:
        np.testing.assert_allclose(updated.scores(q), fresh.scores(q), rtol=1e-6, atol=1e-7)


def test_top_rows_breaks_ties_by_row() -> None:
    scores = np.array([1.0, 3.0, 1.0, 0.0, 3.0, 1.0, 2.0])
    assert top_rows(scores, 4).tolist() == [0, 1, 4, 6]
    assert top_rows(scores, 10).tolist() == [0, 1, 2, 4, 5, 6]  # zero scores never count


# -- fusion ---------------------------------------------------------------------------------------
def test_rrf_and_convex_by_hand() -> None:
    dense, lexical = np.array([0.9, 0.1, 0.5]), np.array([0.0, 4.0, 2.0])
    rrf = fuse(dense, lexical, Fusion("rrf", c=10))
    np.testing.assert_allclose(rrf, [1 / 11, 1 / 13 + 1 / 11, 1 / 12 + 1 / 12])
    convex = fuse(dense, lexical, Fusion("convex", weight=0.25))
    np.testing.assert_allclose(convex, [0.25, 0.75, 0.25 * 0.5 + 0.75 * 0.5])


@pytest.mark.parametrize("fusion", [Fusion("rrf", c=60), Fusion("rrf", c=10), Fusion("convex", weight=0.3)])
def test_hybrid_ranking_equals_brute_force_fusion(faq_hybrid: Ranker, fusion: Fusion) -> None:
    k, m = 5, 15
    model = faq_hybrid.model
    av = model.encode(ANSWERS, role="answer")
    lexical = _bm25s_scores(ANSWERS, QUESTIONS)
    ids = [r["id"] for r in RECORDS]
    from_lexical = 0  # hits that only BM25 recalled: the union is exercised
    for question, lex in zip(QUESTIONS, lexical, strict=True):
        s, d = model.score(model.encode([question], role="question"), av[None])
        dense_rows = _top(s[0].astype(np.float64) - 1e-9 * d[0], m, rows=np.arange(len(ANSWERS)))
        expected = _brute_force(faq_hybrid, question, k, m, fusion, lex, dense_rows)
        got = [h.id for h in faq_hybrid.search(question, k=k, fusion=fusion)]
        assert got == expected, question
        from_lexical += len(set(got) - {ids[r] for r in dense_rows})
        batch = faq_hybrid.search_batch([question, "refund"], k=k, fusion=fusion)[0]
        assert [h.id for h in batch] == expected
    assert from_lexical > 0


@pytest.mark.parametrize("kind", ["hnsw", "ivf", "pq"])
def test_every_index_kind_fuses_its_own_candidates(kind: str) -> None:
    ranker = Ranker.build(FAQ_PATH, hybrid=True, overfetch=3, index_kind=kind)
    k, m = 5, 15
    lexical = _bm25s_scores(ANSWERS, QUESTIONS)
    qv = ranker.model.encode(QUESTIONS, role="question")
    coarse = ranker.candidates(qv, m)
    for i, question in enumerate(QUESTIONS):
        dense_rows = {int(r) for r in coarse[i] if r >= 0}
        expected = _brute_force(ranker, question, k, m, DEFAULT_FUSION, lexical[i], dense_rows)
        assert [h.id for h in ranker.search(question, k=k)] == expected


def test_hits_carry_calibrated_and_raw_scores(faq_hybrid: Ranker) -> None:
    hits = faq_hybrid.search("How do I reset my password?", k=5)
    best = max(h.raw_score for h in hits)  # the best raw score of the search's hits
    assert faq_hybrid.model.calibration.calibrated  # the built-in model ships calibrated
    for h in hits:
        assert 0.0 <= h.score <= 1.0
        assert h.score == pytest.approx(faq_hybrid.model.calibration(h.raw_score, best))
    kept = faq_hybrid.search("How do I reset my password?", k=5, min_score=hits[2].score)
    assert {h.id for h in kept} == {h.id for h in hits if h.score >= hits[2].score}


def test_hybrid_with_a_filter(faq_hybrid: Ranker) -> None:
    hits = faq_hybrid.search("refund", k=3, where={"category": "account"})
    assert hits and all(h.metadata["category"] == "account" for h in hits)


@pytest.mark.parametrize("category", ["account", "billing"])
def test_a_rare_filter_fuses_every_matching_answer(faq_hybrid: Ranker, category: str) -> None:
    """Few matches: every matching answer is scored exactly and by BM25 (the pre-filter), and the
    fused order equals the brute-force fusion over exactly those answers."""
    k = 5
    match = {i for i, r in enumerate(RECORDS) if r.get("category") == category}
    assert 0 < len(match) < len(RECORDS) // 2
    lexical = _bm25s_scores(ANSWERS, QUESTIONS)
    allowed = np.zeros(len(RECORDS), dtype=bool)
    allowed[sorted(match)] = True
    for question, lex in zip(QUESTIONS, lexical, strict=True):
        masked = np.where(allowed, lex, 0.0)  # BM25 adds only matching answers
        expected = _brute_force(faq_hybrid, question, k, len(match), DEFAULT_FUSION, masked, match)
        assert [h.id for h in faq_hybrid.search(question, k=k, where={"category": category})] == expected, question


def test_stopwords_are_bm25s_english_list() -> None:
    from bm25s.stopwords import STOPWORDS_EN

    from qaindex.text.lexical import STOPWORDS_EN as ours

    assert ours == frozenset(STOPWORDS_EN)


def test_hybrid_is_on_by_default_where_pystemmer_is_installed() -> None:
    assert Ranker.build(RECORDS[:40]).has_hybrid
    assert not Ranker.build(RECORDS[:40], hybrid=False).has_hybrid


def test_hybrid_true_without_a_lexical_index_says_how_to_build_one() -> None:
    ranker = Ranker.build(RECORDS[:40], hybrid=False)
    assert ranker.info()["hybrid"] is None
    with pytest.raises(QueryError, match=r"no lexical index.*qaindex build CORPUS --hybrid"):
        ranker.search("refund", hybrid=True)
    with pytest.raises(QueryError, match="hybrid must be True or False"):
        ranker.search("refund", hybrid="yes")  # type: ignore[arg-type]


def test_missing_extra_names_it(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    import qaindex.text.lexical as lexical

    monkeypatch.setattr(lexical, "_TOKENIZER", None)
    monkeypatch.setitem(sys.modules, "Stemmer", None)
    with pytest.raises(MissingDependencyError, match=r"needs PyStemmer.*pip install 'qaindex\[hybrid\]'"):
        Ranker.build(RECORDS[:20], hybrid=True)
    assert not Ranker.build(RECORDS[:20]).has_hybrid  # the default: hybrid where PyStemmer is installed
    result = CliRunner().invoke(main, ["search", "x", "--hybrid", "--index", "nowhere"])
    assert result.exit_code == 1


# -- persistence ----------------------------------------------------------------------------------
def _manifest(index: Path) -> dict[str, Any]:
    return json.loads((index / "manifest.json").read_text())  # type: ignore[no-any-return]


def test_save_load_add_remove_round_trip(tmp_path: Path) -> None:
    target = tmp_path / "ix"
    Ranker.build(RECORDS[:120], hybrid=True).save(target)
    manifest = _manifest(target)
    assert manifest["lexical"] == {"kind": "bm25", "directory": "lexical"}
    assert {f"lexical/{n}" for n in ("terms.npy", "counts.npy", "offsets.npy", "vocab.json")} <= set(manifest["files"])
    with Ranker.edit(target) as ranker:
        ranker.add(RECORDS[120:200])
        ranker.remove([r["id"] for r in RECORDS[:30]])
    loaded = Ranker.load(target)
    loaded.verify()
    fresh = Ranker.build(RECORDS[30:200], hybrid=True)
    for q in QUESTIONS:
        assert [h.id for h in loaded.search(q, k=5)] == [h.id for h in fresh.search(q, k=5)]
    # the stored lexical index is that of a fresh build of the same answers
    fresh.save(tmp_path / "fresh")
    for name in ("terms.npy", "counts.npy", "offsets.npy"):
        a = np.load(target / _manifest(target)["snapshot"] / "lexical" / name)
        b = np.load(tmp_path / "fresh" / _manifest(tmp_path / "fresh")["snapshot"] / "lexical" / name)
        assert a.shape == b.shape


def test_an_index_without_hybrid_loads_and_searches_dense(tmp_path: Path) -> None:
    Ranker.build(RECORDS[:50], hybrid=False).save(tmp_path / "ix")
    ranker = Ranker.load(tmp_path / "ix")
    assert not ranker.has_hybrid and "lexical" not in _manifest(tmp_path / "ix")
    ranker.enable_hybrid().save(tmp_path / "ix")
    assert Ranker.load(tmp_path / "ix").has_hybrid


@pytest.fixture()
def saved(tmp_path: Path) -> Path:
    target = tmp_path / "ix"
    Ranker.build(RECORDS[:60], hybrid=True).save(target)
    return target


@pytest.mark.parametrize("name", ["terms.npy", "counts.npy", "offsets.npy", "vocab.json"])
def test_a_corrupted_lexical_file_is_detected(saved: Path, name: str) -> None:
    path = saved / _manifest(saved)["snapshot"] / "lexical" / name
    data = bytearray(path.read_bytes())
    data[-1] ^= 0x01
    path.write_bytes(bytes(data))
    with pytest.raises(IndexFormatError, match=rf"lexical/{name}: checksum does not match"):
        Ranker.load(saved)


def test_a_missing_lexical_file_or_entry_is_detected(saved: Path, tmp_path: Path) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(saved, copy)
    (copy / _manifest(copy)["snapshot"] / "lexical" / "offsets.npy").unlink()
    with pytest.raises(IndexFormatError, match=r"offsets\.npy: missing"):
        Ranker.load(copy)
    from qaindex.store.index_format import manifest_checksum

    manifest = _manifest(saved)
    del manifest["files"]["lexical/vocab.json"]
    manifest["checksum"] = manifest_checksum(manifest)
    (saved / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(IndexFormatError, match=r'field "lexical" .*missing: lexical/vocab.json'):
        Ranker.load(saved)


def test_unverified_load_still_validates_the_arrays(saved: Path) -> None:
    snap = saved / _manifest(saved)["snapshot"] / "lexical"
    offsets = np.load(snap / "offsets.npy")
    np.save(snap / "offsets.npy", offsets[:-1], allow_pickle=False)
    with pytest.raises(IndexFormatError, match=r"offsets\.npy: must hold 61 non-decreasing offsets"):
        Ranker.load(saved, verify=False)
    np.save(snap / "offsets.npy", offsets, allow_pickle=False)
    np.save(snap / "terms.npy", np.load(snap / "terms.npy").astype(np.float64), allow_pickle=False)
    with pytest.raises(IndexFormatError, match=r"terms\.npy: must be a 1-D int32 array"):
        Ranker.load(saved, verify=False)


def test_pickle_is_refused(saved: Path) -> None:
    snap = saved / _manifest(saved)["snapshot"] / "lexical"
    # an object array (numpy writes it with pickle): its header says dtype |O
    header = b"{'descr': '|O', 'fortran_order': False, 'shape': (1,), }"
    header += b" " * (117 - len(header)) + b"\n"
    (snap / "counts.npy").write_bytes(b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header + b"\x80\x04N.")
    with pytest.raises(IndexFormatError, match=r"counts\.npy: cannot be read"):
        Ranker.load(saved, verify=False)


# -- CLI ------------------------------------------------------------------------------------------
def test_cli_build_search_info_with_hybrid(tmp_path: Path) -> None:
    corpus = tmp_path / "c.jsonl"
    corpus.write_text("".join(json.dumps(r) + "\n" for r in RECORDS[:80]), encoding="utf-8")
    runner = CliRunner()
    index = str(tmp_path / "ix")
    built = runner.invoke(main, ["build", str(corpus), "--index", index, "--hybrid"])
    assert built.exit_code == 0, built.output
    assert "hybrid:     BM25 index" in built.output
    info = runner.invoke(main, ["info", "--index", index, "--json"])
    assert json.loads(info.output)["hybrid"]["kind"] == "bm25"
    out = runner.invoke(main, ["search", "refund", "--index", index, "--json", "-k", "3"])
    hits = json.loads(out.output)["hits"]
    assert len(hits) == 3 and all(0 <= h["score"] <= 1 and isinstance(h["raw_score"], float) for h in hits)
    dense = runner.invoke(main, ["search", "refund", "--index", index, "--json", "--no-hybrid", "--min-score", "0.99"])
    assert dense.exit_code == 0 and all(h["score"] >= 0.99 for h in json.loads(dense.output)["hits"])
    Ranker.build(RECORDS[:30], hybrid=False).save(tmp_path / "plain")
    refused = runner.invoke(main, ["search", "refund", "--index", str(tmp_path / "plain"), "--hybrid"])
    assert refused.exit_code == 1 and "no lexical index" in refused.output


def test_ray_build_makes_the_lexical_index_on_the_driver(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Ray is not needed: only the encoding runs on Ray workers (replaced here by the local
    encoder); the BM25 index comes from the records the driver validated."""
    import qaindex.build.distributed as distributed

    corpus = tmp_path / "c.jsonl"
    corpus.write_text("".join(json.dumps(r) + "\n" for r in RECORDS[:90]), encoding="utf-8")
    monkeypatch.setattr(distributed, "import_ray", lambda: None)
    monkeypatch.setattr(distributed, "_connect", lambda ray, address: False)

    def encode_locally(ray: Any, source: str, model: Any, record_lines: Any, *args: Any, **kwargs: Any) -> np.ndarray:
        return model.encode([r["answer"] for r in RECORDS[:90]], role="answer")  # type: ignore[no-any-return]

    monkeypatch.setattr(distributed, "_encode_on_ray", encode_locally)
    on_ray = distributed.build_on_ray(corpus, hybrid=True)
    local = Ranker.build(corpus, hybrid=True)
    assert on_ray.has_hybrid
    for q in QUESTIONS:
        assert [h.id for h in on_ray.search(q, k=5)] == [h.id for h in local.search(q, k=5)]
    assert not distributed.build_on_ray(corpus, hybrid=False).has_hybrid

"""Hybrid lexical + dense search: BM25 against bm25s, fused ranking against a brute-force fusion
computed here, persistence / add / remove / verify round trips, corruption of the lexical files."""

from __future__ import annotations

import itertools
import json
import shutil
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner

from qaindex import IndexFormatError, MissingDependencyError, ModelFormatError, QueryError, Ranker
from qaindex.cli import main
from qaindex.search.fusion import (
    DEFAULT_FUSION,
    Fusion,
    dense_weight,
    fuse,
    fusion_from,
    hybrid_arrays,
    question_coverage,
)
from qaindex.search.pipeline import pool_size
from qaindex.store.chunk_checks import CHUNK_BYTES, LAZY_FILES, CheckedRows
from qaindex.text.lexical import LexicalIndex, top_rows

bm25s = pytest.importorskip("bm25s")
Stemmer = pytest.importorskip("Stemmer")

ROOT = Path(__file__).resolve().parents[2]
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


def _tokens(text: str) -> list[str]:
    """BM25 terms of a text (repeats kept), by bm25s's tokenizer."""
    stemmer = Stemmer.Stemmer("english")
    return list(bm25s.tokenize([text], stopwords="en", stemmer=stemmer, show_progress=False, return_ids=False)[0])


def _question_terms(question: str) -> int:
    """The question's BM25 terms (known to the index or not), by bm25s's tokenizer."""
    return len(_tokens(question))


def _coverage(texts: list[str], question: str, row: int) -> float:
    """Lexical coverage by its definition: the IDF (Lucene's, from document frequencies counted
    here) of the question's terms that answer ``row`` holds over that of all of them, a term no
    answer holds counting at the IDF of document frequency 0."""
    docs = [set(_tokens(t)) for t in texts]
    n = len(docs)

    def idf(term: str) -> float:
        df = sum(term in d for d in docs)
        return float(np.log(1 + (n - df + 0.5) / (df + 0.5)))

    terms = _tokens(question)
    total = sum(idf(t) for t in terms)
    return sum(idf(t) for t in terms if t in docs[row]) / total if total > 0 else 0.0


def _brute_force(
    ranker: Ranker, question: str, k: int, m: int, fusion: Fusion, lexical: np.ndarray, dense_rows: set[int],
    lexical_rows: set[int] | None = None,
) -> list[str]:  # fmt: skip
    """The fused top k, computed without qaindex.search.fusion: union, exact model scores, ranks, fusion.

    ``lexical_rows``: BM25's candidates (default: its ``m`` best of all answers). Each ranking
    counts to depth ``D`` = CANDIDATE_FLOOR (100): RRF ranks beyond it give nothing, and the model
    scores are normalised against the D-th best (clipped at 0)."""
    depth = 100
    answers = [r.answer for r in ranker.records()]
    ids = [r.id for r in ranker.records()]
    cand = sorted(dense_rows | (_top(lexical, m) if lexical_rows is None else lexical_rows))
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
            (1 / (fusion.c + rank_d[i]) if rank_d[i] <= depth else 0)
            + (1 / (fusion.c + rank_l[i]) if lx[i] > 0 and rank_l[i] <= depth else 0)
            for i in range(len(cand))
        ]
    else:
        weight = fusion.weight
        if fusion.rule == "adaptive":  # clip(a + b * rho, 0, 1) * clip(d - e * cov(q), 0, 1) * min(1, terms / n(q))
            rho = ranker.info()["hybrid"]["dense_ratio"]
            best = int(np.argmax(lx))  # BM25's best candidate (ties: the lowest row)
            cov = _coverage(answers, question, cand[best]) if lx[best] > 0 else 0.0
            weight = (
                min(1.0, max(0.0, fusion.a + fusion.b * rho))
                * min(1.0, max(0.0, fusion.d - fusion.e * cov))
                * min(1.0, fusion.terms / max(1, _question_terms(question)))
            )
        low = sorted(s, reverse=True)[min(depth, len(s)) - 1]
        dn = np.clip((s - low) / (s.max() - low), 0.0, 1.0)
        ln = lx / lx.max() if lx.max() > 0 else np.zeros_like(lx)
        fused = list(weight * dn + (1 - weight) * ln)
    order = sorted(range(len(cand)), key=lambda i: (-fused[i], -s[i], cand[i]))[:k]
    return [ids[cand[i]] for i in order]


@pytest.fixture(scope="module")
def faq_hybrid() -> Ranker:
    return Ranker.build(FAQ_PATH, hybrid=True, overfetch=3, index_kind="flat", question_keys=False)  # answers only


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


def test_postings_are_stored_and_an_index_saved_without_them_searches_the_same(tmp_path: Path) -> None:
    """A save stores the BM25 postings (answers' and stored questions'), so a first search reads
    them instead of deriving them; an index saved before they were stored derives them as before."""
    from qaindex.store.index_format import manifest_checksum
    from qaindex.text.lexical import POSTING_FILES

    built = Ranker.build(FAQ_PATH)
    built.save(tmp_path / "idx")
    loaded = Ranker.load(tmp_path / "idx")
    state, fresh = loaded.state(), built.state()
    assert state.lexical is not None and state.keys is not None and state.keys.lexical is not None
    for lex, derived in ((state.lexical, fresh.lexical), (state.keys.lexical, fresh.keys.lexical)):
        assert lex._stored and lex.postings_differ() is None
        # memory-mapped, not read whole (the answers' verified as read: qaindex.store.chunk_checks)
        rows = lex._postings[1]
        assert isinstance(rows.checks.array if isinstance(rows, CheckedRows) else rows, np.memmap)
        for stored, again in zip(lex._postings, derived._build_postings(), strict=True):
            assert stored.dtype == again.dtype and np.array_equal(stored, again)
    questions = [*QUESTIONS, "share a notebook"]
    expected = built.search_batch(questions, k=10, explain=True)
    assert loaded.search_batch(questions, k=10, explain=True) == expected
    # the same index as an older qaindex saved it: no postings files, none listed
    manifest = json.loads((tmp_path / "idx" / "manifest.json").read_text())
    snap = tmp_path / "idx" / manifest["snapshot"]
    for folder in ("lexical", "keys/lexical"):
        for name in POSTING_FILES:
            (snap / folder / name).unlink()
            del manifest["files"][f"{folder}/{name}"]
    manifest["checksum"] = manifest_checksum(manifest)
    (tmp_path / "idx" / "manifest.json").write_text(json.dumps(manifest))
    old = Ranker.load(tmp_path / "idx")
    assert not old.state().lexical._stored and old.state().lexical._postings is None
    assert old.search_batch(questions, k=10, explain=True) == expected


def test_sorted_union_and_held_terms_equal_numpys_set_routines() -> None:
    from qaindex.search.fusion import sorted_union

    rng = np.random.default_rng(0)
    lex = LexicalIndex.from_texts(ANSWERS)
    for size_a, size_b in [(0, 0), (0, 3), (1, 0), (1, 1), (50, 200), (300, 7)]:
        a, b = rng.integers(-1, 40, size_a), rng.integers(0, 40, size_b)
        assert sorted_union(a, b).tolist() == np.union1d(a, b).tolist()
    for question in QUESTIONS:
        terms, _ = lex.query(question)
        for row in range(0, len(lex), 7):
            own = lex._terms[lex._offsets[row] : lex._offsets[row + 1]]
            assert lex._held(terms, row).tolist() == np.isin(terms, own).tolist()


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


ADAPTIVE = Fusion("adaptive", a=-0.25, b=1.0, terms=4)  # terms = 4: long questions lower the dense weight
COVERAGE = Fusion("adaptive", a=0.25, b=1.0, terms=6, d=1.25, e=1.5)  # the question part moves the weight


@pytest.mark.parametrize(
    "fusion",
    [Fusion("rrf", c=60), Fusion("rrf", c=10), Fusion("convex", weight=0.3), ADAPTIVE, COVERAGE, DEFAULT_FUSION],
)
def test_hybrid_ranking_equals_brute_force_fusion(faq_hybrid: Ranker, fusion: Fusion) -> None:
    k = 20  # deep enough that answers only BM25 recalled make the hits
    m = pool_size(k, 3, len(ANSWERS))  # overfetch 3: the floor of 100
    model = faq_hybrid.model
    av = model.encode(ANSWERS, role="answer")
    lexical = _bm25s_scores(ANSWERS, QUESTIONS)
    ids = [r["id"] for r in RECORDS]
    from_lexical = 0  # hits that only BM25 recalled: the union is exercised
    moved = 0  # questions the question part reorders: the coverage is exercised
    for question, lex in zip(QUESTIONS, lexical, strict=True):
        s, d = model.score(model.encode([question], role="question"), av[None])
        dense_rows = _top(s[0].astype(np.float64) - 1e-9 * d[0], m, rows=np.arange(len(ANSWERS)))
        expected = _brute_force(faq_hybrid, question, k, m, fusion, lex, dense_rows)
        got = [h.id for h in faq_hybrid.search(question, k=k, fusion=fusion)]
        assert got == expected, question
        from_lexical += len(set(got) - {ids[r] for r in dense_rows})
        batch = faq_hybrid.search_batch([question, "refund"], k=k, fusion=fusion)[0]
        assert [h.id for h in batch] == expected
        if fusion.rule == "adaptive" and fusion.e:
            moved += got != [h.id for h in faq_hybrid.search(question, k=k, fusion=replace(fusion, d=1.0, e=0.0))]
    assert from_lexical > 0
    assert moved > 0 or not (fusion.rule == "adaptive" and fusion.e)


@pytest.mark.parametrize("kind", ["hnsw", "ivf", "pq"])
def test_every_index_kind_fuses_its_own_candidates(kind: str) -> None:
    ranker = Ranker.build(FAQ_PATH, hybrid=True, overfetch=3, index_kind=kind, question_keys=False)
    k, m = 5, pool_size(5, 3, len(ANSWERS))
    lexical = _bm25s_scores(ANSWERS, QUESTIONS)
    qv = ranker.model.encode(QUESTIONS, role="question")
    coarse = ranker.candidates(qv, m)
    for i, question in enumerate(QUESTIONS):
        dense_rows = {int(r) for r in coarse[i] if r >= 0}
        expected = _brute_force(ranker, question, k, m, fusion_from(None, ranker.model), lexical[i], dense_rows)
        assert [h.id for h in ranker.search(question, k=k)] == expected


def test_hits_carry_calibrated_and_raw_scores(faq_hybrid: Ranker) -> None:
    hits = faq_hybrid.search("How do I reset my password?", k=5)
    assert faq_hybrid.model.calibration.calibrated  # the built-in model ships calibrated
    assert fusion_from(None, faq_hybrid.model).fused_score is not None  # and a calibration of the fused value
    assert all(0.0 <= h.score <= 1.0 for h in hits)
    dense = faq_hybrid.search("How do I reset my password?", k=5, hybrid=False)
    best = max(h.raw_score for h in dense)  # the best raw score of the search's hits
    for h in dense:
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
        expected = _brute_force(faq_hybrid, question, k, len(match), fusion_from(None, faq_hybrid.model), masked, match)
        assert [h.id for h in faq_hybrid.search(question, k=k, where={"category": category})] == expected, question
        others = sorted({r["category"] for r in RECORDS if "category" in r} - {category})
        for where in ({"category": {"$in": [category]}}, {"category": {"$nin": others}}):  # the same answers
            assert [h.id for h in faq_hybrid.search(question, k=k, where=where)] == expected, (question, where)


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
def test_a_corrupted_lexical_file_is_detected(saved: Path, name: str, tmp_path: Path) -> None:
    path = saved / _manifest(saved)["snapshot"] / "lexical" / name
    if f"lexical/{name}" not in LAZY_FILES:  # hashed whole by every verifying load
        data = bytearray(path.read_bytes())
        data[-1] ^= 0x01
        path.write_bytes(bytes(data))
        with pytest.raises(IndexFormatError, match=rf"lexical/{name}: checksum does not match"):
            Ranker.load(saved)
        return
    # one entry changed to another valid value: only its checksum can tell
    array = np.load(path)
    entry = len(array) // 2
    array[entry] = array[entry] % (array.max() - 1) + 1  # another id in range / another positive count
    np.save(path, array, allow_pickle=False)
    with pytest.raises(IndexFormatError, match=rf"lexical/{name}: checksum does not match"):
        Ranker.load(saved, verify="full")
    # verified as it is read: the load succeeds, the first read of the damaged chunk refuses it
    at = (path.stat().st_size - 4 * len(array) + 4 * entry) // CHUNK_BYTES * CHUNK_BYTES
    end = min(at + CHUNK_BYTES, path.stat().st_size)
    message = (
        rf"lexical/{name}: bytes {at}\.\.{end} \(entries \d+\.\.\d+\) do not match their checksum in {name}\.chunks"
    )
    ranker = Ranker.load(saved, verify="lazy")
    with pytest.raises(IndexFormatError, match=message):
        ranker.save(tmp_path / "copy")  # a save reads every entry
    assert not (tmp_path / "copy").exists()


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
    import qaindex.indexing.distributed as distributed

    corpus = tmp_path / "c.jsonl"
    corpus.write_text("".join(json.dumps(r) + "\n" for r in RECORDS[:90]), encoding="utf-8")
    monkeypatch.setattr(distributed, "import_ray", lambda: None)
    monkeypatch.setattr(distributed, "_connect", lambda ray, address: False)

    def encode_locally(ray: Any, source: str, model: Any, record_lines: Any, *args: Any, **kwargs: Any) -> np.ndarray:
        return model.encode([r["answer"] for r in RECORDS[:90]], role="answer")  # type: ignore[no-any-return]

    monkeypatch.setattr(distributed, "_encode_on_ray", encode_locally)
    on_ray = distributed.build_on_ray(corpus, hybrid=True, chunk_size=32)  # analysed chunk by chunk
    local = Ranker.build(corpus, hybrid=True)
    assert on_ray.has_hybrid and on_ray._lexical.vocab == local._lexical.vocab
    for name in ("_terms", "_counts", "_offsets"):
        assert np.array_equal(getattr(on_ray._lexical, name), getattr(local._lexical, name))
    assert on_ray._lexical.ratio_info == local._lexical.ratio_info
    for q in QUESTIONS:
        assert [h.id for h in on_ray.search(q, k=5)] == [h.id for h in local.search(q, k=5)]
    assert not distributed.build_on_ray(corpus, hybrid=False).has_hybrid


# -- adaptive fusion, the dense/BM25 ratio, BM25 without a scan ---------------------------------
def test_dense_weight_by_hand() -> None:
    rule = Fusion("adaptive", weight=0.4, a=-0.5, b=1.0, terms=8)
    assert dense_weight(rule, 0.9, 4) == pytest.approx(0.4)
    assert dense_weight(rule, 0.9, 16) == pytest.approx(0.2)  # twice the terms: half the weight
    assert dense_weight(rule, 0.3, 4) == 0.0  # clipped at 0
    assert dense_weight(rule, 2.0, 1) == 1.0  # clipped at 1
    assert dense_weight(rule, None, 4) == pytest.approx(0.4)  # no measured ratio: the fallback weight
    assert dense_weight(Fusion("convex", weight=0.3), 0.9, 100) == 0.3
    with pytest.raises(QueryError, match="fuse the adaptive rule with its weight"):
        fuse(np.array([1.0]), np.array([1.0]), rule)


def test_dense_weight_with_coverage_by_hand() -> None:
    rule = Fusion("adaptive", weight=0.4, a=0.0, b=2.0, terms=8, d=1.25, e=1.5)
    # clip(0 + 2 * 0.4, 0, 1) * clip(1.25 - 1.5 * 0.5, 0, 1) = 0.8 * 0.5; 16 terms halve it
    assert dense_weight(rule, 0.4, 4, 0.5) == pytest.approx(0.4)
    assert dense_weight(rule, 0.4, 16, 0.5) == pytest.approx(0.2)
    assert dense_weight(rule, 0.9, 4, 0.1) == 1.0  # both parts clipped at 1: the model alone
    assert dense_weight(rule, 0.9, 4, 0.9) == 0.0  # most of the question in BM25's best: BM25 alone
    assert dense_weight(rule, None, 4, 0.5) == pytest.approx(0.2)  # no ratio: weight is the corpus part
    no_ratio_needed = Fusion("adaptive", weight=0.4, a=0.75, b=0.0, d=1.25, e=1.5)
    assert dense_weight(no_ratio_needed, None, 4, 0.5) == dense_weight(no_ratio_needed, 0.7, 4, 0.5) == 0.375
    # e = 0 is the rule without the question part, whatever the question's coverage
    old = Fusion("adaptive", weight=0.4, a=-0.5, b=1.0, terms=8)
    assert dense_weight(old, 0.9, 4, 0.8) == dense_weight(old, 0.9, 4) == pytest.approx(0.4)


@pytest.mark.parametrize("rule", [DEFAULT_FUSION, COVERAGE, Fusion("adaptive", a=0.3, b=2.0, terms=5, d=0.9, e=0.7)])
def test_dense_weight_is_monotone(rule: Fusion) -> None:
    """More lexical coverage or more terms never raise the dense weight; a higher ratio never
    lowers it (b >= 0); the weight stays in [0, 1]."""
    grid = np.linspace(0.0, 1.0, 21)
    for ratio in (0.2, 0.6, 1.0):
        for terms in (1, 5, 12, 40):
            w = [dense_weight(rule, ratio, terms, c) for c in grid]
            assert all(0.0 <= x <= 1.0 for x in w) and all(x >= y for x, y in itertools.pairwise(w))
    for cov in (0.0, 0.4, 0.9):
        w = [dense_weight(rule, r, 5, cov) for r in grid]
        assert all(x <= y for x, y in itertools.pairwise(w))
        w = [dense_weight(rule, 0.7, t, cov) for t in range(1, 60)]
        assert all(x >= y for x, y in itertools.pairwise(w))


def test_coverage_equals_its_definition() -> None:
    lex = LexicalIndex.from_texts(ANSWERS)
    questions = [*QUESTIONS, "refund xylophone zzqq", "the of and"]  # unknown terms; stopwords only
    checked = 0
    for q in questions:
        terms, length = lex.query(q)
        scores = lex.scores_of_terms(terms)
        for row in {int(np.argmax(scores)), 0, 17}:
            assert lex.coverage(terms, length, row) == pytest.approx(_coverage(ANSWERS, q, row), abs=1e-9), (q, row)
            checked += 0 < lex.coverage(terms, length, row) < 1
    assert checked > 0  # partial coverage is exercised
    terms, length = lex.query("the of and")
    assert length == 0 and lex.coverage(terms, length, 0) == 0.0


def test_a_planted_question_leans_on_the_side_its_coverage_names() -> None:
    """Two answers: BM25 prefers one (it holds the question's rare word), the model the other.
    Full coverage gives BM25's order, none the model's."""
    lex = LexicalIndex.from_texts(["the zorblax adapter ships in a box", "adapters ship quickly", "cats purr"])
    terms, length = lex.query("zorblax adapter")
    rows = np.arange(3)
    bm25 = lex.scores_of_rows(terms, rows)
    dense = np.array([0.1, 0.9, 0.0])
    rule = Fusion("adaptive", a=1.0, b=0.0, d=1.0, e=1.0)
    cov = question_coverage(rule, lex, terms, length, rows, bm25)
    assert cov == pytest.approx(1.0)  # row 0 holds both terms
    w = dense_weight(rule, None, length, cov)
    assert w == 0.0 and int(np.argmax(fuse(dense, bm25, Fusion("convex", weight=w)))) == 0
    w_none = dense_weight(rule, None, length, 0.0)
    assert w_none == 1.0 and int(np.argmax(fuse(dense, bm25, Fusion("convex", weight=w_none)))) == 1
    # the rule without coverage does not look at it; a fused score that weighs it does, under any rule
    assert question_coverage(Fusion("adaptive"), lex, terms, length, rows, bm25) == 0.0
    scored = Fusion("convex", fused_score=(0.0, 1.0, 0.0, 0.0, 0.0, 1.0, 0.0))
    assert question_coverage(scored, lex, terms, length, rows, bm25) == pytest.approx(1.0)


@pytest.mark.parametrize(
    "rule", [DEFAULT_FUSION, COVERAGE, ADAPTIVE, Fusion("adaptive", d=0.5, e=0.0), Fusion("rrf", c=10)]
)
def test_a_fusion_round_trips_through_its_json(rule: Fusion) -> None:
    stored = json.loads(json.dumps(rule.to_json()))
    assert fusion_from(stored) == rule
    assert fusion_from(None, type("M", (), {"manifest": {"fusion": stored}})()) == rule  # as a model manifest


def test_the_ratio_is_measured_stored_and_remeasured(faq_hybrid: Ranker, tmp_path: Path) -> None:
    info = faq_hybrid._lexical.ratio_info  # type: ignore[union-attr]
    assert info is not None and info["pool"] == len(faq_hybrid) and info["questions"] == 200
    assert info["ratio"] == pytest.approx(info["dense_mrr"] / info["bm25_mrr"], rel=1e-4)
    assert 0 < info["dense_mrr"] <= 1 and 0 < info["bm25_mrr"] <= 1
    assert faq_hybrid.info()["hybrid"]["dense_ratio"] == info["ratio"]
    faq_hybrid.save(tmp_path / "ix")
    assert Ranker.load(tmp_path / "ix")._lexical.ratio_info == info  # type: ignore[union-attr]
    # deterministic: a fresh build of the same answers measures the same ratio
    assert Ranker.build(FAQ_PATH, hybrid=True, index_kind="flat").info()["hybrid"]["dense_ratio"] == info["ratio"]
    with Ranker.edit(tmp_path / "ix") as ranker:
        ranker.add([{"id": "one-more", "answer": "Gift cards never expire and can be used with any order."}])
        assert ranker.info()["hybrid"]["dense_ratio"] == info["ratio"]  # 1 answer: kept, no new measurement
        ranker.remove([r["id"] for r in RECORDS[:60]])
        fresh = Ranker.build([*RECORDS[60:], {"id": "one-more", "answer": "Gift cards never expire and can be used "
                                              "with any order."}], hybrid=True)  # fmt: skip
        assert ranker.info()["hybrid"]["dense_ratio"] == fresh.info()["hybrid"]["dense_ratio"] != info["ratio"]


def test_a_corpus_too_short_for_pseudo_questions_falls_back_to_the_stored_weight() -> None:
    ranker = Ranker.build([{"id": i, "answer": f"word{i} here"} for i in range(30)], hybrid=True)
    assert ranker.info()["hybrid"]["dense_ratio"] is None
    assert len(ranker.search("word3", k=3)) == 3


def test_a_damaged_ratio_in_the_lexical_index_is_an_error(saved: Path) -> None:
    vocab = saved / _manifest(saved)["snapshot"] / "lexical" / "vocab.json"
    meta = json.loads(vocab.read_text())
    meta["dense_ratio"] = {"ratio": "high"}
    vocab.write_text(json.dumps(meta))
    with pytest.raises(
        IndexFormatError, match=r'vocab.json: field "dense_ratio.ratio" is \'high\', not a number in \[0, 2000\]'
    ):
        Ranker.load(saved, verify=False)


def test_the_model_manifest_fusion_is_the_default(tmp_path: Path) -> None:
    from qaindex import Model
    from qaindex.model import DEFAULT_MODEL_DIR

    target = tmp_path / "model"
    shutil.copytree(DEFAULT_MODEL_DIR, target)
    manifest = json.loads((target / "manifest.json").read_text())
    manifest["fusion"] = {"rule": "adaptive", "a": 0.1, "b": 0.5, "terms": None, "weight": 0.5, "fitted_on": ["x"]}
    (target / "manifest.json").write_text(json.dumps(manifest))
    model = Model.load(target)
    assert fusion_from(None, model) == Fusion("adaptive", weight=0.5, a=0.1, b=0.5, terms=float("inf"))
    # a manifest fitted before the question part keeps its rule (e = 0), not the default's question part
    assert DEFAULT_FUSION.e != 0 and (fusion_from(None, model).d, fusion_from(None, model).e) == (1.0, 0.0)
    manifest["fusion"] = {**manifest["fusion"], "d": 1.5, "e": 1.25}
    (target / "manifest.json").write_text(json.dumps(manifest))
    assert (fusion_from(None, Model.load(target)).d, fusion_from(None, Model.load(target)).e) == (1.5, 1.25)
    assert fusion_from({"rule": "adaptive"}).e == DEFAULT_FUSION.e  # a mapping: the default's
    assert fusion_from({"rule": "rrf"}, model) == Fusion("rrf")
    manifest["fusion"] = {"rule": "adaptive", "terms": -1}
    (target / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(ModelFormatError, match=r'manifest.json: field "fusion.terms" is -1, outside \(0, 1e\+06\]'):
        Model.load(target)  # refused at load, not at the first hybrid search


def test_the_stored_fusion_is_parsed_once_and_again_when_the_manifest_changes_in_memory(tmp_path: Path) -> None:
    from qaindex import Model
    from qaindex.model import DEFAULT_MODEL_DIR

    model = Model.load(DEFAULT_MODEL_DIR)
    first = fusion_from(None, model)
    assert fusion_from(None, model) is first  # every search asks: parsed once
    changed = Model.load(DEFAULT_MODEL_DIR)
    changed.manifest["fusion"] = {**changed.manifest["fusion"], "a": 0.25}
    assert fusion_from(None, changed).a == 0.25 and fusion_from(None, model) is first
    changed.manifest["fusion"]["a"] = first.a  # back to the stored value: the parsed one again
    assert fusion_from(None, changed) is first
    changed.manifest["fusion"]["e"] = True  # equal to 1 in Python, yet not a number: checked, refused
    with pytest.raises(ModelFormatError, match=r'field "fusion\.e"'):
        fusion_from(None, changed)


def test_a_dense_search_checks_a_fusion_argument_and_never_reads_the_stored_fusion(tmp_path: Path) -> None:
    ranker = Ranker.build(FAQ_PATH, hybrid=True, index_kind="flat", question_keys=False)
    with pytest.raises(QueryError, match="fusion must be a Fusion, a mapping or None, got int"):
        ranker.search("refund", k=3, hybrid=False, fusion=3)  # type: ignore[arg-type]
    dense = [h.id for h in ranker.search("refund", k=3, hybrid=False)]
    ranker.model.manifest["fusion"] = {**ranker.model.manifest["fusion"], "e": True}  # changed in memory: invalid
    assert [h.id for h in ranker.search("refund", k=3, hybrid=False)] == dense  # a dense search does not use it
    with pytest.raises(ModelFormatError, match=r'field "fusion\.e"'):
        ranker.search("refund", k=3)  # a hybrid search does, and checks it


def test_scores_of_rows_equal_bm25s_restricted_to_the_rows() -> None:
    lex = LexicalIndex.from_texts(ANSWERS)
    expected = _bm25s_scores(ANSWERS, QUESTIONS)
    rng = np.random.default_rng(0)
    for question, full in zip(QUESTIONS, expected, strict=True):
        rows = rng.choice(len(ANSWERS), size=40, replace=False)
        got = lex.scores_of_rows(lex.query(question)[0], rows)
        np.testing.assert_allclose(got, full[rows], rtol=1e-5, atol=1e-6)


def _impact_brute_force(terms: list[str], per_term: int) -> set[int]:
    """Per term, the ``per_term`` answers its single-term BM25 (bm25s) scores highest (ties:
    lower row): the impact-ordered postings, computed without qaindex."""
    out: set[int] = set()
    for term in set(terms):
        single = _bm25s_scores(ANSWERS, [term])[0]
        out |= _top(single, per_term)
    return out


def test_the_no_scan_path_equals_its_brute_force(faq_hybrid: Ranker) -> None:
    """Large indexes: BM25 adds its m best among the impact-ordered candidates and scores only
    the candidates; the ranking equals that computed here with bm25s."""
    k, m = 5, 15
    model = faq_hybrid.model
    lexical = _bm25s_scores(ANSWERS, QUESTIONS)
    stemmer = Stemmer.Stemmer("english")
    fusion = fusion_from(None, model)
    qv = model.encode(QUESTIONS, role="question")
    coarse = faq_hybrid.candidates(qv, m)
    _, _, rows, _ = hybrid_arrays(model, faq_hybrid._vectors, faq_hybrid._lexical, QUESTIONS, qv, coarse, k, fusion,
                               scan=False)  # fmt: skip
    ids = [r["id"] for r in RECORDS]
    for i, question in enumerate(QUESTIONS):
        words = bm25s.tokenize([question], stopwords="en", stemmer=stemmer, show_progress=False, return_ids=False)[0]
        impact = sorted(_impact_brute_force(words, m))
        lex_rows = {impact[j] for j in _top(lexical[i][impact], m)}
        dense_rows = {int(r) for r in coarse[i] if r >= 0}
        expected = _brute_force(faq_hybrid, question, k, m, fusion, lexical[i], dense_rows, lex_rows)
        assert [ids[r] for r in rows[i] if r >= 0] == expected, question


def test_impact_rows_of_one_term_hold_its_best_answers() -> None:
    lex = LexicalIndex.from_texts(ANSWERS)
    for term in ("refund", "password", "account", "order", "xylophone"):
        full = _bm25s_scores(ANSWERS, [term])[0]
        got = lex.impact_rows(lex.query(term)[0], 7)
        assert set(got.tolist()) == _top(full, 7)


def _model_with_fusion(tmp_path: Path, fusion: dict[str, Any]) -> Path:
    from qaindex.model import DEFAULT_MODEL_DIR

    target = tmp_path / "model"
    shutil.copytree(DEFAULT_MODEL_DIR, target, dirs_exist_ok=True)
    manifest = json.loads((target / "manifest.json").read_text())
    manifest["fusion"] = fusion
    (target / "manifest.json").write_text(json.dumps(manifest))
    return target


def test_hybrid_hits_carry_the_fused_score_calibration(tmp_path: Path) -> None:
    """A per-hit score calibration (``score``: sigmoid(bias + w_d * logit(p_dense) + w_l * bm25 +
    w_f * fused)) is capped by the hits above; a fused one (``fused_score``: sigmoid(bias +
    w_f * fused + w_t * logit(p_top) + w_m * match [+ w_1 * first])) is used as it is; checked through settings
    whose result is known from the hits' explanations."""
    base = {"rule": "adaptive", "a": -0.25, "b": 1.0, "terms": 10, "weight": 0.5}
    question = "how long does shipping take to canada?"
    identity = Ranker.build(RECORDS, model=_model_with_fusion(tmp_path, {**base, "score": {
        "bias": 0.0, "dense": 1.0, "bm25": 0.0, "fused": 0.0}}), hybrid=True, question_keys=False)  # fmt: skip
    hits = identity.search(question, k=8)
    best = identity.search(question, k=1, hybrid=False)[0].raw_score  # the best model score of all candidates
    own = [float(identity.model.calibration(h.raw_score, best)) for h in hits]
    assert own != sorted(own, reverse=True)  # the model's own probabilities disagree with the fused order here
    for j, h in enumerate(hits):  # the model's own calibrated probability, capped by the hits above
        assert h.score == pytest.approx(min(own[: j + 1]), rel=1e-5)
    constant = Ranker.build(RECORDS, model=_model_with_fusion(tmp_path, {**base, "score": {
        "bias": -1.0, "dense": 0.0, "bm25": 0.0, "fused": 0.0}}), hybrid=True, question_keys=False)  # fmt: skip
    assert {round(h.score, 9) for h in constant.search(question, k=8)} == {round(1 / (1 + np.e), 9)}
    fused = Ranker.build(RECORDS, model=_model_with_fusion(tmp_path, {**base, "fused_score": {
        "bias": 0.0, "fused": 5.0, "top": 0.0, "match": 0.0}}), hybrid=True, question_keys=False)  # fmt: skip
    explained = fused.search(question, k=8, explain=True)
    assert [h.id for h in explained] == [h.id for h in hits]  # ranking unchanged
    for h in explained:
        assert h.explanation is not None and h.explanation.fused is not None
        assert h.score == pytest.approx(1 / (1 + np.exp(-5.0 * h.explanation.fused)), rel=1e-9)
    assert explained[0].score > explained[-1].score
    top = Ranker.build(RECORDS, model=_model_with_fusion(tmp_path, {**base, "fused_score": {
        "bias": -1.0, "fused": 0.0, "top": 1.0, "match": 0.0}}), hybrid=True, question_keys=False)  # fmt: skip
    p_top = float(top.model.calibration(best))
    expected = 1 / (1 + np.exp(1.0 - np.log(p_top / (1 - p_top))))
    assert {round(h.score, 9) for h in top.search(question, k=8)} == {round(expected, 9)}
    # a fifth weight lifts the search's first hit alone, and the same with k 1
    first = Ranker.build(RECORDS, model=_model_with_fusion(tmp_path, {**base, "fused_score": {
        "bias": -1.0, "fused": 0.0, "top": 1.0, "match": 0.0, "first": 2.0}}), hybrid=True, question_keys=False)  # fmt: skip
    lifted = first.search(question, k=8)
    assert [h.id for h in lifted] == [h.id for h in hits]
    assert lifted[0].score == pytest.approx(1 / (1 + np.exp(1.0 - 2.0 - np.log(p_top / (1 - p_top)))), rel=1e-9)
    assert {round(h.score, 9) for h in lifted[1:]} == {round(expected, 9)}
    assert first.search(question, k=1)[0].score == lifted[0].score
    # the question's lexical coverage (of its best BM25 answer, brute force) and ln(1 + n(q)): one
    # value per question, read under every rule (an object may leave out the first hit's weight)
    lexical = first.state().lexical
    assert lexical is not None
    terms, length = lexical.query(question)
    scores = lexical.scores_of_terms(terms)
    cov = lexical.coverage(terms, length, int(np.argmax(scores)))
    want = 1 / (1 + np.exp(-(-1.0 + 2.0 * cov - 0.5 * np.log1p(length))))
    assert 0 < cov < 1 and length > 1
    for rule in (base, {"rule": "convex", "weight": 0.5}, {"rule": "rrf", "c": 60}):
        shaped = Ranker.build(RECORDS, model=_model_with_fusion(tmp_path, {**rule, "fused_score": {
            "bias": -1.0, "fused": 0.0, "top": 0.0, "match": 0.0, "coverage": 2.0, "length": -0.5}}), hybrid=True, question_keys=False)  # fmt: skip
        assert fusion_from(None, shaped.model).fused_score == (-1.0, 0.0, 0.0, 0.0, 0.0, 2.0, -0.5)
        assert {round(h.score, 9) for h in shaped.search(question, k=8)} == {round(want, 9)}
    # the dense search keeps the model's calibration
    dense = fused.search(question, k=3, hybrid=False)
    best = max(h.raw_score for h in dense)
    assert all(h.score == pytest.approx(fused.model.calibration(h.raw_score, best)) for h in dense)


def test_a_bad_score_calibration_in_the_manifest_is_named(tmp_path: Path) -> None:
    from qaindex import Model

    with pytest.raises(ModelFormatError, match=r'field "fusion.score" must be an object of exactly bias, dense, bm25'):
        Model.load(_model_with_fusion(tmp_path, {"rule": "adaptive", "score": {"bias": 1.0}}))

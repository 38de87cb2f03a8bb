"""Stored questions as search keys: indexed beside the answers, each mapping to its record."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from qaindex import IndexFormatError, Ranker
from qaindex.corpus import read_corpus
from qaindex.store.index_format import manifest_checksum
from qaindex.text.lexical import tokenizer_available

ROOT = Path(__file__).resolve().parents[2]
FAQ_FILE = ROOT / "examples" / "faq.jsonl"
MODES = [False, None] if tokenizer_available() else [False]  # dense; hybrid where PyStemmer is installed


@pytest.fixture(scope="module")
def faq() -> Ranker:
    return Ranker.build(FAQ_FILE)


def stored_questions() -> list[tuple[str, str]]:
    return [(q, r.id) for r in read_corpus(FAQ_FILE) for q in r.questions]  # type: ignore[misc]


@pytest.mark.parametrize("hybrid", MODES)
def test_every_stored_question_typed_exactly_finds_its_record_first(faq: Ranker, hybrid: bool | None) -> None:
    pairs = stored_questions()
    assert len(pairs) == len(faq._keys)  # type: ignore[arg-type]
    results = faq.search_batch([q for q, _ in pairs], k=20, hybrid=hybrid)
    firsts = [hits[0].id for hits in results]
    missed = [(q, want, got) for (q, want), got in zip(pairs, firsts, strict=True) if got != want]
    assert missed == []
    for hits in results:  # each record at most once
        assert len({h.id for h in hits}) == len(hits) == 20


def test_without_keys_a_stored_question_is_not_found_first() -> None:
    plain = Ranker.build(FAQ_FILE, question_keys=False)
    assert plain.info()["keys"] is None
    ids = [h.id for h in plain.search("How do I share a notebook?", k=10)]
    assert ids[0] != "sharing-share-notebook"
    assert all(h.matched == "answer" for h in plain.search("How do I share a notebook?", k=10))


def test_hits_say_which_key_matched(faq: Ranker) -> None:
    top = faq.search("How do I share a notebook?", k=5)[0]
    assert (top.id, top.matched) == ("sharing-share-notebook", "question")
    assert top.to_json()["matched"] == "question"
    answer = faq.get("billing-refund-policy").answer
    assert faq.search(answer, k=1, hybrid=False)[0].matched == "answer"


def test_dense_scores_are_each_records_best_key_brute_force(faq: Ranker) -> None:
    """A dense search's hits: each record's best score over its answer and its stored
    questions (the model's scorer on every one), best first, each record once."""
    model = faq.model
    records = list(faq.records())
    texts = [r.answer for r in records] + [q for r in records for q in r.questions]
    owner = list(range(len(records))) + [i for i, r in enumerate(records) for _ in r.questions]
    vectors = model.encode(texts, role="answer")
    for question in ["share a notebook with my team", "refund", "How do I export my notes?"]:
        qv = model.encode([question], role="question")
        scores = model.score(qv, vectors[None])[0][0]
        best = np.full(len(records), -np.inf)
        np.maximum.at(best, owner, scores)
        want = np.argsort(-best, kind="stable")[:10]
        hits = faq.search(question, k=10, hybrid=False)
        assert [h.row for h in hits] == want.tolist()
        np.testing.assert_allclose([h.raw_score for h in hits], best[want], rtol=1e-5)


def test_remove_removes_question_keys_and_keeps_the_others_right(tmp_path: Path) -> None:
    ranker = Ranker.build(FAQ_FILE)
    gone = ranker.get("sharing-share-notebook")
    before = len(ranker._keys)  # type: ignore[arg-type]
    ranker.remove(["sharing-share-notebook", "account-create"])
    removed = len(gone.questions) + len(read_corpus(FAQ_FILE)[0].questions)
    assert len(ranker._keys) == before - removed  # type: ignore[arg-type]
    for hybrid in MODES:
        hits = ranker.search_batch(list(gone.questions), k=len(ranker), hybrid=hybrid)
        assert all("sharing-share-notebook" not in {h.id for h in row} for row in hits)
    pairs = [(q, i) for q, i in stored_questions() if i not in {"sharing-share-notebook", "account-create"}]
    firsts = [h[0].id for h in ranker.search_batch([q for q, _ in pairs], k=1, hybrid=False)]
    assert firsts == [i for _, i in pairs]  # the other keys map to their records' new rows


def test_add_indexes_the_new_records_questions() -> None:
    ranker = Ranker.build(FAQ_FILE)
    new = {"id": "new", "answer": "Hold the shift key while you drag.", "questions": ["Zorblax the flimwidget?"]}
    ranker.add([new, {"id": "plain", "answer": "Drag with two fingers."}])
    for hybrid in MODES:
        top = ranker.search("Zorblax the flimwidget?", k=3, hybrid=hybrid)[0]
        assert (top.id, top.matched) == ("new", "question")
        # a filter that lets through records without stored questions only
        only = ranker.search("Zorblax the flimwidget?", k=3, hybrid=hybrid, where={"id": ["plain"]})
        assert [(h.id, h.matched) for h in only] == [("plain", "answer")]
        some = ranker.search("Zorblax the flimwidget?", k=3, hybrid=hybrid, where=lambda r: not r.questions)
        assert some and all(h.matched == "answer" and not ranker.get(h.id).questions for h in some)


def test_save_load_gives_identical_results(faq: Ranker, tmp_path: Path) -> None:
    faq.save(tmp_path / "idx")
    loaded = Ranker.load(tmp_path / "idx")
    manifest = json.loads((tmp_path / "idx" / "manifest.json").read_text())
    assert manifest["keys"] == {
        "count": 732,
        "directory": "keys",
        "kind": "question",
        "side": "answer",
        "lexical": faq.has_hybrid,
    }
    assert {"keys/vectors.npy", "keys/owners.npy"} <= set(manifest["files"])
    questions = [q for q, _ in stored_questions()[::25]] + ["refund please", "dark mode"]
    for hybrid in MODES:
        assert loaded.search_batch(questions, k=10, hybrid=hybrid) == faq.search_batch(questions, k=10, hybrid=hybrid)
    # after a removal and a save, still the same results
    with Ranker.edit(tmp_path / "idx") as edited:
        edited.remove(["sharing-share-notebook"])
        expected = edited.search_batch(questions, k=10)
    assert Ranker.load(tmp_path / "idx").search_batch(questions, k=10) == expected


def test_streamed_and_in_memory_builds_have_the_same_keys() -> None:
    streamed = Ranker.build(FAQ_FILE)
    in_memory = Ranker.build(read_corpus(FAQ_FILE))
    assert streamed._keys is not None and in_memory._keys is not None
    np.testing.assert_array_equal(streamed._keys.owners, in_memory._keys.owners)
    np.testing.assert_allclose(streamed._keys.vectors, in_memory._keys.vectors, atol=1e-6)


def test_index_without_keys_loads_unchanged(tmp_path: Path) -> None:
    """An index saved without keys (as every index before them) has no ``keys`` field."""
    Ranker.build(FAQ_FILE, question_keys=False).save(tmp_path / "idx")
    manifest = json.loads((tmp_path / "idx" / "manifest.json").read_text())
    assert "keys" not in manifest and not any(name.startswith("keys/") for name in manifest["files"])
    loaded = Ranker.load(tmp_path / "idx")
    assert loaded.info()["keys"] is None
    assert all(h.matched == "answer" for h in loaded.search("How do I share a notebook?", k=10))


def test_a_damaged_keys_field_is_refused(tmp_path: Path) -> None:
    Ranker.build(FAQ_FILE).save(tmp_path / "idx")
    mpath = tmp_path / "idx" / "manifest.json"
    manifest = json.loads(mpath.read_text())
    manifest["keys"]["count"] = 5
    manifest["checksum"] = manifest_checksum(manifest)
    mpath.write_text(json.dumps(manifest))
    with pytest.raises(IndexFormatError) as info:
        Ranker.load(tmp_path / "idx", verify=False)
    snap = tmp_path / "idx" / manifest["snapshot"] / "keys"
    assert str(info.value) == (
        f"{snap}: the stored keys do not match the manifest (5 float32 vectors of dimension 256, owners "
        "non-decreasing rows below 289); the index is corrupted, rebuild it"
    )


@pytest.mark.parametrize("hybrid", MODES)
def test_filters_apply_to_the_records_keys_match(faq: Ranker, hybrid: bool | None) -> None:
    question = "How do I share a notebook?"
    category = faq.get("sharing-share-notebook").metadata["category"]
    for where in ({"category": category}, lambda r: r.metadata.get("category") == category):
        hits = faq.search(question, k=5, where=where, hybrid=hybrid)
        assert (hits[0].id, hits[0].matched) == ("sharing-share-notebook", "question")
        assert all(h.metadata["category"] == category for h in hits)
    other = faq.search(question, k=50, where={"category": "billing"}, hybrid=hybrid)
    assert other and all(h.metadata["category"] == "billing" for h in other)
    assert len({h.id for h in other}) == len(other)
    # a filter letting a few records through (the pre-filter paths): exact, and keys still count
    few = {"id": ["sharing-share-notebook", "billing-refund-policy", "account-create"]}
    hits = faq.search(question, k=3, where=few, hybrid=hybrid)
    assert hits[0].id == "sharing-share-notebook" and len(hits) == 3


@pytest.mark.parametrize("hybrid", MODES)
def test_key_hits_follow_one_order_and_the_top_hit_does_not_depend_on_k(faq: Ranker, hybrid: bool | None) -> None:
    """Answers' and stored questions' hits merged: scores never rise down the list, and the
    first hits (scores included) are those of a larger k."""
    questions = [q for q, _ in stored_questions()[::40]] + ["refund please", "dark mode", "share with my team"]
    wide = faq.search_batch(questions, k=20, hybrid=hybrid)
    assert any(h.matched == "question" for row in wide for h in row)
    for k in (1, 3):
        narrow = faq.search_batch(questions, k=k, hybrid=hybrid)
        for few, many in zip(narrow, wide, strict=True):
            assert [(h.id, h.matched) for h in few] == [(h.id, h.matched) for h in many[:k]]
            assert [h.score for h in few] == pytest.approx([h.score for h in many[:k]], rel=1e-6)
    for row in wide:
        scores = [h.score for h in row]
        assert scores == sorted(scores, reverse=True)


@pytest.mark.parametrize("hybrid", MODES)
def test_explanations_name_the_key_that_matched(faq: Ranker, hybrid: bool | None) -> None:
    question = "How do I share a notebook?"
    for where in (None, {"category": faq.get("sharing-share-notebook").metadata["category"]}):
        hits = faq.search(question, k=10, hybrid=hybrid, explain=True, where=where)
        assert hits[0].matched == "question"
        for h in hits:
            assert h.explanation is not None and h.explanation.key == h.matched
            assert h.explanation.dense_score == pytest.approx(h.raw_score, rel=1e-6)
            assert h.to_json()["explanation"]["key"] == h.matched
            assert h.explanation.line().endswith(f"key {h.matched}")
        assert [(h.id, h.matched, h.score) for h in hits] == [
            (h.id, h.matched, h.score) for h in faq.search(question, k=10, hybrid=hybrid, where=where)
        ]


def test_upsert_replaces_the_stored_questions_of_the_records_it_replaces() -> None:
    """An upsert keeps the keys as a build of the upserted corpus has them."""
    ranker = Ranker.build(FAQ_FILE)
    old = ranker.get("sharing-share-notebook")
    new = [
        {"id": "sharing-share-notebook", "answer": "Use the Share button.", "questions": ["Zorblax the flimwidget?"]},
        {"id": "brand-new", "answer": "Press twice.", "questions": ["Quibble the wozzle?", "Wozzle quibbling?"]},
    ]
    before = len(ranker._keys)  # type: ignore[arg-type]
    ranker.upsert(new)
    assert len(ranker._keys) == before - len(old.questions) + 3  # type: ignore[arg-type]
    for hybrid in MODES:
        for question, want in [
            ("Zorblax the flimwidget?", "sharing-share-notebook"),
            ("Quibble the wozzle?", "brand-new"),
        ]:
            top = ranker.search(question, k=3, hybrid=hybrid)[0]
            assert (top.id, top.matched) == (want, "question")
    # the same keys, mapping to the same records, as a build of the corpus the upsert made
    kept = [r for r in read_corpus(FAQ_FILE) if r.id != "sharing-share-notebook"]
    fresh = Ranker.build([*kept, *new])
    assert fresh._keys is not None and ranker._keys is not None
    np.testing.assert_array_equal(ranker._keys.owners, fresh._keys.owners)
    np.testing.assert_allclose(ranker._keys.vectors, fresh._keys.vectors, atol=1e-6)
    questions = [*old.questions, "Zorblax the flimwidget?", "share a notebook", "refund please"]
    assert ranker.search_batch(questions, k=10, hybrid=False) == fresh.search_batch(questions, k=10, hybrid=False)


def test_a_save_refuses_damaged_key_vectors_and_writes_nothing(tmp_path: Path) -> None:
    """The content checks a build, a save and a load share cover the keys' vectors too."""
    ranker = Ranker.build(FAQ_FILE)
    assert ranker._keys is not None
    vectors = np.array(ranker._keys.vectors)
    vectors[7, 2] = np.nan
    ranker._keys = type(ranker._keys)(vectors, ranker._keys.owners, ranker._keys.lexical)
    with pytest.raises(IndexFormatError, match=r"keys/vectors\.npy: row 7 holds NaN or infinite values"):
        ranker.save(tmp_path / "idx")
    assert not (tmp_path / "idx" / "manifest.json").exists()


@pytest.mark.skipif(not tokenizer_available(), reason="hybrid search needs PyStemmer")
def test_a_stored_question_retyped_is_the_best_lexical_match_and_a_loose_one_adds_nothing() -> None:
    """Hybrid search fuses records: a key holding exactly the question's terms (any case or
    word order) lends its record the best BM25 score of the candidates; a key sharing only
    some words lends nothing (the record's BM25 part is its answer's)."""
    ranker = Ranker.build(FAQ_FILE)
    plain = Ranker.build(FAQ_FILE, question_keys=False)
    for question, want in stored_questions()[::60]:
        retyped = " ".join(reversed(question.rstrip("?").split())).upper()
        hits = ranker.search(retyped, k=5, explain=True)
        assert (hits[0].id, hits[0].matched) == (want, "question")
        assert hits[0].explanation is not None and hits[0].explanation.bm25_score is not None
        assert hits[0].explanation.bm25_score == max(h.explanation.bm25_score for h in hits)  # type: ignore[union-attr]
    loose = "sign up for the newsletter about dark mode"
    with_keys = {h.id: h for h in ranker.search(loose, k=30, explain=True)}
    answers = {h.id: h for h in plain.search(loose, k=30, explain=True)}
    for id in with_keys.keys() & answers.keys():  # the same BM25 part as without keys
        assert with_keys[id].explanation.bm25_score == pytest.approx(answers[id].explanation.bm25_score)  # type: ignore[union-attr]

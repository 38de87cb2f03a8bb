"""Passages as search keys: a long answer is also keyed by overlapping windows of its words."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from qaindex import IndexFormatError, QueryError, Ranker
from qaindex.cli import main
from qaindex.corpus import read_corpus, records_from_dicts
from qaindex.key_index import PASSAGE, QUESTION, choose_passage_words, passages
from qaindex.store.index_format import manifest_checksum
from qaindex.text.lexical import tokenizer_available

ROOT = Path(__file__).resolve().parents[2]
FAQ_FILE = ROOT / "examples" / "faq.jsonl"
MODES = [False, None] if tokenizer_available() else [False]
WORDS = 16

# a long answer whose last sentences are about something its opening never mentions
FILLER = "Notebooks keep your pages in order and the sidebar lists them by the date you last edited them. " * 6
LONG = {
    "id": "long-manual",
    "answer": FILLER + "To print a page, open the print dialog and choose landscape paper for wide tables.",
    "question": "What does the manual say?",
}


@pytest.fixture(scope="module")
def records() -> list:
    return [*read_corpus(FAQ_FILE), read_corpus_record(LONG)]


def read_corpus_record(raw: dict):  # type: ignore[no-untyped-def]
    return records_from_dicts([raw])[0]


@pytest.fixture(scope="module")
def ranker(records: list) -> Ranker:
    return Ranker.build(records, passage_words=WORDS)


@pytest.mark.parametrize("words", [4, 5, 16])
def test_passages_cover_every_word_in_windows_of_the_same_length(words: int) -> None:
    text = " ".join(f"w{i}" for i in range(37))
    found = passages(text, words)
    assert all(len(p.split()) == words for p in found)
    starts = [int(p.split()[0][1:]) for p in found]
    assert starts[0] == 0 and starts[-1] == 37 - words  # the last window ends at the answer's end
    assert all(0 < b - a <= words // 2 for a, b in itertools.pairwise(starts))
    covered = {w for p in found for w in p.split()}
    assert covered == set(text.split())
    assert passages(" ".join(text.split()[:words]), words) == []  # an answer that fits has none


def test_auto_keys_passages_for_a_model_that_cuts_and_none_for_a_static_encoder(faq_model: Path) -> None:
    assert choose_passage_words("auto", static_encoder=False) == 64
    assert choose_passage_words("auto", static_encoder=True) == 0
    long = {"id": "long", "answer": " ".join(["reset password link email"] * 40)}  # 160 words
    cutting = Ranker.build([long, {"id": "short", "answer": "refund within days"}], model=faq_model)
    assert cutting._keys is not None and cutting._keys.passage_words == 64
    assert cutting._keys.kinds.tolist() == [PASSAGE] * len(passages(long["answer"], 64))
    static = Ranker.build([long])  # the built-in model reads answers whole
    assert static._keys is not None and static._keys.passage_words == 0 and len(static._keys) == 0


def test_auto_keys_none_beyond_its_limit_and_says_so(
    faq_model: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from qaindex import key_index

    long = [{"id": str(i), "answer": " ".join(["reset password link email"] * 40)} for i in range(3)]
    per_answer = len(passages(long[0]["answer"], 64))
    monkeypatch.setattr(key_index, "AUTO_PASSAGE_LIMIT", 3 * per_answer)
    assert Ranker.build(long, model=faq_model)._keys.passage_words == 64  # type: ignore[union-attr]
    monkeypatch.setattr(key_index, "AUTO_PASSAGE_LIMIT", 3 * per_answer - 1)
    with caplog.at_level("WARNING", logger="qaindex.key_index"):
        skipped = Ranker.build(long, model=faq_model)
    assert skipped._keys is not None and skipped._keys.passage_words == 0 and len(skipped._keys) == 0
    assert [m for m in caplog.messages if m.startswith("passages:")] == [
        f"passages: none (passage_words='auto' would key more than {3 * per_answer - 1} passages of 64 words, "
        "each scored at every search; pass passage_words=64 / --passage-words 64 to key them anyway)"
    ]
    asked = Ranker.build(long, model=faq_model, passage_words=64)  # asked for: no limit
    assert asked._keys is not None and len(asked._keys) == 3 * per_answer


@pytest.mark.parametrize("value", [3, -1, "many", True, 2.5])
def test_a_bad_passage_setting_is_refused_before_any_work(value: object) -> None:
    with pytest.raises(QueryError) as info:
        Ranker.build([LONG], passage_words=value)  # type: ignore[arg-type]
    assert str(info.value) == (
        f'passage_words must be "auto", 0 (no passage keys) or a number of words of at least 8, got {value!r}'
    )


def test_a_question_about_the_end_of_a_long_answer_is_matched_by_its_passage(ranker: Ranker) -> None:
    question = "print a wide table on landscape paper"
    for hybrid in MODES:
        hits = ranker.search(question, k=5, hybrid=hybrid, explain=True)
        mine = [h for h in hits if h.id == "long-manual"]
        assert mine and mine[0].matched == "passage"
        assert mine[0].explanation is not None and mine[0].explanation.key == "passage"
        assert len({h.id for h in hits}) == len(hits)  # each record once
    assert ranker.search("What does the manual say?", k=1)[0].matched == "question"


def test_dense_scores_are_each_records_best_key_brute_force(ranker: Ranker, records: list) -> None:
    """Each record's dense score is the best of its answer's, its stored questions' and its
    passages' (the model's scorer on every one)."""
    model = ranker.model
    texts, owner = [], []
    for i, r in enumerate(records):
        for text in [r.answer, *r.questions, *passages(r.answer, WORDS)]:
            texts.append(text)
            owner.append(i)
    vectors = model.encode(texts, role="answer")
    for question in ["print a wide table on landscape paper", "refund", "sidebar order of pages"]:
        qv = model.encode([question], role="question")
        best = np.full(len(records), -np.inf)
        np.maximum.at(best, owner, model.score(qv, vectors[None])[0][0])
        want = np.argsort(-best, kind="stable")[:10]
        hits = ranker.search(question, k=10, hybrid=False)
        assert [h.row for h in hits] == want.tolist()
        np.testing.assert_allclose([h.raw_score for h in hits], best[want], rtol=1e-5)


def test_without_passages_the_long_answer_is_matched_whole(records: list) -> None:
    plain = Ranker.build(records, passage_words=0)
    assert plain._keys is not None and plain._keys.kinds is None
    assert all(h.matched != "passage" for h in plain.search("print a wide table on landscape paper", k=10))


def test_save_load_add_and_remove_keep_the_passages(ranker: Ranker, records: list, tmp_path: Path) -> None:
    ranker.save(tmp_path / "idx")
    manifest = json.loads((tmp_path / "idx" / "manifest.json").read_text())
    assert manifest["keys"]["kind"] == "question+passage"
    assert manifest["keys"]["passages"] == {"words": WORDS, "step": WORDS // 2}
    assert "keys/kinds.npy" in manifest["files"]
    questions = ["print a wide table on landscape paper", "How do I share a notebook?", "refund"]
    loaded = Ranker.load(tmp_path / "idx")
    for hybrid in MODES:
        assert loaded.search_batch(questions, k=10, hybrid=hybrid) == ranker.search_batch(
            questions, k=10, hybrid=hybrid
        )
    # add then remove: the same keys as a fresh build of the same records
    more = {"id": "more", "answer": "Export " + "every page as a tidy archive with its images " * 4}
    loaded.add([more])
    fresh = Ranker.build([*records, read_corpus_record(more)], passage_words=WORDS)
    assert loaded._keys is not None and fresh._keys is not None
    np.testing.assert_array_equal(loaded._keys.kinds, fresh._keys.kinds)
    np.testing.assert_array_equal(loaded._keys.owners, fresh._keys.owners)
    np.testing.assert_allclose(loaded._keys.vectors, fresh._keys.vectors, atol=1e-6)
    loaded.remove(["more", "long-manual"])
    rest = Ranker.build([r for r in records if r.id != "long-manual"], passage_words=WORDS)
    assert loaded._keys is not None and rest._keys is not None
    np.testing.assert_array_equal(loaded._keys.kinds, rest._keys.kinds)
    np.testing.assert_array_equal(loaded._keys.owners, rest._keys.owners)
    assert (rest._keys.kinds == QUESTION).sum() == sum(len(r.questions) for r in records) - 1


def test_a_damaged_passages_field_is_refused(ranker: Ranker, tmp_path: Path) -> None:
    ranker.save(tmp_path / "idx")
    mpath = tmp_path / "idx" / "manifest.json"
    manifest = json.loads(mpath.read_text())
    manifest["keys"]["passages"] = {"words": WORDS, "step": 3}
    manifest["checksum"] = manifest_checksum(manifest)
    mpath.write_text(json.dumps(manifest))
    with pytest.raises(IndexFormatError) as info:
        Ranker.load(tmp_path / "idx", verify=False)
    assert 'or "kind": "question+passage" with "passages": {"words": W >= 8, "step": W // 2}' in str(info.value)


def test_the_cli_takes_a_passage_setting_and_refuses_a_bad_one(tmp_path: Path) -> None:
    corpus = tmp_path / "c.jsonl"
    corpus.write_text(json.dumps(LONG) + "\n", encoding="utf-8")
    bad = CliRunner().invoke(main, ["build", str(corpus), "--index", str(tmp_path / "a"), "--passage-words", "3"])
    assert bad.exit_code == 2
    assert "'3' is not 'auto', 0 or a number of words of at least 8" in bad.output
    ok = CliRunner().invoke(main, ["build", str(corpus), "--index", str(tmp_path / "b"), "--passage-words", "16"])
    assert ok.exit_code == 0, ok.output
    count = len(passages(LONG["answer"], 16))
    assert f"keys:       1 stored question and {count} passages of 16 words (of the answers over 16)" in ok.output
    assert Ranker.load(tmp_path / "b")._keys.passage_words == 16  # type: ignore[union-attr]


@pytest.mark.skipif(not tokenizer_available(), reason="hybrid search needs PyStemmer")
def test_passages_rank_but_do_not_raise_the_questions_top_probability(ranker: Ranker, records: list) -> None:
    """The same windows stored as questions instead: the same model scores, the same fused
    order; the hybrid ``score`` differs only by the question-level ``p_top``, which reads the
    answers and stored questions but not the passages (so a passage cannot lift it)."""
    as_questions = Ranker.build(
        [
            read_corpus_record(
                {"id": r.id, "answer": r.answer, "questions": [*r.questions, *passages(r.answer, WORDS)]}
            )
            for r in records
        ],
        passage_words=0,
    )
    model = ranker.model
    lifted = 0
    for question in ["print a wide table on landscape paper", "sidebar order of pages", "zebra migration season"]:
        a, b = ranker.search(question, k=10), as_questions.search(question, k=10)
        assert [h.id for h in a] == [h.id for h in b]
        np.testing.assert_allclose([h.raw_score for h in a], [h.raw_score for h in b], rtol=1e-5)
        assert all(x.score <= y.score + 1e-12 for x, y in zip(a, b, strict=True))
        # where a passage holds the best model score of all, the question's p_top is lower
        qv = model.encode([question], role="question")
        texts = [r.answer for r in records] + [q for r in records for q in r.questions]
        others = model.score(qv, model.encode(texts, role="answer")[None])[0][0]
        # the question's top, as the search reports it: the best answer or stored question
        why = ranker.search(question, k=1, explain=True)[0].explanation
        assert why is not None and why.question_top == pytest.approx(float(others.max()), rel=1e-5)
        if a[0].matched == "passage" and a[0].raw_score > others.max():
            lifted += 1
            assert a[0].score < b[0].score
    assert lifted >= 1

"""The BM25 index's construction: vectorised chunk analysis against tokenizing text by text,
impact-ordered postings (ties, cache) and the postings order against their definitions."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip("Stemmer")

from qaindex.store import field_ranges
from qaindex.text import lexical
from qaindex.text.lexical import LexicalBuilder, LexicalIndex, tokenize

WORDS = ["the", "a", "Cats", "cat", "running", "runs", "x", "é", "café", "naïve", "Ünïcode", "to", "42", "a1", "_"]
texts_strategy = st.lists(
    st.lists(st.sampled_from(WORDS), max_size=12).map(" ".join)
    | st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=40),
    max_size=25,
)


def _text_by_text(
    texts: list[str], base: LexicalIndex | None = None
) -> tuple[list[int], list[int], list[int], list[str]]:
    """The CSR arrays by the definition: each text tokenized alone, distinct terms in order of first occurrence."""
    vocab = list(base.vocab) if base else []
    ids = {t: i for i, t in enumerate(vocab)}
    terms: list[int] = list(base._terms) if base else []
    counts: list[int] = list(base._counts) if base else []
    offsets: list[int] = list(base._offsets) if base else [0]
    for text in texts:
        bag: dict[int, int] = {}
        for term in tokenize(text):
            if term not in ids:
                ids[term] = len(vocab)
                vocab.append(term)
            bag[ids[term]] = bag.get(ids[term], 0) + 1
        terms += bag
        counts += bag.values()
        offsets.append(offsets[-1] + len(bag))
    return terms, counts, offsets, vocab


def _assert_arrays(lex: LexicalIndex, expected: tuple[list[int], list[int], list[int], list[str]]) -> None:
    terms, counts, offsets, vocab = expected
    assert lex.vocab == vocab
    assert lex._terms.dtype == np.int32 and lex._counts.dtype == np.int32 and lex._offsets.dtype == np.int64
    assert lex._terms.tolist() == terms
    assert lex._counts.tolist() == counts
    assert lex._offsets.tolist() == offsets


@settings(max_examples=400, deadline=None)
@given(
    st.text(alphabet=st.characters(max_codepoint=127), max_size=60)
    | st.text(alphabet=st.sampled_from(["a", "B", "_", "1", " ", "-", "é", "İ", "ß", "\x1c", "\t", "."]), max_size=30)
)
def test_words_are_the_token_pattern_s_matches(text: str) -> None:
    """The ASCII fast path (a translation and a split) gives exactly the pattern's words."""
    import re

    from qaindex import fast_path_switch

    pytest.importorskip("Stemmer")
    expected = re.findall(lexical.TOKEN_PATTERN, text.lower())
    assert lexical._tokenizer().words(text) == expected
    with fast_path_switch.generic_only():
        assert lexical._tokenizer().words(text) == expected


@settings(max_examples=150, deadline=None)
@given(texts=texts_strategy, more=texts_strategy, chunk=st.integers(1, 7))
def test_chunked_analysis_equals_tokenizing_text_by_text(texts: list[str], more: list[str], chunk: int) -> None:
    old = lexical._ANALYSE_CHUNK
    lexical._ANALYSE_CHUNK = chunk  # chunk boundaries anywhere
    try:
        whole = LexicalIndex.from_texts(texts + more)
        _assert_arrays(whole, _text_by_text(texts + more))
        base = LexicalIndex.from_texts(texts)
        _assert_arrays(base.appended(more), _text_by_text(more, base))
        builder = LexicalBuilder()
        builder.add(texts)
        builder.add(more)
        _assert_arrays(builder.finish(), _text_by_text(texts + more))
    finally:
        lexical._ANALYSE_CHUNK = old


@settings(max_examples=150, deadline=None)
@given(texts=texts_strategy, long=st.integers(1, 30))
def test_long_texts_counted_in_slices_equal_tokenizing_text_by_text(texts: list[str], long: int) -> None:
    # a text over _LONG_TEXT characters is counted slice by slice (cut between words): the
    # same arrays as tokenizing it whole
    old = lexical._LONG_TEXT
    lexical._LONG_TEXT = long
    try:
        _assert_arrays(LexicalIndex.from_texts(texts), _text_by_text(texts))
    finally:
        lexical._LONG_TEXT = old


def test_a_long_text_is_read_in_bounded_slices(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(lexical, "_LONG_TEXT", 1_000)
    tok = lexical._tokenizer()
    read: list[int] = []

    class Spy:
        def findall(self, text: str) -> list[str]:
            read.append(len(text))
            return lexical.re.findall(lexical.TOKEN_PATTERN, text)

    monkeypatch.setattr(tok, "_pattern", Spy())
    text = " ".join(["Cats", "running", "naïve", "the"] * 5_000)  # 94,999 characters
    lex = LexicalIndex.from_texts([text, "cats"])
    assert lex.vocab == ["cat", "run", "naïv"] and lex._counts.tolist() == [5_000, 5_000, 5_000, 1]
    # every slice holds a non-ASCII word, so the pattern reads them all; "cats" (ASCII) takes the split
    assert sum(read) == len(text) and max(read) <= 1_000 + len("running")


def test_a_builder_leaves_its_base_unchanged() -> None:
    base = LexicalIndex.from_texts(["cats purr", "dogs bark"])
    before = (base._terms.copy(), base._offsets.copy(), list(base.vocab))
    builder = LexicalBuilder(base)
    builder.add(["birds sing", "cats sing"])
    grown = builder.finish()
    assert len(grown) == 4 and grown.vocab == ["cat", "purr", "dog", "bark", "bird", "sing"]
    assert builder._terms == [] and builder._counts == []  # each chunk released once joined
    assert grown._terms.dtype == np.int32 and grown._terms.tolist() == [0, 1, 2, 3, 4, 5, 0, 5]
    assert base._terms.tolist() == before[0].tolist() and base._offsets.tolist() == before[1].tolist()
    assert base.vocab == before[2]


def _impact_by_definition(lex: LexicalIndex, term: int, count: int) -> set[int]:
    """The rows of the ``count`` highest BM25 weights of ``term`` (ties: lower row), from the full scores."""
    scores = lex.scores_of_terms(np.array([term]))
    rows = np.flatnonzero(scores > 0)
    order = sorted(rows.tolist(), key=lambda r: (-float(scores[r]), r))
    return set(order[:count])


def test_impact_rows_break_ties_by_row_and_are_cached(monkeypatch: pytest.MonkeyPatch) -> None:
    # identical answers have identical weights: the tie at the cut goes to the lower rows
    texts = ["refund policy"] * 6 + ["refund refund refund"] * 3 + ["shipping times"] * 4 + ["refund shipping"]
    lex = LexicalIndex.from_texts(texts)
    refund, shipping = lex.query("refund")[0][0], lex.query("shipping")[0][0]
    for term in (refund, shipping):
        for count in (1, 2, 3, 4, 5, 8, 20):
            assert set(lex.impact_rows(np.array([term]), count).tolist()) == _impact_by_definition(lex, term, count)
    assert lex.impact_rows(np.array([refund]), 4).tolist() == [0, 6, 7, 8]
    both = lex.impact_rows(np.array([refund, shipping, refund]), 2)
    assert both.tolist() == sorted(_impact_by_definition(lex, refund, 2) | _impact_by_definition(lex, shipping, 2))
    assert lex.impact_rows(np.zeros(0, np.int64), 3).tolist() == []
    # the cache holds the answer, and a full cache starts again
    assert (refund, 4) in lex._impact
    monkeypatch.setattr(lexical, "_IMPACT_CACHE", 2)
    lex._impact.clear()
    for count in (1, 2, 3):
        lex.impact_rows(np.array([refund]), count)
    assert len(lex._impact) <= 2
    assert lex.impact_rows(np.array([refund]), 4).tolist() == [0, 6, 7, 8]


BLOCKS = pytest.mark.parametrize("block", [field_ranges.ENTRY_BLOCK, 5, 1])  # one block, and many


@BLOCKS
def test_postings_are_grouped_by_term_with_rows_ascending(block: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(field_ranges, "ENTRY_BLOCK", block)  # built block by block: the same postings
    rng = np.random.default_rng(0)
    words = ["alpha", "beta", "gamma", "delta", "omega", "sigma", "kappa"]
    texts = [" ".join(rng.choice(words, size=rng.integers(0, 9))) for _ in range(300)]
    lex = LexicalIndex.from_texts(texts)
    indptr, docs, weights = lex._build_postings()
    rows = np.repeat(np.arange(len(lex)), np.diff(lex._offsets))
    order = np.argsort(lex._terms, kind="stable")  # the definition
    np.testing.assert_array_equal(docs, rows[order])
    # each entry's BM25 weight, by the module docstring's formula, in the same order
    n, tf = len(lex), lex._counts.astype(np.float64)
    doc_len = np.bincount(rows, weights=tf, minlength=n)
    df = np.bincount(lex._terms, minlength=len(lex.vocab)).astype(np.float64)
    idf = np.log1p((n - df + 0.5) / (df + 0.5))
    forward = idf[lex._terms] * tf / (tf + lex.k1 * (1 - lex.b + lex.b * doc_len[rows] / doc_len.mean()))
    np.testing.assert_array_equal(weights, forward.astype(np.float32)[order])
    assert indptr.tolist() == [0, *np.cumsum(np.bincount(lex._terms, minlength=len(lex.vocab))).tolist()]


@BLOCKS
def test_stored_postings_load_as_derived_and_a_verifying_check_finds_each_kind_of_damage(
    tmp_path: Path, block: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(field_ranges, "ENTRY_BLOCK", block)  # checked block by block: the same verdicts
    rng = np.random.default_rng(1)
    words = ["alpha", "beta", "gamma", "delta", "omega", "sigma", "kappa"]
    texts = [" ".join(rng.choice(words, size=rng.integers(1, 9))) for _ in range(200)]
    built = LexicalIndex.from_texts(texts)
    built.save(tmp_path)
    names = set(lexical.FILES) | set(lexical.POSTING_FILES)
    loaded = LexicalIndex.load(tmp_path, len(texts), listed=names)
    assert loaded._stored and loaded.postings_differ() is None
    for stored, derived in zip(loaded._postings, built._build_postings(), strict=True):
        np.testing.assert_array_equal(stored, derived)
    np.testing.assert_array_equal(loaded._idf, built._idf)
    assert not LexicalIndex.load(tmp_path, len(texts), listed=lexical.FILES)._stored  # not listed: derived

    def damaged(change: Callable[[np.ndarray, np.ndarray, np.ndarray], None]) -> str | None:
        copy = LexicalIndex.load(tmp_path, len(texts), listed=names)
        indptr, rows, weights = (np.array(a) for a in copy._postings)
        change(indptr, rows, weights)
        copy._postings = (indptr, rows, weights)
        return copy.postings_differ()

    first, second = int(built._postings[0][1]), int(built._postings[0][2])  # the second term's postings

    def moved_row(indptr: np.ndarray, rows: np.ndarray, weights: np.ndarray) -> None:
        # the first term's last row swapped for one it does not hold: count and order kept
        missing = sorted(set(range(len(texts))) - set(rows[:first].tolist()))
        rows[first - 1] = next(r for r in missing if r > rows[first - 2])

    def shifted(indptr: np.ndarray, rows: np.ndarray, weights: np.ndarray) -> None:
        indptr[1] += 1

    def unsorted(indptr: np.ndarray, rows: np.ndarray, weights: np.ndarray) -> None:
        rows[second - 2], rows[second - 1] = rows[second - 1], rows[second - 2]

    def scaled(indptr: np.ndarray, rows: np.ndarray, weights: np.ndarray) -> None:
        weights[first:second] *= 1.01

    assert damaged(moved_row) == "postings-rows.npy"
    assert damaged(shifted) == "postings-indptr.npy"
    assert damaged(unsorted) == "postings-rows.npy"
    assert damaged(scaled) == "postings-weights.npy"
    assert damaged(lambda *a: None) is None


@BLOCKS
def test_an_index_without_terms_has_empty_postings(block: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(field_ranges, "ENTRY_BLOCK", block)
    lex = LexicalIndex.from_texts(["", "the a", "?"])  # stopwords and punctuation only
    indptr, rows, weights = lex._build_postings()
    assert len(rows) == len(weights) == 0 and not indptr.any()
    assert lex.scores("the cat").tolist() == [0.0, 0.0, 0.0]

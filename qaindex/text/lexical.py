"""The lexical (BM25) index of hybrid search, stored beside the vectors of an index snapshot.

Answers are tokenized the way bm25s does by default (lower case, words of two or more word
characters, Lucene's 33 English stopwords removed: bm25s's ``STOPWORDS_EN``) and stemmed with
PyStemmer's English (Snowball) stemmer: the scores equal bm25s's with that stemmer. The
index keeps, per answer, its distinct terms and their counts (a CSR matrix); the BM25
postings (each term's answers, ascending, with their weights) are derived from it, so
``add`` and ``remove`` always give the same scores as a fresh build of the same answers. A
save stores the postings too, and a load memory-maps them: the first search after a load
reads them rather than deriving them (an index saved without them derives them then).

Scoring is BM25 in the Lucene variant (bm25s's default, ``k1`` = 1.5, ``b`` = 0.75)::

    idf(t)      = ln(1 + (N - df(t) + 0.5) / (df(t) + 0.5))
    score(q, d) = sum over the terms t of q of
                  idf(t) * tf(t, d) / (tf(t, d) + k1 * (1 - b + b * |d| / avgdl))

with ``N`` answers, ``df(t)`` of them containing ``t``, ``|d|`` the answer's token count after
stopword removal and ``avgdl`` its mean; a term repeated in the question counts once per
occurrence (as in bm25s), computed as its weight times its count, so a question costs its
distinct terms, not its length. A question is read up to :data:`MAX_QUESTION_CHARS`
characters (cut at a space) and up to its :data:`MAX_QUERY_TERMS`-th distinct term: what
follows is ignored, as the dense side ignores what follows its token limit.

On disk (``SNAPSHOT/lexical/``), no pickle anywhere::

    terms.npy      int32 (nnz,)   term ids of each answer's distinct terms, answer after answer
    counts.npy     int32 (nnz,)   their counts in the answer
    offsets.npy    int64 (n + 1,) where each answer's terms start in terms.npy/counts.npy
    vocab.json     {"format", "format_version", "tokenizer", "k1", "b", "vocab": [stem, ...],
                    "dense_ratio": {...} (optional: the corpus's dense/BM25 ratio, qaindex.fusion)}
    postings-indptr.npy   int64 (vocab + 1,)  where each term's postings start
    postings-rows.npy     int32 (nnz,)        their answers (int64 from 2**31 answers)
    postings-weights.npy  float32 (nnz,)      their BM25 weights idf(t) * tf / (tf + norm(d))
    collection-df.npy     int64 (vocab,)      optional: each term's document frequency in the
                          collection this index is one shard of (vocab.json's "collection":
                          {"answers": N, "terms": total term count}); ``N``, ``df`` and
                          ``avgdl`` are then the collection's (:class:`CollectionStats`)

Tokenizing needs PyStemmer (in the ``cpu`` and ``gpu`` extras, or ``pip install
'qaindex[hybrid]'``); loading and validating a stored index does not.

Example
-------
>>> lex = LexicalIndex.from_texts(["Reset your password from the login page.", "Refunds take 5 days."])
>>> scores = lex.scores("how do I reset my password?")
>>> int(scores.argmax()), bool(scores[1] == 0.0)
(0, True)
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass
from itertools import chain
from pathlib import Path
from typing import Any

import numpy as np

from .. import fast_path_switch
from ..errors import IndexFormatError, MissingDependencyError, QueryError
from ..store.atomic_files import create_file, read_array, save_array
from ..store.field_ranges import lexical_error, row_blocks, row_sums

__all__ = [
    "DIRECTORY",
    "LEXICAL_FORMAT",
    "MAX_QUERY_TERMS",
    "MAX_QUESTION_CHARS",
    "CollectionStats",
    "LexicalBuilder",
    "LexicalIndex",
    "bm25_bound",
    "bm25_idf",
    "build_hybrid",
    "check_entry",
    "matched_words",
    "question_tokens",
    "tokenizer_available",
    "top_rows",
]

LEXICAL_FORMAT = "qaindex-lexical"
LEXICAL_FORMAT_VERSION = 1
DIRECTORY = "lexical"  # inside the snapshot
FILES = ("terms.npy", "counts.npy", "offsets.npy", "vocab.json")
# the postings, stored so that a first search need not derive them (absent in older indexes:
# derived on the first search, as before)
POSTING_FILES = ("postings-indptr.npy", "postings-rows.npy", "postings-weights.npy")
K1 = 1.5
B = 0.75
TOKEN_PATTERN = r"(?u)\b\w\w+\b"  # bm25s's default
# Lucene's English stopword set, as bm25s's STOPWORDS_EN
STOPWORDS_EN = frozenset(
    "a an and are as at be but by for if in into is it no not of on or such that the their then there these "
    "they this to was will with".split()
)
TOKENIZER = {"pattern": TOKEN_PATTERN, "lower": True, "stopwords": "en (Lucene)", "stemmer": "english (PyStemmer)"}
MAX_QUESTION_CHARS = 65_536  # characters of a question the BM25 side reads
MAX_QUERY_TERMS = 1_024  # distinct terms of a question the BM25 side reads
_IMPACT_CACHE = 65_536  # (term, count) entries of impact_rows's cache
_ANALYSE_CHUNK = 65_536  # texts analysed at once by LexicalBuilder.add
_LONG_TEXT = 1 << 20  # characters: a longer text is analysed slice by slice (bounded memory)
_NON_WORD = re.compile(r"\W")
# In ASCII text ``\w`` is ``[A-Za-z0-9_]``: every other ASCII character mapped to a space, a
# split gives the token pattern's words (runs of two or more kept) with no regular expression
_ASCII_NON_WORD = str.maketrans({chr(c): " " for c in range(128) if not (chr(c).isalnum() or chr(c) == "_")})
INSTALL_HINT = "install PyStemmer: pip install 'qaindex[hybrid]' (the cpu and gpu extras include it)"


class _Tokenizer:
    """Lower case, bm25s's token pattern, English stopwords, English Snowball stemming."""

    def __init__(self) -> None:
        try:
            import Stemmer
        except ImportError:
            raise MissingDependencyError(
                f"hybrid search needs PyStemmer, which is not installed; {INSTALL_HINT}"
            ) from None
        self._stem = Stemmer.Stemmer("english").stemWords
        self._stop = STOPWORDS_EN
        self._pattern = re.compile(TOKEN_PATTERN)

    def __call__(self, text: str) -> list[str]:
        words = [w for w in self.words(text) if w not in self._stop]
        return list(self._stem(words)) if words else []

    def words(self, text: str) -> list[str]:
        """The token pattern's words of ``text`` lower-cased, in order, stopwords included:
        ``re.findall(TOKEN_PATTERN, text.lower())``; lower-cased ASCII text by a translation and
        a split instead (the same words, faster).

        Example
        -------
        >>> _tokenizer().words("Reset the e-mail_2 PIN, a b.")
        ['reset', 'the', 'mail_2', 'pin']
        """
        low = text.lower()
        if low.isascii() and fast_path_switch.enabled():
            return [w for w in low.translate(_ASCII_NON_WORD).split() if len(w) > 1]
        return self._pattern.findall(low)

    def bags(
        self, texts: Sequence[str], words: dict[str, int], ids: dict[str, int], vocab: list[str]
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Each text's distinct term ids and counts, in order of first occurrence, and their
        number per text: :meth:`__call__` text by text, vectorised.

        ``words`` (word → term id, ``-1`` for a stopword) caches the stemming across calls;
        new terms are appended to ``vocab`` and ``ids`` in order of first occurrence.
        """
        # a long text is counted word by word in slices (its distinct words, each with its
        # count: memory in its vocabulary, not its length); the others are listed whole
        long = [i for i, t in enumerate(texts) if len(t) > _LONG_TEXT]
        per_text: list[list[str]] = [[] if len(t) > _LONG_TEXT else self.words(t) for t in texts]
        repeats: list[np.ndarray] = []
        for i in long:
            counted = self._word_counts(texts[i])
            per_text[i] = list(counted)
            repeats.append(np.fromiter(counted.values(), np.int64, len(counted)))
        n_words = np.fromiter(map(len, per_text), np.int64, len(per_text))
        flat = list(chain.from_iterable(per_text))
        new = [w for w in dict.fromkeys(flat) if w not in words]  # first occurrence order
        kept = [w for w in new if w not in self._stop]
        for w in new:
            words[w] = -1
        for w, term in zip(kept, self._stem(kept) if kept else [], strict=True):
            tid = ids.get(term)
            if tid is None:
                tid = ids[term] = len(vocab)
                vocab.append(term)
            words[w] = tid
        tids = np.fromiter(map(words.__getitem__, flat), np.int64, len(flat))
        rows = np.repeat(np.arange(len(per_text), dtype=np.int64), n_words)
        weight = None
        if long:  # each listed word counts once, a long text's words their count
            weight = np.ones(len(flat), np.int64)
            ends = np.cumsum(n_words)
            for i, rep in zip(long, repeats, strict=True):
                weight[ends[i] - len(rep) : ends[i]] = rep
        keep = tids >= 0
        tids, rows = tids[keep], rows[keep]
        # distinct (row, term) pairs with counts, then back to first-occurrence order in each row
        keys, first, inverse = np.unique(rows * len(vocab) + tids, return_index=True, return_inverse=True)
        inverse = inverse.reshape(-1)
        if weight is None:
            count = np.bincount(inverse, minlength=len(keys))
        else:
            count = np.bincount(inverse, weights=weight[keep], minlength=len(keys)).astype(np.int64)
        order = np.argsort(first, kind="stable")
        keys, count = keys[order], count[order]
        bag_rows = keys // max(len(vocab), 1)
        return keys - bag_rows * len(vocab), count, np.bincount(bag_rows, minlength=len(per_text)).astype(np.int64)

    def _word_counts(self, text: str) -> Counter[str]:
        """A text's words (before stopwords and stemming) with their counts, in order of first
        occurrence, read in slices of about :data:`_LONG_TEXT` characters cut between words."""
        counted: Counter[str] = Counter()
        start = 0
        while start < len(text):
            end = start + _LONG_TEXT
            cut = _NON_WORD.search(text, end) if end < len(text) else None
            stop = len(text) if end >= len(text) or cut is None else cut.start()
            counted.update(self.words(text[start:stop]))
            start = stop
        return counted


_TOKENIZER: _Tokenizer | None = None


def _tokenizer() -> _Tokenizer:
    global _TOKENIZER
    if _TOKENIZER is None:
        _TOKENIZER = _Tokenizer()
    return _TOKENIZER


def tokenizer_available(strict: bool = False) -> bool:
    """Whether PyStemmer (the ``hybrid`` extra) is installed (``strict``: raise
    :class:`~qaindex.MissingDependencyError` saying what to install when it is not).

    Example
    -------
    >>> isinstance(tokenizer_available(), bool)
    True
    """
    try:
        _tokenizer()
    except MissingDependencyError:
        if strict:
            raise
        return False
    return True


def build_hybrid(hybrid: object) -> bool:
    """Whether a build makes a lexical index: ``None`` when PyStemmer is installed, True (it
    must be: :class:`~qaindex.MissingDependencyError` otherwise) or False.

    Example
    -------
    >>> build_hybrid(False)
    False
    """
    if hybrid is None:
        return tokenizer_available()
    if not isinstance(hybrid, bool | np.bool_):
        raise QueryError(f"hybrid must be True, False or None, got {hybrid!r}")
    return tokenizer_available(strict=True) if hybrid else False


def tokenize(text: str) -> list[str]:
    """The BM25 terms of a text (stems, stopwords removed), in order.

    Example
    -------
    >>> tokenize("Resetting the passwords")
    ['reset', 'password']
    """
    return _tokenizer()(text)


COLLECTION_DF = "collection-df.npy"


@dataclass(frozen=True)
class CollectionStats:
    """The BM25 statistics of a collection split into shards (:mod:`qaindex.indexing.sharding`):
    each shard's index scores its answers with the collection's ``N``, ``avgdl`` and ``df``
    (module docstring), so a shard's BM25 scores, idf and bounds are those of one index of
    the whole collection.

    Attributes
    ----------
    answers : int
        ``N``, the collection's answers.
    terms : int
        Their total term count (``avgdl = terms / answers``: exact, as the mean of integers).
    df : numpy.ndarray (vocab,) int64
        The collection's document frequency of each term of this shard's vocabulary.
    """

    answers: int
    terms: int
    df: np.ndarray

    @property
    def avgdl(self) -> float:
        return self.terms / self.answers if self.answers and self.terms > 0 else 1.0

    def entry(self) -> dict[str, int]:
        """``vocab.json``'s ``collection`` (and ``info``'s): ``{"answers", "terms"}``."""
        return {"answers": self.answers, "terms": self.terms}


class LexicalIndex:
    """BM25 over a list of answers (row ``i`` is the index's answer ``i``).

    Build with :meth:`from_texts`, open a stored one with :meth:`load`.
    """

    def __init__(
        self,
        terms: np.ndarray,
        counts: np.ndarray,
        offsets: np.ndarray,
        vocab: list[str],
        *,
        k1: float = K1,
        b: float = B,
    ) -> None:
        self._terms = terms
        self._counts = counts
        self._offsets = offsets
        self.vocab = vocab
        self._ids = {term: i for i, term in enumerate(vocab)}
        self.k1 = float(k1)
        self.b = float(b)
        self._postings: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
        self._impact: dict[tuple[int, int], np.ndarray] = {}  # (term, count) -> its best postings' rows
        self._idf: np.ndarray | None = None  # idf of each vocabulary term
        self._stored = False  # whether the postings were read from disk (a verifying load compares them)
        # the corpus's label-free dense/BM25 ratio (qaindex.fusion.dense_ratio); None: not measured
        self.ratio_info: dict[str, Any] | None = None
        # the statistics of the collection this index is a shard of; None: its own
        self.collection: CollectionStats | None = None

    @property
    def ratio(self) -> float | None:
        """The measured dense/BM25 ratio of the corpus (``adaptive`` fusion), or None."""
        return None if self.ratio_info is None else float(self.ratio_info["ratio"])

    def with_ratio(self, info: Mapping[str, Any] | None) -> LexicalIndex:
        """This index (same arrays, shared) with a measured dense/BM25 ratio attached."""
        out = LexicalIndex(self._terms, self._counts, self._offsets, self.vocab, k1=self.k1, b=self.b)
        out._ids, out._postings, out._impact = self._ids, self._postings, self._impact
        out._idf, out._stored = self._idf, self._stored
        out.ratio_info = None if info is None else dict(info)
        out.collection = self.collection
        return out

    def with_collection(self, stats: CollectionStats | None) -> LexicalIndex:
        """This index (same rows) scored with a collection's statistics (None: its own): its
        postings are derived again with them (and stored so by a save).

        Example
        -------
        >>> whole = LexicalIndex.from_texts(["cats purr", "dogs bark", "cats and dogs"])
        >>> shard = LexicalIndex.from_texts(["cats and dogs"])
        >>> df = np.array([2, 2])  # cat, dog in the whole collection
        >>> shard = shard.with_collection(CollectionStats(3, 6, df))
        >>> bool(np.allclose(shard.scores("cats"), whole.scores("cats")[2:]))
        True
        """
        out = LexicalIndex(self._terms, self._counts, self._offsets, self.vocab, k1=self.k1, b=self.b)
        out._ids, out.ratio_info = self._ids, self.ratio_info
        if stats is not None:
            df = np.asarray(stats.df, dtype=np.int64)
            if df.shape != (len(self.vocab),):
                raise ValueError(f"collection df must hold one count per term ({len(self.vocab)}), got {df.shape}")
            stats = CollectionStats(int(stats.answers), int(stats.terms), df)
        out.collection = stats
        return out

    def term_counts(self) -> tuple[np.ndarray, int]:
        """Each vocabulary term's document frequency here and the total term count: what a
        collection's statistics add up over its shards (:class:`CollectionStats`)."""
        doc_len, _, df = self._weight_parts()
        return df.astype(np.int64), int(doc_len.sum())

    # -- construction ---------------------------------------------------------------------
    @classmethod
    def from_texts(cls, texts: Sequence[str]) -> LexicalIndex:
        """Tokenize and index ``texts`` (needs PyStemmer)."""
        builder = LexicalBuilder()
        builder.add(texts)
        return builder.finish()

    def __len__(self) -> int:
        return len(self._offsets) - 1

    def appended(self, texts: Sequence[str]) -> LexicalIndex:
        """A new index with ``texts`` appended as new rows (this one is unchanged)."""
        builder = LexicalBuilder(self)
        builder.add(texts)
        return builder.finish()

    def kept(self, rows: np.ndarray) -> LexicalIndex:
        """A new index of the given rows only, in that order (the vocabulary is kept)."""
        rows = np.asarray(rows, dtype=np.int64)
        starts, ends = self._offsets[rows], self._offsets[rows + 1]
        lengths = ends - starts
        take = _ranges(starts, lengths)
        offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        return LexicalIndex(self._terms[take], self._counts[take], offsets, self.vocab, k1=self.k1, b=self.b)

    # -- scoring -----------------------------------------------------------------------------
    def _weight_parts(self) -> tuple[np.ndarray, float, np.ndarray]:
        """Each answer's length ``|d|`` (float64), ``avgdl`` and each term's document frequency
        (here: the postings' lengths; the collection's ``avgdl`` and ``df`` score them)."""
        doc_len = row_sums(self._counts, self._offsets).astype(np.float64)  # exact: integer sums below 2**53
        if self.collection is not None:
            avgdl = self.collection.avgdl
        else:
            avgdl = float(doc_len.mean()) if len(self) and doc_len.sum() > 0 else 1.0
        return doc_len, avgdl, np.bincount(self._terms, minlength=len(self.vocab))

    def _answers(self) -> int:
        """``N`` of the idf: the collection's, or this index's."""
        return self.collection.answers if self.collection is not None else len(self)

    def _idf_of(self, df: np.ndarray) -> np.ndarray:
        """Each term's idf: from ``df`` (this index's), or the collection's."""
        if self.collection is not None:
            return bm25_idf(self.collection.answers, self.collection.df)
        return bm25_idf(len(self), df)

    def _entry_blocks(
        self, doc_len: np.ndarray, avgdl: float, idf: np.ndarray
    ) -> Iterator[tuple[int, np.ndarray, np.ndarray]]:
        """Per block of answers (:func:`~qaindex.store.field_ranges.row_blocks`): where its
        entries start, their rows (int64) and their BM25 weights (the module docstring's
        formula, float64), from :meth:`_weight_parts` and the terms' ``idf``."""
        for r0, r1 in row_blocks(self._offsets):
            e0, e1 = int(self._offsets[r0]), int(self._offsets[r1])
            rows = np.repeat(np.arange(r0, r1, dtype=np.int64), np.diff(self._offsets[r0 : r1 + 1]))
            tf = self._counts[e0:e1].astype(np.float64)
            norm = self.k1 * (1.0 - self.b + self.b * doc_len[rows] / avgdl)
            yield e0, rows, idf[self._terms[e0:e1]] * tf / (tf + norm)

    def _build_postings(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The postings (each term's rows ascending, with their float32 weights), built block by
        block: a counting sort that places each block's entries after the same terms' entries of
        earlier blocks, so memory beyond the result is one block's temporaries."""
        if self._postings is None:
            doc_len, avgdl, df = self._weight_parts()
            idf = self._idf_of(df)
            indptr = np.zeros(len(self.vocab) + 1, np.int64)
            np.cumsum(df, out=indptr[1:])
            fill = indptr[:-1].copy()  # each term's next free slot
            rows_out = np.empty(len(self._terms), _row_dtype(len(self)))
            weights_out = np.empty(len(self._terms), np.float32)
            for e0, rows, weight in self._entry_blocks(doc_len, avgdl, idf):
                if not len(rows):
                    continue
                terms = self._terms[e0 : e0 + len(rows)]
                order = np.argsort(terms, kind="stable")  # by term, rows ascending within each
                ranked = terms[order]
                first = np.flatnonzero(np.r_[True, ranked[1:] != ranked[:-1]])  # where each term's run starts
                length = np.diff(np.r_[first, len(ranked)])
                place = fill[ranked] + (np.arange(len(ranked)) - np.repeat(first, length))
                rows_out[place] = rows[order]
                weights_out[place] = weight[order]
                fill[ranked[first]] += length
            self._idf = idf
            self._postings = (indptr, rows_out, weights_out)
        return self._postings

    def _use_postings(self, indptr: np.ndarray, rows: np.ndarray, weights: np.ndarray) -> None:
        """Serve stored postings (:meth:`load`): the ``idf`` comes from their lengths (or the collection's)."""
        self._idf = self._idf_of(np.diff(indptr))
        self._postings = (indptr, rows, weights)
        self._stored = True

    def read_through(self, wrap: Callable[[str, np.ndarray], Any]) -> None:
        """Serve each stored per-entry array (``terms.npy``, ``counts.npy`` and the stored
        postings' rows and weights) as ``wrap(file name, array)`` gives it: a loaded index's
        arrays verified chunk by chunk as they are read (:mod:`qaindex.store.chunk_checks`)."""
        self._terms = wrap("terms.npy", self._terms)
        self._counts = wrap("counts.npy", self._counts)
        if self._stored and self._postings is not None:
            indptr, rows, weights = self._postings
            self._postings = (indptr, wrap(POSTING_FILES[1], rows), wrap(POSTING_FILES[2], weights))

    def postings_differ(self) -> str | None:
        """Which postings file read from disk disagrees with the terms and counts (None: they
        agree, or none was read); run by a verifying load, in O(entries) without a sort.

        Per term: its number of postings is its document frequency, its rows ascend and add
        up to the rows that hold it, and its weights add up (to float32 rounding) to the
        BM25 weights of its entries in the terms and counts.
        """
        if not self._stored or self._postings is None:
            return None
        indptr, rows, weights = self._postings
        vocab = len(self.vocab)
        # per term: the sum of its entries' rows and of their weights, block by block
        sums, want = np.zeros(vocab, np.float64), np.zeros(vocab, np.float64)
        doc_len, avgdl, df = self._weight_parts()
        for e0, held, expected in self._entry_blocks(doc_len, avgdl, self._idf_of(df)):
            terms = self._terms[e0 : e0 + len(held)]
            sums += np.bincount(terms, weights=held, minlength=vocab)
            want += np.bincount(terms, weights=expected, minlength=vocab)
        if not np.array_equal(np.diff(indptr), df):
            return POSTING_FILES[0]
        if not len(self._terms):
            return None
        present = df > 0
        firsts = indptr[:-1][present]  # where each present term's postings start
        # a row sum is exact in float64 below 2**53 (at most entries * rows)
        runs = np.append(firsts, len(rows))  # each present term's postings, as the rows of a CSR array
        row_sum = row_sums(rows, runs, np.float64)
        if not _ascending_runs(rows, firsts) or not np.array_equal(row_sum, sums[present]):
            return POSTING_FILES[1]
        if not np.allclose(row_sums(weights, runs, np.float64), want[present], rtol=1e-5, atol=1e-6):
            return POSTING_FILES[2]
        return None

    def query_terms(self, question: str) -> np.ndarray:
        """Term ids of a question's terms that occur in the index (repeats kept)."""
        return self.query(question)[0]

    def query(self, question: str) -> tuple[np.ndarray, int]:
        """A question's term ids that occur in the index (repeats kept) and its number of
        terms (known or not): what :meth:`scores_of_terms` and the fusion need.

        Only the question's first :data:`MAX_QUESTION_CHARS` characters (cut at a space)
        and its terms before the ``MAX_QUERY_TERMS + 1``-th distinct one are read.

        Example
        -------
        >>> lex = LexicalIndex.from_texts(["cats purr", "dogs bark"])
        >>> terms, length = lex.query("cats cats fly " * 100_000)
        >>> len(terms), length
        (9362, 14043)
        """
        return self.query_of_tokens(question_tokens(question))

    def query_of_tokens(self, tokens: Sequence[str]) -> tuple[np.ndarray, int]:
        """:meth:`query` of a question's terms (:func:`question_tokens`)."""
        return np.asarray([i for i in self.term_ids(tokens) if i >= 0], dtype=np.int64), len(tokens)

    def score_bound(self, terms: np.ndarray, length: int) -> float:
        """The BM25 score no answer can reach for a question (:meth:`query`'s ``terms`` and
        ``length``): the sum of its terms' idf (a term's weight tends to its idf as its count
        grows), a term no answer has at the idf of document frequency 0. ``best score /
        bound`` is the share of the question's term evidence its best answer matches.

        Example
        -------
        >>> ix = LexicalIndex.from_texts(["cats purr", "dogs bark"])
        >>> terms, length = ix.query("cats fly")
        >>> round(float(ix.scores_of_terms(terms).max() / ix.score_bound(terms, length)), 3)
        0.112
        """
        self._build_postings()
        assert self._idf is not None
        return bm25_bound(self._idf[np.asarray(terms, dtype=np.int64)], length, self._answers())

    def scores_of_terms(self, terms: np.ndarray) -> np.ndarray:
        """:meth:`scores` of a question given as its term ids (:meth:`query`)."""
        indptr, docs, weights = self._build_postings()
        n = len(self)
        if not len(terms):
            return np.zeros(n, np.float32)
        # each distinct term's postings once, weighted by its count in the question
        unique, count = np.unique(np.asarray(terms, dtype=np.int64), return_counts=True)
        lengths = indptr[unique + 1] - indptr[unique]
        take = _ranges(indptr[unique], lengths)
        weighted = weights[take].astype(np.float64) * np.repeat(count, lengths)
        return np.bincount(docs[take], weights=weighted, minlength=n).astype(np.float32)

    def impact_rows(self, terms: np.ndarray, per_term: int) -> np.ndarray:
        """The answers among the ``per_term`` highest-weighted postings of each of the
        question's terms (impact-ordered postings; ties by row), sorted: a candidate list for
        BM25's best answers that costs ``per_term`` per term once a term's best postings are
        known (found in its postings' length at its first use, then kept), not a scan of the
        postings. For a one-term question its best ``per_term`` (by :meth:`scores_of_rows`)
        are BM25's best.

        Example
        -------
        >>> lex = LexicalIndex.from_texts(["cats purr", "dogs bark", "cats cats cats"])
        >>> lex.impact_rows(lex.query("cats")[0], 1).tolist()
        [2]
        """
        unique = np.unique(np.asarray(terms, dtype=np.int64))
        if not len(unique):
            return np.zeros(0, np.int64)
        return np.unique(np.concatenate([self._best_postings(int(t), per_term) for t in unique]))

    def best_postings(self, term: int, count: int) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`impact_rows`' postings of one term: the rows of its ``count`` highest-weighted
        postings (ties by row), ascending, and their weights (float32).

        Example
        -------
        >>> lex = LexicalIndex.from_texts(["cats purr", "dogs bark", "cats cats cats"])
        >>> rows, weights = lex.best_postings(lex.query("cats")[0][0], 1)
        >>> rows.tolist(), bool(weights[0] > 0)
        ([2], True)
        """
        rows = self._best_postings(term, count)
        indptr, docs, weights = self._build_postings()
        start, end = int(indptr[term]), int(indptr[term + 1])
        at = start + np.searchsorted(np.asarray(docs[start:end]), rows)
        return rows, np.asarray(weights[at], dtype=np.float32) if len(at) else np.zeros(0, np.float32)

    def _best_postings(self, term: int, count: int) -> np.ndarray:
        """The rows of ``term``'s ``count`` highest-weighted postings (ties by row), cached."""
        key = (term, count)
        cached = self._impact.get(key)
        if cached is not None:
            return cached
        indptr, docs, weights = self._build_postings()
        start, end = int(indptr[term]), int(indptr[term + 1])
        rows, w = docs[start:end], weights[start:end]
        if len(rows) > count:
            threshold = np.partition(w, len(w) - count)[len(w) - count]  # the count-th highest weight
            above = np.flatnonzero(w > threshold)
            tied = np.flatnonzero(w == threshold)[: count - len(above)]  # postings are in row order
            rows = rows[np.concatenate([above, tied])]
        out = np.sort(rows).astype(np.int64)
        if len(self._impact) >= _IMPACT_CACHE:  # a long-running server sees every term in the end
            self._impact.clear()
        self._impact[key] = out
        return out

    def scores_of_rows(self, terms: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """BM25 scores (float32) of the given rows only, for a question's term ids: equal to
        ``scores_of_terms(terms)[rows]``, at a cost of a binary search per row in each
        question term's postings, not in ``N`` (the lexical side of a hybrid search at scale).

        Example
        -------
        >>> lex = LexicalIndex.from_texts(["cats purr", "dogs bark", "cats and dogs"])
        >>> terms, _ = lex.query("cats?")
        >>> bool(np.allclose(lex.scores_of_rows(terms, np.array([2, 0])), lex.scores_of_terms(terms)[[2, 0]]))
        True
        """
        indptr, docs, weights = self._build_postings()
        rows = np.asarray(rows, dtype=np.int64)
        out = np.zeros(len(rows), np.float64)
        if not len(terms) or not len(rows):
            return out.astype(np.float32)
        unique, count = np.unique(np.asarray(terms, dtype=np.int64), return_counts=True)
        for t, c in zip(unique.tolist(), count.tolist(), strict=True):
            start, end = indptr[t], indptr[t + 1]
            if end == start:
                continue
            postings = docs[start:end]  # ascending rows
            at = np.minimum(np.searchsorted(postings, rows), end - start - 1)
            hit = postings[at] == rows
            out[hit] += weights[start + at[hit]].astype(np.float64) * c
        return out.astype(np.float32)

    def coverage(self, terms: np.ndarray, length: int, row: int) -> float:
        """The share of a question's IDF mass that answer ``row`` contains (in [0, 1])::

            coverage = sum(idf(t) for t in q if t in row) / (sum(idf(t) for t in q) + u * idf_max)

        ``terms`` and ``length`` are :meth:`query`'s (repeats count); ``u = length - len(terms)``
        question terms no answer contains each weigh ``idf_max = ln(1 + (N + 0.5) / 0.5)`` (a
        term of document frequency 0): the denominator is :meth:`score_bound`. 0 for a question
        without terms. Cost: the row's length.

        Example
        -------
        >>> lex = LexicalIndex.from_texts(["cats purr", "dogs bark", "cats and dogs"])
        >>> terms, length = lex.query("cats dogs")
        >>> round(lex.coverage(terms, length, 0), 3), round(lex.coverage(terms, length, 2), 3)
        (0.5, 1.0)
        """
        total = self.score_bound(terms, length)
        if total <= 0:
            return 0.0
        assert self._idf is not None
        terms = np.asarray(terms, dtype=np.int64)
        return float(self._idf[terms][self._held(terms, row)].sum()) / total

    def term_ids(self, words: Sequence[str]) -> list[int]:
        """Each word's term id, -1 for a word the index does not have."""
        return [self._ids.get(word, -1) for word in words]

    def holds(self, terms: Sequence[int], rows: np.ndarray) -> np.ndarray:
        """Which of ``terms`` (ids, -1 for none) each of ``rows`` holds: bool ``(len(rows), len(terms))``.

        Example
        -------
        >>> lex = LexicalIndex.from_texts(["cats purr", "dogs bark", "cats and dogs"])
        >>> lex.holds(lex.term_ids(["cat", "dog", "emu"]), np.array([2, 0])).tolist()
        [[True, True, False], [True, False, False]]
        """
        rows = np.asarray(rows, dtype=np.int64)
        out = np.zeros((len(rows), len(terms)), bool)
        wanted = np.asarray(terms, dtype=np.int64)
        known = np.flatnonzero(wanted >= 0)
        if not len(rows) or not len(known):
            return out
        starts = np.asarray(self._offsets[rows], dtype=np.int64)
        lengths = np.asarray(self._offsets[rows + 1], dtype=np.int64) - starts
        held = np.asarray(self._terms[_ranges(starts, lengths)], dtype=np.int64)  # the rows' terms, row after row
        owner = np.repeat(np.arange(len(rows)), lengths)
        order = known[np.argsort(wanted[known], kind="stable")]  # the known terms by id
        ids = wanted[order]
        at = np.minimum(np.searchsorted(ids, held), len(ids) - 1)
        hit = ids[at] == held
        out[owner[hit], order[at[hit]]] = True
        dup = np.flatnonzero(np.r_[False, ids[1:] == ids[:-1]])  # a term asked twice: each column
        for j in dup.tolist():
            out[:, order[j]] = out[:, order[j - 1]]
        return out

    def _held(self, terms: np.ndarray, row: int) -> np.ndarray:
        """Which of ``terms`` answer ``row`` holds: ``numpy.isin`` through a set, a tenth of its
        cost for a question's few terms against an answer's (every hybrid search calls it)."""
        own = set(self._terms[self._offsets[row] : self._offsets[row + 1]].tolist())
        return np.array([t in own for t in np.asarray(terms).tolist()], dtype=bool)

    def same_terms(self, terms: np.ndarray, length: int, rows: np.ndarray) -> np.ndarray:
        """Which of ``rows`` hold exactly the distinct terms of a question (:meth:`query`'s
        ``terms`` and ``length``; a question with a term no row has matches none): the text
        typed again, up to case, stems, stop words, repeats and word order.

        Example
        -------
        >>> lex = LexicalIndex.from_texts(["cats purr", "the cat purrs loudly", "Purr, cats!"])
        >>> lex.same_terms(*lex.query("purr, cats"), np.arange(3)).tolist()
        [True, False, True]
        """
        rows = np.asarray(rows, dtype=np.int64)
        wanted = np.unique(np.asarray(terms, dtype=np.int64))
        if len(wanted) == 0 or len(terms) < length:  # no term, or one the index does not have
            return np.zeros(len(rows), dtype=bool)
        out = np.zeros(len(rows), dtype=bool)
        for j, row in enumerate(rows.tolist()):
            own = self._terms[self._offsets[row] : self._offsets[row + 1]]
            out[j] = len(own) == len(wanted) and bool(np.isin(own, wanted).all())
        return out

    def matched_terms(self, terms: np.ndarray, row: int) -> tuple[str, ...]:
        """The distinct terms of a question (:meth:`query`'s ``terms``) that answer ``row``
        holds, as indexed (lower-cased, stemmed), in question order.

        Example
        -------
        >>> lex = LexicalIndex.from_texts(["cats purr", "dogs bark", "cats and dogs"])
        >>> lex.matched_terms(lex.query("dogs and cats")[0], 2)
        ('dog', 'cat')
        """
        return matched_words(self.vocab, terms, self._held(terms, row))

    def scores(self, question: str) -> np.ndarray:
        """BM25 score (float32) of every answer for a question (0 where no term matches).

        Example
        -------
        >>> [round(float(s), 3) for s in LexicalIndex.from_texts(["cats purr", "dogs bark"]).scores("cats purr?")]
        [0.555, 0.0]
        """
        return self.scores_of_terms(self.query_terms(question))

    def top(self, question: str, m: int) -> tuple[np.ndarray, np.ndarray]:
        """The ``m`` best rows by BM25 among the answers with a matching term (fewer when
        fewer match): ``(rows int64, scores float32)``, best first, ties by row."""
        scores = self.scores(question)
        hit = top_rows(scores, m)
        rows = hit[np.lexsort((hit, -scores[hit]))]
        return rows, scores[rows]

    # -- persistence -------------------------------------------------------------------------
    @property
    def stored_bytes(self) -> int:
        """About how many bytes :meth:`save` writes (for disk-full messages)."""
        arrays = 4 * (len(self._terms) + len(self._counts)) + 8 * len(self._offsets)
        postings = 8 * (len(self.vocab) + 1) + (np.dtype(_row_dtype(len(self))).itemsize + 4) * len(self._terms)
        return arrays + postings + 16 * len(self.vocab) + 4096

    def save(self, directory: Path) -> None:
        """Write :data:`FILES` and :data:`POSTING_FILES` into ``directory`` (a new snapshot's;
        published by its rename).

        Each is a new file (:func:`qaindex.store.atomic_files.create_file`: never through a link),
        and a failed write keeps its errno, so a full disk is a ``DiskFullError`` for the caller.
        """
        directory.mkdir(parents=True, exist_ok=True)
        save_array(directory / "terms.npy", self._terms.astype(np.int32))
        save_array(directory / "counts.npy", self._counts.astype(np.int32))
        save_array(directory / "offsets.npy", self._offsets.astype(np.int64))
        for name, array in zip(POSTING_FILES, self._build_postings(), strict=True):
            save_array(directory / name, array)
        meta = {
            "format": LEXICAL_FORMAT,
            "format_version": LEXICAL_FORMAT_VERSION,
            "kind": "bm25",
            "tokenizer": TOKENIZER,
            "k1": self.k1,
            "b": self.b,
            "vocab": self.vocab,
        }
        if self.ratio_info is not None:
            meta["dense_ratio"] = self.ratio_info
        if self.collection is not None:
            meta["collection"] = self.collection.entry()
            save_array(directory / COLLECTION_DF, self.collection.df.astype(np.int64))
        with create_file(directory / "vocab.json") as handle:
            handle.write(json.dumps(meta, ensure_ascii=False).encode("utf-8"))

    @classmethod
    def load(cls, directory: Path, count: int, *, listed: Collection[str]) -> LexicalIndex:
        """Read and validate a stored lexical index of ``count`` answers (raises :class:`IndexFormatError`).

        ``listed``: the names in ``directory`` that the index manifest lists (so verifies); the
        stored postings are read when they are listed (memory-mapped, their ranges checked),
        else derived on the first search.
        """

        def bad(name: str, why: str) -> IndexFormatError:
            return IndexFormatError(f"{directory / name}: {why}; the index is corrupted, rebuild it with --hybrid")

        try:
            meta = json.loads((directory / "vocab.json").read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            raise bad("vocab.json", f"cannot be read ({exc})") from None
        except RecursionError:
            raise bad("vocab.json", "cannot be read (JSON nested too deeply)") from None
        if not isinstance(meta, dict) or meta.get("format") != LEXICAL_FORMAT:
            raise bad("vocab.json", f'field "format" must be {LEXICAL_FORMAT!r}')
        if meta.get("format_version") != LEXICAL_FORMAT_VERSION:
            raise IndexFormatError(
                f"{directory / 'vocab.json'}: lexical format version {meta.get('format_version')!r} is not "
                f"supported (this qaindex reads {LEXICAL_FORMAT_VERSION}); upgrade qaindex or rebuild the index"
            )
        vocab = meta.get("vocab")
        if not isinstance(vocab, list) or not all(isinstance(t, str) for t in vocab) or len(set(vocab)) != len(vocab):
            raise bad("vocab.json", 'field "vocab" must be a list of distinct strings')
        why = lexical_error(meta, count)  # the ranges: qaindex.store.field_ranges
        if why is not None:
            raise bad("vocab.json", why)
        arrays = {}
        for name, dtype in (("terms.npy", np.int32), ("counts.npy", np.int32), ("offsets.npy", np.int64)):
            try:  # the per-entry arrays memory-mapped, as the postings: read where searches need them
                arrays[name] = read_array(directory / name, mmap=name != "offsets.npy")
            except (OSError, ValueError) as exc:
                raise bad(name, f"cannot be read ({exc})") from None
            if arrays[name].dtype != dtype or arrays[name].ndim != 1:
                raise bad(name, f"must be a 1-D {np.dtype(dtype).name} array")
        terms, counts, offsets = arrays["terms.npy"], arrays["counts.npy"], arrays["offsets.npy"]
        if len(offsets) != count + 1 or offsets[0] != 0 or np.any(np.diff(offsets) < 0) or offsets[-1] != len(terms):
            raise bad("offsets.npy", f"must hold {count + 1} non-decreasing offsets from 0 to {len(terms)}")
        if len(counts) != len(terms) or (len(counts) and counts.min() < 1):
            raise bad("counts.npy", f"must hold {len(terms)} positive counts")
        if len(terms) and (terms.min() < 0 or terms.max() >= len(vocab)):
            raise bad("terms.npy", f"term ids must be in [0, {len(vocab) - 1}]")
        out = cls(terms, counts, offsets, vocab, k1=float(meta["k1"]), b=float(meta["b"]))
        if meta.get("dense_ratio") is not None:
            out.ratio_info = dict(meta["dense_ratio"])
        if meta.get("collection") is not None:
            out.collection = _read_collection(directory, meta["collection"], count, len(vocab), listed, bad)
        if all(name in listed for name in POSTING_FILES):
            out._use_postings(*_read_postings(directory, count, len(vocab), len(terms), bad))
        return out

    def describe(self) -> dict[str, Any]:
        """What ``info`` shows: kind, terms, parameters, the measured dense/BM25 ratio."""
        return {
            "kind": "bm25",
            "terms": len(self.vocab),
            "k1": self.k1,
            "b": self.b,
            "tokenizer": TOKENIZER,
            "dense_ratio": self.ratio,
            **({"collection": self.collection.entry()} if self.collection is not None else {}),
        }


def _read_collection(
    directory: Path, entry: Any, count: int, vocab: int, listed: Collection[str], bad: Callable[[str, str], Exception]
) -> CollectionStats:
    """``vocab.json``'s ``collection`` and :data:`COLLECTION_DF`, checked (a shard's statistics)."""
    if (
        not isinstance(entry, dict)
        or not all(isinstance(entry.get(k), int) and not isinstance(entry.get(k), bool) for k in ("answers", "terms"))
        or entry["answers"] < count
        or entry["terms"] < 0
    ):
        raise bad("vocab.json", f'field "collection" must be {{"answers": int >= {count}, "terms": int >= 0}}')
    if COLLECTION_DF not in listed:
        raise bad(COLLECTION_DF, "is missing or not listed in the index manifest")
    try:
        df = read_array(directory / COLLECTION_DF)
    except (OSError, ValueError) as exc:
        raise bad(COLLECTION_DF, f"cannot be read ({exc})") from None
    if df.dtype != np.int64 or df.shape != (vocab,) or (vocab and (df.min() < 0 or df.max() > entry["answers"])):
        raise bad(COLLECTION_DF, f"must hold {vocab} int64 document frequencies in [0, {entry['answers']}]")
    return CollectionStats(int(entry["answers"]), int(entry["terms"]), np.asarray(df))


def bm25_idf(count: int, df: np.ndarray) -> np.ndarray:
    """``ln(1 + (N - df + 0.5) / (df + 0.5))`` of each term, for ``N = count`` answers (float64).

    Example
    -------
    >>> bm25_idf(3, np.array([1, 3])).round(3).tolist()
    [0.981, 0.134]
    """
    df = np.asarray(df, dtype=np.float64)
    return np.log1p((count - df + 0.5) / (df + 0.5))


def _run_chunks(firsts: np.ndarray, total: int) -> Iterator[tuple[int, int, np.ndarray]]:
    """Consecutive runs (run ``j`` spans ``firsts[j]`` to ``firsts[j + 1]``, the last to
    ``total``) in chunks of about :data:`~qaindex.store.field_ranges.ENTRY_BLOCK` entries
    (:func:`~qaindex.store.field_ranges.row_blocks`, a run as a row): ``(start, end, the
    chunk's run starts relative to start)``."""
    bounds = np.append(np.asarray(firsts, dtype=np.int64), total)
    for j0, j1 in row_blocks(bounds):
        start = int(bounds[j0])
        yield start, int(bounds[j1]), bounds[j0:j1] - start


def _ascending_runs(rows: np.ndarray, firsts: np.ndarray) -> bool:
    """Whether the rows of every run (:func:`_run_chunks`) strictly ascend."""
    for a, b, local in _run_chunks(firsts, len(rows)):
        ascending = np.diff(np.asarray(rows[a:b], dtype=np.int64)) > 0
        ascending[local[1:] - 1] = True  # a new term may start lower
        if not ascending.all():
            return False
    return True


def _row_dtype(count: int) -> type[np.signedinteger[Any]]:
    """The dtype of the postings' rows: int32 below 2**31 answers (half the bytes), else int64."""
    return np.int32 if count < 1 << 31 else np.int64


def _read_postings(
    directory: Path, count: int, vocab: int, entries: int, bad: Callable[[str, str], IndexFormatError]
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The stored postings, each array's shape, dtype and ranges checked (what a checksum
    cannot vouch for; a verifying load also compares them with the terms: :meth:`LexicalIndex.postings_differ`)."""
    indptr_name, rows_name, weights_name = POSTING_FILES
    arrays = {}
    for name, mmap in ((indptr_name, False), (rows_name, True), (weights_name, True)):
        try:
            arrays[name] = read_array(directory / name, mmap=mmap)
        except (OSError, ValueError) as exc:
            raise bad(name, f"cannot be read ({exc})") from None
    indptr, rows, weights = arrays[indptr_name], arrays[rows_name], arrays[weights_name]
    if indptr.dtype != np.int64 or indptr.shape != (vocab + 1,):
        raise bad(indptr_name, f"must be a 1-D int64 array of {vocab + 1} offsets")
    if indptr[0] != 0 or indptr[-1] != entries or np.any(np.diff(indptr) < 0):
        raise bad(indptr_name, f"must hold non-decreasing offsets from 0 to {entries}")
    if rows.dtype != _row_dtype(count) or rows.shape != (entries,):
        raise bad(rows_name, f"must be a 1-D {np.dtype(_row_dtype(count)).name} array of {entries} rows")
    if entries and (int(rows.min()) < 0 or int(rows.max()) >= count):
        raise bad(rows_name, f"rows must be in [0, {count - 1}]")
    if weights.dtype != np.float32 or weights.shape != (entries,):
        raise bad(weights_name, f"must be a 1-D float32 array of {entries} weights")
    if not np.isfinite(weights).all():
        raise bad(weights_name, "holds NaN or infinite weights")
    return indptr, rows, weights


def _bounded(question: str) -> str:
    """The first :data:`MAX_QUESTION_CHARS` characters of a question, cut at a space when
    one is in the last quarter (a word is not split in two)."""
    if len(question) <= MAX_QUESTION_CHARS:
        return question
    head = question[:MAX_QUESTION_CHARS]
    space = max(head.rfind(" "), head.rfind("\n"), head.rfind("\t"))
    return head[:space] if space >= MAX_QUESTION_CHARS * 3 // 4 else head


def bm25_bound(idf: np.ndarray, length: int, answers: int) -> float:
    """:meth:`LexicalIndex.score_bound` from the idf of a question's known terms (repeats
    kept), its number of terms and ``N``: each unknown term weighs the idf of document
    frequency 0, ``ln(1 + (N + 0.5) / 0.5)``.

    Example
    -------
    >>> round(bm25_bound(np.array([0.5, 0.5]), 3, 1), 3)
    2.386
    """
    unknown = max(0, int(length) - len(idf))
    return float(np.sum(idf)) + unknown * math.log1p((answers + 0.5) / 0.5)


def matched_words(vocab: Sequence[str], terms: np.ndarray, held: np.ndarray) -> tuple[str, ...]:
    """The distinct words of ``terms`` (ids into ``vocab``) where ``held`` is True, in order."""
    return tuple(dict.fromkeys(vocab[int(t)] for t, h in zip(terms, held, strict=True) if h))


def question_tokens(question: str) -> list[str]:
    """A question's terms as BM25 reads them (stemmed, repeats kept): its first
    :data:`MAX_QUESTION_CHARS` characters, up to its :data:`MAX_QUERY_TERMS`-th distinct term.

    Example
    -------
    >>> question_tokens("Do cats purr? Cats do!")
    ['do', 'cat', 'purr', 'cat', 'do']
    """
    tokens = _tokenizer()(_bounded(question))
    distinct: dict[str, None] = {}
    for at, term in enumerate(tokens):
        if term not in distinct and len(distinct) == MAX_QUERY_TERMS:
            return tokens[:at]
        distinct[term] = None
    return tokens


def top_rows(scores: np.ndarray, m: int) -> np.ndarray:
    """The rows of the ``m`` highest positive scores (ties: lower rows), in row order; O(n).

    Example
    -------
    >>> top_rows(np.array([0.0, 2.0, 1.0, 2.0, 1.0]), 3).tolist()
    [1, 2, 3]
    """
    hit = np.flatnonzero(scores > 0)
    if len(hit) <= m:
        return hit.astype(np.int64)
    s = scores[hit]
    cut = np.partition(s, len(s) - m)[len(s) - m]  # the m-th highest score
    above = hit[s > cut]
    ties = hit[s == cut][: m - len(above)]
    return np.sort(np.concatenate([above, ties])).astype(np.int64)


def check_entry(entry: object, files: Mapping[str, Any], mpath: Path) -> None:
    """Validate an index manifest's ``lexical`` field: the lexical files must be listed (so verified)."""
    missing = [f"{DIRECTORY}/{name}" for name in FILES if f"{DIRECTORY}/{name}" not in files]
    if not isinstance(entry, dict) or entry.get("directory") != DIRECTORY or entry.get("kind") != "bm25" or missing:
        raise IndexFormatError(
            f'{mpath}: field "lexical" must be {{"kind": "bm25", "directory": "lexical"}} with every lexical file '
            f'listed in "files" (missing: {", ".join(missing) or "none"}), got {entry!r}; the index is corrupted, '
            "rebuild it with --hybrid"
        )


def _ranges(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Concatenated ``arange(s, s + l)`` for each start and length (vectorised)."""
    lengths = np.asarray(lengths, dtype=np.int64)
    total = int(lengths.sum())
    if total == 0:
        return np.zeros(0, np.int64)
    ends = np.cumsum(lengths)
    idx = np.arange(total, dtype=np.int64) - np.repeat(ends - lengths, lengths)
    out: np.ndarray = np.repeat(np.asarray(starts, dtype=np.int64), lengths) + idx
    return out


class LexicalBuilder:
    """Analyses texts chunk after chunk into the rows of a new :class:`LexicalIndex`.

    Each distinct word is stemmed once and no Python loop runs over the words, yet the
    arrays equal those of tokenizing text by text (:func:`tokenize`): each row's distinct
    terms in order of first occurrence, new terms appended to the vocabulary in the order
    they first occur. A streamed build feeds it one chunk of answers at a time.

    Parameters
    ----------
    base : LexicalIndex, optional
        The rows (and vocabulary) the new ones follow; unchanged.

    Example
    -------
    >>> builder = LexicalBuilder()
    >>> builder.add(["Cats purr.", "Dogs bark at cats"])
    >>> lex = builder.finish()
    >>> len(lex), lex.vocab
    (2, ['cat', 'purr', 'dog', 'bark'])
    """

    def __init__(self, base: LexicalIndex | None = None) -> None:
        self._tok = _tokenizer()
        self._base = base
        self._vocab = list(base.vocab) if base is not None else []
        self._ids = dict(base._ids) if base is not None else {}
        self._words: dict[str, int] = {}  # word -> term id, -1 for a stopword
        self._terms: list[np.ndarray] = []
        self._counts: list[np.ndarray] = []
        self._lengths: list[np.ndarray] = []

    def add(self, texts: Sequence[str]) -> None:
        """Analyse ``texts`` as the next rows."""
        for start in range(0, len(texts), _ANALYSE_CHUNK):
            terms, counts, lengths = self._tok.bags(
                texts[start : start + _ANALYSE_CHUNK], self._words, self._ids, self._vocab
            )
            self._terms.append(terms.astype(np.int32))  # the stored dtype: half the memory of a streamed build
            self._counts.append(counts.astype(np.int32))
            self._lengths.append(lengths)

    def finish(self) -> LexicalIndex:
        """The index of the base's rows and every text added, in order (the builder is empty after)."""
        base = self._base
        if base is None:
            base = LexicalIndex(np.zeros(0, np.int32), np.zeros(0, np.int32), np.zeros(1, np.int64), [])
        added = np.concatenate(self._lengths) if self._lengths else np.zeros(0, np.int64)
        self._lengths = []
        offsets = np.concatenate([base._offsets, base._offsets[-1] + np.cumsum(added)]).astype(np.int64)
        terms, counts = _joined(base._terms, self._terms), _joined(base._counts, self._counts)
        return LexicalIndex(terms, counts, offsets, list(self._vocab), k1=base.k1, b=base.b)


def _joined(first: np.ndarray, parts: list[np.ndarray]) -> np.ndarray:
    """``first`` then ``parts`` as one int32 array, each part released once copied (``parts`` ends
    empty): a build's peak holds the joined array and one part, not every part twice."""
    out = np.empty(len(first) + sum(len(p) for p in parts), np.int32)
    out[: len(first)] = first
    at = len(first)
    parts.reverse()
    while parts:
        part = parts.pop()
        out[at : at + len(part)] = part
        at += len(part)
    return out

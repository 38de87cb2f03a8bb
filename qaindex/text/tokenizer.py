"""Deterministic, dependency-free text tokenization shared by training and runtime.

Two kinds of tokenizer are provided (see :data:`TOKENIZER_KINDS`):

``"wordpiece"``
    Reproduces HuggingFace's uncased ``BertTokenizer`` (for example the one of
    ``bert-base-uncased`` or ``all-MiniLM-L6-v2``): BERT's basic tokenizer
    (text cleaning, CJK ideograph splitting, lowercasing, accent stripping,
    punctuation splitting) followed by greedy longest-match-first WordPiece with
    the ``##`` continuation prefix.
``"word"``
    The same basic tokenizer, after which every word is looked up whole in the
    vocabulary (see :meth:`Tokenizer.build_word_vocab`).

Only the standard library and numpy are used, so the same code runs in training
and at query time and produces identical ids in both.

Where HuggingFace's two BERT implementations disagree, the fast ``tokenizers``
one (used by sentence-transformers and ``tokenizer.json``) is followed for
lowercasing: it maps characters one at a time, so a word-final capital sigma
becomes "σ" rather than the "ς" of ``str.lower()``.  Character classes
(control, punctuation, CJK ideograph ranges) follow the Python ``BertTokenizer``
and this interpreter's :mod:`unicodedata`; the two differ from ``tokenizers``
only for characters unassigned or newly assigned in recent Unicode versions.
Special tokens written literally in the text (such as "[SEP]") are not
recognised; they are tokenized like any other text.

A tokenizer made with ``cls_token`` and ``sep_token`` (as exported sentence-transformers
models are, :mod:`qaindex_export.exporting.sentence_transformer`) wraps every encoding in them, as
HuggingFace's BERT tokenizers do for a single sequence: ``[CLS] tokens [SEP]``, truncated
to ``max_tokens`` including both (the text's tokens are cut to ``max_tokens - 2``).

Examples
--------
>>> tok = Tokenizer(["[PAD]", "[UNK]", "un", "##aff", "##able", ",", "!"])
>>> tok.tokenize("Unaffable, UNAFFABLE!")
['un', '##aff', '##able', ',', 'un', '##aff', '##able', '!']
>>> tok.encode("unaffable?")
[2, 3, 4, 1]
"""

from __future__ import annotations

import functools
import itertools
import os
import re
import unicodedata
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from .. import fast_path_switch

__all__ = ["TOKENIZER_KINDS", "Tokenizer", "TokenizerError"]

TOKENIZER_KINDS: Final[tuple[str, ...]] = ("wordpiece", "word")
"""The accepted values of the ``kind`` setting."""

# Number of whitespace-separated chunks whose token ids each Tokenizer remembers.
_CACHE_SIZE: Final = 65536
# Longer chunks are tokenized without the cache so that it cannot pin huge strings.
_MAX_CACHED_CHUNK_CHARS: Final = 256

# Characters that ``str.split()`` treats as whitespace but BERT deletes as control
# characters (category Cc) instead of treating them as separators.  They are
# removed before splitting so that "a\x0bb" becomes "ab", exactly as in BERT.
# Every other character that BERT treats as whitespace is also whitespace for
# ``str.split()``, and every other ``str.split()`` separator is one for BERT too.
_CONTROL_SPACES_RE: Final = re.compile("[\x0b\x0c\x1c-\x1f\x85]")

# The exact fast path (see ``Tokenizer._fast_ids``).  In pure-ASCII text without control
# characters (tab, newline and carriage return are whitespace, not control, for BERT),
# BERT's chunks (see ``_chunks``) are exactly ``text.split()``'s, and lowercasing the whole
# text first changes no chunk's ids (ASCII lowercasing is idempotent).  So the ids of such a
# text are the concatenated ids of its ``text.lower().split()`` chunks, each computed once
# (``Tokenizer._fast_chunk_ids``) and then remembered in a plain dict.  ``text.split()``
# would also split at \x0b, \x0c and \x1c-\x1f, which BERT deletes instead: texts with
# any ASCII control character take the generic path.
_ASCII_CONTROL_RE: Final = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
# The basic-tokenizer words of such a chunk: runs of letters and digits, and every other
# character alone (each is punctuation for BERT: code points 33-47, 58-64, 91-96, 123-126).
_ASCII_WORDS_RE: Final = re.compile(r"[A-Za-z0-9]+|[^A-Za-z0-9]")
# Separates texts joined into one string for a batch; a control character, so never part of
# a text that takes the fast path, and a chunk of its own between spaces.
_SEPARATOR: Final = "\x01"
_SEPARATOR_ID: Final = -1
# Distinct chunks whose ids the fast path remembers per Tokenizer (cleared when full).
_FAST_CACHE_SIZE: Final = 1 << 18
# Texts joined per batch on the fast path (bounds the memory of the temporary word lists).
_FAST_BLOCK: Final = 2048
# With a token limit, texts longer than this many characters per allowed token are first
# tokenized up to a space near that length; when that prefix already holds enough tokens
# (its tokens are the text's first ones), the rest of the text is never looked at.
_PREFIX_CHARS_PER_TOKEN: Final = 16


def _fast_eligible(text: object) -> bool:
    """Whether ``text`` is a str of ASCII characters other than control characters (tab,
    newline and carriage return allowed): the texts the fast path tokenizes."""
    return type(text) is str and text.isascii() and (text.isprintable() or _ASCII_CONTROL_RE.search(text) is None)


class _ChunkIds(dict[str, tuple[int, ...]]):
    """``chunk -> token ids``, computed on a miss and forgotten all at once when full.

    A dict subclass so that ``map(cache.__getitem__, chunks)`` runs at C speed on hits.
    """

    def __init__(self, compute: Callable[[str], tuple[int, ...]]) -> None:
        super().__init__()
        self._compute = compute
        self[_SEPARATOR] = (_SEPARATOR_ID,)

    def __missing__(self, chunk: str) -> tuple[int, ...]:
        ids = self._compute(chunk)
        if len(chunk) <= _MAX_CACHED_CHUNK_CHARS:
            if len(self) >= _FAST_CACHE_SIZE:
                self.clear()
                self[_SEPARATOR] = (_SEPARATOR_ID,)
            self[chunk] = ids
        return ids


_CONFIG_FIELDS: Final[tuple[str, ...]] = (
    "kind",
    "vocab",
    "vocab_size",
    "lowercase",
    "strip_accents",
    "unk_token",
    "pad_token",
    "max_chars_per_word",
)

# Classes of a raw character in the cleaning step.
_KEEP: Final = 0
_DROP: Final = 1
_SPACE: Final = 2
_CJK: Final = 3


class TokenizerError(ValueError):
    """A tokenizer setting or vocabulary is invalid.

    The message names the offending file or field, the bad value and what to do
    about it.

    Examples
    --------
    >>> try:
    ...     Tokenizer(["[PAD]"])
    ... except TokenizerError as exc:
    ...     print(exc)  # doctest: +ELLIPSIS
    unk_token '[UNK]' is not in the vocabulary; ...
    """


def _is_cjk(cp: int) -> bool:
    """Return whether code point ``cp`` is a CJK ideograph as BERT defines it."""
    return (
        0x4E00 <= cp <= 0x9FFF
        or 0x3400 <= cp <= 0x4DBF
        or 0x20000 <= cp <= 0x2A6DF
        or 0x2A700 <= cp <= 0x2B73F
        or 0x2B740 <= cp <= 0x2B81F
        or 0x2B820 <= cp <= 0x2CEAF
        or 0xF900 <= cp <= 0xFAFF
        or 0x2F800 <= cp <= 0x2FA1F
    )


@functools.lru_cache(maxsize=16384)
def _raw_class(ch: str) -> int:
    """Classify one input character for BERT's cleaning and CJK steps."""
    if ch in " \t\n\r":
        return _SPACE
    cp = ord(ch)
    if cp == 0 or cp == 0xFFFD:
        return _DROP
    category = unicodedata.category(ch)
    if category[0] == "C":
        return _DROP
    if category == "Zs" or ch.isspace():
        return _SPACE
    if _is_cjk(cp):
        return _CJK
    return _KEEP


@functools.lru_cache(maxsize=16384)
def _is_punctuation(ch: str) -> bool:
    """Return whether ``ch`` is punctuation as BERT defines it."""
    cp = ord(ch)
    if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
        return True
    return unicodedata.category(ch)[0] == "P"


def _strip_accents(text: str) -> str:
    """Decompose ``text`` (NFD) and drop the non-spacing marks (category Mn)."""
    if text.isascii():
        return text
    return "".join(ch for ch in unicodedata.normalize("NFD", text) if unicodedata.category(ch) != "Mn")


def _split_punctuation(word: str, out: list[str]) -> None:
    """Append ``word`` to ``out`` split so that each punctuation char stands alone."""
    start = 0
    for i, ch in enumerate(word):
        if _is_punctuation(ch):
            if start < i:
                out.append(word[start:i])
            out.append(ch)
            start = i + 1
    if start < len(word):
        out.append(word[start:] if start else word)


def _basic_words(chunk: str, lowercase: bool, strip_accents: bool) -> list[str]:
    """Run BERT's basic tokenizer on one whitespace-free chunk of text.

    Parameters
    ----------
    chunk : str
        Text as produced by ``str.split()`` after removing the characters matched by
        ``_CONTROL_SPACES_RE``.
    lowercase, strip_accents : bool
        Lowercase the words; additionally strip accents (only when lowercasing).

    Returns
    -------
    list of str
        The words, in order.
    """
    # Cleaning (drop control characters, U+0000 and U+FFFD) and CJK splitting.
    pieces: list[str] = []
    buf: list[str] = []
    for ch in chunk:
        cls = _raw_class(ch)
        if cls == _KEEP:
            buf.append(ch)
        elif cls == _DROP:
            continue
        else:
            if buf:
                pieces.append("".join(buf))
                buf.clear()
            if cls == _CJK:
                pieces.append(ch)
    if buf:
        pieces.append("".join(buf))

    words: list[str] = []
    for piece in pieces:
        if lowercase:
            # Lowercase character by character, as HuggingFace's tokenizers does:
            # str.lower() would turn a word-final capital sigma into "ς", not "σ".
            piece = piece.lower() if "Σ" not in piece else "".join(c.lower() for c in piece)
            if strip_accents:
                piece = _strip_accents(piece)
        _split_punctuation(piece, words)
    if all(word.isascii() for word in words):
        return words
    # BERT splits on whitespace once more at the end; case mapping or
    # decomposition never produces whitespace in practice, but stay exact.
    return [part for word in words for part in word.split()]


def _chunks(text: str) -> list[str]:
    """Split ``text`` into whitespace-free chunks exactly where BERT splits words."""
    return _CONTROL_SPACES_RE.sub("", text).split()


def _check_vocab(tokens: Sequence[object]) -> dict[str, int]:
    """Validate vocabulary entries and return the token-to-id mapping."""
    ids: dict[str, int] = {}
    for index, token in enumerate(tokens):
        if not isinstance(token, str):
            raise TokenizerError(
                f"vocabulary entry at line {index + 1} is {token!r} "
                f"({type(token).__name__}), not a string; every token must be a str"
            )
        if "\n" in token or "\r" in token:
            raise TokenizerError(
                f"vocabulary token {token!r} at line {index + 1} contains a line "
                "break; tokens must not contain '\\n' or '\\r'"
            )
        previous = ids.setdefault(token, index)
        if previous != index:
            raise TokenizerError(
                f"duplicate token {token!r} in the vocabulary at lines "
                f"{previous + 1} and {index + 1}; remove one of them "
                "(each token must appear once, its id is its line number minus 1)"
            )
    try:
        "".join(ids).encode("utf-8")
    except UnicodeEncodeError:
        for token, index in ids.items():
            try:
                token.encode("utf-8")
            except UnicodeEncodeError:
                raise TokenizerError(
                    f"vocabulary token {token!r} at line {index + 1} contains a lone "
                    "surrogate and cannot be saved as UTF-8; remove or fix it"
                ) from None
    return ids


def _require_bool(name: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise TokenizerError(
            f"tokenizer setting {name!r} must be true or false, got {value!r} "
            f"({type(value).__name__}); set it to a boolean"
        )
    return value


def _require_str(name: str, value: object) -> str:
    if not isinstance(value, str):
        raise TokenizerError(
            f"tokenizer setting {name!r} must be a string, got {value!r} ({type(value).__name__}); set it to a string"
        )
    return value


def _require_int(name: str, value: object, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TokenizerError(
            f"tokenizer setting {name!r} must be an integer, got {value!r} "
            f"({type(value).__name__}); set it to an integer >= {minimum}"
        )
    if value < minimum:
        raise TokenizerError(
            f"tokenizer setting {name!r} must be >= {minimum}, got {value!r}; set it to an integer >= {minimum}"
        )
    return value


def _check_limit(name: str, value: object) -> int:
    """Validate a call argument such as ``max_tokens`` (not a stored setting)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < 0:
        raise ValueError(f"{name} must be >= 0, got {value}")
    return value


class Tokenizer:
    """Deterministic BERT-compatible tokenizer backed by a fixed vocabulary.

    Parameters
    ----------
    vocab : sequence of str
        The tokens; a token's id is its index.  ``pad_token`` and ``unk_token``
        must be among them and no token may appear twice.
    kind : {"wordpiece", "word"}, default "wordpiece"
        ``"wordpiece"`` reproduces HuggingFace's ``BertTokenizer``;
        ``"word"`` looks each basic-tokenizer word up whole.
    lowercase : bool, default True
        Lowercase the text.
    strip_accents : bool, default True
        Remove accents (NFD decomposition, then drop combining marks).  As in
        BERT, accents are stripped only when ``lowercase`` is also true.
    unk_token : str, default "[UNK]"
        Token emitted for words that cannot be represented.
    pad_token : str, default "[PAD]"
        Token used to pad rows in :meth:`encode_batch`.
    max_chars_per_word : int, default 100
        For ``"wordpiece"``, words with more characters (code points) than this
        become ``unk_token``, as in BERT.  Not used by ``"word"``.
    cls_token, sep_token : str or None, default None
        When both are given, :meth:`encode`, :meth:`encode_many` and
        :meth:`encode_batch` return ``[cls] ids [sep]`` (BERT's single-sequence
        template), with ``max_tokens`` counting both.  :meth:`tokenize` never
        adds them.

    Raises
    ------
    TokenizerError
        If a setting is invalid, a special token is missing from ``vocab``, or
        ``vocab`` contains a duplicate or non-string entry.

    Notes
    -----
    Instances are immutable and safe to share between threads.  Each instance
    remembers the ids of up to 65536 distinct whitespace-separated chunks of
    text, which makes repeated words almost free to tokenize; pure-ASCII text
    (the common case) takes an exact fast path with its own cache of up to
    262144 chunks and as many words, and :meth:`encode_many` tokenizes many
    such texts with almost no per-text Python work.

    Examples
    --------
    >>> vocab = ["[PAD]", "[UNK]", "hello", "world", ",", "!", "un", "##aff", "##able"]
    >>> tok = Tokenizer(vocab)
    >>> tok.tokenize("Héllo, WORLD!")
    ['hello', ',', 'world', '!']
    >>> tok.encode("hello unaffable world", max_tokens=3)
    [2, 6, 7]
    >>> tok.pad_id, tok.unk_id, tok.vocab_size
    (0, 1, 9)
    """

    def __init__(
        self,
        vocab: Sequence[str],
        *,
        kind: str = "wordpiece",
        lowercase: bool = True,
        strip_accents: bool = True,
        unk_token: str = "[UNK]",
        pad_token: str = "[PAD]",
        max_chars_per_word: int = 100,
        cls_token: str | None = None,
        sep_token: str | None = None,
    ) -> None:
        if isinstance(vocab, (str, bytes)) or not isinstance(vocab, Sequence):
            raise TokenizerError(
                f"vocab must be a sequence of token strings, got {type(vocab).__name__}; "
                "pass a list of tokens (to load a saved tokenizer use Tokenizer.from_config)"
            )
        kind = _require_str("kind", kind)
        if kind not in TOKENIZER_KINDS:
            raise TokenizerError(
                f"unknown tokenizer kind {kind!r}; expected one of " + ", ".join(repr(k) for k in TOKENIZER_KINDS)
            )
        self._kind = kind
        self._lowercase = _require_bool("lowercase", lowercase)
        self._strip_accents = _require_bool("strip_accents", strip_accents)
        self._unk_token = _require_str("unk_token", unk_token)
        self._pad_token = _require_str("pad_token", pad_token)
        self._max_chars = _require_int("max_chars_per_word", max_chars_per_word, 1)

        self._vocab: tuple[str, ...] = tuple(vocab)
        self._ids = _check_vocab(self._vocab)
        for name, token in (("unk_token", unk_token), ("pad_token", pad_token)):
            if token not in self._ids:
                raise TokenizerError(
                    f"{name} {token!r} is not in the vocabulary; add {token!r} to the "
                    f"vocabulary or pass {name}= a token that is in it"
                )
        self._unk_id = self._ids[unk_token]
        self._pad_id = self._ids[pad_token]
        if (cls_token is None) != (sep_token is None):
            raise TokenizerError("cls_token and sep_token go together: give both (e.g. '[CLS]' and '[SEP]') or neither")
        self._cls_token = None if cls_token is None else _require_str("cls_token", cls_token)
        self._sep_token = None if sep_token is None else _require_str("sep_token", sep_token)
        self._wrap: tuple[int, int] | None = None
        if self._cls_token is not None and self._sep_token is not None:
            for name, token in (("cls_token", self._cls_token), ("sep_token", self._sep_token)):
                if token not in self._ids:
                    raise TokenizerError(
                        f"{name} {token!r} is not in the vocabulary; add {token!r} to the "
                        f"vocabulary or pass {name}= a token that is in it"
                    )
            self._wrap = (self._ids[self._cls_token], self._ids[self._sep_token])
        self._max_piece_chars = max(1, max(map(len, self._vocab)))
        self.clear_cache()

    def clear_cache(self) -> None:
        """Forget the word pieces of the chunks seen so far (a fresh tokenizer's state)."""
        self._cached_chunk_ids: Callable[[str], tuple[int, ...]] = functools.lru_cache(maxsize=_CACHE_SIZE)(
            self._chunk_ids
        )
        self._fast_cache = _ChunkIds(self._fast_chunk_ids)
        self._fast_words: dict[str, tuple[int, ...]] = {}

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        del state["_cached_chunk_ids"]
        del state["_fast_cache"]
        del state["_fast_words"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self.clear_cache()

    def __repr__(self) -> str:
        return (
            f"Tokenizer(kind={self._kind!r}, vocab_size={len(self._vocab)}, "
            f"lowercase={self._lowercase}, strip_accents={self._strip_accents}, "
            f"unk_token={self._unk_token!r}, pad_token={self._pad_token!r}, "
            f"max_chars_per_word={self._max_chars}"
            + ("" if self._wrap is None else f", cls_token={self._cls_token!r}, sep_token={self._sep_token!r}")
            + ")"
        )

    # ------------------------------------------------------------------ properties

    @property
    def kind(self) -> str:
        """The tokenizer kind, one of :data:`TOKENIZER_KINDS`."""
        return self._kind

    @property
    def vocab(self) -> tuple[str, ...]:
        """The vocabulary; a token's id is its index."""
        return self._vocab

    @property
    def vocab_size(self) -> int:
        """The number of tokens in the vocabulary."""
        return len(self._vocab)

    @property
    def pad_id(self) -> int:
        """The id of ``pad_token``."""
        return self._pad_id

    @property
    def unk_id(self) -> int:
        """The id of ``unk_token``."""
        return self._unk_id

    # ------------------------------------------------------------------ tokenizing

    def _wordpiece(self, word: str, out: list[int]) -> None:
        """Append the WordPiece ids of one basic-tokenizer word to ``out``."""
        n = len(word)
        if n > self._max_chars:
            out.append(self._unk_id)
            return
        ids = self._ids
        pieces: list[int] = []
        start = 0
        while start < n:
            end = min(n, start + self._max_piece_chars)
            found = -1
            while start < end:
                piece = word[start:end] if start == 0 else "##" + word[start:end]
                found = ids.get(piece, -1)
                if found >= 0:
                    break
                end -= 1
            if found < 0:
                out.append(self._unk_id)
                return
            pieces.append(found)
            start = end
        out.extend(pieces)

    def _chunk_ids(self, chunk: str) -> tuple[int, ...]:
        """Return the token ids of one whitespace-free chunk of text."""
        words = _basic_words(chunk, self._lowercase, self._strip_accents)
        if self._kind == "word":
            ids = self._ids
            unk = self._unk_id
            return tuple(ids.get(word, unk) for word in words)
        out: list[int] = []
        for word in words:
            self._wordpiece(word, out)
        return tuple(out)

    def _fast_chunk_ids(self, chunk: str) -> tuple[int, ...]:
        """:meth:`_chunk_ids` of a chunk of a fast-path text (ASCII, no space or control
        character; lowercased already when lowercasing), with the ids of each word remembered."""
        words = self._fast_words
        if len(words) >= _FAST_CACHE_SIZE:
            words.clear()
        out: list[int] = []
        for word in _ASCII_WORDS_RE.findall(chunk):
            ids = words.get(word)
            if ids is None:
                if self._kind == "word":
                    ids = (self._ids.get(word, self._unk_id),)
                else:
                    pieces: list[int] = []
                    self._wordpiece(word, pieces)
                    ids = tuple(pieces)
                words[word] = ids
            out += ids
        return tuple(out)

    def _fast_ids(self, text: str, limit: int | None) -> list[int] | None:
        """The token ids of one text through the fast path; None if it does not qualify.

        Gives exactly what :meth:`_encode_generic` gives (see ``_ASCII_CONTROL_RE``'s comment).
        """
        if not _fast_eligible(text):
            return None
        if limit is not None and len(text) > _PREFIX_CHARS_PER_TOKEN * limit + 64:
            # The tokens of a prefix that ends at a space are a prefix of the text's tokens.
            space = text.find(" ", _PREFIX_CHARS_PER_TOKEN * limit)
            if space >= 0:
                head = self._fast_ids(text[:space], None)
                if head is not None and len(head) >= limit:
                    del head[limit:]
                    return head
        chunks = (text.lower() if self._lowercase else text).split()
        out = list(itertools.chain.from_iterable(map(self._fast_cache.__getitem__, chunks)))
        if limit is not None and len(out) > limit:
            del out[limit:]
        return out

    def encode_ragged(
        self, texts: Sequence[str], limit: int | None
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        """Token ids of many texts as one flat array: ``(flat, starts, lengths)``, the batch
        method :meth:`qaindex.Model.encode` calls (then :meth:`pad_ragged` per batch).

        Text ``i``'s ids are ``flat[starts[i] : starts[i] + lengths[i]]``, equal to
        ``encode(texts[i], limit)`` (wrapped in ``cls_token``/``sep_token`` if set); one
        array for the batch instead of a list per text.

        Example
        -------
        >>> tok = Tokenizer(["[PAD]", "[UNK]", "a", "b"])
        >>> flat, starts, lengths = tok.encode_ragged(["a b a", "b"], None)
        >>> flat.tolist(), starts.tolist(), lengths.tolist()
        ([2, 3, 2, 3], [0, 3], [3, 1])
        """
        if self._wrap is None:
            return self._encode_ragged_plain(texts, limit)
        if limit is not None and limit < 2:
            rows = [self._wrapped(self._encode(t, 0), limit) for t in texts]
            lengths = np.fromiter(map(len, rows), dtype=np.int64, count=len(rows))
            flat = np.fromiter(itertools.chain.from_iterable(rows), dtype=np.int64, count=int(lengths.sum()))
            return flat, np.cumsum(lengths) - lengths, lengths
        flat, starts, lengths = self._encode_ragged_plain(texts, None if limit is None else limit - 2)
        n = len(lengths)
        out = np.empty(len(flat) + 2 * n, dtype=np.int64)
        new_starts = starts + 2 * np.arange(n, dtype=np.int64)
        out[new_starts] = self._wrap[0]
        out[new_starts + lengths + 1] = self._wrap[1]
        text_of = np.repeat(np.arange(n, dtype=np.int64), lengths)
        out[np.arange(len(flat), dtype=np.int64) + 2 * text_of + 1] = flat
        return out, new_starts, lengths + 2

    def _wrapped(self, ids: list[int], limit: int | None) -> list[int]:
        """``[cls] ids [sep]`` cut to ``limit`` (``ids`` already cut to ``limit - 2``)."""
        assert self._wrap is not None
        out = [self._wrap[0], *ids, self._wrap[1]]
        return out if limit is None else out[:limit]

    def _encode_ragged_plain(
        self, texts: Sequence[str], limit: int | None
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        """Token ids of many texts as one flat array, without special tokens.

        Text ``i``'s ids are ``flat[starts[i] : starts[i] + lengths[i]]`` (truncated to
        ``limit``), equal to ``encode(texts[i], limit)``.  Texts that qualify for the fast path
        are joined ``_FAST_BLOCK`` at a time into one string, split and looked up with no
        per-text Python work; the others go through :meth:`_encode` one by one.
        """
        n = len(texts)
        cap = -1 if limit is None else limit
        parts: list[npt.NDArray[np.int64]] = []
        lengths = np.zeros(n, dtype=np.int64)
        chain = itertools.chain.from_iterable
        lookup = self._fast_cache.__getitem__
        long_text = _PREFIX_CHARS_PER_TOKEN * cap + 64 if cap >= 0 else -1
        for first in range(0, n, _FAST_BLOCK):
            block = texts[first : first + _FAST_BLOCK]
            fast = [
                i for i, text in enumerate(block) if _fast_eligible(text) and (long_text < 0 or len(text) <= long_text)
            ]
            joined = (" " + _SEPARATOR + " ").join([block[i] for i in fast])
            if self._lowercase:
                joined = joined.lower()
            flat = np.fromiter(chain(map(lookup, joined.split())), dtype=np.int64)
            # Text bounds in ``flat``: between separators (one fewer than the fast texts).
            seps = np.flatnonzero(flat == _SEPARATOR_ID)
            src = np.zeros(len(block), dtype=np.int64)
            size = np.zeros(len(block), dtype=np.int64)
            if fast:
                fast_idx = np.asarray(fast, dtype=np.int64)
                begin = np.concatenate(([0], seps + 1))
                end = np.concatenate((seps, [len(flat)]))
                src[fast_idx] = begin
                size[fast_idx] = end - begin
            if len(fast) < len(block):
                slow_ids: list[int] = []
                is_fast = np.zeros(len(block), dtype=bool)
                is_fast[fast] = True
                for i in np.flatnonzero(~is_fast).tolist():
                    ids = self._encode(block[i], limit)
                    src[i] = len(flat) + len(slow_ids)
                    size[i] = len(ids)
                    slow_ids += ids
                flat = np.concatenate((flat, np.asarray(slow_ids, dtype=np.int64)))
            if cap >= 0:
                np.minimum(size, cap, out=size)
            lengths[first : first + len(block)] = size
            # Gather every text's (truncated) ids, in text order, without a Python loop.
            dst = np.cumsum(size) - size
            total = int(size.sum())
            parts.append(flat[np.repeat(src - dst, size) + np.arange(total, dtype=np.int64)])
        flat_all = np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)
        starts = np.cumsum(lengths) - lengths
        return flat_all, starts, lengths

    def _encode(self, text: str, limit: int | None) -> list[int]:
        if not isinstance(text, str):
            raise TypeError(f"text must be a str, got {type(text).__name__}")
        if limit != 0 and fast_path_switch.enabled():
            fast = self._fast_ids(text, limit)
            return self._encode_mixed(text, limit) if fast is None else fast
        return self._encode_generic(text, limit)

    def _encode_mixed(self, text: str, limit: int | None) -> list[int]:
        """:meth:`_encode_generic` for any text, its plain ASCII chunks looked up in the fast cache.

        A chunk of printable ASCII characters (no control character) has the same ids as
        its lowercased form on the fast path, so texts with a few non-ASCII characters
        share the fast path's cache for their other words.
        """
        out: list[int] = []
        fast = self._fast_cache
        cached = self._cached_chunk_ids
        lowercase = self._lowercase
        for chunk in _chunks(text):
            if chunk.isascii() and chunk.isprintable():
                out += fast[chunk.lower() if lowercase else chunk]
            elif len(chunk) <= _MAX_CACHED_CHUNK_CHARS:
                out += cached(chunk)
            else:
                out += self._chunk_ids(chunk)
            if limit is not None and len(out) >= limit:
                del out[limit:]
                break
        return out

    def _encode_generic(self, text: str, limit: int | None) -> list[int]:
        """The reference implementation: chunk by chunk through BERT's basic tokenizer."""
        out: list[int] = []
        if limit == 0:
            return out
        cached = self._cached_chunk_ids
        for chunk in _chunks(text):
            if len(chunk) <= _MAX_CACHED_CHUNK_CHARS:
                out.extend(cached(chunk))
            else:
                out.extend(self._chunk_ids(chunk))
            if limit is not None and len(out) >= limit:
                del out[limit:]
                break
        return out

    def tokenize(self, text: str) -> list[str]:
        """Split ``text`` into vocabulary tokens.

        Parameters
        ----------
        text : str
            Any text; never raises for a ``str`` (control characters, lone
            surrogates and unknown symbols are dropped or become ``unk_token``).

        Returns
        -------
        list of str
            The tokens, each of which is in :attr:`vocab`.  Empty for text with no
            tokens (for example ``""`` or whitespace only).

        Examples
        --------
        >>> tok = Tokenizer(["[PAD]", "[UNK]", "a", "##b", "中", "."])
        >>> tok.tokenize("ab.中  🙂 \\x00")
        ['a', '##b', '.', '中', '[UNK]']
        """
        vocab = self._vocab
        return [vocab[i] for i in self._encode(text, None)]

    def encode(self, text: str, max_tokens: int | None = None) -> list[int]:
        """Convert ``text`` to token ids.

        Parameters
        ----------
        text : str
            Any text (see :meth:`tokenize`).
        max_tokens : int or None, default None
            Keep only the first ``max_tokens`` ids (no limit if None).

        Returns
        -------
        list of int
            Token ids, each in ``range(vocab_size)``.  No special tokens such as
            ``[CLS]`` or ``[SEP]`` are added.

        Raises
        ------
        ValueError
            If ``max_tokens`` is negative.

        Examples
        --------
        >>> tok = Tokenizer(["[PAD]", "[UNK]", "a", "b"])
        >>> tok.encode("a b c a")
        [2, 3, 1, 2]
        >>> tok.encode("a b c a", max_tokens=2)
        [2, 3]
        """
        limit = None if max_tokens is None else _check_limit("max_tokens", max_tokens)
        if self._wrap is not None:
            return self._wrapped(self._encode(text, None if limit is None else max(limit - 2, 0)), limit)
        return self._encode(text, limit)

    def encode_batch(
        self, texts: Sequence[str], max_tokens: int
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        """Encode several texts into a padded id matrix and its attention mask.

        Parameters
        ----------
        texts : sequence of str
            The texts.
        max_tokens : int
            Truncate every text to at most this many tokens.

        Returns
        -------
        ids : numpy.ndarray of int64, shape (len(texts), L)
            Token ids, right-padded with :attr:`pad_id`.  ``L`` is the length of the
            longest truncated encoding, but at least 1.
        mask : numpy.ndarray of int64, shape (len(texts), L)
            1 where ``ids`` holds a real token and 0 where it holds padding.  A
            text without tokens gives a row of zeros.

        Raises
        ------
        ValueError
            If ``max_tokens`` is negative.

        Examples
        --------
        >>> tok = Tokenizer(["[PAD]", "[UNK]", "a", "b"])
        >>> ids, mask = tok.encode_batch(["a b a", "b", ""], max_tokens=2)
        >>> ids
        array([[2, 3],
               [3, 0],
               [0, 0]])
        >>> mask
        array([[1, 1],
               [1, 0],
               [0, 0]])
        """
        if isinstance(texts, str):
            raise TypeError("texts must be a sequence of str, not a single str")
        return self.pad(self.encode_many(texts, max_tokens))

    def encode_many(self, texts: Iterable[str], max_tokens: int | None = None) -> list[list[int]]:
        """Convert several texts to token ids: ``[encode(t, max_tokens) for t in texts]``, faster.

        Parameters
        ----------
        texts : iterable of str
            The texts (a single ``str`` is refused).
        max_tokens : int or None, default None
            Keep only the first ``max_tokens`` ids of each text (no limit if None).

        Returns
        -------
        list of list of int
            One id list per text, in order.

        Raises
        ------
        TypeError
            If ``texts`` is a ``str`` or contains something that is not a ``str``.
        ValueError
            If ``max_tokens`` is negative.

        Examples
        --------
        >>> tok = Tokenizer(["[PAD]", "[UNK]", "a", "b", "##b"])
        >>> tok.encode_many(["a b", "ab", "é"], max_tokens=1)
        [[2], [2], [1]]
        """
        if isinstance(texts, str):
            raise TypeError("texts must be a sequence of str, not a single str")
        limit = None if max_tokens is None else _check_limit("max_tokens", max_tokens)
        if not fast_path_switch.enabled() or (limit == 0 and self._wrap is None):
            if self._wrap is None:
                return [self._encode(text, limit) for text in texts]
            inner = None if limit is None else max(limit - 2, 0)
            return [self._wrapped(self._encode(text, inner), limit) for text in texts]
        items = texts if isinstance(texts, Sequence) else list(texts)
        flat, starts, lengths = self.encode_ragged(items, limit)
        ids = flat.tolist()
        return [ids[start : start + size] for start, size in zip(starts.tolist(), lengths.tolist(), strict=True)]

    def pad_ragged(
        self,
        flat: npt.NDArray[np.int64],
        starts: npt.NDArray[np.int64],
        lengths: npt.NDArray[np.int64],
        rows: npt.NDArray[np.int64],
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        """:meth:`pad` of the given rows of :meth:`encode_ragged` output, without Python loops.

        Example
        -------
        >>> tok = Tokenizer(["[PAD]", "[UNK]", "a", "b"])
        >>> ids, mask = tok.pad_ragged(*tok.encode_ragged(["a b a", "b"], None), np.array([1, 0]))
        >>> ids.tolist(), mask.tolist()
        ([[3, 0, 0], [2, 3, 2]], [[1, 0, 0], [1, 1, 1]])
        """
        size = lengths[rows]
        width = max(1, int(size.max(initial=0)))
        columns = np.arange(width, dtype=np.int64)
        real = columns < size[:, None]
        ids = np.full((len(rows), width), self._pad_id, dtype=np.int64)
        ids[real] = flat[(starts[rows][:, None] + columns)[real]]
        return ids, real.astype(np.int64)

    def pad(self, rows: Sequence[Sequence[int]]) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        """Right-pad token id lists into an id matrix and its attention mask.

        The one padding rule of qaindex (used by :meth:`encode_batch`, the runtime's
        ``Model.encode`` and training): width is the longest row, but at least 1, filled
        with :attr:`pad_id`; the mask is 1 on real tokens.

        Examples
        --------
        >>> tok = Tokenizer(["[PAD]", "[UNK]", "a", "b"])
        >>> tok.pad([[2, 3], []])
        (array([[2, 3],
               [0, 0]]), array([[1, 1],
               [0, 0]]))
        """
        if not fast_path_switch.enabled():
            return self._pad_generic(rows)
        lengths = np.fromiter(map(len, rows), dtype=np.int64, count=len(rows))
        width = max(1, int(lengths.max(initial=0)))
        real = np.arange(width) < lengths[:, None]
        ids = np.full((len(rows), width), self._pad_id, dtype=np.int64)
        # Boolean assignment fills the True cells in row-major order: each row's ids in turn.
        ids[real] = np.fromiter(itertools.chain.from_iterable(rows), dtype=np.int64, count=int(lengths.sum()))
        return ids, real.astype(np.int64)

    def _pad_generic(self, rows: Sequence[Sequence[int]]) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        """The reference implementation of :meth:`pad`: row by row."""
        width = max([1, *map(len, rows)])
        ids = np.full((len(rows), width), self._pad_id, dtype=np.int64)
        mask = np.zeros((len(rows), width), dtype=np.int64)
        for i, row in enumerate(rows):
            if len(row):
                ids[i, : len(row)] = row
                mask[i, : len(row)] = 1
        return ids, mask

    # ------------------------------------------------------------------ persistence

    def config(self, vocab_file: str = "vocab.txt") -> dict[str, object]:
        """Return the settings as a JSON-serialisable dict.

        Parameters
        ----------
        vocab_file : str, default "vocab.txt"
            Name of the vocabulary file (relative to the directory later given to
            :meth:`from_config`); write it with :meth:`save_vocab`.

        Returns
        -------
        dict
            Keys ``kind``, ``vocab``, ``vocab_size``, ``lowercase``,
            ``strip_accents``, ``unk_token``, ``pad_token`` and
            ``max_chars_per_word``.

        Examples
        --------
        >>> Tokenizer(["[PAD]", "[UNK]"], kind="word").config()  # doctest: +NORMALIZE_WHITESPACE
        {'kind': 'word', 'vocab': 'vocab.txt', 'vocab_size': 2, 'lowercase': True,
         'strip_accents': True, 'unk_token': '[UNK]', 'pad_token': '[PAD]',
         'max_chars_per_word': 100}
        """
        out: dict[str, object] = {
            "kind": self._kind,
            "vocab": vocab_file,
            "vocab_size": len(self._vocab),
            "lowercase": self._lowercase,
            "strip_accents": self._strip_accents,
            "unk_token": self._unk_token,
            "pad_token": self._pad_token,
            "max_chars_per_word": self._max_chars,
        }
        if self._wrap is not None:  # only then: older readers keep reading every other model
            out["cls_token"] = self._cls_token
            out["sep_token"] = self._sep_token
        return out

    def save_vocab(self, path: str | os.PathLike[str]) -> None:
        """Write the vocabulary to ``path``: UTF-8, one token per line, ``\\n`` endings.

        Parameters
        ----------
        path : str or os.PathLike
            Destination file; overwritten if it exists.

        Examples
        --------
        >>> import tempfile
        >>> tok = Tokenizer(["[PAD]", "[UNK]", "a"])
        >>> with tempfile.TemporaryDirectory() as d:
        ...     tok.save_vocab(Path(d) / "vocab.txt")
        ...     loaded = Tokenizer.from_config(tok.config(), d)
        >>> loaded.vocab == tok.vocab
        True
        """
        with open(path, "w", encoding="utf-8", newline="\n") as f:
            f.writelines(token + "\n" for token in self._vocab)

    @classmethod
    def from_config(cls, config: Mapping[str, object], directory: str | os.PathLike[str]) -> Tokenizer:
        """Create a tokenizer from :meth:`config` output and its vocabulary file.

        Parameters
        ----------
        config : mapping
            Settings as returned by :meth:`config` (for example read back from
            JSON).  Unknown keys are ignored.
        directory : str or os.PathLike
            Directory that ``config["vocab"]`` is relative to.

        Returns
        -------
        Tokenizer

        Raises
        ------
        TokenizerError
            If a field is missing or has the wrong type, the kind is unknown, the
            vocabulary file is missing or unreadable, or its number of tokens is
            not ``config["vocab_size"]``.  The message names the field or file.

        Examples
        --------
        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as d:
        ...     _ = (Path(d) / "words.txt").write_text("[PAD]\\n[UNK]\\nhi\\n", encoding="utf-8")
        ...     cfg = Tokenizer(["[PAD]", "[UNK]", "hi"], kind="word").config("words.txt")
        ...     tok = Tokenizer.from_config(cfg, d)
        >>> tok.tokenize("Hi there")
        ['hi', '[UNK]']
        """
        if not isinstance(config, Mapping):
            raise TokenizerError(
                f"tokenizer config must be a mapping (JSON object), got "
                f"{type(config).__name__}; pass the dict produced by Tokenizer.config()"
            )
        missing = [key for key in _CONFIG_FIELDS if key not in config]
        if missing:
            raise TokenizerError(
                "tokenizer config is missing the field(s) "
                + ", ".join(repr(key) for key in missing)
                + "; add them or re-export the model (expected fields: "
                + ", ".join(_CONFIG_FIELDS)
                + ")"
            )
        kind = _require_str("kind", config["kind"])
        if kind not in TOKENIZER_KINDS:
            raise TokenizerError(
                f"tokenizer config field 'kind' is {kind!r}, which is not a known "
                "tokenizer kind; expected one of "
                + ", ".join(repr(k) for k in TOKENIZER_KINDS)
                + " (was the model exported by a newer qaindex?)"
            )
        vocab_name = _require_str("vocab", config["vocab"])
        vocab_size = _require_int("vocab_size", config["vocab_size"], 0)
        lowercase = _require_bool("lowercase", config["lowercase"])
        strip_accents = _require_bool("strip_accents", config["strip_accents"])
        unk_token = _require_str("unk_token", config["unk_token"])
        pad_token = _require_str("pad_token", config["pad_token"])
        max_chars = _require_int("max_chars_per_word", config["max_chars_per_word"], 1)
        cls_token = config.get("cls_token")
        sep_token = config.get("sep_token")
        for name, token in (("cls_token", cls_token), ("sep_token", sep_token)):
            if token is not None:
                _require_str(name, token)

        path = Path(directory) / vocab_name
        tokens = _read_vocab(path, vocab_name, directory)
        if len(tokens) != vocab_size:
            raise TokenizerError(
                f"tokenizer config field 'vocab_size' is {vocab_size} but the "
                f"vocabulary file {str(path)!r} has {len(tokens)} tokens; the config "
                "and the vocabulary file do not belong together: re-export the "
                "model or correct 'vocab_size'"
            )
        try:
            return cls(
                tokens,
                kind=kind,
                lowercase=lowercase,
                strip_accents=strip_accents,
                unk_token=unk_token,
                pad_token=pad_token,
                max_chars_per_word=max_chars,
                cls_token=cls_token,  # type: ignore[arg-type]
                sep_token=sep_token,  # type: ignore[arg-type]
            )
        except TokenizerError as exc:
            raise TokenizerError(f"vocabulary file {str(path)!r}: {exc}") from None

    # ------------------------------------------------------------------ vocabulary

    @staticmethod
    def build_word_vocab(
        texts: Iterable[str],
        *,
        min_count: int = 1,
        max_size: int | None = None,
        lowercase: bool = True,
        strip_accents: bool = True,
    ) -> list[str]:
        """Build a vocabulary for ``kind="word"`` from a corpus.

        Parameters
        ----------
        texts : iterable of str
            The corpus; it is read once.
        min_count : int, default 1
            Leave out words seen fewer times than this.
        max_size : int or None, default None
            Maximum size of the returned vocabulary, including ``"[PAD]"`` and
            ``"[UNK]"`` (so at least 2).  No limit if None.
        lowercase, strip_accents : bool, default True
            Must match the settings of the :class:`Tokenizer` that will use the
            vocabulary.

        Returns
        -------
        list of str
            ``["[PAD]", "[UNK]"]`` followed by the words, most frequent first and
            ties in alphabetical (code point) order.  Words are produced by the
            same pre-tokenization as ``kind="word"``.

        Raises
        ------
        ValueError
            If ``min_count < 1`` or ``max_size < 2``.

        Examples
        --------
        >>> Tokenizer.build_word_vocab(["The cat.", "the dog"], min_count=1)
        ['[PAD]', '[UNK]', 'the', '.', 'cat', 'dog']
        >>> Tokenizer.build_word_vocab(["The cat.", "the dog"], max_size=3)
        ['[PAD]', '[UNK]', 'the']
        """
        if isinstance(min_count, bool) or not isinstance(min_count, int) or min_count < 1:
            raise ValueError(f"min_count must be an int >= 1, got {min_count!r}")
        if max_size is not None and (isinstance(max_size, bool) or not isinstance(max_size, int) or max_size < 2):
            raise ValueError(f"max_size must be None or an int >= 2 (it includes [PAD] and [UNK]), got {max_size!r}")
        if isinstance(texts, str):
            raise TypeError("texts must be an iterable of str, not a single str")
        chunk_counts: Counter[str] = Counter()
        for text in texts:
            if not isinstance(text, str):
                raise TypeError(f"texts must contain str, got {type(text).__name__}")
            chunk_counts.update(_chunks(text))
        word_counts: Counter[str] = Counter()
        for chunk, count in chunk_counts.items():
            for word in _basic_words(chunk, lowercase, strip_accents):
                word_counts[word] += count
        specials = ["[PAD]", "[UNK]"]
        ranked = sorted(
            (item for item in word_counts.items() if item[1] >= min_count),
            key=lambda item: (-item[1], item[0]),
        )
        words = [word for word, _ in ranked if word not in specials]
        if max_size is not None:
            words = words[: max_size - len(specials)]
        return specials + words


def _read_vocab(path: Path, vocab_name: str, directory: str | os.PathLike[str]) -> list[str]:
    """Read a vocabulary file: UTF-8, one token per line, ``\\n`` line endings."""
    try:
        with open(path, encoding="utf-8", newline="") as f:
            text = f.read()
    except FileNotFoundError:
        raise TokenizerError(
            f"vocabulary file {str(path)!r} not found (tokenizer config field 'vocab' "
            f"is {vocab_name!r}, relative to {os.fspath(directory)!r}); put the "
            "vocabulary file there or correct the 'vocab' field"
        ) from None
    except UnicodeDecodeError as exc:
        raise TokenizerError(
            f"vocabulary file {str(path)!r} is not valid UTF-8 (byte {exc.start}); re-save it as UTF-8"
        ) from None
    except OSError as exc:
        raise TokenizerError(
            f"cannot read vocabulary file {str(path)!r}: {exc.strerror or exc}; check that it is a readable file"
        ) from None
    tokens = text.split("\n")
    if tokens[-1] == "":
        tokens.pop()
    if tokens and tokens[0].startswith("\ufeff"):
        raise TokenizerError(
            f"vocabulary file {str(path)!r} starts with a byte-order mark; re-save it as UTF-8 without BOM"
        )
    for number, token in enumerate(tokens, start=1):
        if token.endswith("\r"):
            raise TokenizerError(
                f"vocabulary file {str(path)!r} line {number} ends with '\\r' "
                "(Windows line endings); re-save it with '\\n' line endings"
            )
    return tokens

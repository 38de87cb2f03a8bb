"""Embeddings for training from a spec: ``minilm``, ``minilm-words``, ``distilled[:PATH]``, ``glove:PATH``,
``word2vec:PATH``, ``none``.

:func:`build_embeddings` turns an embedding spec plus the training texts into an
:class:`~.word_vectors.Embeddings`: the tokenizer vocabulary, the matching matrix
(or None for trainable random init) and the tokenizer kind. The sources themselves are in
:mod:`.word_vectors` (MiniLM, text vector files) and :mod:`.distill` (distilled tables); their
names are importable from here too.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

import numpy as np

from qaindex.text.tokenizer import Tokenizer

from .distill import load_distilled
from .word_vectors import (
    SPECIALS,
    Embeddings,
    EmbeddingsError,
    load_minilm,
    minilm_dir,
    minilm_whole_words,
    read_word_vectors,
)

__all__ = [
    "EMBEDDING_KINDS",
    "Embeddings",
    "EmbeddingsError",
    "build_embeddings",
    "load_minilm",
    "minilm_dir",
    "minilm_whole_words",
    "read_word_vectors",
]

EMBEDDING_KINDS = ("minilm", "minilm-words", "distilled", "glove", "word2vec", "none")


def _text_words(texts: Iterable[str]) -> list[str]:
    """Words of ``texts`` as the ``kind="word"`` tokenizer splits them, most frequent first."""
    return Tokenizer.build_word_vocab(texts)[len(SPECIALS) :]


def build_embeddings(
    spec: str,
    texts: Iterable[str],
    *,
    max_vocab: int = 30000,
    min_count: int = 1,
) -> Embeddings:
    """Build the vocabulary and embedding matrix for an embedding spec.

    Parameters
    ----------
    spec : str
        ``"minilm"`` (frozen all-MiniLM-L6-v2 token embeddings, WordPiece, 384-d),
        ``"minilm-words"`` (the same vectors averaged over whole words, word tokenizer; see
        :func:`~.word_vectors.minilm_whole_words`),
        ``"distilled"`` / ``"distilled:PATH"`` (a table distilled from MiniLM's outputs,
        see :mod:`.distill`; cached, or read from PATH),
        ``"glove:PATH"`` / ``"word2vec:PATH"`` (text vector files, word tokenizer) or
        ``"none"`` (word tokenizer, embeddings trained from random initialisation).
    texts : iterable of str
        Training (and dev) texts; their words are always in the vocabulary of word
        tokenizers (words without a pretrained vector get a zero row).
    max_vocab : int, default 30000
        For ``glove``/``word2vec``: also keep this many of the file's most frequent words
        (its first lines) so unseen test words are covered. For ``none``: the vocabulary
        size limit (most frequent training words).
    min_count : int, default 1
        For ``none``: drop training words seen fewer times.

    Returns
    -------
    Embeddings

    Example
    -------
    >>> emb = build_embeddings("none", ["the cat sat", "the dog"])
    >>> emb.vocab, emb.vectors is None
    (['[PAD]', '[UNK]', 'the', 'cat', 'dog', 'sat'], True)
    """
    kind, _, arg = spec.partition(":")
    if kind not in EMBEDDING_KINDS:
        raise EmbeddingsError(
            f"unknown embeddings {spec!r}; use minilm, minilm-words, distilled, distilled:PATH, glove:PATH, "
            "word2vec:PATH or none"
        )
    if kind == "minilm":
        if arg:
            raise EmbeddingsError(f"embeddings {spec!r}: minilm takes no path")
        return load_minilm()
    if kind == "minilm-words":
        if arg:
            raise EmbeddingsError(f"embeddings {spec!r}: minilm-words takes no path")
        return minilm_whole_words(_text_words(texts))
    if kind == "distilled":
        # a table distilled from MiniLM's outputs (qaindex_export.embeddings.distill), cached or from a file
        source = f"distilled:{os.path.abspath(arg)}" if arg else "distilled"
        return load_distilled(spec).embeddings(source)
    if kind == "none":
        vocab = Tokenizer.build_word_vocab(texts, min_count=min_count, max_size=max(2, max_vocab))
        return Embeddings(vocab, None, "word", "none")
    if not arg:
        raise EmbeddingsError(f"embeddings {spec!r}: give the vector file as {kind}:PATH")
    text_words = _text_words(texts)
    words, vectors = read_word_vectors(arg, keep=text_words, limit=max_vocab)
    row = {w: i for i, w in enumerate(words)}
    vocab = [*SPECIALS, *[w for w in words if w not in SPECIALS]]
    in_vocab = set(vocab)
    vocab += [w for w in text_words if w not in in_vocab]
    matrix = np.zeros((len(vocab), vectors.shape[1]), dtype=np.float32)
    found = 0
    for i, w in enumerate(vocab):
        j = row.get(w)
        if j is not None and i >= len(SPECIALS):
            matrix[i] = vectors[j]
            found += 1
    return Embeddings(vocab, matrix, "word", f"{kind}:{os.path.abspath(arg)}", found=found)

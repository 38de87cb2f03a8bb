"""Splitting tokenized texts into chunks (sentences) for hierarchical encoders (HRDE).

A hierarchical encoder reads a text as ``chunks × tokens``: a word-level network encodes
every chunk, a chunk-level network reads the chunk encodings in order. The split works on
token ids, after tokenization and truncation to the role's ``max_tokens``, so training and
serving split identically:

- a chunk ends after a *sentence-end* token (by default ``.``, ``!`` and ``?``; a run of them,
  like ``?!``, ends one chunk), or when it reaches ``max_chunk_tokens`` tokens;
- only the first ``max_chunks`` chunks are kept;
- an empty text has no chunk (its encoder input is one all-padding chunk).

The manifest's optional ``chunking`` field maps a role to its settings, e.g.
``{"answer": {"method": "sentences", "sentence_end": [".", "!", "?"], "max_chunks": 8,
"max_chunk_tokens": 32}}``; a chunked role's encoder graph takes ``input_ids`` and
``attention_mask`` of shape (batch, chunks, tokens). Sentence-end tokens missing from the
vocabulary are ignored (texts are then cut by length only).

Example
-------
>>> c = Chunking(frozenset({9}), max_chunks=3, max_chunk_tokens=2)
>>> c.split([1, 2, 9, 3, 9, 9, 4, 5, 6])
[[1, 2], [9], [3, 9]]
>>> ids, mask = c.pad([[1, 9, 2], []])
>>> ids.shape, mask.sum(axis=(1, 2)).tolist()
((2, 2, 2), [3, 0])
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import ModelFormatError
from .tokenizer import Tokenizer

__all__ = ["CHUNKING_METHODS", "SENTENCE_END", "Chunking", "read_chunking"]

CHUNKING_METHODS = ("sentences", "length")
"""``sentences``: cut after sentence-end tokens and at ``max_chunk_tokens``; ``length``: at
``max_chunk_tokens`` only."""
SENTENCE_END = (".", "!", "?")


@dataclass(frozen=True)
class Chunking:
    """How one role's token ids are split into chunks.

    Parameters
    ----------
    ends : frozenset of int
        Token ids after which a chunk ends (empty: cut by length only).
    max_chunks : int
        Chunks kept (the first ones).
    max_chunk_tokens : int
        Longest chunk.
    """

    ends: frozenset[int]
    max_chunks: int
    max_chunk_tokens: int

    def split(self, ids: Sequence[int]) -> list[list[int]]:
        """Chunks of one text's token ids (see the module docstring for the rule)."""
        chunks: list[list[int]] = []
        current: list[int] = []
        n = len(ids)
        for i, token in enumerate(ids):
            current.append(int(token))
            sentence_end = token in self.ends and not (i + 1 < n and ids[i + 1] in self.ends)
            if sentence_end or len(current) >= self.max_chunk_tokens:
                chunks.append(current)
                current = []
                if len(chunks) >= self.max_chunks:
                    return chunks
        if current:
            chunks.append(current)
        return chunks[: self.max_chunks]

    def pad(self, rows: Sequence[Sequence[int]]) -> tuple[np.ndarray, np.ndarray]:
        """Token-id rows → ``input_ids``, ``attention_mask`` int64 (batch, chunks, tokens), both ≥ 1.

        Padding (whole chunks and chunk tails) is id 0 with mask 0.
        """
        split = [self.split(r) for r in rows]
        n_chunks = max([1, *(len(s) for s in split)])
        n_tokens = max([1, *(len(c) for s in split for c in s)])
        ids = np.zeros((len(rows), n_chunks, n_tokens), dtype=np.int64)
        mask = np.zeros_like(ids)
        for b, chunks in enumerate(split):
            for c, chunk in enumerate(chunks):
                ids[b, c, : len(chunk)] = chunk
                mask[b, c, : len(chunk)] = 1
        return ids, mask

    @classmethod
    def for_tokenizer(
        cls,
        tokenizer: Tokenizer,
        *,
        method: str = "sentences",
        sentence_end: Sequence[str] = SENTENCE_END,
        max_chunks: int = 8,
        max_chunk_tokens: int = 32,
    ) -> Chunking:
        """Settings resolved against ``tokenizer``'s vocabulary.

        Example
        -------
        >>> tok = Tokenizer(["[PAD]", "[UNK]", "a", "."], kind="word")
        >>> Chunking.for_tokenizer(tok, max_chunks=4).split(tok.encode("a. a a. a"))
        [[2, 3], [2, 2, 3], [2]]
        """
        ends: frozenset[int] = frozenset()
        if method == "sentences":
            index = {token: i for i, token in enumerate(tokenizer.vocab)}
            ends = frozenset(index[t] for t in sentence_end if t in index)
        return cls(ends, int(max_chunks), int(max_chunk_tokens))


def manifest_entry(
    *, method: str = "sentences", sentence_end: Sequence[str] = SENTENCE_END, max_chunks: int, max_chunk_tokens: int
) -> dict[str, Any]:
    """One role's ``chunking`` manifest entry.

    Example
    -------
    >>> manifest_entry(max_chunks=4, max_chunk_tokens=16)["method"]
    'sentences'
    """
    return {
        "method": method,
        "sentence_end": list(sentence_end),
        "max_chunks": int(max_chunks),
        "max_chunk_tokens": int(max_chunk_tokens),
    }


def read_chunking(value: object, mpath: Path, roles: Sequence[str]) -> dict[str, dict[str, Any]]:
    """Validate the manifest's ``chunking`` field (absent: no chunked role); returns it.

    Raises
    ------
    ModelFormatError
        Naming the field and the bad value.

    Example
    -------
    >>> read_chunking(None, Path("m/manifest.json"), ["question", "answer"])
    {}
    """
    if value is None:
        return {}

    def bad(field: str, expected: str, got: object) -> ModelFormatError:
        return ModelFormatError(f'{mpath}: field "{field}" must be {expected}, got {got!r}; re-export the model')

    if not isinstance(value, Mapping):
        raise bad("chunking", "an object mapping roles to chunking settings", value)
    out: dict[str, dict[str, Any]] = {}
    for role, spec in value.items():
        if role not in roles:
            raise bad("chunking", f"keyed by roles among {list(roles)}", role)
        if not isinstance(spec, Mapping):
            raise bad(f"chunking.{role}", "an object", spec)
        if spec.get("method") not in CHUNKING_METHODS:
            raise bad(f"chunking.{role}.method", " or ".join(CHUNKING_METHODS), spec.get("method"))
        ends = spec.get("sentence_end", [])
        if not isinstance(ends, list) or not all(isinstance(t, str) and t for t in ends):
            raise bad(f"chunking.{role}.sentence_end", "a list of tokens", ends)
        for key in ("max_chunks", "max_chunk_tokens"):
            n = spec.get(key)
            if not isinstance(n, int) or isinstance(n, bool) or n < 1:
                raise bad(f"chunking.{role}.{key}", "a positive integer", n)
        out[str(role)] = dict(spec)
    return out


def from_manifest(spec: Mapping[str, Any], tokenizer: Tokenizer) -> Chunking:
    """A validated manifest entry (:func:`read_chunking`) resolved against the vocabulary."""
    return Chunking.for_tokenizer(
        tokenizer,
        method=spec["method"],
        sentence_end=spec.get("sentence_end", []),
        max_chunks=spec["max_chunks"],
        max_chunk_tokens=spec["max_chunk_tokens"],
    )

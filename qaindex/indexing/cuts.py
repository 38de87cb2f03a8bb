"""How many answers a model's answer cut shortened, counted as a build reads them.

A model reads at most ``max_tokens["answer"]`` word pieces of an answer (a static encoder:
:data:`qaindex.model.STATIC_ANSWER_TOKENS`); the rest of a longer answer is not encoded. A
build counts those answers and the word pieces left out, and says so
(:meth:`qaindex.Ranker.build`'s ``build_report``, ``qaindex build``'s output, the log).

Example
-------
>>> from qaindex import Model
>>> cuts = AnswerCuts(Model.load())
>>> cuts.add(["word " * 9000, "short answer"])
>>> {k: cuts.report()[k] for k in ("answers", "cut", "tokens_dropped")}
{'answers': 2, 'cut': 1, 'tokens_dropped': 808}
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np

__all__ = ["AnswerCuts", "TextSink", "cut_line"]


class TextSink(Protocol):
    """What a build hands each chunk of answer texts to, in row order (the BM25 builder, a tally)."""

    def add(self, texts: Sequence[str]) -> None: ...


class AnswerCuts:
    """Counts the answers longer than the model's answer cut; forwards the texts to ``then``."""

    def __init__(self, model: Any, then: TextSink | None = None) -> None:
        self.limit = int(model.max_tokens["answer"])
        self._tokenizer = model.tokenizer
        self._then = then
        self.answers = 0
        self.cut = 0
        self.dropped = 0
        self.longest = 0

    def add(self, texts: Sequence[str]) -> None:
        """Count ``texts`` (the next answers), then hand them on."""
        self.answers += len(texts)
        # a word piece has at least one character, so only texts longer than the cut (plus the
        # two special tokens some tokenizers add) in characters can be cut: only they are tokenized
        long = [t for t in texts if len(t) + 2 > self.limit]
        if long:
            lengths = np.asarray(self._tokenizer.encode_ragged(long, None)[2], dtype=np.int64)
            over = lengths[lengths > self.limit]
            self.cut += len(over)
            self.dropped += int((over - self.limit).sum())
            self.longest = max(self.longest, int(lengths.max()))
        if self._then is not None:
            self._then.add(texts)

    def report(self) -> dict[str, Any]:
        """``{"answers", "limit", "cut", "tokens_dropped", "longest"}`` (``longest``: word pieces
        of the longest answer that had to be measured; 0 when none could be cut)."""
        return {
            "answers": self.answers,
            "limit": self.limit,
            "cut": self.cut,
            "tokens_dropped": self.dropped,
            "longest": self.longest,
        }


def cut_line(report: dict[str, Any]) -> str:
    """One line on the answer cut, for ``qaindex build`` and the log.

    Example
    -------
    >>> print(cut_line({"answers": 10, "limit": 128, "cut": 2, "tokens_dropped": 50, "longest": 160}))
    2 of 10 answers cut at the model's 128 word pieces: 50 word pieces left out, the longest has 160
    """
    if not report["cut"]:
        return f"every answer read whole (none longer than the model's {report['limit']:,} word pieces)"
    return (
        f"{report['cut']:,} of {report['answers']:,} answers cut at the model's {report['limit']:,} word pieces: "
        f"{report['tokens_dropped']:,} word pieces left out, the longest has {report['longest']:,}"
    )

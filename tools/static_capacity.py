"""How far a static token table can go on the evaluation corpora: an upper bound, not a model.

The built-in default is a static table (every token one vector, a text the sum of its tokens')
distilled from all-MiniLM-L6-v2 on a general corpus. Where it misses its targets (BM25, or 0.80×
MiniLM), two causes are possible: the general corpus does not teach these domains, or no static
table can reproduce the teacher's ranking there. This tool tells them apart by cheating on
purpose: it distils the same recipe (``tools/build_default_model.py``: the Model2Vec start, the
teacher term, the ball) on the evaluation corpora's *own* texts, then evaluates that table on
the same corpora, beside the shipped default, bm25s and MiniLM, in one run.

- ``--texts all``: every answer and every test question of the pools gets its teacher vector
  (the most a static table can be taught about these corpora);
- ``--texts answers``: the answers only, what ``qaindex train --teacher`` sees of a user's corpus;
- ``--teacher mpnet``: all-mpnet-base-v2 instead of all-MiniLM-L6-v2, both as the teacher of the
  sentence term (texts cut at 128 word pieces, what the table reads) and as the Model2Vec start
  (its outputs for MiniLM's word pieces): how far a table distilled from the better teacher goes.

A corpus where even ``--texts all`` stays below a target is beyond a static table distilled
from this teacher; one where it clears the target is a data gap. The tables are never shipped
(they have seen the test questions). Writes ``benchmarks/results/static_capacity_<texts>.json``
(``static_capacity_<texts>_mpnet.json`` for mpnet).

Usage::

    python -m tools.static_capacity --evaldata DIR [--texts all|answers] [--epochs 10] [--teacher minilm|mpnet]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
from qaindex_export.embeddings.distill import sentence_teacher

from benchmarks.quality.pooled_eval import FAQ, minilm_encoder, pool_answers, questions_and_relevant, with_junk
from qaindex.eval.datasets import read_labelled
from tools.build_default_model import cached_encoder, load_evaldata

TEACHER_TOKENS = 128  # word pieces of a text the mpnet teacher reads (the table's own limit)

ROOT = Path(__file__).resolve().parents[1]


def write_corpus(pools: dict, folder: Path, texts_kind: str, teacher: str = "minilm") -> dict[str, int]:
    """``folder/texts.jsonl``, ``pairs.npy`` (question → relevant answer rows: the ball's held-out
    pairs) and the teacher vectors (``teacher.npy``, or with ``answers`` a ``shards-0/`` of the
    answer rows only) of every pool's answers and questions."""
    texts: list[str] = []
    sources: list[str] = []
    pairs: list[tuple[int, int]] = []
    for label, groups in pools.items():
        first = len(texts)
        answers = pool_answers(groups)
        texts += answers
        sources += [label] * len(answers)
        questions, relevant = questions_and_relevant(groups)
        for question, rows in zip(questions, relevant, strict=True):
            texts.append(question)
            sources.append(f"{label} (questions)")
            pairs += [(len(texts) - 1, first + int(r)) for r in rows]
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "texts.jsonl", "w", encoding="utf-8") as fh:
        for text, source in zip(texts, sources, strict=True):
            fh.write(json.dumps({"text": text, "source": source}) + "\n")
    np.save(folder / "pairs.npy", np.asarray(pairs, dtype=np.int64).reshape(-1, 2))
    shared = folder.parent / "minilm-cache.npz"  # one cache for both kinds, read again by the evaluation
    if teacher == "minilm":
        encode = minilm_encoder()
    else:  # the table reads 128 word pieces of a text: its teacher reads as many
        encode = sentence_teacher(teacher, max_tokens=TEACHER_TOKENS)
    vectors = cached_encoder(encode, folder.parent / f"{teacher}-cache.npz")(texts).astype(np.float16)
    if not (folder / "minilm-eval-cache.npz").is_symlink():
        (folder / "minilm-eval-cache.npz").symlink_to(shared.resolve())
    if texts_kind == "all":
        np.save(folder / "teacher.npy", vectors)
    else:
        rows = np.asarray([i for i, s in enumerate(sources) if not s.endswith("(questions)")], dtype=np.int64)
        (folder / "shards-0").mkdir(exist_ok=True)
        np.save(folder / "shards-0" / "order.npy", rows)
        np.save(folder / "shards-0" / "00000.npy", vectors[rows])
    return {"texts": len(texts), "pairs": len(pairs)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--evaldata", type=Path, required=True, help="folder of NAME/{answers,questions}.jsonl pools")
    parser.add_argument("--texts", choices=("all", "answers"), default="all", help="which texts get teacher vectors")
    parser.add_argument("--epochs", type=int, default=10, help="passes over the teacher vectors")
    parser.add_argument("--teacher", choices=("minilm", "mpnet"), default="minilm", help="the teacher and start")
    parser.add_argument("--work", type=Path, default=ROOT / "benchmarks" / ".cache" / "static-capacity",
                        help="scratch folder (texts, teacher vectors: git-ignored)")  # fmt: skip
    args = parser.parse_args()
    pools = {FAQ: with_junk(read_labelled(ROOT / "examples" / "faq.jsonl")), **load_evaldata(args.evaldata)}
    suffix = "" if args.teacher == "minilm" else f"_{args.teacher}"
    corpus = args.work / f"{args.texts}{suffix}"
    print(write_corpus(pools, corpus, args.texts, args.teacher), flush=True)
    results = ROOT / "benchmarks" / "results" / f"static_capacity_{args.texts}{suffix}.json"
    command = [sys.executable, "-m", "tools.build_default_model", "--corpus", str(corpus), "--teacher", args.teacher]
    command += ["--evaldata", str(args.evaldata), "--epochs", str(args.epochs), "--no-install", "--no-speed"]
    subprocess.run([*command, "--results", str(results)], cwd=ROOT, check=True)
    report = json.loads(results.read_text())
    ran = " ".join(["python", "-m", "tools.static_capacity", *sys.argv[1:]])
    report["capacity"] = {"texts": args.texts, "epochs": args.epochs, "teacher": args.teacher, "command": ran}
    results.write_text(json.dumps(report, indent=2, default=float) + "\n")


if __name__ == "__main__":
    main()

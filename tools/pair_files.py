"""Question → answer pair files for ``tools.training_corpus --pairs``: SQuAD 1.1 and BoolQ.

Neither dataset's own files can be had here (too large for a repository snapshot), so they
are read from public repositories that hold them in smaller pieces, brought here with the
``fetch`` tool (a bare git directory):

* **SQuAD 1.1** (CC BY-SA 4.0; Rajpurkar, Zhang, Lopyrev and Liang, EMNLP 2016; crowd-written
  questions on Wikipedia paragraphs): the per-article pages of the dataset's explorer,
  ``rajpurkar/SQuAD-explorer`` at :data:`SQUAD_COMMIT`, ``explore/1.1/{train,dev}/*.html``
  (87,599 and 10,570 questions, the official counts). Each question gives its paragraph
  (``answer``) and the sentence(s) holding its first answer span that the paragraph holds
  (``sentence``).
* **BoolQ** (CC BY-SA 3.0; Clark et al., NAACL 2019; real Google search queries with a
  Wikipedia passage): ``dwzhu-pku/boolqQA`` at :data:`BOOLQ_COMMIT`, ``datafile/dev.jsonl``
  and the 1,000 unlabelled ``datafile/test.jsonl`` lines.

Usage::

    python -m tools.pair_files squad GIT_DIR --split train --out squad11-train.jsonl
    python -m tools.pair_files boolq GIT_DIR --out boolq.jsonl
"""

from __future__ import annotations

import argparse
import html
import json
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

SQUAD_COMMIT = "13f82e35b9a1fb9173f863b35f5675030646571e"
BOOLQ_COMMIT = "a88d374e9d0b9fa6712e33a80aefdc916ba6718a"

_PRE = re.compile(r"<pre>(.*?)</pre>", re.S)
_QA = re.compile(r'<div class="qa-wrap"><p>\s*<strong class="question">(.*?)</strong></p>(.*?)</ol></div>', re.S)
_ANSWER = re.compile(r'<span class="answer">(.*?)</span>', re.S)
_TITLE = re.compile(r'<h1 id="title">(.*?)</h1>')
_TAG = re.compile(r"<[^>]+>")
_SENTENCE_END = re.compile(r"(?<=[.!?])[\"')\]]*\s+(?=[A-Z0-9\"'(\[])")


def _git(git_dir: Path, *args: str) -> str:
    done = subprocess.run(["git", "--git-dir", str(git_dir), *args], capture_output=True, check=True)
    return done.stdout.decode("utf-8")


def answer_sentence(paragraph: str, answer: str) -> str | None:
    """The sentence(s) of ``paragraph`` holding the first occurrence of ``answer`` (case aside).

    Example
    -------
    >>> answer_sentence("It rained. Paris is in France. Yes.", "France")
    'Paris is in France.'
    """
    start = paragraph.find(answer)
    if start < 0:
        start = paragraph.lower().find(answer.lower())
    if start < 0:
        return None
    end = start + len(answer)
    bounds, begin = [], 0
    for m in _SENTENCE_END.finditer(paragraph):
        bounds.append((begin, m.start() + len(m.group(0).rstrip())))
        begin = m.end()
    bounds.append((begin, len(paragraph)))
    hit = [(a, b) for a, b in bounds if b > start and a < end]
    return paragraph[min(a for a, _ in hit) : max(b for _, b in hit)].strip() if hit else None


def squad_pairs(git_dir: Path, split: str) -> Iterator[dict[str, Any]]:
    """Every question of one SQuAD 1.1 split, from the explorer's article pages."""
    folder = f"{SQUAD_COMMIT}:explore/1.1/{split}/"
    for name in _git(git_dir, "ls-tree", "-z", "--name-only", folder).split("\0"):
        if not name.endswith(".html") or name == "index.html":
            continue
        page = _git(git_dir, "show", folder + name)
        found = _TITLE.search(page)
        title = html.unescape(found.group(1)) if found else name[:-5]
        for index, block in enumerate(page.split('<div class="para-wrap">')[1:]):
            pre = _PRE.search(block)
            if pre is None:
                continue
            paragraph = html.unescape(pre.group(1)).strip()
            for question, rest in _QA.findall(block):
                answers = [html.unescape(a).strip() for a in _ANSWER.findall(rest)]
                sentence = next((s for s in (answer_sentence(paragraph, a) for a in answers) if s), None)
                yield {
                    "question": html.unescape(_TAG.sub("", question)).strip(),
                    "answer": paragraph,
                    "sentence": sentence,
                    "short_answers": answers,
                    "title": title,
                    "paragraph_index": index,
                    "source": f"squad1.1-{split}",
                }


def boolq_pairs(git_dir: Path) -> Iterator[dict[str, Any]]:
    """BoolQ's dev questions and the 1,000 unlabelled test ones, each (question, passage) once."""
    seen = set()
    for split, path in (("dev", "datafile/dev.jsonl"), ("extra1000", "datafile/test.jsonl")):
        for line in _git(git_dir, "show", f"{BOOLQ_COMMIT}:{path}").splitlines():
            row = json.loads(line)
            key = (row["question"], row["passage"])
            if key in seen:
                continue
            seen.add(key)
            yield {
                "question": row["question"],
                "answer": row["passage"],
                "label": row.get("answer"),
                "title": row.get("title"),
                "boolq_split": split,
                "source": "boolq",
            }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("dataset", choices=["squad", "boolq"], help="which pairs")
    parser.add_argument("git_dir", type=Path, help="the fetched repository (a bare git directory)")
    parser.add_argument("--split", default="train", choices=["train", "dev"], help="SQuAD split")
    parser.add_argument("--out", type=Path, required=True, help="the JSON-lines file to write")
    args = parser.parse_args()
    rows = squad_pairs(args.git_dir, args.split) if args.dataset == "squad" else boolq_pairs(args.git_dir)
    count = 0
    with args.out.open("w", encoding="utf-8") as out:
        for row in rows:
            out.write(json.dumps(row, ensure_ascii=False) + "\n")
            count += 1
    print(f"{count} pairs written to {args.out}")


if __name__ == "__main__":
    main()

"""Build the evaluation corpora that look like users' corpora (research-only, never shipped).

Every corpus is a folder with two files, the format every quality study reads
(:mod:`benchmarks.quality.corpus_format`):

- ``answers.jsonl``: one ``{"id": str, "answer": str}`` per line — every record of the corpus
  (what a user would index);
- ``questions.jsonl``: one ``{"question": str, "answers": [id, ...]}`` per line — a user's
  question and the ids of the answers that answer it (at least one);

plus ``meta.json`` (source, commit, licence, how the pool was built, counts). Questions are
capped at ``MAX_QUESTIONS`` per corpus (a seeded sample in source order) so that a benchmark
run stays short; the answers are never sampled within a source (whole-corpus retrieval).

Corpora and where to get their sources (clone each repository into ``--sources DIR``; the
folder names below are what this script looks for):

``stackfaq`` — FAQ with paraphrased user questions. StackFAQ (Karan & Šnajder 2018,
  "Paraphrase-focused learning to rank for domain-specific FAQ retrieval"): 719 StackExchange
  (web applications) threads, each with its top answers and up to ~10 rephrasings of the
  question written by annotators as users would ask. Answers: every top answer; questions:
  every rephrasing (not the original title), relevant = all answers of its thread.
  Source: ``git clone https://github.com/ML-Recipes/BERT-FAQ`` →
  ``BERT-FAQ/data/StackFAQ/stackExchange-FAQ.xml``. Licence: StackExchange content CC BY-SA
  (research use; cite the paper).

``semeval-cqa`` — community-forum QA. SemEval-2015 Task 3 English (CQA-QL, Qatar Living
  forum): each thread's question (subject + body) with its comments labelled Good /
  Potential / Bad / Dialogue. Answers: every non-empty comment of the dev and test threads;
  questions: every thread question with at least one Good comment, relevant = its Good
  comments. Source: ``git clone https://github.com/diyessi/Iyas`` →
  ``Iyas/semeval2015-3/data/SemEval2015-Task3-English-data/datasets/emnlp15/CQA-QL-{devel,test}.xml``.
  Licence: "free for general research use" (SemEval-2015 Task 3 README; cite Màrquez et al. 2015).

``aws-docs`` — technical-documentation QA. The AWS documentation QA set (Gholami & Noori
  2021, "Zero-shot open-book question answering"): 100 questions "inspired by real AWS
  customers" with their answer span and the documentation page holding it. Answers:
  passages of AWS user guides (markdown split at headings, then into chunks of at most
  ``PASSAGE_CHARS`` characters at line boundaries); the pool holds every passage of each
  referenced page plus passages of other pages of the same guides (seeded) up to
  ``AWS_POOL`` passages. Relevant = the passages of the referenced page that contain the
  answer span (normalised, word-bounded; all of them when it occurs more than once — the
  question is never used to pick); where the span is not verbatim, the passages of that page
  covering the largest share (≥ 0.6) of its words. Questions without such a passage are
  dropped. Source: ``git clone https://github.com/siagholami/aws-documentation`` →
  ``aws-documentation/QA_true.csv`` and ``aws-documentation/documents/``. Licence: questions
  CC BY 4.0; documentation CC BY-SA 4.0.

``product-faq`` — our own FAQ for a fictional product (``benchmarks/data/product_faq``,
  Apache-2.0): answers written for the product, questions written in varied user phrasing
  before any retrieval result was looked at. Always built (no source needed).

``wikiqa``, ``trecqa-raw``, ``trecqa-clean`` — the existing answer-selection test splits in
  the same format (``--datasets DIR``, research licences): answers are every distinct
  candidate of the split, questions those with at least one correct candidate.

Usage::

    python -m tools.corpora --sources SRC --data OUT [--datasets DATASETS]
"""

from __future__ import annotations

import csv
import html
import json
import random
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Sequence
from pathlib import Path

from benchmarks.common import ROOT, argument_parser
from benchmarks.quality.corpus_format import Corpus, CorpusBuildError, read_corpus_dir, write_corpus

PRODUCT_FAQ = ROOT / "benchmarks" / "data" / "product_faq"
MAX_QUESTIONS = 500
SEED = 0
PASSAGE_CHARS = 1200
MIN_PASSAGE_CHARS = 40
AWS_POOL = 3000
AWS_MIN_COVERAGE = 0.6

SOURCES: dict[str, dict[str, str]] = {
    "stackfaq": {
        "url": "https://github.com/ML-Recipes/BERT-FAQ",
        "commit": "3c184030c1819b462e29f665465ab4968657440e",
        "path": "data/StackFAQ/stackExchange-FAQ.xml",
        "licence": "StackExchange content, CC BY-SA; research use (Karan & Snajder 2018)",
        "kind": "FAQ with paraphrased user questions",
    },
    "semeval-cqa": {
        "url": "https://github.com/diyessi/Iyas",
        "commit": "3773b29aa35d63946abcdd02b5081c681e834773",
        "path": "semeval2015-3/data/SemEval2015-Task3-English-data/datasets/emnlp15/CQA-QL-{devel,test}.xml",
        "licence": "SemEval-2015 Task 3: free for general research use (Marquez et al. 2015)",
        "kind": "community-forum QA (Qatar Living)",
    },
    "aws-docs": {
        "url": "https://github.com/siagholami/aws-documentation",
        "commit": "2d06ee9011f3192b2ff38c09f04e01f1ea9e0191",
        "path": "QA_true.csv + documents/",
        "licence": "questions CC BY 4.0; AWS documentation CC BY-SA 4.0",
        "kind": "technical-documentation QA (AWS user guides)",
    },
    "product-faq": {
        "url": "benchmarks/data/product_faq (this repository)",
        "commit": "",
        "path": "answers.jsonl + questions.jsonl",
        "licence": "Apache-2.0",
        "kind": "product FAQ of a fictional product, questions written before any result",
    },
}


def cap_questions(
    questions: Sequence[tuple[str, list[str]]], limit: int = MAX_QUESTIONS, seed: int = SEED
) -> list[tuple[str, list[str]]]:
    """At most ``limit`` questions: a seeded sample, kept in source order (all if fewer)."""
    if len(questions) <= limit:
        return list(questions)
    keep = sorted(random.Random(seed).sample(range(len(questions)), limit))
    return [questions[i] for i in keep]


def _clean(text: str) -> str:
    return re.sub(r"\s+", " ", html.unescape(text or "")).strip()


def _require(path: Path, how: str) -> Path:
    if not path.exists():
        raise CorpusBuildError(f"{path}: not found; {how}")
    return path


# ------------------------------------------------------------------------ StackFAQ


def build_stackfaq(sources: Path) -> Corpus:
    """FAQ with paraphrased user questions (StackFAQ)."""
    path = _require(
        sources / "BERT-FAQ" / "data" / "StackFAQ" / "stackExchange-FAQ.xml",
        "clone https://github.com/ML-Recipes/BERT-FAQ into the sources folder",
    )
    return stackfaq_from_xml(path.read_text(encoding="utf-8"))


def stackfaq_from_xml(text: str) -> Corpus:
    """Parse StackFAQ's XML (``<qapair>`` with ``<rephr>``, ``<question>``, ``<answer>``)."""
    root = ET.fromstring(text)
    answers: list[tuple[str, str]] = []
    questions: list[tuple[str, list[str]]] = []
    seen: dict[str, str] = {}
    for t, pair in enumerate(root.iter("qapair")):
        ids: list[str] = []
        for j, node in enumerate(pair.findall("answer")):
            body = _clean(node.text or "")
            if not body:
                continue
            if body in seen:  # the same answer text twice: one record
                ids.append(seen[body])
                continue
            aid = f"sf{t}-{j}"
            seen[body] = aid
            answers.append((aid, body))
            ids.append(aid)
        if not ids:
            continue
        for node in pair.findall("rephr"):
            q = _clean(node.text or "")
            if q and q != "*":  # "*" separates the annotators' lists
                questions.append((q, sorted(set(ids))))
    meta = {"source": SOURCES["stackfaq"], "threads": t + 1, "questions_before_cap": len(questions)}
    return Corpus("stackfaq", answers, cap_questions(questions), meta)


# ------------------------------------------------------------------------ SemEval CQA


SEMEVAL_FILES = ("CQA-QL-devel.xml", "CQA-QL-test.xml")


def build_semeval(sources: Path) -> Corpus:
    """Community-forum QA (SemEval-2015 Task 3, Qatar Living)."""
    folder = sources / "Iyas" / "semeval2015-3" / "data" / "SemEval2015-Task3-English-data" / "datasets" / "emnlp15"
    texts = [
        _require(folder / name, "clone https://github.com/diyessi/Iyas into the sources folder").read_text(
            encoding="utf-8"
        )
        for name in SEMEVAL_FILES
    ]
    return semeval_from_xml(texts)


def semeval_from_xml(texts: Iterable[str]) -> Corpus:
    """Parse SemEval-2015 Task 3 XML files (``<Question>`` with ``<Comment CGOLD=...>``)."""
    answers: list[tuple[str, str]] = []
    questions: list[tuple[str, list[str]]] = []
    seen: dict[str, str] = {}
    threads = 0
    for text in texts:
        for qnode in ET.fromstring(text).iter("Question"):
            threads += 1
            subject = _clean(qnode.findtext("QSubject") or "")
            body = _clean(qnode.findtext("QBody") or "")
            question = body if body.lower().startswith(subject.lower().rstrip(".?! ")) else f"{subject} {body}".strip()
            good: list[str] = []
            for c in qnode.iter("Comment"):
                ctext = _clean(c.findtext("CBody") or "")
                if not ctext:
                    continue
                aid = seen.get(ctext)
                if aid is None:
                    aid = c.get("CID") or f"c{len(answers)}"
                    seen[ctext] = aid
                    answers.append((aid, ctext))
                if c.get("CGOLD") == "Good":
                    good.append(aid)
            if question and good:
                questions.append((question, sorted(set(good))))
    meta = {"source": SOURCES["semeval-cqa"], "threads": threads, "questions_before_cap": len(questions)}
    return Corpus("semeval-cqa", answers, cap_questions(questions), meta)


# ------------------------------------------------------------------------ AWS docs


_ANCHOR = re.compile(r"<a name=\"[^\"]*\"></a>")
_LINK = re.compile(r"!?\[([^\]]*)\]\([^)]*\)")
_ESCAPE = re.compile(r"\\([\\`*_{}\[\]()#+\-.!|<>])")
_WORD = re.compile(r"[a-z0-9]+")


def markdown_passages(text: str, max_chars: int = PASSAGE_CHARS) -> list[str]:
    """Split a documentation page into passages: sections at headings, each cut at line
    boundaries into chunks of at most ``max_chars`` characters (a longer line is its own
    chunk); the section's heading leads each of its chunks; passages shorter than
    ``MIN_PASSAGE_CHARS`` are dropped. Links keep their text, anchors and escapes go."""
    text = _ESCAPE.sub(r"\1", _LINK.sub(r"\1", _ANCHOR.sub("", text)))
    sections: list[tuple[str, list[str]]] = [("", [])]
    for line in text.splitlines():
        if re.match(r"#{1,6} ", line):
            sections.append((line.lstrip("#").strip(), []))
        elif line.strip():
            sections[-1][1].append(line.strip().replace("**", ""))
    out: list[str] = []
    for heading, lines in sections:
        chunk: list[str] = []
        size = 0
        for line in lines:
            if chunk and size + len(line) > max_chars:
                out.append(_passage(heading, chunk))
                chunk, size = [], 0
            chunk.append(line)
            size += len(line) + 1
        if chunk:
            out.append(_passage(heading, chunk))
    return [p for p in out if len(p) >= MIN_PASSAGE_CHARS]


def _passage(heading: str, lines: list[str]) -> str:
    body = "\n".join(lines)
    return f"{heading}\n{body}" if heading else body


def _norm_words(text: str) -> list[str]:
    return _WORD.findall(text.lower())


def answer_passages(answer: str, passages: Sequence[str]) -> list[int]:
    """Indices of the passages that hold ``answer``: those containing its words as a
    contiguous, word-bounded run; failing that, those covering the largest share
    (≥ ``AWS_MIN_COVERAGE``) of its distinct words; else none."""
    words = _norm_words(answer)
    if not words:
        return []
    needle = " " + " ".join(words) + " "
    exact = [i for i, p in enumerate(passages) if needle in " " + " ".join(_norm_words(p)) + " "]
    if exact:
        return exact
    want = set(words)
    cover = [len(want & set(_norm_words(p))) / len(want) for p in passages]
    best = max(cover, default=0.0)
    return [i for i, c in enumerate(cover) if c == best] if best >= AWS_MIN_COVERAGE else []


def build_aws(sources: Path, pool: int = AWS_POOL, seed: int = SEED) -> Corpus:
    """Technical-documentation QA over AWS user guides (passages of the docs)."""
    base = sources / "aws-documentation"
    how = "clone https://github.com/siagholami/aws-documentation into the sources folder"
    rows = list(csv.DictReader(_require(base / "QA_true.csv", how).open(encoding="utf-8-sig")))
    docs = base / "documents"

    def page_path(ref: str) -> Path:
        guide, page = ref.strip().split("/", 1)
        hits = sorted((docs / guide).glob(f"*/{page}")) + sorted((docs / guide).glob(page))
        if not hits:
            raise CorpusBuildError(f"{base / 'QA_true.csv'}: page {ref!r} not found under {docs / guide}")
        return hits[0]

    page_passages: dict[Path, list[str]] = {}
    questions_raw: list[tuple[str, str, Path]] = []
    for r in rows:
        path = page_path(r["Document_True"])
        page_passages.setdefault(path, markdown_passages(path.read_text(encoding="utf-8", errors="replace")))
        questions_raw.append((_clean(r["Question"]), _clean(r["Answer_True"]), path))
    answers: list[tuple[str, str]] = []
    seen: dict[str, str] = {}
    page_ids: dict[Path, list[str]] = {}

    def add(path: Path, passages: list[str]) -> list[str]:
        ids = []
        rel = path.relative_to(docs).as_posix()
        for i, text in enumerate(passages):
            aid = seen.get(text)
            if aid is None:
                aid = f"{rel}#{i}"
                seen[text] = aid
                answers.append((aid, text))
            ids.append(aid)
        return ids

    for path, passages in page_passages.items():
        page_ids[path] = add(path, passages)
    guides = sorted({p.relative_to(docs).parts[0] for p in page_passages})
    others = sorted(
        q for g in guides for q in (docs / g).rglob("*.md") if q not in page_passages and q.name.lower() != "readme.md"
    )
    random.Random(seed).shuffle(others)
    for path in others:
        if len(answers) >= pool:
            break
        add(path, markdown_passages(path.read_text(encoding="utf-8", errors="replace"))[: pool - len(answers)])
    questions: list[tuple[str, list[str]]] = []
    dropped: list[str] = []
    for q, ans, path in questions_raw:
        hits = answer_passages(ans, page_passages[path])
        if not hits:
            dropped.append(q)
            continue
        questions.append((q, sorted({page_ids[path][i] for i in hits})))
    meta = {
        "source": SOURCES["aws-docs"],
        "guides": guides,
        "referenced_pages": len(page_passages),
        "dropped_questions": dropped,
        "questions_before_cap": len(questions),
    }
    return Corpus("aws-docs", answers, cap_questions(questions), meta)


# ------------------------------------------------------------------------ product FAQ and existing splits


def build_product_faq(folder: Path = PRODUCT_FAQ) -> Corpus:
    """Our own product FAQ (in the repository, Apache-2.0)."""
    corpus = read_corpus_dir(folder)
    corpus.name = "product-faq"
    corpus.meta = {"source": SOURCES["product-faq"], "questions_before_cap": len(corpus.questions)}
    return corpus


DATASET_SPLITS = {
    "wikiqa": "wikiqa/test.filtered.jsonl",
    "trecqa-raw": "trecqa_raw/test.jsonl",
    "trecqa-clean": "trecqa_clean/test.jsonl",
}


def build_labelled_split(name: str, path: Path) -> Corpus:
    """An answer-selection split (``{"qid","question","aid","answer","label"}`` lines) as a
    corpus: every distinct candidate is an answer; questions with a correct candidate."""
    answers: dict[str, str] = {}
    order: list[str] = []
    qs: dict[str, tuple[str, list[str]]] = {}
    for line_no, line in enumerate(_require(path, "pass --datasets").read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            r = json.loads(line)
            qid, question, aid, text, label = r["qid"], r["question"], str(r["aid"]), r["answer"], int(r["label"])
        except (json.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
            raise CorpusBuildError(f"{path}:{line_no}: bad record ({exc})") from exc
        if aid not in answers:
            answers[aid] = text
            order.append(aid)
        entry = qs.setdefault(qid, (question, []))
        if label == 1:
            entry[1].append(aid)
    questions = [(q, rel) for q, rel in qs.values() if rel]
    meta = {"source": {"path": path.name, "licence": "research-only (see the dataset's SOURCE.md)"}}
    return Corpus(name, [(a, answers[a]) for a in order if answers[a].strip()], cap_questions(questions), meta)


def source_commit(sources: Path, repo: str) -> str | None:
    """HEAD commit of a cloned source repository (None when not a git checkout)."""
    try:
        return subprocess.run(
            ["git", "-C", str(sources / repo), "rev-parse", "HEAD"], check=True, capture_output=True, text=True
        ).stdout.strip()
    except (subprocess.CalledProcessError, FileNotFoundError):
        return None


BUILDERS = {"stackfaq": build_stackfaq, "semeval-cqa": build_semeval, "aws-docs": build_aws}
CHECKOUTS = {"stackfaq": "BERT-FAQ", "semeval-cqa": "Iyas", "aws-docs": "aws-documentation"}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argument_parser(__doc__)
    parser.add_argument("--sources", required=True, help="folder holding the cloned source repositories")
    parser.add_argument("--data", required=True, help="output folder: one sub-folder per corpus")
    parser.add_argument("--datasets", default=None, help="also convert the WikiQA/TrecQA test splits from this folder")
    parser.add_argument("--only", action="append", default=[], help="build only these corpora (repeatable)")
    args = parser.parse_args(argv)
    sources, out = Path(args.sources), Path(args.data)
    wanted = set(args.only) or {*BUILDERS, "product-faq", *(DATASET_SPLITS if args.datasets else ())}
    try:
        built: list[Corpus] = []
        for name, build in BUILDERS.items():
            if name in wanted:
                corpus = build(sources)
                corpus.meta["checkout_commit"] = source_commit(sources, CHECKOUTS[name])  # None: not a git clone
                built.append(corpus)
        if "product-faq" in wanted:
            built.append(build_product_faq())
        if args.datasets:
            for name, rel in DATASET_SPLITS.items():
                if name in wanted:
                    built.append(build_labelled_split(name, Path(args.datasets) / rel))
        for corpus in built:
            folder = write_corpus(corpus, out)
            print(f"{corpus.name:14} {len(corpus.answers):6} answers {len(corpus.questions):5} questions -> {folder}")
    except CorpusBuildError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

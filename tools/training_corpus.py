"""Rebuild the general training corpus of the built-in default model from its public sources.

Every source is permissively licensed (listed with its licence in ``SOURCES`` and in the
model card); nothing of ``examples/`` and no evaluation data is read.

- **WordNet 3.0** (WordNet licence; Debian package ``wordnet-base``): every synset's gloss and
  its example sentences, and questions generated from the synset's lemmas by templates
  ("what is a X?", "what does it mean to X?", "what does X mean?", ...), each paired with the
  gloss it asks about.
- **MedQuAD** (CC-BY 4.0; the public repository ``abachaa/MedQuAD``): the NIH question-answer
  pairs whose answers are included (three MedlinePlus subsets ship questions only; their
  questions are kept as unpaired texts).
- **The Python 3.11 documentation** (PSF licence; Debian package ``python3.11-doc``):
  paragraphs of every HTML page, and the FAQ's question → first-answer-paragraph pairs.

Writes ``OUT/texts.jsonl`` (one ``{"text", "source"}`` per line, deduplicated, in a seeded
order) and ``OUT/pairs.npy`` (int32 rows ``(question index, answer index)`` into it).

Usage::

    python -m tools.training_corpus --out /path/to/traindata \\
        [--wordnet /usr/share/wordnet] [--medquad DIR] [--pydoc /usr/share/doc/python3.11/html]
        [--docs KEY=GIT_DIR ...] [--questions KEY=GIT_DIR ...] [--pairs KEY=FILE.jsonl ...]
        [--exclude EVAL.jsonl ...]

Without ``--medquad`` and ``--extend``, the repositories named by ``--docs`` and ``--questions``
(real user questions, :mod:`tools.question_sources`) and the pair files named by ``--pairs``
(``{"question", "answer"}`` JSON lines, ``PAIR_FILES``) alone form the corpus.
"""

from __future__ import annotations

import argparse
import json
import random
import re
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from html.parser import HTMLParser
from pathlib import Path
from xml.etree import ElementTree

import numpy as np

from tools.doc_repos import DOC_REPOS
from tools.doc_sources import (  # noqa: F401 (re-exported: the tests and the builder import them from here)
    MAX_CHARS,
    clean,
    doc_file_records,
    docs_records,
    faq_yaml_records,
    markdown_records,
    normalize,
    strip_markdown,
    user_question,
)
from tools.question_sources import PAIR_FILES, QUESTION_REPOS, pair_file_records, question_records

SOURCES = {
    "wordnet": ("WordNet 3.0 glosses, examples and template questions", "WordNet 3.0 licence (Princeton)"),
    "medquad": ("MedQuAD question-answer pairs (NIH websites)", "CC-BY 4.0"),
    "pydoc": ("Python 3.11 documentation paragraphs and FAQ pairs", "PSF License"),
}
SOURCES.update(
    {
        key: (f"{what}: FAQ and heading-question pairs (github.com/{repo})", licence)
        for key, (repo, _, what, licence, _) in DOC_REPOS.items()
    }
)
SOURCES.update(
    {
        key: (f"{what}: question title → answer pairs (github.com/{repo})", licence)
        for key, (repo, _, what, licence, _) in QUESTION_REPOS.items()
    }
)
SOURCES.update({key: (f"{what} ({credit})", licence) for key, (what, licence, credit, _) in PAIR_FILES.items()})
# ---------------------------------------------------------------- WordNet

_NOUN_Q = ("what is {a} {w}?", "what does {w} mean?", "define {w}", "{w} meaning", "what is meant by {w}?")
_VERB_Q = ("what does it mean to {w}?", "how do I {w}?", "what does {w} mean?", "define {w}", "meaning of to {w}")
_ADJ_Q = ("what does {w} mean?", "what is something {w}?", "define {w}", "meaning of {w}")


def _article(word: str) -> str:
    return "an" if word[:1].lower() in "aeiou" else "a"


def wordnet_records(root: Path, rng: random.Random) -> Iterator[tuple[str, str | None]]:
    """(text, paired gloss or None) from WordNet's ``data.{noun,verb,adj,adv}``.

    Each synset yields its gloss, its quoted examples, and one template question per synset
    (a random lemma and template) paired with the gloss.
    """
    for pos, templates in (("noun", _NOUN_Q), ("verb", _VERB_Q), ("adj", _ADJ_Q), ("adv", _ADJ_Q)):
        with open(root / f"data.{pos}", encoding="latin-1") as fh:
            for line in fh:
                if line.startswith("  ") or "|" not in line:
                    continue
                head, gloss = line.split("|", 1)
                fields = head.split()
                count = int(fields[3], 16)
                lemmas = [fields[4 + 2 * i].replace("_", " ") for i in range(count)]
                lemmas = [re.sub(r"\(.*\)$", "", lemma) for lemma in lemmas]
                parts = [p.strip() for p in gloss.strip().split(";")]
                definition = clean("; ".join(p for p in parts if not p.startswith('"')))
                examples = [clean(p.strip('"')) for p in parts if p.startswith('"')]
                if not definition:
                    continue
                answer = clean(f"{lemmas[0]}: {definition}") if rng.random() < 0.5 else definition
                yield answer, None
                for example in examples:
                    if len(example) > 12:
                        yield example, None
                word = rng.choice(lemmas)
                question = rng.choice(templates).format(w=word, a=_article(word))
                if rng.random() < 0.5:
                    question = question[0].upper() + question[1:]
                yield question, answer


# ---------------------------------------------------------------- MedQuAD


def medquad_records(root: Path) -> Iterator[tuple[str, str | None]]:
    """(question, answer) pairs of MedQuAD's XML files; questions without answers unpaired."""
    for path in sorted(root.glob("*/*.xml")):
        try:
            tree = ElementTree.parse(path)
        except ElementTree.ParseError:
            continue
        for pair in tree.iter("QAPair"):
            question = clean(pair.findtext("Question") or "")
            answer = clean(pair.findtext("Answer") or "")
            if not question:
                continue
            yield question, (answer if len(answer) > 20 else None)


# ---------------------------------------------------------------- Python docs


class _Paragraphs(HTMLParser):
    """Collects the text of ``<p>`` elements and of ``<h2>``/``<h3>`` headings (tagged)."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.items: list[tuple[str, str]] = []
        self._tag: str | None = None
        self._buf: list[str] = []
        self._skip = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in ("p", "h2", "h3") and self._tag is None:
            self._tag, self._buf = tag, []
        elif tag == "a" and dict(attrs).get("class") == "headerlink":
            self._skip += 1

    def handle_endtag(self, tag: str) -> None:
        if tag == "a" and self._skip:
            self._skip -= 1
        elif tag == self._tag:
            self.items.append((tag, clean("".join(self._buf))))
            self._tag = None

    def handle_data(self, data: str) -> None:
        if self._tag is not None and not self._skip:
            self._buf.append(data)


def pydoc_records(root: Path) -> Iterator[tuple[str, str | None]]:
    """Paragraphs of the Python docs; in the FAQ, each question heading paired with its first paragraph."""
    for path in sorted(root.rglob("*.html")):
        rel = path.relative_to(root).as_posix()
        if rel.startswith(("_", "genindex", "py-modindex", "search")) or "whatsnew/changelog" in rel:
            continue
        parser = _Paragraphs()
        parser.feed(path.read_text(encoding="utf-8", errors="replace"))
        question: str | None = None
        for tag, text in parser.items:
            if tag in ("h2", "h3"):
                question = text if rel.startswith("faq/") and text.endswith("?") else None
                continue
            if len(text) < 40:
                continue
            if question is not None:
                yield question, text
                question = None
            else:
                yield text, None


# ---------------------------------------------------------------- assemble


_ID_KEYS = frozenset({"id", "qid", "aid", "pid", "label", "answers_ids"})


def _strings(value: object) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)
    elif isinstance(value, dict):
        for key, item in value.items():
            if key not in _ID_KEYS:
                yield from _strings(item)


def eval_texts(paths: Iterable[Path]) -> set[str]:
    """Normalized texts of evaluation files (JSON lines: every string field but ids) that training must not see.

    Answer-id lists (``"answers": ["id-1", ...]``) are read too; ids never equal a corpus text of
    three words or more, so they only make the set larger.
    """
    keys: set[str] = set()
    for path in paths:
        with open(path, encoding="utf-8") as fh:
            for line in fh:
                if line.strip():
                    keys.update(normalize(s) for s in _strings(json.loads(line)) if len(s) >= 3)
    return keys


def read_corpus(folder: Path) -> tuple[list[tuple[str, str]], np.ndarray]:
    """(texts with their sources, in file order; pairs) of a corpus folder this tool wrote."""
    texts = []
    with open(folder / "texts.jsonl", encoding="utf-8") as fh:
        for line in fh:
            record = json.loads(line)
            texts.append((record["text"], record["source"]))
    return texts, np.load(folder / "pairs.npy").astype(np.int64).reshape(-1, 2)


def assemble(
    out: Path,
    feeds: Iterable[tuple[str, Iterable[tuple[str, str | None]]]],
    seed: int = 0,
    extend: Path | None = None,
    exclude: set[str] | frozenset[str] = frozenset(),
    max_shared: int = 3,
) -> dict[str, int]:
    """Write ``texts.jsonl``, ``pairs.npy`` and ``counts.json`` under ``out`` from ``(source, records)`` feeds.

    Records are ``(text, partner or None)``; a text with a partner is a question and the partner its
    answer. Texts are deduplicated; the new texts are written in a seeded random order. With
    ``extend`` (a folder this tool wrote), that corpus's texts come first, in their order and with
    their indices, its pairs first too; a new text equal to one of them (case and spacing aside)
    reuses its index, and a question it pairs keeps that answer only (a new record of that question,
    often the same answer extracted again with other spacing, adds neither a pair nor its answer).
    A new text in ``exclude`` (normalized, see :func:`eval_texts`) is dropped with its pairs. A new
    pair whose question has more than ``max_shared`` answers, or whose answer more than
    ``max_shared`` questions, is dropped (its texts stay). Returns the counts written to
    ``counts.json``: texts per source, ``pairs``, ``pairs_<source>`` per new source, ``texts``, and
    ``eval_overlap_dropped``.
    """
    rng = random.Random(seed)
    old: list[tuple[str, str]] = []
    old_pairs = np.zeros((0, 2), np.int64)
    if extend is not None:
        old, old_pairs = read_corpus(extend)
    index: dict[str, int] = {}
    for i, (text, _) in enumerate(old):
        index.setdefault(normalize(text), i)
    texts: list[tuple[str, str]] = []  # the new ones; index len(old) + position
    pairs: list[tuple[int, int]] = []
    answered = {int(i) for i in old_pairs[:, 0]}  # the extended corpus's answer to a question stands
    seen_pairs: set[tuple[int, int]] = set()
    dropped: set[str] = set()

    def add(text: str, source: str) -> int | None:
        key = normalize(text)
        if key in exclude:
            dropped.add(key)
            return None
        if key not in index:
            index[key] = len(old) + len(texts)
            texts.append((text, source))
        return index[key]

    sources: list[str] = []
    for source, records in feeds:
        for text, partner in records:
            if len(text) < 3:
                continue
            i = add(text, source)
            if i is None or not partner or i in answered:
                continue
            j = add(partner, source)
            if j is None or j == i or (i, j) in seen_pairs:
                continue
            seen_pairs.add((i, j))
            pairs.append((i, j))
            sources.append(source)
    # a text paired with many others is boilerplate ("Describes an issue …") or a heading every page
    # has ("Install the agent"): such pairs teach nothing about meaning
    questions_of = Counter(j for _, j in pairs)
    answers_of = Counter(i for i, _ in pairs)
    keep = [k for k, (i, j) in enumerate(pairs) if questions_of[j] <= max_shared and answers_of[i] <= max_shared]
    pairs = [pairs[k] for k in keep]
    pair_counts = Counter(sources[k] for k in keep)
    order = list(range(len(texts)))
    rng.shuffle(order)
    where = np.arange(len(old) + len(texts), dtype=np.int64)
    where[len(old) + np.asarray(order, dtype=np.int64)] = len(old) + np.arange(len(texts))
    out.mkdir(parents=True, exist_ok=True)
    tmp = out / "texts.jsonl.tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        for text, source in old + [texts[i] for i in order]:
            fh.write(json.dumps({"text": text, "source": source}, ensure_ascii=False) + "\n")
    new_pairs = where[np.asarray(pairs, dtype=np.int64).reshape(-1, 2)]
    pair_array = np.concatenate([old_pairs, new_pairs]).astype(np.int32)
    tmp_pairs = out / "pairs.tmp.npy"
    np.save(tmp_pairs, pair_array)
    tmp.replace(out / "texts.jsonl")
    tmp_pairs.replace(out / "pairs.npy")
    counts: dict[str, int] = {}
    for _, source in old + texts:
        counts[source] = counts.get(source, 0) + 1
    counts.update({f"pairs_{k}": v for k, v in pair_counts.items()})
    counts["pairs"] = len(pair_array)
    counts["texts"] = len(old) + len(texts)
    counts["eval_overlap_dropped"] = len(dropped)
    (out / "counts.json").write_text(json.dumps(counts, indent=1) + "\n")
    return counts


def build(out: Path, wordnet: Path, medquad: Path, pydoc: Path, seed: int = 0) -> dict[str, int]:
    """Write the corpus of the three original sources under ``out``; returns counts per source.

    Kept for rebuilding the original corpus; its texts are deduplicated exactly (not case-blind) and
    shuffled all together, as the corpus the teacher vectors were computed for was.
    """
    rng = random.Random(seed)
    index: dict[str, int] = {}
    texts: list[tuple[str, str]] = []
    pairs: list[tuple[int, int]] = []
    counts: dict[str, int] = {}

    def add(text: str, source: str) -> int:
        if text not in index:
            index[text] = len(texts)
            texts.append((text, source))
            counts[source] = counts.get(source, 0) + 1
        return index[text]

    feeds = (
        ("wordnet", wordnet_records(wordnet, rng)),
        ("medquad", medquad_records(medquad)),
        ("pydoc", pydoc_records(pydoc)),
    )
    for source, records in feeds:
        for text, partner in records:
            if len(text) < 3:
                continue
            i = add(text, source)
            if partner:
                pairs.append((i, add(partner, source)))
    order = list(range(len(texts)))
    rng.shuffle(order)
    where = np.empty(len(texts), dtype=np.int64)
    where[order] = np.arange(len(texts))
    out.mkdir(parents=True, exist_ok=True)
    tmp = out / "texts.jsonl.tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        for i in order:
            text, source = texts[i]
            fh.write(json.dumps({"text": text, "source": source}, ensure_ascii=False) + "\n")
    tmp.replace(out / "texts.jsonl")
    pair_array = where[np.asarray(pairs, dtype=np.int64)].astype(np.int32) if pairs else np.zeros((0, 2), np.int32)
    np.save(out / "pairs.npy", pair_array)
    counts["pairs"] = len(pairs)
    counts["texts"] = len(texts)
    (out / "counts.json").write_text(json.dumps(counts, indent=1) + "\n")
    return counts


def _repo_arg(option: str, repos: Mapping[str, object], what: str = "GIT_DIR") -> Callable[[str], tuple[str, Path]]:
    """The argparse type of ``option``: ``KEY=PATH`` with ``KEY`` one of ``repos`` (``what`` names PATH)."""

    def parse(value: str) -> tuple[str, Path]:
        key, sep, path = value.partition("=")
        if not sep or key not in repos:
            raise argparse.ArgumentTypeError(
                f"{option} wants KEY={what} with KEY one of {', '.join(repos)}; got {value!r}"
            )
        return key, Path(path)

    return parse


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="output folder (texts.jsonl, pairs.npy)")
    parser.add_argument(
        "--extend",
        type=Path,
        default=None,
        help="corpus folder to extend: its texts and pairs come first, with their indices; "
        "the WordNet, MedQuAD and Python-docs sources are then not read again",
    )
    parser.add_argument("--wordnet", type=Path, default=Path("/usr/share/wordnet"), help="WordNet dict folder")
    parser.add_argument("--medquad", type=Path, default=None, help="checkout of abachaa/MedQuAD (without --extend)")
    parser.add_argument("--pydoc", type=Path, default=Path("/usr/share/doc/python3.11/html"), help="Python HTML docs")
    parser.add_argument(
        "--docs",
        type=_repo_arg("--docs", DOC_REPOS),
        action="append",
        default=[],
        metavar="KEY=GIT_DIR",
        help=f"a documentation repository (bare git dir or clone) to read; KEY one of: {', '.join(DOC_REPOS)}",
    )
    parser.add_argument(
        "--questions",
        type=_repo_arg("--questions", QUESTION_REPOS),
        action="append",
        default=[],
        metavar="KEY=GIT_DIR",
        help=f"a repository of real user questions to read; KEY one of: {', '.join(QUESTION_REPOS)}",
    )
    parser.add_argument(
        "--pairs",
        type=_repo_arg("--pairs", PAIR_FILES, "FILE"),
        action="append",
        default=[],
        metavar="KEY=FILE",
        help='a JSON-lines file of {"question", "answer"} pairs to read (records with an eval_overlap field '
        f"skipped); KEY one of: {', '.join(PAIR_FILES)}",
    )
    parser.add_argument(
        "--exclude",
        type=Path,
        action="append",
        default=[],
        metavar="JSONL",
        help="evaluation file (JSON lines) whose texts must not be trained on; repeatable",
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the templates and the order")
    args = parser.parse_args()
    listed = bool(args.docs or args.questions or args.pairs)
    if args.extend is None and args.medquad is None and not listed:
        parser.error("--medquad is required unless --extend names an existing corpus or --docs/--questions/--pairs")
    if args.extend is None and not listed:
        print(json.dumps(build(args.out, args.wordnet, args.medquad, args.pydoc, args.seed)))
        return
    feeds: list[tuple[str, Iterable[tuple[str, str | None]]]] = []
    if args.extend is None and args.medquad is not None:  # without --medquad: the listed repositories alone
        rng = random.Random(args.seed)
        feeds += [
            ("wordnet", wordnet_records(args.wordnet, rng)),
            ("medquad", medquad_records(args.medquad)),
            ("pydoc", pydoc_records(args.pydoc)),
        ]
    for key, git_dir in args.docs:
        feeds.append((key, docs_records(git_dir, DOC_REPOS[key][1])))
    for key, git_dir in args.questions:
        feeds.append((key, question_records(git_dir, QUESTION_REPOS[key][1])))
    for key, path in args.pairs:
        feeds.append((key, pair_file_records(path, PAIR_FILES[key][3])))
    exclude = eval_texts(args.exclude)
    counts = assemble(args.out, feeds, args.seed, args.extend, exclude)
    print(json.dumps(counts))


if __name__ == "__main__":
    main()

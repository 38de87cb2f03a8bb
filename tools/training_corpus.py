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

    python tools/training_corpus.py --out /path/to/traindata \\
        [--wordnet /usr/share/wordnet] [--medquad DIR] [--pydoc /usr/share/doc/python3.11/html]
"""

from __future__ import annotations

import argparse
import html
import json
import random
import re
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path
from xml.etree import ElementTree

import numpy as np

SOURCES = {
    "wordnet": ("WordNet 3.0 glosses, examples and template questions", "WordNet 3.0 licence (Princeton)"),
    "medquad": ("MedQuAD question-answer pairs (NIH websites)", "CC-BY 4.0"),
    "pydoc": ("Python 3.11 documentation paragraphs and FAQ pairs", "PSF License"),
}
MAX_CHARS = 400  # texts are cut at a word boundary here (about 90 WordPiece tokens; the teacher sees <= 128)
_SPACE = re.compile(r"\s+")


def clean(text: str) -> str:
    """Collapse whitespace and cut ``text`` to ``MAX_CHARS`` at a word boundary."""
    text = _SPACE.sub(" ", html.unescape(text)).strip()
    if len(text) > MAX_CHARS:
        text = text[:MAX_CHARS].rsplit(" ", 1)[0]
    return text


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


def build(out: Path, wordnet: Path, medquad: Path, pydoc: Path, seed: int = 0) -> dict[str, int]:
    """Write ``texts.jsonl`` and ``pairs.npy`` under ``out``; returns counts per source."""
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="output folder (texts.jsonl, pairs.npy)")
    parser.add_argument("--wordnet", type=Path, default=Path("/usr/share/wordnet"), help="WordNet dict folder")
    parser.add_argument("--medquad", type=Path, required=True, help="checkout of abachaa/MedQuAD")
    parser.add_argument("--pydoc", type=Path, default=Path("/usr/share/doc/python3.11/html"), help="Python HTML docs")
    parser.add_argument("--seed", type=int, default=0, help="seed of the templates and the order")
    args = parser.parse_args()
    print(json.dumps(build(args.out, args.wordnet, args.medquad, args.pydoc, args.seed)))


if __name__ == "__main__":
    main()

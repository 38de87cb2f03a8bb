"""Real user questions with their answers: Stack Exchange sites' question title → answer.

Read by ``python -m tools.training_corpus --questions KEY=GIT_DIR`` from a public repository that
holds a site's data-dump file (``Posts.xml``, or JSON lines of question → answer), or by
``--pairs KEY=FILE.jsonl`` from a local JSON-lines file of question → answer pairs (``PAIR_FILES``:
SQuAD 1.1, BoolQ and Stack Exchange pairs extracted beforehand). Stack Exchange
content is licensed CC BY-SA by its authors; ``QUESTION_REPOS`` lists every repository read, the
site, its licence and the file that licence was read from. The web-applications site is never
read: it is the source of an evaluation corpus.

A question yields ``(title, answer)`` — its accepted answer, else its highest-scored answer
with a positive score — and its body as an unpaired text; code blocks and markup are dropped,
texts cut at ``MAX_CHARS`` (:func:`tools.doc_sources.clean`).
"""

from __future__ import annotations

import html
import json
import re
from collections.abc import Iterator
from pathlib import Path
from xml.etree import ElementTree

from tools.doc_sources import clean, git_files

# key: (GitHub repository, file read, what, licence, where the licence is stated)
QUESTION_REPOS: dict[str, tuple[str, str, str, str, str]] = {
    "se-coffee": (
        "Yoav-Shafir/Elasticsearch-Coffee-Search-Engine-JS",
        "Posts.xml",
        "Coffee Stack Exchange questions and answers (data dump)",
        "CC BY-SA 3.0",
        "Stack Exchange data dump (README.md names the site as the source)",
    ),
    "se-beer": (
        "kevswanberg/beer_tentrr",
        "Posts.xml",
        "Beer, Wine & Spirits Stack Exchange questions and answers (data dump)",
        "CC BY-SA 3.0",
        "Stack Exchange data dump",
    ),
    "se-ai": (
        "sasiddiqui/confucius",
        "data/stackexchange/ai.stackexchange.com/Posts.xml",
        "Artificial Intelligence Stack Exchange questions and answers (data dump)",
        "CC BY-SA 3.0",
        "Stack Exchange data dump",
    ),
    "se-conlang": (
        "mattly/ssdug-graphql",
        "data/Posts.xml",
        "Constructed Languages Stack Exchange questions and answers (data dump)",
        "CC BY-SA 3.0",
        "data/LICENSE",
    ),
    "se-quantum": (
        "Jean-Low/StackERedes",
        "data/Posts.xml",
        "Quantum Computing Stack Exchange questions and answers (data dump)",
        "CC BY-SA 3.0",
        "Stack Exchange data dump",
    ),
    "se-bicycles": (
        "woodstock-dev/code-challenge-10-18-2023",
        "data/Posts.xml",
        "Bicycles Stack Exchange questions and answers (data dump)",
        "CC BY-SA 3.0",
        "Stack Exchange data dump",
    ),
    "se-skeptics": (
        "purudpd/RecSys-QA",
        "web_science_dataset.jsonl",
        "Skeptics Stack Exchange questions and answers",
        "CC BY-SA 3.0",
        "Stack Exchange content (README.txt names the site and links every post)",
    ),
    "se-matheducators": (
        "jrfoster/spark-intro",
        "Posts.xml",
        "Mathematics Educators Stack Exchange questions and answers (data dump)",
        "CC BY-SA 3.0",
        "Stack Exchange data dump",
    ),
    "se-genai": (
        "yu51a5/BigQueryApachePipeline",
        "Posts.xml",
        "GenAI Stack Exchange questions and answers (data dump)",
        "CC BY-SA 4.0",
        "Stack Exchange data dump",
    ),
    "se-3dprinting": (
        "arianeborges/sentiment-analysis-with-python",
        "Posts.xml",
        "3D Printing Stack Exchange questions and answers (data dump)",
        "CC BY-SA 3.0",
        "Stack Exchange data dump",
    ),
    "se-history-meta": (
        "GonzaloHirsch/TP-XML",
        "Posts.xml",
        "History Stack Exchange's meta site: questions about the site and their answers (data dump)",
        "CC BY-SA 3.0",
        "Stack Exchange data dump",
    ),
    "se-music-meta": (
        "spreusche/Tp-especial-XML",
        "Posts.xml",
        "Music Stack Exchange's meta site (data dump)",
        "CC BY-SA 3.0",
        "Stack Exchange data dump",
    ),
    "se-datascience-meta": (
        "ArleneDcosta/StackExchangePatternandPrediction",
        "Posts.xml",
        "Data Science Stack Exchange's meta site (data dump)",
        "CC BY-SA 3.0",
        "Stack Exchange data dump",
    ),
    "se-opendata-meta": (
        "stat4decision/python-avr2017",
        "Posts.xml",
        "Open Data Stack Exchange's meta site (data dump)",
        "CC BY-SA 3.0",
        "Stack Exchange data dump",
    ),
}

# key: (what, licence, attribution, the field read as the answer)
PAIR_FILES: dict[str, tuple[str, str, str, str]] = {
    "squad11": (
        "SQuAD 1.1 train: crowd-written questions on Wikipedia paragraphs → the sentence holding the answer",
        "CC BY-SA 4.0",
        "Rajpurkar, Zhang, Lopyrev and Liang, SQuAD (EMNLP 2016); passages from Wikipedia",
        "sentence",
    ),
    "squad11-paragraph": (
        "SQuAD 1.1 train: crowd-written questions on Wikipedia paragraphs → the paragraph",
        "CC BY-SA 4.0",
        "Rajpurkar, Zhang, Lopyrev and Liang, SQuAD (EMNLP 2016); passages from Wikipedia",
        "answer",
    ),
    "boolq": (
        "BoolQ: real Google search queries (yes/no) → the Wikipedia passage that answers them",
        "CC BY-SA 3.0",
        "Clark et al., BoolQ (NAACL 2019); passages from Wikipedia",
        "answer",
    ),
    "se-small-sites": (
        "Stack Exchange small sites (beer, quantum computing, coffee, AI, mathematics educators, GenAI, "
        "early Stack Overflow): question title → accepted or best answer",
        "CC BY-SA 3.0",
        "Stack Exchange, each post's authors (the record's url and author fields)",
        "answer",
    ),
    "se-skeptics-pairs": (
        "Skeptics Stack Exchange: question title → answer",
        "CC BY-SA 3.0",
        "Stack Exchange, each post's authors (the record's url)",
        "answer",
    ),
}

_CODE = re.compile(r"<pre\b.*?</pre>|<code>[^<]{40,}</code>", re.S | re.I)
_TAG = re.compile(r"<[^>]+>")
_BLOCK = re.compile(r"</?(p|li|ul|ol|blockquote|h\d|br)\b[^>]*>", re.I)


def html_text(body: str) -> str:
    """Plain text of a post's HTML body: code blocks dropped, tags removed, entities decoded.

    Example
    -------
    >>> html_text("<p>Use <code>ls</code>:</p><pre><code>ls -la</code></pre><p>then &amp; done</p>")
    'Use ls: then & done'
    """
    text = _CODE.sub(" ", body)
    text = _BLOCK.sub(" ", text)
    return re.sub(r"\s+([:;,.!?])", r"\1", re.sub(r"\s+", " ", html.unescape(_TAG.sub("", text)))).strip()


def posts_records(xml: str, min_answer_chars: int = 40) -> Iterator[tuple[str, str | None]]:
    """``(title, answer)`` of every question of a Stack Exchange ``Posts.xml``, and its body unpaired.

    The answer is the accepted one, else the highest-scored answer with a score above 0; a
    question without either gives its title and body unpaired.

    Example
    -------
    >>> xml = ('<posts><row Id="1" PostTypeId="1" AcceptedAnswerId="2" Title="How do I descale a kettle?" '
    ...        'Body="&lt;p&gt;Mine is full of lime scale, and the tea tastes of it.&lt;/p&gt;" />'
    ...        '<row Id="2" PostTypeId="2" ParentId="1" Score="3" '
    ...        'Body="&lt;p&gt;Boil a mix of water and white vinegar, then rinse twice.&lt;/p&gt;" /></posts>')
    >>> for record in posts_records(xml):
    ...     print(record)
    ('How do I descale a kettle?', 'Boil a mix of water and white vinegar, then rinse twice.')
    ('Mine is full of lime scale, and the tea tastes of it.', None)
    """
    root = ElementTree.fromstring(xml)
    questions: list[dict[str, str]] = []
    answers: dict[str, dict[str, str]] = {}
    best: dict[str, tuple[int, str]] = {}
    for row in root.iter("row"):
        kind = row.get("PostTypeId")
        if kind == "1" and row.get("Title"):
            questions.append(dict(row.attrib))
        elif kind == "2" and row.get("ParentId"):
            answers[row.get("Id", "")] = dict(row.attrib)
            score = int(row.get("Score", "0") or 0)
            parent = row.get("ParentId", "")
            if score > 0 and score > best.get(parent, (0, ""))[0]:
                best[parent] = (score, row.get("Id", ""))
    for q in questions:
        title = clean(html.unescape(q["Title"]))
        chosen = answers.get(q.get("AcceptedAnswerId", "")) or answers.get(best.get(q.get("Id", ""), (0, ""))[1])
        answer = clean(html_text(chosen["Body"])) if chosen else ""
        yield title, answer if len(answer) >= min_answer_chars else None
        body = clean(html_text(q.get("Body", "")))
        if len(body) >= min_answer_chars:
            yield body, None


def jsonl_records(text: str, min_answer_chars: int = 40) -> Iterator[tuple[str, str | None]]:
    """``(question, answer)`` of JSON lines with ``question`` and ``answer`` fields (the first answer
    of each question).

    Example
    -------
    >>> lines = '{"question": "Does cracking knuckles cause arthritis?", "answer": "No study found a link ' \\
    ...         'between habitual knuckle cracking and arthritis of the hand."}\\n'
    >>> [q for q, _ in jsonl_records(lines + lines)]
    ['Does cracking knuckles cause arthritis?']
    """
    seen: set[str] = set()
    for line in text.splitlines():
        if not line.strip():
            continue
        record = json.loads(line)
        question = clean(str(record.get("question", "")))
        if not question or question in seen:
            continue
        seen.add(question)
        answer = clean(str(record.get("answer", "")))
        yield question, answer if len(answer) >= min_answer_chars else None


def pair_file_records(path: Path, answer_field: str = "answer") -> Iterator[tuple[str, str | None]]:
    """``(question, answer)`` of a local JSON-lines file (``{"question", "answer"}`` per line).

    Parameters
    ----------
    path : pathlib.Path
        The file; every line a JSON object with a ``question`` and an ``answer_field`` string.
    answer_field : str
        The field read as the answer (``"sentence"``: SQuAD's sentence holding the answer span).

    Yields
    ------
    tuple of (str, str or None)
        As :func:`jsonl_records`: the first answer of each question, ``None`` for an answer under
        40 characters. A record with an ``eval_overlap`` field (flagged as overlapping an
        evaluation corpus when the file was extracted) is skipped.
    """
    with open(path, encoding="utf-8") as fh:
        kept = [
            json.dumps({"question": r.get("question", ""), "answer": r.get(answer_field, "")})
            for r in map(json.loads, filter(str.strip, fh))
            if "eval_overlap" not in r
        ]
    yield from jsonl_records("\n".join(kept))


def question_records(git_dir: Path, path: str) -> Iterator[tuple[str, str | None]]:
    """The records of the file ``path`` of a repository's HEAD (``Posts.xml`` or JSON lines)."""
    for name, text in git_files(git_dir, path, suffixes=(path.lower(),), max_bytes=8_000_000):
        if name == path:
            yield from (jsonl_records(text) if name.endswith(".jsonl") else posts_records(text))

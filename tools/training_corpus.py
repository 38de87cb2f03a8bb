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
import subprocess
from collections import Counter
from collections.abc import Iterable, Iterator
from html.parser import HTMLParser
from pathlib import Path
from xml.etree import ElementTree

import numpy as np
import yaml

SOURCES = {
    "wordnet": ("WordNet 3.0 glosses, examples and template questions", "WordNet 3.0 licence (Princeton)"),
    "medquad": ("MedQuAD question-answer pairs (NIH websites)", "CC-BY 4.0"),
    "pydoc": ("Python 3.11 documentation paragraphs and FAQ pairs", "PSF License"),
}
# Documentation repositories read by ``--docs KEY=GIT_DIR`` (each key is a ``source`` of texts.jsonl):
# (GitHub repository, folder read ("" = all), what, licence, the repository's file the licence was read from)
DOC_REPOS: dict[str, tuple[str, str, str, str, str]] = {
    "ms-support": (
        "MicrosoftDocs/OfficeDocs-Support",
        "",
        "Microsoft 365, Office, Outlook, Exchange, SharePoint and Teams support articles",
        "CC-BY 4.0",
        "LICENSE",
    ),
    "ms-exchange": (
        "MicrosoftDocs/OfficeDocs-Exchange",
        "",
        "Exchange Server and Exchange Online documentation",
        "CC-BY 4.0",
        "LICENSE",
    ),
    "ms-sharepoint": (
        "MicrosoftDocs/OfficeDocs-SharePoint",
        "",
        "SharePoint and OneDrive documentation",
        "CC-BY 4.0",
        "LICENSE",
    ),
    "ms-deployoffice": (
        "MicrosoftDocs/OfficeDocs-DeployOffice",
        "",
        "Microsoft 365 Apps deployment documentation",
        "CC-BY 4.0",
        "LICENSE",
    ),
    "ms-powershell": ("MicrosoftDocs/PowerShell-Docs", "", "PowerShell documentation", "CC-BY 4.0", "LICENSE.md"),
    "ms-azure-cli": ("MicrosoftDocs/azure-docs-cli", "", "Azure CLI documentation", "CC-BY 4.0", "LICENSE"),
    "ms-azure-mgmt": (
        "MicrosoftDocs/azure-management-docs",
        "",
        "Azure management documentation (Arc, Container Registry, Automation, Resource Manager, ...)",
        "CC-BY 4.0",
        "LICENSE",
    ),
    "ms-data-explorer": (
        "MicrosoftDocs/dataexplorer-docs",
        "",
        "Azure Data Explorer and Kusto documentation",
        "CC-BY 4.0",
        "LICENSE",
    ),
    "ms-power-query": ("MicrosoftDocs/powerquery-docs", "", "Power Query documentation", "CC-BY 4.0", "LICENSE"),
    "ms-business-central": (
        "MicrosoftDocs/dynamics365smb-docs",
        "",
        "Dynamics 365 Business Central user documentation",
        "CC-BY 4.0",
        "LICENSE",
    ),
    "ms-dynamics-ax": (
        "MicrosoftDocs/DynamicsAX2012-technet",
        "",
        "Dynamics AX 2012 documentation",
        "CC-BY 4.0",
        "LICENSE",
    ),
    "ms-biztalk": ("MicrosoftDocs/biztalk-docs", "", "BizTalk Server documentation", "CC-BY 4.0", "LICENSE"),
    "ms-iis": ("MicrosoftDocs/iis-docs", "", "IIS documentation", "CC-BY 4.0", "LICENSE"),
    "ms-cpp": ("MicrosoftDocs/cpp-docs", "", "Visual C++ documentation", "CC-BY 4.0", "LICENSE"),
    "ms-vba": ("MicrosoftDocs/VBA-Docs", "", "Office VBA documentation", "CC-BY 4.0", "LICENSE"),
    "ms-windows-drivers": (
        "MicrosoftDocs/windows-driver-docs",
        "",
        "Windows driver documentation",
        "CC-BY 4.0",
        "LICENSE",
    ),
    "ms-mdop": (
        "MicrosoftDocs/mdop-docs",
        "",
        "Microsoft Desktop Optimization Pack documentation",
        "CC-BY 4.0",
        "LICENSE",
    ),
    "ms-rms": ("MicrosoftDocs/Azure-RMSDocs", "", "Azure Information Protection documentation", "CC-BY 4.0", "LICENSE"),
    "ms-ata": (
        "MicrosoftDocs/ATADocs",
        "",
        "Advanced Threat Analytics and Defender for Identity documentation",
        "CC-BY 4.0",
        "LICENSE",
    ),
    "ms-virtualization": (
        "MicrosoftDocs/Virtualization-Documentation",
        "",
        "Windows containers and Hyper-V documentation",
        "CC-BY 4.0",
        "LICENSE",
    ),
    "ms-sysinternals": ("MicrosoftDocs/sysinternals", "", "Sysinternals documentation", "CC-BY 4.0", "LICENSE"),
    "ms-terminal": ("MicrosoftDocs/terminal", "", "Windows Terminal documentation", "CC-BY 4.0", "LICENSE"),
    "ms-wsl": ("MicrosoftDocs/WSL", "", "Windows Subsystem for Linux documentation", "CC-BY 4.0", "LICENSE"),
    "ms-live-share": ("MicrosoftDocs/live-share", "", "Visual Studio Live Share documentation", "CC-BY 4.0", "LICENSE"),
    "ms-edge-enterprise": (
        "MicrosoftDocs/Edge-Enterprise",
        "",
        "Microsoft Edge for business documentation",
        "CC-BY 4.0",
        "LICENSE",
    ),
    "ms-playfab": ("MicrosoftDocs/playfab-docs", "", "PlayFab documentation", "CC-BY 4.0", "LICENSE"),
    "ms-msix": ("MicrosoftDocs/msix-docs", "", "MSIX packaging documentation", "CC-BY 4.0", "LICENSE"),
    "ms-quantum": ("MicrosoftDocs/quantum-docs", "", "Azure Quantum documentation", "CC-BY 4.0", "LICENSE"),
    "streamlit": ("streamlit/docs", "content/", "Streamlit documentation and knowledge base", "Apache-2.0", "LICENSE"),
    "huggingface-hub": ("huggingface/hub-docs", "docs/", "Hugging Face Hub documentation", "Apache-2.0", "LICENSE"),
    "cypress": ("cypress-io/cypress-documentation", "docs/", "Cypress documentation", "MIT", "LICENSE.md"),
    "ms-business-central-dev": (
        "MicrosoftDocs/dynamics365smb-devitpro-pb",
        "",
        "Business Central developer and IT-pro documentation",
        "CC-BY 4.0",
        "LICENSE",
    ),
    "ms-project-operations": (
        "MicrosoftDocs/dynamics-365-project-operations",
        "",
        "Dynamics 365 Project Operations documentation",
        "CC-BY 4.0",
        "LICENSE",
    ),
    "ms-power-pages": ("MicrosoftDocs/power-pages-docs", "", "Power Pages documentation", "CC-BY 4.0", "LICENSE"),
    "ms-dynamics-guidance": (
        "MicrosoftDocs/dynamics365-guidance",
        "",
        "Dynamics 365 implementation guidance",
        "MIT",
        "LICENSE",
    ),
    "ms-contact-center": (
        "MicrosoftDocs/dynamics-365-contact-center",
        "",
        "Dynamics 365 Contact Center documentation",
        "CC-BY 4.0",
        "LICENSE",
    ),
    "ms-fraud-protection": (
        "MicrosoftDocs/dynamics-365-fraud-protection",
        "",
        "Dynamics 365 Fraud Protection documentation",
        "CC-BY 4.0",
        "LICENSE",
    ),
    "prometheus": ("prometheus/docs", "", "Prometheus documentation", "Apache-2.0", "LICENSE"),
    "argo-cd": ("argoproj/argo-cd", "docs/", "Argo CD documentation", "Apache-2.0", "LICENSE"),
    "homebrew": ("Homebrew/brew", "docs/", "Homebrew documentation", "BSD-2-Clause", "LICENSE.txt"),
    "nodejs": (
        "nodejs/nodejs.org",
        "apps/site/pages/en/",
        "Node.js website (learn pages, about, blog)",
        "MIT",
        "LICENSE",
    ),
    "dart": ("dart-lang/site-www", "src/content/", "Dart documentation", "CC-BY 4.0", "LICENSE"),
    "opentelemetry": (
        "open-telemetry/opentelemetry.io",
        "content/en/",
        "OpenTelemetry documentation",
        "CC-BY 4.0",
        "LICENSE",
    ),
    "cncf-glossary": ("cncf/glossary", "content/en/", "Cloud Native Glossary", "Apache-2.0", "LICENSE"),
    "dapr": ("dapr/docs", "daprdocs/content/en/", "Dapr documentation", "CC-BY 4.0", "LICENSE"),
    "minikube": ("kubernetes/minikube", "site/content/en/", "minikube documentation", "Apache-2.0", "LICENSE"),
    "webpack": ("webpack/webpack.js.org", "src/content/", "webpack documentation", "CC-BY 4.0", "LICENSE"),
    "typescript": (
        "microsoft/TypeScript-Website",
        "packages/documentation/copy/en/",
        "TypeScript handbook",
        "CC-BY 4.0",
        "LICENSE",
    ),
    "vue": ("vuejs/docs", "src/", "Vue documentation", "CC-BY 4.0", "LICENSE"),
    "fastapi": ("fastapi/fastapi", "docs/en/", "FastAPI documentation", "MIT", "LICENSE"),
    "go": ("golang/website", "_content/", "Go website (FAQ, docs)", "BSD-3-Clause", "LICENSE"),
    "rclone": ("rclone/rclone", "docs/content/", "rclone documentation (FAQ, storage backends)", "MIT", "COPYING"),
    "conda": ("conda/conda", "docs/", "conda documentation", "BSD-3-Clause", "LICENSE"),
    "traefik": ("traefik/traefik", "docs/content/", "Traefik documentation", "MIT", "LICENSE.md"),
    "knative": ("knative/docs", "docs/", "Knative documentation", "CC-BY 4.0", "LICENSE-docs"),
    "gitea": ("go-gitea/docs", "content/", "Gitea documentation", "Apache-2.0", "LICENSE"),
    "react": ("reactjs/react.dev", "src/content/", "React documentation", "CC-BY 4.0", "LICENSE-DOCS.md"),
}
SOURCES.update(
    {
        key: (f"{what}: FAQ and heading-question pairs (github.com/{repo})", licence)
        for key, (repo, _, what, licence, _) in DOC_REPOS.items()
    }
)
MAX_CHARS = 400  # texts are cut at a word boundary here (about 90 WordPiece tokens; the teacher sees <= 128)
_SPACE = re.compile(r"\s+")


def clean(text: str) -> str:
    """Collapse whitespace and cut ``text`` to ``MAX_CHARS`` at a word boundary."""
    text = _SPACE.sub(" ", html.unescape(text)).strip()
    if len(text) > MAX_CHARS:
        text = text[:MAX_CHARS].rsplit(" ", 1)[0]
    return text


def normalize(text: str) -> str:
    """The key two texts are the same under: lower case, whitespace collapsed."""
    return _SPACE.sub(" ", text).strip().lower()


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


# ---------------------------------------------------------------- documentation repositories

# headings that name a part of a page, not something a user asks
_GENERIC_HEADINGS = {
    "symptoms",
    "symptom",
    "cause",
    "causes",
    "resolution",
    "resolutions",
    "workaround",
    "status",
    "more information",
    "next steps",
    "see also",
    "related content",
    "related articles",
    "related topics",
    "references",
    "reference",
    "prerequisites",
    "prerequisite",
    "overview",
    "summary",
    "introduction",
    "in this article",
    "example",
    "examples",
    "syntax",
    "parameters",
    "inputs",
    "outputs",
    "notes",
    "remarks",
    "description",
    "applies to",
    "feedback",
    "third-party information disclaimer",
    "contact us for help",
    "before you begin",
    "requirements",
    "limitations",
    "known issues",
    "solution",
    "solutions",
    "additional resources",
    "learn more",
    "get help",
    "faq",
    "frequently asked questions",
    "clean up resources",
    "resources",
    "what's next",
    "conclusion",
    "background",
    "scenario",
    "more resources",
    "properties",
    "methods",
    "fields",
    "links",
    "glossary",
    "terminology",
    "definitions",
    "data collection",
    "disclaimer",
    "questions and answers",
    "general",
    "troubleshooting",
    "troubleshoot",
    "support",
}
_QUESTION_WORDS = (
    "how",
    "what",
    "why",
    "when",
    "where",
    "which",
    "who",
    "can",
    "could",
    "do",
    "does",
    "did",
    "is",
    "are",
    "should",
    "will",
    "would",
    "was",
    "were",
    "has",
    "have",
    "may",
    "am",
)
_TASK_VERBS = frozenset(
    """
    add allow apply archive assign authenticate automate back block build cancel change check choose clean
    clear configure connect convert copy create customize debug define delete deploy disable download edit
    enable encrypt export extend find fix generate get grant hide import increase install integrate invite
    join limit link list load lock log manage map migrate monitor move open optimize pause print protect
    publish reduce register reinstall remove rename renew repair replace report reset resolve restore restrict
    resume retrieve review revoke roll rotate run save schedule search secure send set share sign specify
    start stop submit switch sync synchronize test track transfer troubleshoot turn uninstall unlock update
    upgrade upload use validate verify view work write recover prevent set-up setup scale shrink format
    """.split()
)
_FENCE = re.compile(r"^\s*(```|~~~)")
_MD_IMAGE = re.compile(r"!\[[^\]]*\]\([^)]*\)")
_MD_INCLUDE = re.compile(
    r"\[!INCLUDE\s*\[[^\]]*\]\([^)]*\)\]|\[!(INCLUDE|div|VIDEO|NOTE|TIP|IMPORTANT|WARNING|CAUTION)[^\]]*\](\([^)]*\))?",
    re.I,
)
_MD_LINK = re.compile(r"\[([^\]]*)\]\([^)]*\)")
_MD_REFLINK = re.compile(r"\[([^\]]+)\]\[[^\]]*\]")
_HTML_TAG = re.compile(r"<[^>]{1,300}>")
_HTML_COMMENT = re.compile(r"<!--.*?-->", re.S)
_EMPHASIS = re.compile(r"(\*\*|__|\*|`)")
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
_LIST_MARK = re.compile(r"^\s*(?:[-*+]|\d+[.)])\s+")
_SCENARIO = re.compile(r"^consider the following scenarios?:\s*", re.I)
_STEP_PREFIX = re.compile(
    r"^(?:step\s*\d+\s*[:.-]|\d+\s*[.)-]|option\s*\d+\s*[:.-]|method\s*\d+\s*[:.-]|scenario\s*\d+\s*[:.-])\s*", re.I
)
_TEMPLATE = re.compile(r"\{\{.*?\}\}|\{%.*?%\}")
_ESCAPE = re.compile(r"\\([\\`*_{}\[\]()#+\-.!<>|])")
# an API reference page's title ("Range.Copy method (Excel)", "GetBatchRequest Class"): not a user's question
_API_TITLE = re.compile(
    r"\b(propert(y|ies)|methods?|events?|class|fields?|enumerations?|enum|interfaces?|struct(ure)?|constructors?|"
    r"namespaces?|members|operators?|delegates?|functions?|macros?|callbacks?|routines?|ioctl|objects?|"
    r"collections?|keywords?|statements?|cmdlets?|attributes?|elements?|tables?|types?)\s*(\([^)]*\))?$",
    re.I,
)
_IDENTIFIER = re.compile(r"\b[A-Za-z]\w*\.[A-Z][a-z]+|\w_\w|::|[a-z][A-Z]\w*[a-z][A-Z]\w*[a-z][A-Z]|\w\(\)|\.chm\d")
# paragraphs that are page furniture, not an answer
_FURNITURE = re.compile(
    r"^(_?applies to\b|namespace:|assembly:|learn more about:?|in this article\b|hi there! you have landed)", re.I
)


def strip_markdown(text: str) -> str:
    """Plain text of a Markdown fragment: no code blocks, tables, images, HTML, notes' markers; links to text."""
    lines: list[str] = []
    fenced = False
    for line in _HTML_COMMENT.sub(" ", text).splitlines():
        if _FENCE.match(line):
            fenced = not fenced
            continue
        stripped = line.strip()
        if fenced or stripped.startswith(("|", ":::", "[!INCLUDE", "<!--", "- [", "* [")) or stripped == ">":
            continue
        if line.startswith(("    ", "\t")) and not _LIST_MARK.match(line):
            continue  # indented code
        stripped = stripped.lstrip(">").strip()
        stripped = _LIST_MARK.sub("", stripped)
        lines.append(stripped)
    out = "\n".join(lines)
    out = _MD_IMAGE.sub(" ", out)
    out = _MD_INCLUDE.sub(" ", out)
    out = _MD_LINK.sub(r"\1", out)
    out = _MD_REFLINK.sub(r"\1", out)
    out = _HTML_TAG.sub(" ", out)
    out = _TEMPLATE.sub(" ", out)
    out = _ESCAPE.sub(r"\1", out)
    out = _EMPHASIS.sub("", out)
    return out


def paragraphs(markdown: str) -> list[str]:
    """Cleaned paragraphs (blank-line separated) of a Markdown body, code and tables dropped."""
    out: list[str] = []
    block: list[str] = []
    fenced = False
    for line in markdown.splitlines():
        if _FENCE.match(line):
            fenced = not fenced
            if block:
                out.append("\n".join(block))
                block = []
            continue
        if fenced:
            continue
        if line.strip():
            block.append(line)
        elif block:
            out.append("\n".join(block))
            block = []
    if block:
        out.append("\n".join(block))
    cleaned = (_SPACE.sub(" ", html.unescape(strip_markdown(p))).strip() for p in out)
    return [p for p in cleaned if len(p) >= 3]


def answer_text(markdown: str, min_chars: int = 40) -> str | None:
    """The first paragraphs of a Markdown answer, joined up to ``MAX_CHARS``; None when too short."""
    parts: list[str] = []
    for para in paragraphs(markdown):
        if _FURNITURE.match(para):
            continue
        parts.append(para if para[-1:] in ".:!?;" else para + ".")
        if sum(len(p) + 1 for p in parts) >= MAX_CHARS:
            break
    text = clean(" ".join(parts))
    return text if len(text) >= min_chars else None


_ENGLISH_WORDS = frozenset(
    "the a an and or of to in is are for on with you your this that it can be how what do i my not from by".split()
)
_FOREIGN_WORDS = frozenset(
    "der die das und ist nicht sie wie ein eine mit für le la les et est des une pour avec vous el los las y "
    "que del por para con una il di che per non da het een van ik je".split()
)


def restates(question: str, answer: str) -> bool:
    """The answer is little more than the question again ("X" → "Learn more about: X.")."""
    q, a = normalize(question).rstrip("?. "), normalize(answer)
    return bool(q) and q in a and len(a) < len(q) + 40


def is_english(text: str) -> bool:
    """ASCII letters, and no more common German/French/Spanish/Italian/Dutch words than English ones."""
    letters = sum(c.isalpha() for c in text)
    if letters < 3 or sum(c.isascii() for c in text if c.isalpha()) < 0.97 * letters:
        return False
    words = [w.strip(".,:;!?()\"'").lower() for w in text.split()]
    return sum(w in _FOREIGN_WORDS for w in words) <= sum(w in _ENGLISH_WORDS for w in words)


_PRONOUN = re.compile(r"\b(it|this|they|them)\b", re.I)
_ING_STEMS = _TASK_VERBS | {"us", "mak", "creat", "configur", "manag", "troubleshoot", "sav", "shar", "mov"}
# words that carry no topic: a heading made of these alone ("What it is", "How it works") is not a question
_EMPTY_WORDS = frozenset(_QUESTION_WORDS) | {
    "it",
    "this",
    "that",
    "they",
    "them",
    "i",
    "you",
    "we",
    "a",
    "an",
    "the",
    "to",
    "of",
    "in",
    "for",
    "on",
    "with",
    "work",
    "works",
    "matter",
    "matters",
    "help",
    "helps",
    "next",
    "else",
    "need",
    "know",
    "here",
    "there",
    "me",
    "my",
    "your",
    "use",
    "used",
    "about",
    "more",
    "information",
    "addresses",
    "address",
    "problem",
}


def user_question(heading: str, title: str = "") -> str | None:
    """``heading`` as a user's question or task ("How do I …?", "Configure …"), else None.

    A pronoun ("How it helps") is replaced by the page's ``title`` when that is short; a heading that
    names no topic at all ("What's next?", "How it works" on a page with a long title) is None.
    """
    text = _STEP_PREFIX.sub("", clean(strip_markdown(heading))).strip(" :.-")
    words = text.split()
    if not 2 <= len(words) <= 25 or len(text) < 8 or not is_english(text):
        return None
    if text.lower().rstrip("?") in _GENERIC_HEADINGS or "{" in text or "<" in text or _IDENTIFIER.search(text):
        return None
    first = words[0].lower().strip("'\"")
    if not (
        text.endswith("?")
        or first in _QUESTION_WORDS
        or first in _TASK_VERBS
        or (first.endswith("ing") and first[:-3] in _ING_STEMS)  # "Configuring …", "Using …"
    ):
        return None
    if _PRONOUN.search(text):
        if not title or len(title.split()) > 6:
            return None
        text = _PRONOUN.sub(title, text, count=1)
    if all(w.lower().strip("?.,'\"") in _EMPTY_WORDS for w in text.split()):
        return None
    return text


def front_matter(markdown: str) -> tuple[dict[str, object], str]:
    """(YAML front matter, the rest) of a Markdown page; an empty dict when it has none or it does not parse."""
    if not markdown.startswith("---"):
        return {}, markdown
    end = markdown.find("\n---", 3)
    if end < 0:
        return {}, markdown
    try:
        meta = yaml.safe_load(markdown[3:end])
    except yaml.YAMLError:
        meta = None
    return (meta if isinstance(meta, dict) else {}), markdown[end + 4 :].split("\n", 1)[-1]


def sections(body: str) -> list[tuple[int, str, str]]:
    """(level, heading, body) of every Markdown heading outside code blocks; level 0 for text before the first."""
    out: list[tuple[int, str, str]] = []
    level, heading, lines = 0, "", []
    fenced = False
    for line in body.splitlines():
        if _FENCE.match(line):
            fenced = not fenced
        match = None if fenced else _HEADING.match(line)
        if match:
            out.append((level, heading, "\n".join(lines)))
            level, heading, lines = len(match.group(1)), match.group(2), []
        else:
            lines.append(line)
    out.append((level, heading, "\n".join(lines)))
    return out


def markdown_records(markdown: str) -> Iterator[tuple[str, str | None]]:
    """(question, answer) pairs of one documentation page.

    - front matter ``title`` (or the page's ``# heading``) → front matter ``description`` (without one,
      the page's first paragraphs);
    - every heading phrased as a question or a task → its section's first paragraphs (a heading with
      nothing under it but sub-headings answers with its first sub-section);
    - support articles: the title and the *Symptoms* section → the *Resolution* (or *Cause*) section.
    """
    meta, body = front_matter(markdown)
    parts = sections(body)
    title = next((h for lv, h, _ in parts if lv == 1), None) or str(meta.get("title") or "")
    title = clean(strip_markdown(title))
    if _API_TITLE.search(title) or _IDENTIFIER.search(title):
        title = ""  # reference pages: their headings may still hold questions
    description = meta.get("description")
    intro = next((text for lv, _, text in parts if lv == 1), None) or parts[0][2]
    answer = answer_text(description) if isinstance(description, str) else None
    if answer is None or restates(title, answer):
        answer = answer_text(intro)
    if answer and is_english(answer) and len(title) >= 8 and is_english(title) and not restates(title, answer):
        yield title, answer
    named = {clean(strip_markdown(h)).lower(): text for lv, h, text in parts if lv >= 2}
    fix = next((named[k] for k in ("resolution", "solution", "workaround", "cause") if k in named), None)
    if fix is not None:
        answer = answer_text(fix)
        if answer and is_english(answer):
            if len(title) >= 8 and is_english(title):
                yield title, answer
            symptom = answer_text(named.get("symptoms", named.get("symptom", "")))
            symptom = _SCENARIO.sub("", symptom or "").strip() or None
            if symptom and is_english(symptom):
                yield symptom, answer
    for k, (level, heading, text) in enumerate(parts):
        if level < 2:
            continue
        question = user_question(heading, title)
        if question is None:
            continue
        answer = answer_text(text)
        if answer is None and k + 1 < len(parts) and parts[k + 1][0] > level:
            answer = answer_text(parts[k + 1][2])
        if answer and is_english(answer) and not restates(question, answer):
            yield question, answer


def faq_yaml_records(text: str) -> Iterator[tuple[str, str | None]]:
    """(question, answer) pairs of a ``### YamlMime:FAQ`` page (``sections: - questions: - question/answer``)."""
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError:
        return
    if not isinstance(doc, dict):
        return
    groups = [doc] + [s for s in doc.get("sections") or [] if isinstance(s, dict)]
    for group in groups:
        for item in group.get("questions") or []:
            if not isinstance(item, dict):
                continue
            question, answer = item.get("question"), item.get("answer")
            if not isinstance(question, str) or not isinstance(answer, str):
                continue
            question = clean(strip_markdown(question))
            reply = answer_text(answer, min_chars=20)
            if len(question) >= 8 and reply and is_english(question) and is_english(reply):
                yield question, reply


def doc_file_records(path: str, text: str) -> Iterator[tuple[str, str | None]]:
    """Pairs of one file of a documentation repository (Markdown page or YAML FAQ); nothing for other files."""
    name = path.lower()
    if name.endswith((".yml", ".yaml")):
        if text.lstrip().startswith("### YamlMime:FAQ"):
            yield from faq_yaml_records(text)
    elif name.endswith((".md", ".mdx")):
        parts = name.split("/")
        skip = ("includes", "snippets", "includes-generic", "changelog", "release-notes", "releases", "blog", "news")
        if any(p in skip for p in parts[:-1]):
            return
        if parts[-1] in (
            "readme.md",
            "license.md",
            "contributing.md",
            "code_of_conduct.md",
            "security.md",
            "changelog.md",
            "toc.md",
            "index.md",
        ):
            return
        yield from markdown_records(text)


def git_files(
    git_dir: Path, under: str = "", suffixes: tuple[str, ...] = (".md", ".mdx", ".yml")
) -> Iterator[tuple[str, str]]:
    """(path, text) of the files of ``git_dir``'s HEAD whose names end with ``suffixes``, in path order.

    Reads a bare repository (``git cat-file --batch``); files absent from a partial snapshot are skipped.
    """
    listing = subprocess.run(
        ["git", "--git-dir", str(git_dir), "ls-tree", "-r", "-z", "HEAD"], capture_output=True, check=True
    ).stdout.decode("utf-8", "replace")
    entries = []
    for entry in listing.split("\0"):
        if not entry:
            continue
        info, path = entry.split("\t", 1)
        _mode, kind, sha = info.split()
        if kind == "blob" and path.startswith(under) and path.lower().endswith(suffixes):
            entries.append((path, sha))
    entries.sort()
    proc = subprocess.Popen(
        ["git", "--git-dir", str(git_dir), "cat-file", "--batch"], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    assert proc.stdin is not None and proc.stdout is not None
    try:
        for path, sha in entries:
            proc.stdin.write(sha.encode() + b"\n")
            proc.stdin.flush()
            header = proc.stdout.readline().split()
            if len(header) < 3 or header[1] == b"missing":
                continue
            data = proc.stdout.read(int(header[2]))
            proc.stdout.read(1)
            if len(data) > 2_000_000:
                continue
            yield path, data.decode("utf-8", "replace")
    finally:
        proc.stdin.close()
        proc.wait()


def docs_records(git_dir: Path, under: str = "") -> Iterator[tuple[str, str | None]]:
    """(question, answer) pairs of every Markdown page and YAML FAQ under ``under`` of a repository's HEAD."""
    for path, text in git_files(git_dir, under):
        yield from doc_file_records(path, text)


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
    reuses its index. A new text in ``exclude`` (normalized, see :func:`eval_texts`) is dropped with
    its pairs. A new pair whose question has more than ``max_shared`` answers, or whose answer more
    than ``max_shared`` questions, is dropped (its texts stay). Returns the counts written to
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
            if i is None or not partner:
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


def _doc_arg(value: str) -> tuple[str, Path]:
    key, sep, path = value.partition("=")
    if not sep or key not in DOC_REPOS:
        raise argparse.ArgumentTypeError(
            f"--docs wants KEY=GIT_DIR with KEY one of {', '.join(DOC_REPOS)}; got {value!r}"
        )
    return key, Path(path)


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
        type=_doc_arg,
        action="append",
        default=[],
        metavar="KEY=GIT_DIR",
        help=f"a documentation repository (bare git dir or clone) to read; KEY one of: {', '.join(DOC_REPOS)}",
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
    if args.extend is None and args.medquad is None:
        parser.error("--medquad is required unless --extend names an existing corpus")
    if args.extend is None and not args.docs:
        print(json.dumps(build(args.out, args.wordnet, args.medquad, args.pydoc, args.seed)))
        return
    feeds: list[tuple[str, Iterable[tuple[str, str | None]]]] = []
    if args.extend is None:
        rng = random.Random(args.seed)
        feeds += [
            ("wordnet", wordnet_records(args.wordnet, rng)),
            ("medquad", medquad_records(args.medquad)),
            ("pydoc", pydoc_records(args.pydoc)),
        ]
    for key, git_dir in args.docs:
        feeds.append((key, docs_records(git_dir, DOC_REPOS[key][1])))
    exclude = eval_texts(args.exclude)
    counts = assemble(args.out, feeds, args.seed, args.extend, exclude)
    print(json.dumps(counts))


if __name__ == "__main__":
    main()

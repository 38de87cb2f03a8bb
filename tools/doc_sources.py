"""Question → answer pairs from permissively licensed documentation repositories.

Read by ``python -m tools.training_corpus --docs KEY=GIT_DIR`` (a bare or normal git directory, as
``fetch`` or ``git clone`` leave it): FAQ files (``### YamlMime:FAQ`` YAML and Markdown FAQs),
section headings phrased as questions or tasks → the section's first paragraphs, page title →
description, support articles' symptoms → resolution. ``DOC_REPOS`` lists every repository with
its licence and the file the licence was read from (in ``doc_repos.py``). Also the text cleaning shared with the
other sources (``clean``, ``normalize``).
"""

from __future__ import annotations

import html
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import yaml

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
    git_dir: Path,
    under: str = "",
    suffixes: tuple[str, ...] = (".md", ".mdx", ".yml"),
    max_bytes: int = 2_000_000,
) -> Iterator[tuple[str, str]]:
    """(path, text) of the files of ``git_dir``'s HEAD whose names end with ``suffixes``, in path order.

    Reads a bare repository (``git cat-file --batch``); files absent from a partial snapshot, and
    files over ``max_bytes``, are skipped.
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
            if len(data) > max_bytes:
                continue
            yield path, data.decode("utf-8", "replace")
    finally:
        proc.stdin.close()
        proc.wait()


def docs_records(git_dir: Path, under: str = "") -> Iterator[tuple[str, str | None]]:
    """(question, answer) pairs of every Markdown page and YAML FAQ under ``under`` of a repository's HEAD."""
    for path, text in git_files(git_dir, under):
        yield from doc_file_records(path, text)

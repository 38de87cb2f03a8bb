"""The BM25 index of a large build analysed in another process, beside the encoder.

A build's calling thread reads, validates and tokenizes each chunk of answers while a
worker thread runs the encoder (:class:`~qaindex.indexing.streaming.EncodePipeline`). The
BM25 side (lower-casing, splitting, stemming and counting every word:
:class:`~qaindex.text.lexical.LexicalBuilder`) is pure Python and would take a third of
that thread's time, so for a build of more than :data:`IN_PROCESS_TEXTS` answers
:class:`LexicalWorker` hands each chunk of texts to a :class:`~qaindex.text.lexical.LexicalBuilder`
in a child process and goes on; the child analyses the chunks in order, as the builder would
in process, so the index is the same. Smaller builds analyse in process (a child costs a
fraction of a second to start).

The child is a new interpreter that runs :func:`main` (it imports nothing of the program that
builds, so a script without a ``__main__`` guard is not run again, and it shares no thread or
lock with the encoder). Each chunk goes down its standard
input as one frame: 8 bytes of length (little-endian), then the texts as a JSON array; an
empty frame ends the input. A full pipe makes the parent wait, so at most a pipe's worth of
texts is in flight. The child writes its arrays (``.npy``) and vocabulary (JSON) to temporary
files and one JSON line naming them, or the error that stopped it, to its standard output;
the parent memory-maps the arrays and unlinks the files, so the build's memory holds them
once, as pages of those files. A child that fails or dies is a
:class:`~qaindex.errors.QAIndexError` saying so, at the next chunk or at
:meth:`LexicalWorker.finish`; nothing is written to an index before the build succeeds.
"""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

import numpy as np

from .. import fast_path_switch
from ..errors import QAIndexError
from ..text.lexical import LexicalBuilder, LexicalIndex

__all__ = ["IN_PROCESS_TEXTS", "LexicalWorker", "build_analyser"]

#: Answers a build analyses in process before it starts a child for the rest (and them).
IN_PROCESS_TEXTS = 16_384
_FRAME = struct.Struct("<Q")  # the length of a frame's JSON bytes
_ARRAYS = ("terms", "counts", "offsets")


class LexicalWorker:
    """A :class:`~qaindex.text.lexical.LexicalBuilder` that analyses in a child process once
    more than ``in_process`` texts were added (see the module docstring).

    Parameters
    ----------
    spool_dir : path-like, optional
        Where the child's temporary files live (default: the system's temporary directory).
    in_process : int, optional
        Texts analysed in process before the child starts (default :data:`IN_PROCESS_TEXTS`).

    Example
    -------
    >>> worker = LexicalWorker(in_process=1)
    >>> worker.add(["Cats purr."]); worker.add(["Dogs bark at cats"])
    >>> lex = worker.finish()
    >>> len(lex), lex.vocab
    (2, ['cat', 'purr', 'dog', 'bark'])
    """

    def __init__(self, spool_dir: str | os.PathLike[str] | None = None, *, in_process: int | None = None) -> None:
        self._spool = None if spool_dir is None else os.fspath(spool_dir)
        self._limit = IN_PROCESS_TEXTS if in_process is None else in_process
        self._held: list[str] = []  # texts not handed to a child yet
        self._local = LexicalBuilder()  # the in-process builder; raises if PyStemmer is missing
        self._child: subprocess.Popen[bytes] | None = None

    def add(self, texts: Sequence[str]) -> None:
        """Analyse ``texts`` as the next rows (in the child, once it runs)."""
        if self._child is None:
            self._held.extend(texts)
            if len(self._held) <= self._limit or not sys.executable:  # no interpreter to start: stay here
                return
            self._start()
            texts, self._held = self._held, []
        self._send(list(texts))

    def finish(self) -> LexicalIndex:
        """The index of every text added, in order."""
        child = self._child
        if child is None:
            self._local.add(self._held)
            self._held = []
            return self._local.finish()
        self._write(b"")  # the end of the input
        assert child.stdin is not None
        child.stdin.close()
        code, result = self._stopped()
        if code != 0 or "error" in result or "paths" not in result:
            raise _failed(code, result)
        paths = result["paths"]
        try:
            arrays = [np.load(paths[name], mmap_mode="r") for name in _ARRAYS]
            vocab = json.loads(Path(paths["vocab"]).read_text(encoding="utf-8"))
        finally:
            for path in paths.values():
                Path(path).unlink(missing_ok=True)  # the maps keep the pages while the index lives
        terms, counts, offsets = arrays
        return LexicalIndex(terms, counts, np.asarray(offsets), vocab)

    def _start(self) -> None:
        # -c, not -m: running a module the package imports would import it twice
        command = [sys.executable, "-c", "from qaindex.indexing.lexical_worker import main; main()"]
        if self._spool is not None:
            command.append(self._spool)
        self._child = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE)

    def _send(self, texts: list[str]) -> None:
        """One chunk of texts as a frame (an empty list too: only :meth:`finish` ends the input)."""
        self._write(json.dumps(texts).encode("ascii"))

    def _write(self, data: bytes) -> None:
        """A frame: its length, then ``data`` (empty: the end of the input)."""
        child = self._child
        assert child is not None and child.stdin is not None
        try:
            child.stdin.write(_FRAME.pack(len(data)))
            child.stdin.write(data)
            child.stdin.flush()
        except (BrokenPipeError, OSError):  # the child stopped: say why
            raise _failed(*self._stopped()) from None

    def _stopped(self) -> tuple[int, dict[str, Any]]:
        """Wait for the child to end: its exit code and its result line (parsed)."""
        child = self._child
        assert child is not None and child.stdout is not None
        line = child.stdout.read()
        child.wait()
        self._child = None
        return child.returncode, _parsed(line)

    def __del__(self) -> None:
        child = self._child
        if child is not None and child.poll() is None:
            child.kill()
            child.wait()


def _failed(code: int | None, result: dict[str, Any]) -> QAIndexError:
    """The error for a child that stopped without the index: the error it reported, or how it ended."""
    if "error" in result:
        return QAIndexError(f"the BM25 analysis failed in its worker process: {result['error']}")
    how = f"killed by signal {-code}" if code is not None and code < 0 else "without its result"
    return QAIndexError(
        f"the BM25 worker process of this build exited with code {code} ({how}); if memory ran out, build "
        "with --no-hybrid or on a machine with more memory"
    )


def build_analyser() -> LexicalWorker | LexicalBuilder:
    """What a build hands its answers' texts to for the BM25 index: a :class:`LexicalWorker`,
    or without the fast paths (:func:`qaindex.fast_path_switch.generic_only`) the in-process
    builder. Either's ``finish()`` gives the index."""
    return LexicalWorker() if fast_path_switch.enabled() else LexicalBuilder()


def _parsed(line: bytes) -> dict[str, Any]:
    """The child's JSON result line ({} when it wrote none)."""
    try:
        result = json.loads(line.decode("utf-8")) if line.strip() else {}
    except ValueError:
        return {}
    return result if isinstance(result, dict) else {}


def _frames(stream: IO[bytes]) -> Any:
    """The lists of texts on ``stream``, up to the empty frame."""
    while True:
        head = stream.read(_FRAME.size)
        if len(head) < _FRAME.size:
            raise EOFError("the input ended before its last frame")
        (size,) = _FRAME.unpack(head)
        if size == 0:
            return
        yield json.loads(stream.read(size))


def _serve(spool: str | None, stdin: IO[bytes], stdout: IO[bytes]) -> int:
    """The child: analyse each frame's texts, write the index's files, report them on ``stdout``."""
    paths: dict[str, str] = {}
    try:
        builder = LexicalBuilder()
        for texts in _frames(stdin):
            builder.add(texts)
        lex = builder.finish()
        for name, array in zip(_ARRAYS, (lex._terms, lex._counts, lex._offsets), strict=True):
            handle, path = tempfile.mkstemp(prefix=f"qaindex-bm25-{name}-", suffix=".npy", dir=spool)
            with os.fdopen(handle, "wb") as out:
                np.save(out, array, allow_pickle=False)
            paths[name] = path
        handle, path = tempfile.mkstemp(prefix="qaindex-bm25-vocab-", suffix=".json", dir=spool)
        with os.fdopen(handle, "w", encoding="utf-8") as text:
            json.dump(lex.vocab, text)
        paths["vocab"] = path
        stdout.write(json.dumps({"paths": paths}).encode("utf-8") + b"\n")
        return 0
    except BaseException as exc:  # noqa: BLE001 - reported to the parent, which raises
        for path in paths.values():
            Path(path).unlink(missing_ok=True)
        stdout.write(json.dumps({"error": f"{type(exc).__name__}: {exc}"}).encode("utf-8") + b"\n")
        return 1


def main() -> None:
    """The child process's entry point: frames on standard input, the result on standard output
    (the spool directory, if any, as its one argument)."""
    sys.exit(_serve(sys.argv[1] if len(sys.argv) > 1 else None, sys.stdin.buffer, sys.stdout.buffer))


if __name__ == "__main__":
    main()

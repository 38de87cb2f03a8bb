"""The BM25 index of a large build analysed in another process, beside the encoder.

A build's calling thread reads, validates and tokenizes each chunk of answers while a
worker thread runs the encoder (:class:`~qaindex.indexing.streaming.EncodePipeline`). The
BM25 side (lower-casing, splitting, stemming and counting every word:
:class:`~qaindex.text.lexical.LexicalBuilder`) is pure Python and would take a third of
that thread's time, so for a build of more than :data:`IN_PROCESS_TEXTS` answers
:class:`LexicalWorker` hands each chunk of texts to a :class:`~qaindex.text.lexical.LexicalBuilder`
in a child process and returns at once; the child analyses the chunks in order, as the
builder would in process, so the index is the same. Smaller builds analyse in process (a
child costs a fraction of a second to start).

The child writes its arrays to temporary files that the parent memory-maps and unlinks, so
the build's memory holds them once, as pages of those files. A child that fails or dies is
a :class:`~qaindex.errors.QAIndexError` naming what happened, at the next chunk or at
:meth:`LexicalWorker.finish`; nothing is written to an index before the build succeeds.
"""

from __future__ import annotations

import multiprocessing
import os
import queue
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import QAIndexError
from ..text.lexical import LexicalBuilder, LexicalIndex

__all__ = ["IN_PROCESS_TEXTS", "LexicalWorker"]

#: Answers a build analyses in process before it starts a child for the rest (and them).
IN_PROCESS_TEXTS = 16_384
_QUEUED = 2  # chunks of texts waiting for the child at most (the parent waits beyond)
_POLL = 1.0  # seconds between checks that the child still runs, while waiting on it
_ARRAYS = ("terms", "counts", "offsets")


class LexicalWorker:
    """A :class:`~qaindex.text.lexical.LexicalBuilder` that analyses in a child process once
    more than ``in_process`` texts were added (see the module docstring).

    Parameters
    ----------
    spool_dir : path-like, optional
        Where the child's temporary array files live (default: the system's temporary directory).
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
        self._child: Any = None
        self._inbox: Any = None
        self._outbox: Any = None

    def add(self, texts: Sequence[str]) -> None:
        """Analyse ``texts`` as the next rows (in the child, once it runs; returns at once)."""
        if self._child is None:
            self._held.extend(texts)
            if len(self._held) <= self._limit:
                return
            self._start()
            texts, self._held = self._held, []
        self._send(list(texts))

    def finish(self) -> LexicalIndex:
        """The index of every text added, in order."""
        if self._child is None:
            self._local.add(self._held)
            self._held = []
            return self._local.finish()
        self._send(None)
        status, payload = self._receive()
        self._child.join()
        if status != "ok":
            raise QAIndexError(f"the BM25 analysis failed in its worker process: {payload}")
        paths, vocab = payload
        try:
            arrays = [np.load(paths[name], mmap_mode="r") for name in _ARRAYS]
        finally:
            for path in paths.values():
                Path(path).unlink(missing_ok=True)  # the maps keep the pages while the index lives
        terms, counts, offsets = arrays
        return LexicalIndex(terms, counts, np.asarray(offsets), vocab)

    def _start(self) -> None:
        context = multiprocessing.get_context("spawn")  # not fork: the encoder's threads are running
        self._inbox = context.Queue(maxsize=_QUEUED)
        self._outbox = context.Queue()
        self._child = context.Process(
            target=_serve, args=(self._inbox, self._outbox, self._spool), name="qaindex-bm25", daemon=True
        )
        self._child.start()

    def _send(self, texts: list[str] | None) -> None:
        while True:
            try:
                self._inbox.put(texts, timeout=_POLL)
                return
            except queue.Full:
                self._check_alive()

    def _receive(self) -> tuple[str, Any]:
        while True:
            try:
                result: tuple[str, Any] = self._outbox.get(timeout=_POLL)
                return result
            except queue.Empty:
                self._check_alive()

    def _check_alive(self) -> None:
        if not self._child.is_alive():
            try:  # an error the child reported before it stopped
                status, payload = self._outbox.get(timeout=_POLL)
            except queue.Empty:
                status = payload = None
            if status == "error":
                raise QAIndexError(f"the BM25 analysis failed in its worker process: {payload}")
            code = self._child.exitcode
            raise QAIndexError(
                f"the BM25 worker process of this build exited with code {code} "
                f"({'killed by signal ' + str(-code) if code is not None and code < 0 else 'an error'}); "
                "if memory ran out, build with --no-hybrid or on a machine with more memory"
            )

    def __del__(self) -> None:
        child = self._child
        if child is not None and child.is_alive():
            child.kill()


def _serve(inbox: Any, outbox: Any, spool: str | None) -> None:
    """The child: analyse each list of texts from ``inbox`` until None, then write the arrays
    to temporary files and put ``("ok", (paths, vocab))`` (or ``("error", message)``) in ``outbox``."""
    try:
        builder = LexicalBuilder()
        while (texts := inbox.get()) is not None:
            builder.add(texts)
        lex = builder.finish()
        paths = {}
        for name, array in zip(_ARRAYS, (lex._terms, lex._counts, lex._offsets), strict=True):
            handle, path = tempfile.mkstemp(prefix=f"qaindex-bm25-{name}-", suffix=".npy", dir=spool)
            with os.fdopen(handle, "wb") as out:
                np.save(out, array, allow_pickle=False)
            paths[name] = path
        outbox.put(("ok", (paths, lex.vocab)))
    except BaseException as exc:  # noqa: BLE001 - reported to the parent, which raises
        outbox.put(("error", f"{type(exc).__name__}: {exc}"))

"""A corpus encoded into the pieces of an index: stored records, answer vectors, coarse index.

:meth:`qaindex.Ranker.build` checks its arguments and calls :func:`encode_corpus`; a file is
streamed chunk by chunk (:mod:`.streaming`), records in memory are encoded at once.
:func:`rebuilt_coarse` remakes the coarse index after answers are removed.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .. import fast_path_switch
from ..checks import MAX_SETTING, choice, flag, path_arg, path_or_records, positive_int
from ..corpus import Record, records_from_dicts
from ..errors import QueryError
from ..key_index import KEY_SIDE, KeyIndex, auto_passage_words, build_keys, choose_passage_words
from ..model import Model
from ..reranker import Reranker
from ..store.index_checks import check_content
from ..store.records import RecordStore
from ..text.lexical import LexicalIndex, build_hybrid
from ..vector_index import INDEX_KINDS, CoarseIndex, choose_kind
from .cuts import AnswerCuts, TextSink, cut_line
from .lexical_worker import build_analyser
from .streaming import DEFAULT_CHUNK, EncodePipeline
from .tuning import check_target, tune_for_corpus

__all__ = ["Built", "appended_keys", "check_hnsw", "encode_answers", "encode_corpus", "encode_keys", "rebuilt_coarse"]

_log = logging.getLogger("qaindex.ranker")


def check_hnsw(hnsw: Any) -> dict[str, int] | None:
    """The ``hnsw`` argument of a build: index parameters by name, each a bounded positive int."""
    if hnsw is None:
        return None
    if not isinstance(hnsw, Mapping):
        raise QueryError(f"hnsw must be a mapping of M, ef_construction, ef_search; got {type(hnsw).__name__}")
    limits = {
        "M": 256,
        "ef_construction": 1 << 16,
        "ef_search": MAX_SETTING,
        "nlist": 1 << 16,
        "nprobe": 1 << 16,
        "refine": MAX_SETTING,
    }
    out = {}
    for key, value in hnsw.items():
        if key not in limits:
            raise QueryError(
                f"unknown index parameter {key!r}; use {', '.join(limits)} (nlist, nprobe: IVF; M, refine: PQ)"
            )
        out[key] = positive_int(value, f"hnsw[{key!r}]", maximum=limits[key])
    return out


def encode_answers(
    model: Model, texts: list[str], batch_size: int, progress: bool, lexical: TextSink | None = None
) -> np.ndarray:
    """The answers' vectors, with a progress bar on stderr when asked.

    Encoded :data:`~.streaming.DEFAULT_CHUNK` texts at a time through the build's pipeline
    (:class:`~.streaming.EncodePipeline`: the next chunk is tokenized, and ``lexical`` given its
    texts, while onnxruntime encodes this one), so the vectors are exactly those of a file
    build of the same answers.
    """
    parts: list[np.ndarray] = []

    def run(update: Callable[[int], Any] | None) -> None:
        with EncodePipeline(model, parts, batch_size, update, lexical) as pipeline:
            for start in range(0, len(texts), DEFAULT_CHUNK):
                pipeline.submit_texts(texts[start : start + DEFAULT_CHUNK])

    if not progress:
        run(None)
    else:
        from tqdm import tqdm

        with tqdm(total=len(texts), desc="encoding answers", unit="answer", disable=None) as bar:
            run(bar.update)
    if not parts:
        return np.zeros((0, model.dimension), dtype=np.float32)
    return parts[0] if len(parts) == 1 else np.concatenate(parts)


@dataclass
class Built:
    """What :func:`encode_corpus` makes: the pieces of a new index and the checked options."""

    model: Model
    records: RecordStore
    vectors: np.ndarray
    coarse: CoarseIndex
    reranker: Reranker | None
    overfetch: int
    #: the answers' BM25 index (hybrid search), or None for a dense-only index
    lexical: LexicalIndex | None
    #: the stored questions as search keys (qaindex.key_index), or None: answers only
    keys: KeyIndex | None = None
    #: the answers the model's answer cut shortened (qaindex.indexing.cuts.AnswerCuts.report)
    cuts: dict[str, Any] | None = None


def encode_keys(
    model: Model, records: Any, batch_size: int, *, lexical: bool, question_keys: bool, passage_words: int | str
) -> KeyIndex | None:
    """A build's search keys (:mod:`qaindex.key_index`): the stored questions of ``records``
    and, with ``passage_words`` (as :meth:`qaindex.Ranker.build` takes it; ``"auto"``:
    :func:`~qaindex.key_index.auto_passage_words` for this model and these records), their
    answers' passages, encoded on :data:`KEY_SIDE`; None without ``question_keys`` (no
    passages either)."""
    if not question_keys:
        return None
    words = auto_passage_words(passage_words, records, static_encoder=model.static_encoder)
    return _encoded_keys(model, records, batch_size, lexical, 0, words)[0]


def _encoded_keys(
    model: Model, records: object, batch_size: int, lexical: bool, first_row: int, passage_words: int
) -> tuple[KeyIndex, list[str]]:
    started = time.perf_counter()
    keys, texts = build_keys(
        records,
        lambda texts: model.encode(texts, role=KEY_SIDE, batch_size=batch_size),
        model.dimension,
        lexical=lexical,
        first_row=first_row,
        passage_words=passage_words,
    )
    if len(keys):
        counts = keys.describe()
        _log.info(
            "encoded %d stored questions and %d passages as search keys in %.2f s",
            counts["stored_questions"],
            counts["passage_keys"],
            time.perf_counter() - started,
        )
    return keys, texts


def appended_keys(
    keys: KeyIndex | None, model: Model, new: list[Record], first_row: int, batch_size: int
) -> KeyIndex | None:
    """``keys`` followed by the keys of ``new`` records (added at ``first_row``), with the
    index's passage setting; None for an index without keys."""
    if keys is None:
        return None
    added, texts = _encoded_keys(model, new, batch_size, False, first_row, keys.passage_words)
    return keys.appended(added, texts)


def encode_corpus(
    corpus: str | os.PathLike[str] | Iterable[Mapping[str, Any] | Record],
    *,
    model: str | os.PathLike[str] | Model | None,
    device: str,
    index_kind: str,
    hnsw: Mapping[str, int] | None,
    overfetch: int,
    batch_size: int,
    progress: bool,
    recall: float | None,
    reranker: str | os.PathLike[str] | Reranker | None,
    hybrid: bool | None,
    question_keys: bool = True,
    passage_words: int | str = "auto",
) -> Built:
    """:meth:`qaindex.Ranker.build`'s work: check every argument, then encode and index.

    Every argument is checked before any model is loaded or text encoded (a missing
    extra for ``hybrid`` too). A file is read, encoded and stored in chunks, one chunk of
    texts in memory at a time; with ``recall``, the coarse stage's search breadth is tuned
    (:mod:`.tuning`).
    """
    overfetch = positive_int(overfetch, "overfetch", maximum=MAX_SETTING)
    batch_size = positive_int(batch_size, "batch_size")
    flag(progress, "progress")
    flag(question_keys, "question_keys")
    choose_passage_words(passage_words, static_encoder=False)  # a bad setting fails before any encoding
    use_hybrid = build_hybrid(hybrid)  # a missing extra fails before any encoding
    choice(device, "device", ("auto", "cpu", "cuda"))
    choice(index_kind, "index_kind", INDEX_KINDS)
    hnsw = check_hnsw(hnsw)
    if recall is not None:
        recall = check_target(recall)
    if model is not None and not isinstance(model, str | os.PathLike | Model):
        raise QueryError(f"model must be a model directory, a Model or None, got {type(model).__name__}")
    if isinstance(model, str | os.PathLike):
        path_arg(model, "model", what="a model directory")
    if reranker is not None and not isinstance(reranker, Reranker):
        path_arg(reranker, "reranker", what="a reranker model directory")
    is_path = path_or_records(corpus, "corpus")
    # Encoding overlaps Python work (a file's next chunk, qaindex.indexing.streaming; the stored
    # records), which takes one core: onnxruntime gets the other (with two threads it
    # competes with that work, and it is much slower on a loaded machine).
    threads = 1 if fast_path_switch.enabled() else None
    loaded = model if isinstance(model, Model) else Model.load(model, device=device, threads=threads)
    if reranker is not None and not isinstance(reranker, Reranker):
        reranker = Reranker.load(reranker, device=device)
    # the BM25 rows, analysed in a child process beside the encoder for a large build (.lexical_worker)
    lexical = build_analyser() if use_hybrid else None
    cuts = AnswerCuts(loaded, then=lexical)  # counts the answers the model cuts, then BM25 rows
    store, vectors, coarse = _encode(
        corpus,
        loaded,
        is_path=is_path,
        index_kind=index_kind,
        hnsw=hnsw,
        device=device,
        batch_size=batch_size,
        progress=progress,
        recall=recall,
        overfetch=overfetch,
        lexical=cuts,
    )
    report = cuts.report()
    (_log.warning if report["cut"] else _log.info)("answers: %s", cut_line(report))
    keys = encode_keys(
        loaded, store, batch_size, lexical=use_hybrid, question_keys=question_keys, passage_words=passage_words
    )
    analysed = None if lexical is None else lexical.finish()
    # the checks a load applies to what a checksum cannot vouch for (a save repeats them, scanning everything)
    check_content(
        Path("new index"),
        model=loaded,
        vectors=vectors,
        records=store,
        lexical=analysed,
        scan=False,
        blame=loaded.directory,
        keys=keys,
    )
    return Built(loaded, store, vectors, coarse, reranker, overfetch, analysed, keys, report)


def _encode(
    corpus: str | os.PathLike[str] | Iterable[Mapping[str, Any] | Record],
    model: Model,
    *,
    is_path: bool,
    index_kind: str,
    hnsw: Mapping[str, int] | None,
    device: str,
    batch_size: int,
    progress: bool,
    recall: float | None,
    overfetch: int,
    lexical: TextSink | None,
) -> tuple[RecordStore, np.ndarray, CoarseIndex]:
    started = time.perf_counter()
    if is_path:  # streamed: one chunk of texts in memory at a time (qaindex.indexing.streaming)
        store, vectors, coarse = _from_file(corpus, model, index_kind, hnsw, device, batch_size, progress, lexical)  # type: ignore[arg-type]
        tuned_on: RecordStore | list[Record] = store
    else:
        records = records_from_dicts(corpus)  # type: ignore[arg-type]
        texts = [r.answer for r in records]
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="qaindex-records") as pool:
            # The stored lines are made, and the BM25 rows (in the encoding pipeline), while
            # onnxruntime (which releases the GIL) runs.
            stored = pool.submit(RecordStore.from_records, records) if fast_path_switch.enabled() else None
            vectors = encode_answers(model, texts, batch_size, progress, lexical)
            store = RecordStore.from_records(records) if stored is None else stored.result()
        coarse = CoarseIndex(
            model.space, model.dimension, choose_kind(index_kind, len(records)), hnsw, device=device, count=len(records)
        )
        coarse.add(vectors)
        tuned_on = records
    _log.info("encoded %d answers with %s in %.2f s", len(store), model.name, time.perf_counter() - started)
    if recall is not None and coarse.kind != "flat":  # flat is exact: nothing to tune
        tune_for_corpus(coarse, model, tuned_on, vectors, target=recall, overfetch=overfetch)
    return store, vectors, coarse


def _from_file(
    corpus: str | os.PathLike[str],
    model: Model,
    index_kind: str,
    hnsw: Mapping[str, int] | None,
    device: str,
    batch_size: int,
    progress: bool,
    lexical: TextSink | None,
) -> tuple[RecordStore, np.ndarray, CoarseIndex]:
    from .streaming import build_from_file, count_lines

    options: dict[str, Any] = {
        "index_kind": index_kind,
        "hnsw": hnsw,
        "device": device,
        "batch_size": batch_size,
        "lexical": lexical,
    }
    if not progress:
        return build_from_file(corpus, model, **options)
    from tqdm import tqdm

    with tqdm(total=count_lines(corpus), desc="encoding answers", unit="answer", disable=None) as bar:
        built = build_from_file(corpus, model, progress=bar.update, **options)
        bar.total = bar.n  # lines counted blank lines and repeated benchmark answers too: end at 100%
        return built


def rebuilt_coarse(coarse: CoarseIndex, requested: str, model: Model, vectors: np.ndarray) -> CoarseIndex:
    """A coarse index of ``vectors`` (after removals), of the kind ``requested`` chooses for
    their count, keeping ``coarse``'s parameters and tuning where the kind is the same."""
    count = len(vectors)
    kind = choose_kind(requested, count) if requested == "auto" else coarse.kind
    params = dict(coarse.params) if kind == coarse.kind else {}
    if params.get("nlist", 0) > count:  # IVF lists need an answer each to train
        params.pop("nlist")
    out = CoarseIndex(model.space, model.dimension, kind, params or None, device=coarse.device, count=count)
    out.add(np.asarray(vectors))
    if kind == coarse.kind:
        out.tuning = coarse.tuning
    return out

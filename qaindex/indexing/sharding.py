"""Building an index in shards: ``qaindex build CORPUS.jsonl --shards N [--ray ADDRESS]``.

A shard set is a directory of ordinary indexes, one per contiguous slice of the corpus, and a
``shards.json`` that lists them::

    INDEX/shards.json      {"format": "qaindex-shards", "format_version": 1, "answers", "keys",
                            "shards": [{"directory", "answers", "keys", "snapshot"}, ...],
                            "collection": {"answers", "terms"} or null, "dense_ratio": {...} or null,
                            "created"}
    INDEX/shard-000/       an index (qaindex.snapshot) of the first slice's records
    INDEX/shard-001/       ...

How it is built, so that a search of the set returns what one index of the whole corpus
returns (:mod:`qaindex.search.shards`):

1. The corpus is validated once, as a local build validates it (same ``file:line`` errors,
   ids unique across the whole corpus), and cut into ``N`` slices of consecutive records.
2. Each slice is built and saved as an index (``Ranker.build`` of its records), one after
   the other here or as Ray tasks in parallel (``--ray``: each task gets its slice's records
   and saves its shard, so on a cluster the index directory must be on a filesystem every
   node writes and the set's searches read).
3. The BM25 statistics of the whole collection (``N``, the total term count and each term's
   document frequency, summed over the shards) are written into every shard's lexical index
   (:class:`~qaindex.text.lexical.CollectionStats`), which derives its postings with them, and
   the adaptive fusion's dense/BM25 ratio is measured on the sample of the whole collection
   one index would measure it on (:func:`~qaindex.search.fusion.dense_ratio`).
4. ``shards.json`` is written last (atomically), with each shard's snapshot: a shard changed
   afterwards (``qaindex add`` on it alone) is refused by the set until it is rebuilt.

Example
-------
>>> import tempfile, pathlib
>>> out = pathlib.Path(tempfile.mkdtemp()) / "faq-shards"
>>> build_shards("examples/faq.jsonl", out, shards=2).name
'faq-shards'
>>> sorted(p.name for p in out.iterdir())
['shard-000', 'shard-001', 'shards.json']
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from ..corpus import Record
from ..errors import QAIndexError
from ..model import Model, resolve_model_path
from ..snapshot import now
from ..store.atomic_files import read_json_object, write_json_atomic
from ..text.lexical import CollectionStats, LexicalIndex, build_hybrid
from .streaming import RecordSpool, validate_corpus

__all__ = ["SHARDS_FILE", "SHARDS_FORMAT", "build_shards", "by_shard", "read_shard_set", "shard_directory"]

SHARDS_FILE = "shards.json"
SHARDS_FORMAT = "qaindex-shards"
SHARDS_FORMAT_VERSION = 1
MAX_SHARDS = 1024


def shard_directory(i: int) -> str:
    """The directory name of shard ``i``: ``shard-000``, ``shard-001``, ..."""
    return f"shard-{i:03d}"


def build_shards(
    corpus: str | os.PathLike[str] | Iterable[Mapping[str, Any] | Record],
    path: str | os.PathLike[str],
    *,
    shards: int,
    ray: str | None = None,
    model: str | os.PathLike[str] | Model | None = None,
    device: str = "auto",
    index_kind: str = "auto",
    overfetch: int = 10,
    batch_size: int = 256,
    recall: float | None = None,
    hybrid: bool | None = None,
    question_keys: bool = True,
    passage_words: int | str = "auto",
) -> Path:
    """Build a shard set of a corpus at ``path`` (a new or empty directory); see the module docstring.

    Parameters
    ----------
    corpus : path or iterable
        A JSONL corpus file, or records (dicts in the corpus format, or :class:`~qaindex.Record`).
    path : path-like
        The shard set's directory: new, or empty.
    shards : int, keyword-only
        Number of shards (1 to 1,024, at most one per record).
    ray : str, keyword-only, optional
        Build the shards as Ray tasks (``local``, ``auto`` or an address, as ``--ray`` takes);
        None: one after the other in this process.
    model, device, index_kind, overfetch, batch_size, recall, hybrid, question_keys, passage_words
        As for :meth:`qaindex.Ranker.build`, for every shard.

    Returns
    -------
    Path
        ``path``; open it with :meth:`qaindex.ShardedRanker.load`.
    """
    from ..checks import positive_int

    shards = positive_int(shards, "shards", maximum=MAX_SHARDS)
    root = Path(os.fspath(path))
    if root.exists() and (not root.is_dir() or any(root.iterdir())):
        raise QAIndexError(f"{root}: exists and is not an empty directory; build a shard set into a new directory")
    hybrid = build_hybrid(hybrid)
    model_dir = resolve_model_path(model.directory if isinstance(model, Model) else model)
    options = {
        "model": os.fspath(model_dir),
        "device": device,
        "index_kind": index_kind,
        "overfetch": overfetch,
        "batch_size": batch_size,
        "recall": recall,
        "hybrid": hybrid,
        "question_keys": question_keys,
        "passage_words": passage_words,
    }
    root.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".building-", dir=root))
    try:
        store, spans = _slices(corpus, work, shards)
        targets = [root / shard_directory(i) for i in range(len(spans))]
        slices = ([store.get(row) for row in range(*span)] for span in spans)  # one slice's records at a time
        if ray is None:
            for records, target in zip(slices, targets, strict=True):
                _build_one(records, os.fspath(target), options)
        else:
            _build_on_ray(ray, list(slices), targets, options)
        _finish(root, targets, hybrid, device)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return root


def _slices(corpus: Any, work: Path, shards: int) -> tuple[Any, list[tuple[int, int]]]:
    """The corpus validated once into a record store, and the ``[start, stop)`` rows of each
    of ``shards`` slices of consecutive records."""
    source = corpus
    if not isinstance(corpus, str | os.PathLike):  # records: written as corpus lines, then read as a file
        source = work / "corpus.jsonl"
        with open(source, "w", encoding="utf-8") as handle:
            for record in corpus:
                item = record.to_json() if isinstance(record, Record) else record
                handle.write(json.dumps(item, ensure_ascii=False) + "\n")
    spool = RecordSpool(work)
    validate_corpus(source, spool)
    store = spool.store()
    if shards > len(store):
        raise QAIndexError(f"{shards} shards for {len(store)} records: ask for at most one shard per record")
    bounds = np.linspace(0, len(store), shards + 1).round().astype(np.int64).tolist()
    return store, list(itertools.pairwise(bounds))


def _build_one(records: list[Record], target: str, options: dict[str, Any]) -> None:
    """Build and save one shard (in this process, or in a Ray task)."""
    from ..ranker import Ranker

    Ranker.build(records, **options).save(target)


def _build_on_ray(address: str, slices: list[list[Record]], targets: list[Path], options: dict[str, Any]) -> None:
    """Every shard built as a Ray task, in parallel (each task gets its slice's records)."""
    from .distributed import ClusterError, _connect, import_ray

    ray = import_ray()
    started = _connect(ray, address)
    try:
        task = ray.remote(num_cpus=1, max_retries=0)(_build_one)
        pending = [task.remote(r, os.fspath(t), options) for r, t in zip(slices, targets, strict=True)]
        try:
            ray.get(pending)
        except Exception as exc:  # noqa: BLE001 - a task's error arrives wrapped by Ray
            cause = getattr(exc, "cause", None) or exc
            if isinstance(cause, QAIndexError):
                raise cause from None
            raise ClusterError(f"a shard's build failed on Ray: {str(cause).strip().splitlines()[-1]}") from None
    finally:
        if started:
            ray.shutdown()


def _finish(root: Path, targets: list[Path], hybrid: bool, device: str) -> None:
    """Write the collection's BM25 statistics and dense/BM25 ratio into the shards, then
    ``shards.json`` (module docstring, steps 3 and 4)."""
    from ..ranker import Ranker

    opened = [Ranker.load(t, device=device, verify="full") for t in targets]
    counts = [len(r) for r in opened]
    collection = None
    ratio = None
    if hybrid:
        lexicals = [lx for lx in (r.state().lexical for r in opened) if lx is not None]
        assert len(lexicals) == len(opened), "every shard of a hybrid build has a BM25 index"
        per_shard = [lx.term_counts() for lx in lexicals]
        totals: dict[str, int] = {}
        for lx, (df, _) in zip(lexicals, per_shard, strict=True):
            for word, count in zip(lx.vocab, df.tolist(), strict=True):
                totals[word] = totals.get(word, 0) + count
        collection = {"answers": sum(counts), "terms": sum(terms for _, terms in per_shard)}
        ratio = _collection_ratio(opened)
        for i, (ranker, lx) in enumerate(zip(opened, lexicals, strict=True)):
            df = np.asarray([totals[word] for word in lx.vocab], np.int64)
            stats = CollectionStats(collection["answers"], collection["terms"], df)
            state = ranker.state()
            rebuilt = Ranker(
                state.model,
                state.records,
                state.vectors,
                state.coarse,
                overfetch=state.overfetch,
                kind_requested=ranker.kind_requested,
                created=state.created,
                reranker=state.reranker,
                lexical=lx.with_collection(stats),
                keys=state.keys,
            )
            rebuilt.save(targets[i], overwrite=True)
    snapshots = [read_json_object(t / "manifest.json", error=QAIndexError, what="index")["snapshot"] for t in targets]
    keys = [len(r.state().keys or ()) for r in opened]
    write_json_atomic(
        root / SHARDS_FILE,
        {
            "format": SHARDS_FORMAT,
            "format_version": SHARDS_FORMAT_VERSION,
            "answers": sum(counts),
            "keys": sum(keys),
            "shards": [
                {"directory": t.name, "answers": c, "keys": k, "snapshot": s}
                for t, c, k, s in zip(targets, counts, keys, snapshots, strict=True)
            ],
            "collection": collection,
            "dense_ratio": ratio,
            "created": now(),
        },
    )


def by_shard(offsets: np.ndarray, rows: np.ndarray) -> list[tuple[int, np.ndarray, np.ndarray]]:
    """Sorted global ``rows`` of a shard set, shard by shard: ``(shard, rows, local rows)``
    (``offsets``: each shard's first row, then the total).

    Example
    -------
    >>> [(s, r.tolist(), l.tolist()) for s, r, l in by_shard(np.array([0, 3, 5]), np.array([1, 3, 4]))]
    [(0, [1], [1]), (1, [3, 4], [0, 1])]
    """
    rows = np.asarray(rows, dtype=np.int64)
    shard = np.searchsorted(offsets, rows, side="right") - 1
    return [(s, rows[shard == s], rows[shard == s] - int(offsets[s])) for s in np.unique(shard).tolist()]


class _SampledCollection:
    """The whole collection as :func:`~qaindex.search.fusion.dense_ratio` reads an index: its
    size, its answers' vectors and texts by global row, and a sample's own BM25 index."""

    def __init__(self, rankers: list[Any]) -> None:
        self._rankers = rankers
        self._offsets = np.concatenate([[0], np.cumsum([len(r) for r in rankers])]).astype(np.int64)

    def __len__(self) -> int:
        return int(self._offsets[-1])

    def __getitem__(self, rows: np.ndarray) -> np.ndarray:  # the vectors of sorted rows
        parts = [self._rankers[s].state().vectors[local] for s, _, local in by_shard(self._offsets, rows)]
        return np.concatenate([np.asarray(p, dtype=np.float32) for p in parts])

    def answer(self, row: int) -> str:
        ((s, _, local),) = by_shard(self._offsets, np.array([row]))
        return str(self._rankers[s].state().records.get(int(local[0])).answer)

    def kept(self, rows: np.ndarray) -> LexicalIndex:  # a sample's own statistics, as LexicalIndex.kept gives
        return LexicalIndex.from_texts([self.answer(int(r)) for r in rows])


def _collection_ratio(rankers: list[Any]) -> dict[str, Any] | None:
    """The adaptive fusion's ratio of the whole collection, as one index of it measures it."""
    from ..search.fusion import dense_ratio

    whole = _SampledCollection(rankers)
    info = dense_ratio(rankers[0].model, whole, whole, whole.answer)  # type: ignore[arg-type]
    return None if info is None else {**info, "answers": len(whole)}


def read_shard_set(root: Path) -> dict[str, Any]:
    """``shards.json`` of a shard set, checked (an :class:`~qaindex.IndexFormatError` names the field)."""
    from ..errors import IndexFormatError

    path = root / SHARDS_FILE
    manifest = read_json_object(path, error=IndexFormatError, what="shard set")

    def bad(why: str) -> IndexFormatError:
        return IndexFormatError(f"{path}: {why}; rebuild the shard set")

    if manifest.get("format") != SHARDS_FORMAT:
        raise bad(f'field "format" must be {SHARDS_FORMAT!r}')
    if manifest.get("format_version") != SHARDS_FORMAT_VERSION:
        raise IndexFormatError(
            f"{path}: shard set format version {manifest.get('format_version')!r} is not supported (this "
            f"qaindex reads {SHARDS_FORMAT_VERSION}); upgrade qaindex or rebuild the shard set"
        )
    entries = manifest.get("shards")
    if not isinstance(entries, list) or not entries or len(entries) > MAX_SHARDS:
        raise bad(f'field "shards" must list 1 to {MAX_SHARDS} shards')
    for i, entry in enumerate(entries):
        if (
            not isinstance(entry, dict)
            or entry.get("directory") != shard_directory(i)
            or not all(isinstance(entry.get(k), int) and entry[k] >= 0 for k in ("answers", "keys"))
            or not isinstance(entry.get("snapshot"), str)
        ):
            want = f'{{"directory": "{shard_directory(i)}", "answers", "keys", "snapshot"}}'
            raise bad(f'field "shards[{i}]" must be {want}')
    if manifest.get("answers") != sum(e["answers"] for e in entries):
        raise bad('field "answers" must be the sum of the shards\' answers')
    return manifest

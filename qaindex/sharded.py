"""An index in shards, searched in parallel: :class:`ShardedRanker`.

For a corpus too large for one machine (or one process): ``qaindex build CORPUS --shards N``
writes ``N`` ordinary indexes of consecutive slices of the corpus and a ``shards.json``
(:mod:`qaindex.indexing.sharding`); :class:`ShardedRanker` opens them, in this process
(each shard searched in a thread) or as Ray actors (``ray=``: one per shard, wherever the
cluster places them), and merges their candidates into the hits one index of the whole
corpus returns (:mod:`qaindex.search.shards`).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import numpy as np

from .checks import finite_number, flag, path_arg
from .corpus import Record
from .errors import IndexFormatError, QueryError
from .indexing.sharding import build_shards, by_shard, read_shard_set, shard_directory
from .model import Model
from .ranker import Ranker
from .search.budget import HIT_OVERHEAD
from .search.fusion import LEXICAL_SCAN_LIMIT
from .search.hits import Hit, cut, make_hits
from .search.pipeline import pool_size
from .search.plan import check_k, check_question, check_questions, fusion_setting
from .search.shards import Collection, ShardPart, ShardQuery, key_pool, merge_shards, shard_candidates
from .store.atomic_files import read_json_object
from .text.lexical import question_tokens

__all__ = ["ShardServer", "ShardedRanker"]

_QUESTIONS_PER_ROUND = 256  # questions sent to the shards at once


class ShardServer:
    """One shard of a set, loaded: what a sharded search asks of it (here, or in a Ray actor).

    Parameters
    ----------
    path : str
        The shard's index directory.
    device, threads, verify
        As for :meth:`qaindex.Ranker.load`.
    """

    def __init__(self, path: str, device: str = "auto", threads: int | None = None, verify: bool | str = True) -> None:
        self.ranker = Ranker.load(path, device=device, threads=threads, verify=verify)

    def info(self) -> dict[str, Any]:
        """Its answers, keys, over-fetch and model manifest (checked against the set's)."""
        state = self.ranker.state()
        keys = state.keys
        return {
            "answers": len(state.records),
            "keys": 0 if keys is None else len(keys),
            "overfetch": state.overfetch,
            "hybrid": state.lexical is not None,
            "model": state.model.manifest,
        }

    def candidates(self, query: ShardQuery) -> list[ShardPart]:
        """:func:`qaindex.search.shards.shard_candidates` of this shard."""
        return shard_candidates(self.ranker.state(), query)

    def records(self, rows: list[int]) -> list[Record]:
        """The records of these rows (local numbers)."""
        store = self.ranker.state().records
        return [store.get(int(row)) for row in rows]


class ShardedRanker:
    """A shard set (``qaindex build --shards N``) opened for searching.

    Its searches return the hits one index of the whole corpus returns (the same hits and
    scores with exact ``flat`` shards; an approximate index kind approximates per shard),
    each shard searched in parallel: in threads of this process, or in Ray actors.

    Example
    -------
    >>> import tempfile, pathlib
    >>> out = pathlib.Path(tempfile.mkdtemp()) / "faq-shards"
    >>> sharded = ShardedRanker.build("examples/faq.jsonl", out, shards=2)
    >>> one = Ranker.build("examples/faq.jsonl")
    >>> q = "How do I reset my password?"
    >>> [h.id for h in sharded.search(q, k=3)] == [h.id for h in one.search(q, k=3)]
    True
    """

    def __init__(self, path: Path, model: Model, servers: list[Any], manifest: dict[str, Any], *, ray: Any = None):
        self.path = path
        self.model = model
        self._servers = servers
        self._ray = ray
        self._manifest = manifest
        entries = manifest["shards"]
        offsets = np.concatenate([[0], np.cumsum([e["answers"] for e in entries])]).astype(np.int64)
        key_offsets = np.concatenate([[0], np.cumsum([e["keys"] for e in entries])]).astype(np.int64)
        ratio = manifest.get("dense_ratio")
        self._collection = Collection(offsets, key_offsets, None if ratio is None else float(ratio["ratio"]))
        self._pool = ThreadPoolExecutor(max_workers=len(servers)) if ray is None else None
        infos = self._each("info")
        self.overfetch = int(infos[0]["overfetch"])
        self.has_hybrid = bool(infos[0]["hybrid"]) and manifest.get("collection") is not None
        for entry, info in zip(entries, infos, strict=True):
            if info["answers"] != entry["answers"] or info["keys"] != entry["keys"] or info["model"] != model.manifest:
                raise IndexFormatError(
                    f"{path / entry['directory']}: its answers, keys or model differ from what "
                    f"{path / 'shards.json'} lists; rebuild the shard set"
                )

    # -- construction ------------------------------------------------------------------
    @classmethod
    def build(
        cls, corpus: Any, path: str | os.PathLike[str], *, shards: int, ray: str | None = None, **options: Any
    ) -> ShardedRanker:
        """Build a shard set at ``path`` (:func:`qaindex.indexing.sharding.build_shards`: the
        ``options`` of :meth:`qaindex.Ranker.build`) and open it (on Ray when ``ray`` is given)."""
        root = build_shards(corpus, path, shards=shards, ray=ray, **options)
        device = options.get("device", "auto")
        return cls.load(root, device=device, ray=ray)

    @classmethod
    def load(
        cls,
        path: str | os.PathLike[str],
        *,
        device: str = "auto",
        threads: int | None = 1,
        verify: bool | str = True,
        ray: str | None = None,
    ) -> ShardedRanker:
        """Open a shard set: every shard loaded as :meth:`qaindex.Ranker.load` loads an index
        (``device``, ``threads`` per shard, ``verify``), here or, with ``ray`` (``local``,
        ``auto`` or an address), in one Ray actor per shard.

        Raises
        ------
        IndexFormatError
            ``shards.json`` is missing or invalid, or a shard changed since the set was built.
        """
        root = path_arg(path, "path", what="a shard set directory")
        manifest = read_shard_set(root)
        for entry in manifest["shards"]:
            shard = root / entry["directory"]
            snapshot = read_json_object(shard / "manifest.json", error=IndexFormatError, what="index")["snapshot"]
            if snapshot != entry["snapshot"]:
                raise IndexFormatError(
                    f"{shard}: holds snapshot {snapshot!r}, not the {entry['snapshot']!r} that "
                    f"{root / 'shards.json'} lists: the shard changed after the set was built; rebuild the shard set"
                )
        first = root / shard_directory(0)
        model = Model.load(first / manifest["shards"][0]["snapshot"] / "model", device=device, threads=threads)
        paths = [os.fspath(root / e["directory"]) for e in manifest["shards"]]
        if ray is None:
            servers: list[Any] = [ShardServer(p, device, threads, verify) for p in paths]
            return cls(root, model, servers, manifest)
        from .indexing.distributed import _connect, import_ray

        handle = import_ray()
        _connect(handle, ray)
        actor = handle.remote(num_cpus=0)(ShardServer)
        return cls(root, model, [actor.remote(p, device, threads, verify) for p in paths], manifest, ray=handle)

    def close(self) -> None:
        """Stop the shards' threads or Ray actors."""
        if self._pool is not None:
            self._pool.shutdown()
        if self._ray is not None:
            for server in self._servers:
                self._ray.kill(server)
        self._servers = []

    def __len__(self) -> int:
        return int(self._collection.offsets[-1])

    def _each(self, method: str, *args: Any) -> list[Any]:
        """``method(*args)`` of every shard, in parallel, results in shard order."""
        if self._ray is not None:
            return cast(list[Any], self._ray.get([getattr(s, method).remote(*args) for s in self._servers]))
        if self._pool is None or len(self._servers) == 1:
            return [getattr(s, method)(*args) for s in self._servers]
        return list(self._pool.map(lambda s: getattr(s, method)(*args), self._servers))

    # -- searching ---------------------------------------------------------------------
    def search(
        self,
        question: str,
        k: int = 10,
        *,
        min_score: float | None = None,
        hybrid: bool | None = None,
        fusion: Any = None,
        explain: bool = False,
        where: Any = None,
    ) -> list[Hit]:
        """The ``k`` best answers of the whole set for one question (the arguments of
        :meth:`qaindex.Ranker.search`; ``where`` filters and reranking stages are not
        supported on a shard set).

        Example
        -------
        >>> sharded.search("can I get a refund?", k=1)[0].id  # doctest: +SKIP
        'billing-refund-policy'
        """
        qs = check_question(question)
        return self.search_batch(
            qs, k, min_score=min_score, hybrid=hybrid, fusion=fusion, explain=explain, where=where
        )[0]

    def search_batch(
        self,
        questions: Sequence[str],
        k: int = 10,
        *,
        min_score: float | None = None,
        hybrid: bool | None = None,
        fusion: Any = None,
        explain: bool = False,
        where: Any = None,
    ) -> list[list[Hit]]:
        """:meth:`search` for many questions: one list of hits per question."""
        if where is not None:
            raise QueryError(
                "a shard set searches without filters (where=...): filter the hits it returns, or search one "
                "shard with Ranker.load(SHARD_DIRECTORY)"
            )
        qs = check_questions(questions)
        k = check_k(k)
        flag(explain, "explain")
        if min_score is not None:
            min_score = finite_number(min_score, "min_score", optional=True)
        lexical = True if self.has_hybrid else None
        fused = fusion_setting(cast(Any, SimpleNamespace(model=self.model, lexical=lexical)), hybrid, fusion)
        out: list[list[Hit]] = []
        for start in range(0, len(qs), _QUESTIONS_PER_ROUND):
            out += self._round(qs[start : start + _QUESTIONS_PER_ROUND], min(k, len(self)), fused, bool(explain))
        return [cut(hits, k, min_score) for hits in out]

    def _round(self, qs: list[str], k: int, fused: Any, explain: bool) -> list[list[Hit]]:
        total = len(self)
        m = pool_size(k, self.overfetch, total)
        query = ShardQuery(
            vectors=self.model.encode(qs, role="question"),
            questions=tuple(qs),
            tokens=None if fused is None else tuple(tuple(question_tokens(q)) for q in qs),
            m=m,
            width=k,
            every=m >= total,
            scan=total <= LEXICAL_SCAN_LIMIT,
            key_pool=key_pool(k, self.overfetch, int(self._collection.key_offsets[-1])),
        )
        parts = self._each("candidates", query)
        s, d, r, p, matched, why = merge_shards(self.model, self._collection, query, parts, fused, explain=explain)
        records = _Fetched(total, self._fetch(r))
        has_keys = bool(self._collection.key_offsets[-1])
        return make_hits(
            cast(Any, records),
            self.model.calibration,
            s,
            d,
            r,
            None,
            p,
            why,
            matched if has_keys else None,
            hit_size=HIT_OVERHEAD,
        )

    def _fetch(self, rows: np.ndarray) -> dict[int, Record]:
        """The records of the hits' global rows, from their shards."""
        groups = by_shard(self._collection.offsets, np.unique(rows[rows >= 0]))
        if self._ray is not None:  # every shard asked at once
            found = self._ray.get([self._servers[s].records.remote(local.tolist()) for s, _, local in groups])
        else:
            found = [self._servers[s].records(local.tolist()) for s, _, local in groups]
        out: dict[int, Record] = {}
        for (_, mine, _), records in zip(groups, found, strict=True):
            out.update(zip(mine.tolist(), records, strict=True))
        return out

    def info(self) -> dict[str, Any]:
        """The set: its directory, answers, shards and model."""
        return {
            "path": str(self.path),
            "answers": len(self),
            "shards": [dict(e) for e in self._manifest["shards"]],
            "hybrid": self.has_hybrid,
            "dense_ratio": self._collection.ratio,
            "model": self.model.name,
            "ray": self._ray is not None,
        }


class _Fetched:
    """The hits' records, for :func:`~qaindex.search.hits.make_hits` (rows of the whole set)."""

    def __init__(self, total: int, records: dict[int, Record]) -> None:
        self._total, self._records = total, records

    def __len__(self) -> int:
        return self._total

    def get(self, row: int) -> Record:
        return self._records[row]

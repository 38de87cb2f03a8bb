"""Coarse recall with FAISS, exact ground truth with numpy.

Two index kinds, over the answers' vectors:

- ``flat``: exhaustive search. For the Poincaré geometry it searches the inner product of
  the lifted vectors (:func:`qaindex.geometry.hyperbolic.lift`), which ranks exactly by Poincaré
  distance in exact arithmetic; float32 rounding only disturbs near-ties, which the exact
  rerank of the over-fetched candidates then orders correctly.
- ``hnsw``: approximate graph search (``IndexHNSWFlat``) on the raw ball coordinates with
  the L2 metric, which recalls Poincaré neighbours far better than HNSW on lifted vectors;
  the exact rerank of ``k * overfetch`` candidates restores the exact order among them.

For models ranked by the origin-relative distance (``ranking: "relative"``, see
:func:`qaindex.geometry.hyperbolic.relative_distance`) both kinds search the lift of
:func:`qaindex.geometry.hyperbolic.relative_lift` (``e^f`` as an inner product, accurate for
distances of a few units and more): ``flat`` by inner product, ``hnsw`` by L2 after the usual
extra coordinate that makes every stored vector's norm :data:`~qaindex.geometry.hyperbolic.RELATIVE_LIFT_BOUND`
(maximum inner product search as nearest-neighbour search).

For the cosine geometry both kinds search the inner product of unit-normalised vectors.
For the bilinear geometry (:mod:`qaindex.geometry.bilinear`) ``flat`` searches the raw inner product
and ``hnsw`` L2 on the MIPS lift (:func:`qaindex.geometry.bilinear.mips_lift`).
Search returns row numbers, ``-1`` where fewer than ``m`` answers exist.

Three more kinds trade memory and disk for recall, each searching the same vectors as its
family (the exact rerank of the candidates restores the order among them):

- ``hnsw_sq8``: HNSW whose stored vectors are 8-bit scalar-quantised (``IndexHNSWSQ``),
  a quarter of the bytes of ``hnsw``; parameters as ``hnsw``.
- ``ivf``: inverted lists (``IndexIVFFlat``) over the vectors ``flat`` searches, ``nlist``
  k-means lists of which ``nprobe`` are scanned per question; ``nprobe = nlist`` is an
  exhaustive search.
- ``ivf_sq8``: ``ivf`` with 8-bit scalar-quantised storage (``IndexIVFScalarQuantizer``).
- ``pq``: an exhaustive scan of 4-bit product-quantisation codes (``IndexPQFastScan``, FAISS's
  SIMD "fast scan"; ``M`` sub-quantisers, by default one per :data:`PQ_COORDINATES`
  coordinates, so about a thirty-second of the float32 bytes) of the vectors ``flat``
  searches, then a refinement: the ``k × overfetch × refine`` best codes are re-scored with
  their float32 vectors (the answers' stored vectors, gathered by row) and the best
  ``k × overfetch`` go on to the exact rerank. On the built-in model's vectors (questions
  lie off the answers' manifold) graph and inverted-list indexes need a wide search for
  recall 0.99 at a million answers, while this scan reaches it at a fraction of ``flat``'s
  time and builds fast (``benchmarks/speed/ann_difficulty.py``, ``docs/scale.md``). ``auto`` picks it above
  :data:`AUTO_FLAT_MAX` answers.

The search breadth (``ef_search``, ``nprobe``, ``refine``) can be tuned to a recall target at build
time (:mod:`qaindex.indexing.tuning`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, Protocol

import numpy as np

from . import geometry as geometries
from .devices import faiss_gpu_count, import_faiss
from .errors import IndexFormatError, QAIndexError
from .geometry import Geometry, bilinear


class RowSource(Protocol):
    """Rows gathered by fancy indexing (``vectors[rows]``): a plain array, or one that verifies the
    rows it reads first (:class:`qaindex.store.chunk_checks.CheckedRows`)."""

    shape: tuple[int, ...]

    def __getitem__(self, rows: np.ndarray) -> np.ndarray: ...


__all__ = [
    "AUTO_FLAT_MAX",
    "BREADTH_PARAM",
    "CONCRETE_KINDS",
    "DEFAULT_HNSW",
    "INDEX_KINDS",
    "KIND_PARAMS",
    "CoarseIndex",
    "best_first",
    "choose_kind",
    "default_params",
    "exact_search",
]

INDEX_KINDS = ("auto", "flat", "hnsw", "hnsw_sq8", "ivf", "ivf_sq8", "pq")
CONCRETE_KINDS = INDEX_KINDS[1:]
HNSW_KINDS = ("hnsw", "hnsw_sq8")
IVF_KINDS = ("ivf", "ivf_sq8")
AUTO_FLAT_MAX = 20_000
DEFAULT_REFINE = 10
_PQ_CENTROIDS = 16  # 4-bit codes
#: Coordinates per ``pq`` sub-quantiser by default. Codes of two coordinates each reach a recall
#: at a smaller ``refine`` than codes of four, but their scan costs more than the wider
#: refinement: the scan's cost grows faster than the code length, the refinement's only with
#: ``refine`` (``benchmarks/speed/ann_difficulty.py`` compares both, ``docs/performance.md``).
PQ_COORDINATES = 4
DEFAULT_HNSW: dict[str, int] = {"M": 32, "ef_construction": 200, "ef_search": 256}
#: The parameters each kind takes (all positive integers).
KIND_PARAMS: dict[str, tuple[str, ...]] = {
    "flat": (),
    "hnsw": ("M", "ef_construction", "ef_search"),
    "hnsw_sq8": ("M", "ef_construction", "ef_search"),
    "ivf": ("nlist", "nprobe"),
    "ivf_sq8": ("nlist", "nprobe"),
    "pq": ("M", "refine"),
}
#: The parameter that sets the search breadth (what :mod:`qaindex.indexing.tuning` tunes), per kind.
BREADTH_PARAM: dict[str, str] = {
    "hnsw": "ef_search",
    "hnsw_sq8": "ef_search",
    "ivf": "nprobe",
    "ivf_sq8": "nprobe",
    "pq": "refine",
}


def default_params(kind: str, count: int) -> dict[str, int]:
    """Default parameters of an index kind for ``count`` answers.

    HNSW keeps :data:`DEFAULT_HNSW` up to 200,000 answers; above, ``ef_construction`` drops
    to 100 (building a million-answer graph at 200 takes too long on a small machine; the
    build-time recall tuning of :mod:`qaindex.indexing.tuning` widens the search instead). IVF uses
    about ``2·√count`` lists (at least 1, at most 8,192 and at most ``count``) and probes an
    eighth of them. ``pq`` re-scores ``refine`` codes per candidate: :data:`DEFAULT_REFINE`
    up to 100,000 answers, growing as ``√count`` above (32 at a million; the build-time recall
    tuning of :mod:`qaindex.indexing.tuning` lowers it where fewer reach the target); its ``M``
    defaults to a quarter of the searched dimension (see :class:`CoarseIndex`).

    Example
    -------
    >>> default_params("ivf", 1_000_000), default_params("hnsw", 10**6)["ef_construction"]
    ({'nlist': 2000, 'nprobe': 250}, 100)
    """
    if kind in HNSW_KINDS:
        params = dict(DEFAULT_HNSW)
        if count > 200_000:
            params["ef_construction"] = 100
        return params
    if kind in IVF_KINDS:
        nlist = int(max(1, min(8192, round(2 * np.sqrt(max(count, 1))), count)))
        return {"nlist": nlist, "nprobe": max(1, nlist // 8)}
    if kind == "pq":
        return {"refine": max(DEFAULT_REFINE, round(DEFAULT_REFINE * np.sqrt(max(count, 1) / 100_000)))}
    return {}


def choose_kind(kind: str, count: int) -> str:
    """Resolve ``"auto"`` to a concrete index kind for ``count`` answers.

    Example
    -------
    >>> choose_kind("auto", 500), choose_kind("auto", 1_000_000), choose_kind("flat", 10**6)
    ('flat', 'pq', 'flat')
    """
    if kind not in INDEX_KINDS:
        raise QAIndexError(f"unknown index kind {kind!r}; choose one of: {', '.join(INDEX_KINDS)}")
    if kind == "auto":
        return "flat" if count <= AUTO_FLAT_MAX else "pq"
    return kind


class CoarseIndex:
    """A FAISS index over answer vectors that returns candidate rows for exact reranking.

    Parameters
    ----------
    geometry : {"poincare", "cosine", "bilinear"} or Geometry
        The vectors' geometry (:mod:`qaindex.geometry`): it gives the lift FAISS searches.
    dimension : int
        Dimension of the answer vectors.
    kind : {"flat", "hnsw", "hnsw_sq8", "ivf", "ivf_sq8", "pq"}
    params : mapping, optional
        The kind's parameters (:data:`KIND_PARAMS`: ``M``, ``ef_construction``,
        ``ef_search`` for HNSW; ``nlist``, ``nprobe`` for IVF; ``M`` (sub-quantisers, default
        a quarter of the searched dimension, rounded up) and ``refine`` for PQ); missing ones default
        to :func:`default_params` for ``count``.
    device : {"auto", "cpu", "cuda"}
        ``flat`` indexes move to a GPU when FAISS sees one (``auto``) or must (``cuda``).
    ranking : {"distance", "relative"}, keyword-only
        The model's ranking rule (Poincaré only): plain distance, or origin-relative distance;
        used with a geometry name (a :class:`~qaindex.geometry.Geometry` carries its own).

    Example
    -------
    >>> import numpy as np
    >>> ix = CoarseIndex("poincare", 4, "flat")
    >>> ix.add(np.random.default_rng(0).uniform(-0.4, 0.4, (10, 4)).astype(np.float32))
    >>> ix.search(np.zeros((1, 4), np.float32), 3).shape
    (1, 3)
    """

    def __init__(
        self,
        geometry: str | Geometry,
        dimension: int,
        kind: str,
        params: Mapping[str, int] | None = None,
        *,
        device: str = "cpu",
        index: Any = None,
        ranking: str = "distance",
        count: int = 0,
    ) -> None:
        #: the geometry object: lifts for FAISS (its name is :attr:`geometry`)
        self.space: Geometry = geometries.get(geometry, ranking)
        if kind not in CONCRETE_KINDS:
            raise QAIndexError(f"unknown index kind {kind!r}; choose one of: {', '.join(CONCRETE_KINDS)}")
        self.geometry = self.space.name
        self.dimension = int(dimension)
        self.kind = kind
        self.params: dict[str, int] = default_params(kind, count)
        if params:
            self.params.update({k: int(v) for k, v in params.items() if k in KIND_PARAMS[kind]})
        if kind in IVF_KINDS:
            self.params["nprobe"] = min(self.params["nprobe"], self.params["nlist"])
        if kind == "pq":
            self.params.setdefault("M", -(-self.searched_dimension // PQ_COORDINATES))
        #: how the search breadth was chosen (:func:`qaindex.indexing.tuning.tune_breadth`), or None
        self.tuning: dict[str, Any] | None = None
        self._faiss = import_faiss()
        self._bound: float | None = None  # the lift's padded norm (bounded geometries, hnsw)
        self._cpu_index = index if index is not None else self._new_index()
        self.device = "cpu"
        self._index = self._cpu_index
        self._move_to_device(device)

    # -- construction ----------------------------------------------------------------------
    @property
    def _inner_product(self) -> bool:
        """Whether this kind searches the inner product of ``flat``'s vectors (flat, IVF)."""
        return self.kind not in HNSW_KINDS

    @property
    def searched_dimension(self) -> int:
        """Dimension of the vectors this kind searches: ``dimension``, or ``dimension + 2`` for Poincaré
        vectors lifted so that an inner product (flat, IVF) ranks by their distance."""
        return self.space.lifted_dimension(self.dimension, inner_product=self._inner_product)

    @property
    def stored_dimension(self) -> int:
        """Dimension of the vectors FAISS stores (``dim + 2`` for lifted Poincaré flat).

        Scalar-quantised kinds pad it with zeros to a multiple of 16, where FAISS's SIMD
        distance code applies (zeros change neither inner products nor L2 distances).
        """
        d = self.searched_dimension
        if self.kind == "pq":  # a whole number of coordinates per sub-quantiser
            sub = self.params["M"]
            return -(-d // sub) * sub
        return d + (-d) % 16 if self.kind.endswith("_sq8") else d

    def _padded(self, x: np.ndarray) -> np.ndarray:
        extra = self.stored_dimension - x.shape[1]
        if extra <= 0:
            return x
        return np.ascontiguousarray(np.concatenate([x, np.zeros((len(x), extra), dtype=np.float32)], axis=1))

    def _new_index(self) -> Any:
        faiss = self._faiss
        d = self.stored_dimension
        if self.kind == "flat":
            return faiss.IndexFlatIP(d)
        if self.kind == "pq":
            return faiss.IndexPQFastScan(d, self.params["M"], 4, faiss.METRIC_INNER_PRODUCT)
        if self.kind in IVF_KINDS:
            quantizer = faiss.IndexFlatIP(d)
            nlist = self.params["nlist"]
            if self.kind == "ivf":
                index = faiss.IndexIVFFlat(quantizer, d, nlist, faiss.METRIC_INNER_PRODUCT)
            else:
                index = faiss.IndexIVFScalarQuantizer(
                    quantizer, d, nlist, faiss.ScalarQuantizer.QT_8bit, faiss.METRIC_INNER_PRODUCT
                )
            index.nprobe = self.params["nprobe"]
            return index
        metric = faiss.METRIC_INNER_PRODUCT if self.space.hnsw_metric == "ip" else faiss.METRIC_L2
        if self.kind == "hnsw_sq8":
            index = faiss.IndexHNSWSQ(d, faiss.ScalarQuantizer.QT_8bit, self.params["M"], metric)
        else:
            index = faiss.IndexHNSWFlat(d, self.params["M"], metric)
        index.hnsw.efConstruction = self.params["ef_construction"]
        index.hnsw.efSearch = self.params["ef_search"]
        return index

    def _move_to_device(self, device: str) -> None:
        if device == "cpu" or self.kind != "flat":
            if device == "cuda" and self.kind != "flat":
                raise QAIndexError(
                    f"qaindex moves only the flat index to a GPU, not {self.kind}; use --device auto or cpu, "
                    "or --index-kind flat"
                )
            return
        gpus = faiss_gpu_count()
        if gpus == 0:
            if device == "cuda":
                from .errors import DeviceError

                raise DeviceError(
                    "device 'cuda' was requested but FAISS sees no GPU "
                    "(faiss.get_num_gpus() is 0); install faiss-gpu (`pip install 'qaindex[gpu]'`) "
                    "on a machine with CUDA, or use --device cpu"
                )
            return
        faiss = self._faiss
        self._gpu_resources = faiss.StandardGpuResources()
        self._index = faiss.index_cpu_to_gpu(self._gpu_resources, 0, self._cpu_index)
        self.device = "cuda"

    def _db(self, vectors: np.ndarray) -> np.ndarray:
        return self._padded(self._db_vectors(vectors))

    def _query(self, queries: np.ndarray) -> np.ndarray:
        return self._padded(self._query_vectors(queries))

    def _db_vectors(self, vectors: np.ndarray) -> np.ndarray:
        if self.space.bounded and not self._inner_product and self._bound is None:
            # the padded norm: fixed by the first vectors, or by the stored ones
            stored = self._cpu_index.ntotal if self._cpu_index is not None else 0
            self._bound = (
                float(np.sum(self._cpu_index.reconstruct(0).astype(np.float64) ** 2))
                if stored
                else bilinear.mips_bound(vectors)
            )
        return self.space.lift(vectors, inner_product=self._inner_product, bound=self._bound)

    def _query_vectors(self, queries: np.ndarray) -> np.ndarray:
        return self.space.lift_query(queries, inner_product=self._inner_product)

    @property
    def ntotal(self) -> int:
        return int(self._index.ntotal)

    def add(self, vectors: np.ndarray) -> None:
        """Append vectors (their rows continue after the existing ones)."""
        if len(vectors):
            if not self._index.is_trained:
                self.train(vectors)
            self._index.add(self._db(vectors))
            if self._index is not self._cpu_index:
                self._cpu_index = None  # the GPU copy is the truth until saved

    def _train_size(self, count: int) -> int:
        """How many of ``count`` vectors train this kind (a seeded sample of them)."""
        if self.kind in IVF_KINDS:
            nlist = self.params["nlist"]
            if count < nlist:  # k-means needs at least one point per list
                raise QAIndexError(
                    f"an {self.kind} index of {nlist} lists needs at least {nlist} answers to train, got "
                    f"{count}; add more answers or choose --index-kind flat"
                )
            # k-means on a seeded sample: 64 points per list and 25 iterations (FAISS's default)
            # up to 200,000 answers; above, 32 and 10 (training 2,000 lists on 128,000 points
            # for 25 rounds takes minutes on 2 cores; the tuned nprobe absorbs coarser lists)
            return min(count, (32 if count > 200_000 else 64) * nlist)
        if self.kind == "pq" and count < _PQ_CENTROIDS:  # k-means of 16 codes per sub-quantiser
            raise QAIndexError(
                f"a pq index needs at least {_PQ_CENTROIDS} answers to train its codes, got {count}; "
                "add more answers or choose --index-kind flat"
            )
        return min(count, 100_000)

    def train(self, vectors: np.ndarray) -> None:
        """Train IVF lists / quantisers on a seeded sample of ``vectors`` (all the answers to come).

        :meth:`add` trains on the first vectors it is given when this was not called; a build
        that adds its answers in chunks calls this first with all of them (a memory-mapped
        array is fine: only the sample is read), so it trains exactly as a build that adds
        them at once.
        """
        if not len(vectors):
            return
        if self.space.bounded and not self._inner_product and self._bound is None and not self.ntotal:
            # the padded norm of the lift: from every answer to come, not the first chunk
            self._bound = max(
                bilinear.mips_bound(np.asarray(vectors[s : s + 65536])) for s in range(0, len(vectors), 65536)
            )
        if self._index.is_trained:
            return
        size = self._train_size(len(vectors))
        if size < len(vectors):
            pick = np.sort(np.random.default_rng(0).choice(len(vectors), size=size, replace=False))
            sample = np.asarray(vectors[pick])
        else:
            sample = np.asarray(vectors)
        self._train(self._db(sample), len(vectors))

    def _train(self, db: np.ndarray, count: int) -> None:
        if self.kind in IVF_KINDS:
            self._index.cp.niter = 10 if count > 200_000 else 25
            self._index.cp.min_points_per_centroid = 1  # small corpora: no FAISS warning on stderr
        if self.kind == "pq":
            self._index.pq.cp.min_points_per_centroid = 1  # (one warning per sub-quantiser otherwise)
        self._index.train(np.ascontiguousarray(db))

    def set_breadth(self, value: int) -> None:
        """Set the search breadth (``ef_search`` or ``nprobe``) of later searches."""
        name = BREADTH_PARAM.get(self.kind)
        if name is None:
            return
        value = int(value)
        if name == "nprobe":
            value = min(value, self.params["nlist"])
            self._index.nprobe = value
        self.params[name] = value

    # -- search -----------------------------------------------------------------------------
    def search(self, queries: np.ndarray, m: int, *, vectors: np.ndarray | RowSource | None = None) -> np.ndarray:
        """Candidate rows for each query.

        Parameters
        ----------
        queries : array (n, dimension)
        m : int
            Candidates per query.
        vectors : array (ntotal, dimension), keyword-only, optional
            The answers' vectors, row for row (a memory-mapped array is fine): the ``pq``
            kind re-scores its ``m × refine`` best codes with them. Without them it returns
            the ``m`` best codes. Other kinds ignore them.

        Returns
        -------
        numpy.ndarray (n, m), int64
            Rows, best coarse match first, ``-1`` where fewer than ``m`` exist.
        """
        return self._search(queries, m, vectors, scored=False)[1]

    def search_scored(
        self, queries: np.ndarray, m: int, *, vectors: np.ndarray | RowSource | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`search` with the coarse stage's scores: ``(scores float32 (n, m), rows)``,
        best first (``-inf`` where missing). A sharded index keeps the ``m`` best of its
        shards' candidates by them, as one index's coarse stage does.
        """
        scores, rows = self._search(queries, m, vectors, scored=True)
        assert scores is not None
        return scores, rows

    def _search(
        self, queries: np.ndarray, m: int, vectors: np.ndarray | RowSource | None, *, scored: bool
    ) -> tuple[np.ndarray | None, np.ndarray]:
        n = len(queries)
        if m <= 0 or n == 0:
            return np.full((n, max(m, 0)), -np.inf, np.float32), np.full((n, max(m, 0)), -1, dtype=np.int64)
        if self.kind == "pq":
            return self._search_refined(queries, m, vectors, scored)
        if self.kind in HNSW_KINDS:
            self._index.hnsw.efSearch = max(self.params["ef_search"], m)
        elif self.kind in IVF_KINDS:
            self._index.nprobe = self.params["nprobe"]
        else:
            _set_blas_threshold(self._faiss, n)
        found, rows = self._index.search(self._query(queries), m)
        rows = np.asarray(rows, dtype=np.int64)
        if not scored:
            return None, rows
        return _higher_better(np.asarray(found, np.float32), rows, self._index.metric_type), rows

    def _search_refined(
        self, queries: np.ndarray, m: int, vectors: np.ndarray | RowSource | None, scored: bool
    ) -> tuple[np.ndarray | None, np.ndarray]:
        """``pq``: the ``m × refine`` best codes, re-scored exactly (float32 inner product)."""
        wide = min(self.ntotal, m * self.params["refine"]) if vectors is not None else m
        q = self._query(queries)
        found_scores, rows = self._index.search(q, max(wide, m))
        rows = np.asarray(rows, dtype=np.int64)
        if vectors is None or wide <= m:
            if not scored:
                return None, rows[:, :m]
            return np.where(rows[:, :m] >= 0, np.asarray(found_scores, np.float32)[:, :m], -np.inf), rows[:, :m]
        out = np.full((len(rows), m), -1, dtype=np.int64)
        out_scores = np.full((len(rows), m), -np.inf, dtype=np.float32) if scored else None
        for i, found in enumerate(rows):
            found = np.sort(found[found >= 0])  # ascending rows: sequential reads of a memory map
            rows_vectors = np.asarray(vectors[found], dtype=np.float32)
            scores = self.space.lift_scores(q[i], rows_vectors)
            best = best_first(scores, m)
            out[i, : len(best)] = found[best]
            if out_scores is not None:
                out_scores[i, : len(best)] = scores[best]
        return out_scores, out

    def exhaustive_search(self, queries: np.ndarray, m: int, vectors: np.ndarray) -> np.ndarray:
        """The ``m`` best of every row of ``vectors`` under this index's own search metric (its
        lift of the vectors, by inner product or L2), computed exactly a block of rows at a
        time: what :meth:`search` approaches as its breadth grows (the recall of its widest
        breadth). Rows best first (ties by row), ``(n, min(m, len(vectors)))`` int64.

        Example
        -------
        >>> ix = CoarseIndex("poincare", 2, "flat")
        >>> vecs = np.array([[0.1, 0.0], [0.0, 0.2], [0.3, 0.0]], np.float32)
        >>> ix.add(vecs)
        >>> ix.exhaustive_search(vecs[2:], 2, vecs).tolist() == ix.search(vecs[2:], 2).tolist()
        True
        """
        q = np.ascontiguousarray(self._query(np.asarray(queries, dtype=np.float32)), dtype=np.float64)
        total = len(vectors)
        m = min(m, total)
        best_s = np.zeros((len(q), 0))
        best_r = np.zeros((len(q), 0), dtype=np.int64)
        for start in range(0, total, _EXHAUSTIVE_ROWS):
            db = np.asarray(self._db(np.asarray(vectors[start : start + _EXHAUSTIVE_ROWS])), dtype=np.float64)
            scores = q @ db.T
            if self._index.metric_type != _METRIC_INNER_PRODUCT:  # -|q - x|² up to |q|², constant per query
                scores = 2.0 * scores - np.einsum("ij,ij->i", db, db)[None, :]
            rows = np.broadcast_to(np.arange(start, start + len(db), dtype=np.int64), scores.shape)
            best_s, best_r = np.concatenate([best_s, scores], 1), np.concatenate([best_r, rows], 1)
            if best_s.shape[1] > m:
                keep = np.argpartition(-best_s, m - 1, axis=1)[:, :m]
                best_s, best_r = np.take_along_axis(best_s, keep, 1), np.take_along_axis(best_r, keep, 1)
        order = np.lexsort((best_r, -best_s), axis=-1)
        out: np.ndarray = np.take_along_axis(best_r, order, 1)
        return out

    # -- persistence ---------------------------------------------------------------------
    def describe(self) -> dict[str, Any]:
        """Kind, parameters, device and recall tuning, for manifests and ``qaindex info``."""
        out: dict[str, Any] = {"kind": self.kind, "params": dict(self.params), "device": self.device}
        if self.tuning is not None:
            out["tuning"] = dict(self.tuning)
        return out

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the index with ``faiss.write_index`` (FAISS's own binary format)."""
        faiss = self._faiss
        index = self._index if self.device == "cpu" else faiss.index_gpu_to_cpu(self._index)
        faiss.write_index(index, os.fspath(path))

    @classmethod
    def load(
        cls,
        path: str | os.PathLike[str],
        *,
        geometry: str | Geometry,
        dimension: int,
        kind: str,
        params: Mapping[str, int] | None,
        count: int,
        device: str = "cpu",
        ranking: str = "distance",
        tuning: Mapping[str, Any] | None = None,
    ) -> CoarseIndex:
        """Read an index written by :meth:`save`, memory-mapping it where FAISS can."""
        faiss = import_faiss()
        # IVF lists memory-mapped by FAISS are read-only and slower to scan: read them
        flags = 0 if kind in IVF_KINDS else faiss.IO_FLAG_MMAP | faiss.IO_FLAG_READ_ONLY
        try:
            index = faiss.read_index(os.fspath(path), flags)
        except RuntimeError:
            try:
                index = faiss.read_index(os.fspath(path))
            except RuntimeError as exc:
                raise IndexFormatError(
                    f"{path}: FAISS cannot read it ({str(exc).splitlines()[0]}); rebuild the index"
                ) from None
        out = cls(geometry, dimension, kind, params, device=device, index=index, ranking=ranking, count=count)
        out.tuning = dict(tuning) if tuning is not None else None
        if kind in IVF_KINDS:
            out._index.nprobe = out.params["nprobe"]
        if out.ntotal != count or index.d != out.stored_dimension:
            raise IndexFormatError(
                f"{path}: holds {out.ntotal} vectors of dimension {index.d}, the manifest says "
                f"{count} of dimension {out.stored_dimension}; rebuild the index"
            )
        return out


def best_first(scores: np.ndarray, m: int) -> np.ndarray:
    """Positions of the ``m`` highest ``scores``, highest first, ties by position: the first
    ``m`` of ``np.argsort(-scores, kind="stable")``, at the cost of a partition and a sort of
    ``m`` (and their ties), not of every score.

    Example
    -------
    >>> best_first(np.array([1.0, 3.0, 2.0, 3.0, 0.5], np.float32), 3).tolist()
    [1, 3, 2]
    """
    count = len(scores)
    if m <= 0:
        return np.zeros(0, np.int64)
    if m >= count or not np.isfinite(scores).all():
        return np.argsort(-scores, kind="stable")[:m]
    cut = np.partition(scores, count - m)[count - m]  # the m-th highest score
    pick = np.flatnonzero(scores >= cut)  # the m best and every tie of the m-th, by position
    out: np.ndarray = pick[np.argsort(-scores[pick], kind="stable")[:m]]
    return out


_BLAS_BATCH = 20
_BLAS_DEFAULT = 128000
_EXHAUSTIVE_ROWS = 1 << 15  # stored rows lifted and scored at a time by exhaustive_search


def _higher_better(found: np.ndarray, rows: np.ndarray, metric: int) -> np.ndarray:
    """FAISS's search values as scores, higher better (an L2 distance negated; ``-inf`` where no row)."""
    scores = found if metric == _METRIC_INNER_PRODUCT else -found
    return np.where(rows >= 0, scores, -np.inf).astype(np.float32)


_METRIC_INNER_PRODUCT = 0  # faiss.METRIC_INNER_PRODUCT (faiss.METRIC_L2 is 1)


def _set_blas_threshold(faiss: Any, nq: int) -> None:
    """Exhaustive search uses BLAS from ``distance_compute_blas_threshold`` queries on.

    FAISS's default (:data:`_BLAS_DEFAULT`) keeps batches on its per-pair loops, far slower
    than one matrix product; a single query through BLAS pays for its threads and copies, far
    more than the scan. So BLAS is switched on for batches of :data:`_BLAS_BATCH` or more
    queries only. The setting is process-global in FAISS; it changes speed, never results.
    """
    faiss.cvar.distance_compute_blas_threshold = _BLAS_BATCH if nq >= _BLAS_BATCH else _BLAS_DEFAULT


def exact_search(
    queries: np.ndarray,
    vectors: np.ndarray,
    k: int,
    *,
    geometry: str | Geometry,
    ranking: str = "distance",
    chunk: int = 4096,
    screen_above: int = 50_000,
) -> tuple[np.ndarray, np.ndarray]:
    """Brute-force nearest answers in float64: the ground truth for recall.

    Every answer is ranked. Above ``screen_above`` answers a first float64 pass computes
    every distance from inner products (one matrix product per block, ``|x−y|² =
    |x|² + |y|² − 2⟨x, y⟩``) and keeps each query's ``max(4k, k + 64)`` nearest; the
    element-difference formula then recomputes the distances of those to rank them. The
    pass's rounding (about 1e-16 relative to the norms) is far below the gaps between the
    kept and the dropped, so the result is the brute-force one (a test compares both paths,
    ties included), at the cost of one matrix product instead of a difference per element.

    Parameters
    ----------
    queries : array (n, dim)
    vectors : array (N, dim)
    k : int
    geometry : {"poincare", "cosine", "bilinear"} or Geometry, keyword-only
        Ranks by its :meth:`~qaindex.geometry.Geometry.distance`: Poincaré distance, 1 - cosine,
        or ``-q·a``.
    ranking : {"distance", "relative"}, keyword-only
        With a name, Poincaré only: rank by ``d(q, a)``, or by the origin-relative
        ``d(q, a) - d(0, a)`` (:func:`qaindex.geometry.hyperbolic.relative_distance`; the
        returned values are then ``f``).

    Returns
    -------
    distances : numpy.ndarray (n, k), float64, ``inf`` where missing
    rows : numpy.ndarray (n, k), int64, ``-1`` where missing

    Example
    -------
    >>> import numpy as np
    >>> exact_search(np.zeros((1, 2)), np.array([[0.5, 0.0], [0.1, 0.0]]), 1, geometry="poincare")[1]
    array([[1]])
    """
    space = geometries.get(geometry, ranking)
    q = np.asarray(queries, dtype=np.float64)
    n, total = len(q), len(vectors)
    best_d = np.full((n, k), np.inf)
    best_r = np.full((n, k), -1, dtype=np.int64)
    if k == 0 or total == 0 or n == 0:
        return best_d, best_r
    if total > screen_above and k < total:
        return _screened_exact(q, vectors, k, space)
    dim = q.shape[1]
    step = max(1, min(chunk, (1 << 23) // max(1, n * dim)))  # bounds the (n, step, dim) temporary
    for start in range(0, total, step):
        block = np.asarray(vectors[start : start + step], dtype=np.float64)
        d = space.distance(q[:, None, :], block[None, :, :])
        rows = np.broadcast_to(np.arange(start, start + len(block)), d.shape)
        cand_d = np.concatenate([best_d, d], axis=1)
        cand_r = np.concatenate([best_r, rows], axis=1)
        # order by distance, then row (missing rows, -1 at +inf, sort last)
        key_r = np.where(cand_r < 0, np.iinfo(np.int64).max, cand_r)
        order = np.lexsort((key_r, cand_d), axis=-1)[:, :k]
        best_d = np.take_along_axis(cand_d, order, axis=-1)
        best_r = np.take_along_axis(cand_r, order, axis=-1)
    return best_d, best_r


def _screened_exact(q: np.ndarray, vectors: np.ndarray, k: int, space: Geometry) -> tuple[np.ndarray, np.ndarray]:
    """:func:`exact_search` for large corpora: a matrix-product pass, then the exact formula."""
    n, total = len(q), len(vectors)
    keep = min(total, max(4 * k, k + 64))
    qn = np.einsum("ij,ij->i", q, q)
    step = max(1024, (1 << 24) // max(1, n))  # bounds the (n, step) float64 blocks
    best_d = np.full((n, 0), np.inf)
    best_r = np.full((n, 0), -1, dtype=np.int64)
    for start in range(0, total, step):
        block = np.asarray(vectors[start : start + step], dtype=np.float64)
        bn = np.einsum("ij,ij->i", block, block)
        d = space.screened_distance(qn, bn, q @ block.T)
        cand_d = np.concatenate([best_d, d], axis=1)
        cand_r = np.concatenate([best_r, np.broadcast_to(np.arange(start, start + len(block)), d.shape)], axis=1)
        if cand_d.shape[1] > keep:
            part = np.argpartition(cand_d, keep - 1, axis=1)[:, :keep]
            cand_d = np.take_along_axis(cand_d, part, axis=1)
            cand_r = np.take_along_axis(cand_r, part, axis=1)
        best_d, best_r = cand_d, cand_r
    # exact distances of the kept candidates, ranked by distance then row
    rows = np.sort(best_r, axis=1)
    d = np.stack([space.distance(q[i][None, :], np.asarray(vectors[rows[i]], np.float64)) for i in range(n)])
    order = np.lexsort((rows, d), axis=-1)[:, :k]
    return np.take_along_axis(d, order, axis=-1), np.take_along_axis(rows, order, axis=-1)

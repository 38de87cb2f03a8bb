"""Coarse recall with FAISS, exact ground truth with numpy.

Two index kinds, over the answers' vectors:

- ``flat``: exhaustive search. For the Poincaré geometry it searches the inner product of
  the lifted vectors (:func:`qaindex.hyperbolic.lift`), which ranks exactly by Poincaré
  distance in exact arithmetic; float32 rounding only disturbs near-ties, which the exact
  rerank of the over-fetched candidates then orders correctly.
- ``hnsw``: approximate graph search (``IndexHNSWFlat``) on the raw ball coordinates with
  the L2 metric, which recalls Poincaré neighbours far better than HNSW on lifted vectors;
  the exact rerank of ``k * overfetch`` candidates restores the exact order among them.

For models ranked by the origin-relative distance (``ranking: "relative"``, see
:func:`qaindex.hyperbolic.relative_distance`) both kinds search the lift of
:func:`qaindex.hyperbolic.relative_lift` (``e^f`` as an inner product, accurate for
distances of a few units and more): ``flat`` by inner product, ``hnsw`` by L2 after the usual
extra coordinate that makes every stored vector's norm :data:`~qaindex.hyperbolic.RELATIVE_LIFT_BOUND`
(maximum inner product search as nearest-neighbour search).

For the cosine geometry both kinds search the inner product of unit-normalised vectors.
For the bilinear geometry (:mod:`qaindex.bilinear`) ``flat`` searches the raw inner product
and ``hnsw`` L2 on the MIPS lift (:func:`qaindex.bilinear.mips_lift`).
``auto`` picks ``flat`` up to :data:`AUTO_FLAT_MAX` answers and ``hnsw`` above.
Search returns row numbers, ``-1`` where fewer than ``m`` answers exist.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import numpy as np

from . import bilinear, hyperbolic
from .devices import faiss_gpu_count, import_faiss
from .errors import IndexFormatError, QAIndexError

__all__ = [
    "AUTO_FLAT_MAX",
    "DEFAULT_HNSW",
    "INDEX_KINDS",
    "CoarseIndex",
    "choose_kind",
    "exact_search",
]

INDEX_KINDS = ("auto", "flat", "hnsw")
AUTO_FLAT_MAX = 20_000
DEFAULT_HNSW: dict[str, int] = {"M": 32, "ef_construction": 200, "ef_search": 256}


def choose_kind(kind: str, count: int) -> str:
    """Resolve ``"auto"`` to a concrete index kind for ``count`` answers.

    Example
    -------
    >>> choose_kind("auto", 500), choose_kind("auto", 1_000_000), choose_kind("flat", 10**6)
    ('flat', 'hnsw', 'flat')
    """
    if kind not in INDEX_KINDS:
        raise QAIndexError(f"unknown index kind {kind!r}; choose one of: {', '.join(INDEX_KINDS)}")
    if kind == "auto":
        return "flat" if count <= AUTO_FLAT_MAX else "hnsw"
    return kind


def _unit(x: np.ndarray) -> np.ndarray:
    x64 = np.asarray(x, dtype=np.float64)
    norms = np.linalg.norm(x64, axis=-1, keepdims=True)
    return np.ascontiguousarray(x64 / np.maximum(norms, 1e-30), dtype=np.float32)


class CoarseIndex:
    """A FAISS index over answer vectors that returns candidate rows for exact reranking.

    Parameters
    ----------
    geometry : {"poincare", "cosine"}
    dimension : int
        Dimension of the answer vectors.
    kind : {"flat", "hnsw"}
    params : mapping, optional
        HNSW parameters (``M``, ``ef_construction``, ``ef_search``); defaults
        :data:`DEFAULT_HNSW`.
    device : {"auto", "cpu", "cuda"}
        ``flat`` indexes move to a GPU when FAISS sees one (``auto``) or must (``cuda``).
    ranking : {"distance", "relative"}, keyword-only
        The model's ranking rule (Poincaré only): plain distance, or origin-relative distance.

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
        geometry: str,
        dimension: int,
        kind: str,
        params: Mapping[str, int] | None = None,
        *,
        device: str = "cpu",
        index: Any = None,
        ranking: str = "distance",
    ) -> None:
        if geometry not in ("poincare", "cosine", "bilinear"):
            raise QAIndexError(f"unknown geometry {geometry!r}")
        if ranking not in hyperbolic.RANKINGS:
            raise QAIndexError(f"unknown ranking {ranking!r}; choose one of: {', '.join(hyperbolic.RANKINGS)}")
        self.relative = geometry == "poincare" and ranking == "relative"
        if kind not in ("flat", "hnsw"):
            raise QAIndexError(f"unknown index kind {kind!r}; choose flat or hnsw")
        self.geometry = geometry
        self.dimension = int(dimension)
        self.kind = kind
        self.params: dict[str, int] = dict(DEFAULT_HNSW) if kind == "hnsw" else {}
        if kind == "hnsw" and params:
            self.params.update({k: int(v) for k, v in params.items()})
        self._faiss = import_faiss()
        self._mips_bound: float | None = None  # bilinear hnsw only
        self._cpu_index = index if index is not None else self._new_index()
        self.device = "cpu"
        self._index = self._cpu_index
        self._move_to_device(device)

    # -- construction ----------------------------------------------------------------------
    @property
    def stored_dimension(self) -> int:
        """Dimension of the vectors FAISS stores (``dim + 2`` for lifted Poincaré flat)."""
        if self.relative:
            return self.dimension + (1 if self.kind == "flat" else 2)
        if self.geometry == "bilinear":  # inner product; hnsw: L2 on the MIPS lift
            return self.dimension + (1 if self.kind == "hnsw" else 0)
        return self.dimension + 2 if (self.geometry == "poincare" and self.kind == "flat") else self.dimension

    def _new_index(self) -> Any:
        faiss = self._faiss
        d = self.stored_dimension
        if self.kind == "flat":
            return faiss.IndexFlatIP(d)
        # Poincaré: L2 on raw coordinates, or (relative) on the lift with its extra coordinate
        metric = faiss.METRIC_INNER_PRODUCT if self.geometry == "cosine" else faiss.METRIC_L2
        index = faiss.IndexHNSWFlat(d, self.params["M"], metric)
        index.hnsw.efConstruction = self.params["ef_construction"]
        index.hnsw.efSearch = self.params["ef_search"]
        return index

    def _move_to_device(self, device: str) -> None:
        if device == "cpu" or self.kind != "flat":
            if device == "cuda" and self.kind != "flat":
                raise QAIndexError(
                    "FAISS has no GPU version of the hnsw index; use --device auto or cpu, or --index-kind flat"
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
        if self.geometry == "cosine":
            return _unit(vectors)
        if self.geometry == "bilinear":
            if self.kind == "flat":
                return np.ascontiguousarray(vectors, dtype=np.float32)
            if self._mips_bound is None:  # padded norm: fixed by the first vectors (or the stored ones)
                stored = self._cpu_index.ntotal if self._cpu_index is not None else 0
                self._mips_bound = (
                    float(np.sum(self._cpu_index.reconstruct(0).astype(np.float64) ** 2))
                    if stored
                    else bilinear.mips_bound(vectors)
                )
            return bilinear.mips_lift(vectors, self._mips_bound)
        if self.relative:
            rel: np.ndarray = hyperbolic.relative_lift(vectors)
            if self.kind == "flat":
                return rel
            sq = np.sum(rel.astype(np.float64) ** 2, axis=1, keepdims=True)
            extra = np.sqrt(np.maximum(hyperbolic.RELATIVE_LIFT_BOUND - sq, 0.0))
            return np.ascontiguousarray(np.concatenate([rel, extra], axis=1), dtype=np.float32)
        if self.kind == "flat":
            lifted: np.ndarray = hyperbolic.lift(vectors)
            return lifted
        return np.ascontiguousarray(vectors, dtype=np.float32)

    def _query(self, queries: np.ndarray) -> np.ndarray:
        if self.geometry == "cosine":
            return _unit(queries)
        if self.geometry == "bilinear":
            return bilinear.mips_query(queries) if self.kind == "hnsw" else np.ascontiguousarray(queries, np.float32)
        if self.relative:
            rel: np.ndarray = hyperbolic.relative_lift_query(queries)
            if self.kind == "flat":
                return rel
            return np.ascontiguousarray(np.concatenate([rel, np.zeros_like(rel[:, :1])], axis=1))
        if self.kind == "flat":
            lifted: np.ndarray = hyperbolic.lift_query(queries)
            return lifted
        return np.ascontiguousarray(queries, dtype=np.float32)

    @property
    def ntotal(self) -> int:
        return int(self._index.ntotal)

    def add(self, vectors: np.ndarray) -> None:
        """Append vectors (their rows continue after the existing ones)."""
        if len(vectors):
            self._index.add(self._db(vectors))
            if self._index is not self._cpu_index:
                self._cpu_index = None  # the GPU copy is the truth until saved

    # -- search -----------------------------------------------------------------------------
    def search(self, queries: np.ndarray, m: int) -> np.ndarray:
        """Candidate rows for each query.

        Parameters
        ----------
        queries : array (n, dimension)
        m : int
            Candidates per query.

        Returns
        -------
        numpy.ndarray (n, m), int64
            Rows, best coarse match first, ``-1`` where fewer than ``m`` exist.
        """
        n = len(queries)
        if m <= 0 or n == 0:
            return np.full((n, max(m, 0)), -1, dtype=np.int64)
        if self.kind == "hnsw":
            self._index.hnsw.efSearch = max(self.params["ef_search"], m)
        else:
            _set_blas_threshold(self._faiss, n)
        _, rows = self._index.search(self._query(queries), m)
        return np.asarray(rows, dtype=np.int64)

    # -- persistence ---------------------------------------------------------------------
    def describe(self) -> dict[str, Any]:
        """Kind, parameters and device, for manifests and ``qaindex info``."""
        return {"kind": self.kind, "params": dict(self.params), "device": self.device}

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
        geometry: str,
        dimension: int,
        kind: str,
        params: Mapping[str, int] | None,
        count: int,
        device: str = "cpu",
        ranking: str = "distance",
    ) -> CoarseIndex:
        """Read an index written by :meth:`save`, memory-mapping it where FAISS can."""
        faiss = import_faiss()
        try:
            index = faiss.read_index(os.fspath(path), faiss.IO_FLAG_MMAP | faiss.IO_FLAG_READ_ONLY)
        except RuntimeError:
            try:
                index = faiss.read_index(os.fspath(path))
            except RuntimeError as exc:
                raise IndexFormatError(
                    f"{path}: FAISS cannot read it ({str(exc).splitlines()[0]}); rebuild the index"
                ) from None
        out = cls(geometry, dimension, kind, params, device=device, index=index, ranking=ranking)
        if out.ntotal != count or index.d != out.stored_dimension:
            raise IndexFormatError(
                f"{path}: holds {out.ntotal} vectors of dimension {index.d}, the manifest says "
                f"{count} of dimension {out.stored_dimension}; rebuild the index"
            )
        return out


_BLAS_BATCH = 20
_BLAS_DEFAULT = 128000


def _set_blas_threshold(faiss: Any, nq: int) -> None:
    """Exhaustive search uses BLAS from ``distance_compute_blas_threshold`` queries on.

    Measured on these machines: for batches the default (128000) made search ~18x slower
    than BLAS; for a single query BLAS was ~200x slower (10 ms vs 0.05 ms). So BLAS is
    switched on for batches of 20 or more queries only. The setting is process-global in
    FAISS; it changes speed, never results.
    """
    faiss.cvar.distance_compute_blas_threshold = _BLAS_BATCH if nq >= _BLAS_BATCH else _BLAS_DEFAULT


def exact_search(
    queries: np.ndarray,
    vectors: np.ndarray,
    k: int,
    *,
    geometry: str,
    ranking: str = "distance",
    chunk: int = 4096,
) -> tuple[np.ndarray, np.ndarray]:
    """Brute-force nearest answers in float64: the ground truth for recall.

    Parameters
    ----------
    queries : array (n, dim)
    vectors : array (N, dim)
    k : int
    geometry : {"poincare", "cosine"}, keyword-only
        Ranks by Poincaré distance, or by 1 - cosine.
    ranking : {"distance", "relative"}, keyword-only
        Poincaré only: rank by ``d(q, a)``, or by the origin-relative ``d(q, a) - d(0, a)``
        (:func:`qaindex.hyperbolic.relative_distance`; the returned values are then ``f``).

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
    q = np.asarray(queries, dtype=np.float64)
    n, total = len(q), len(vectors)
    best_d = np.full((n, k), np.inf)
    best_r = np.full((n, k), -1, dtype=np.int64)
    if k == 0 or total == 0 or n == 0:
        return best_d, best_r
    dim = q.shape[1]
    step = max(1, min(chunk, (1 << 23) // max(1, n * dim)))  # bounds the (n, step, dim) temporary
    for start in range(0, total, step):
        block = np.asarray(vectors[start : start + step], dtype=np.float64)
        if geometry == "poincare" and ranking == "relative":
            d = hyperbolic.relative_distance(q[:, None, :], block[None, :, :])
        elif geometry == "poincare":
            d = hyperbolic.distance(q[:, None, :], block[None, :, :])
        elif geometry == "bilinear":
            d = -np.einsum("nd,md->nm", q, block)
        else:
            d = 1.0 - hyperbolic.cosine_similarity(q[:, None, :], block[None, :, :])
        rows = np.broadcast_to(np.arange(start, start + len(block)), d.shape)
        cand_d = np.concatenate([best_d, d], axis=1)
        cand_r = np.concatenate([best_r, rows], axis=1)
        # order by distance, then row (missing rows, -1 at +inf, sort last)
        key_r = np.where(cand_r < 0, np.iinfo(np.int64).max, cand_r)
        order = np.lexsort((key_r, cand_d), axis=-1)[:, :k]
        best_d = np.take_along_axis(cand_d, order, axis=-1)
        best_r = np.take_along_axis(cand_r, order, axis=-1)
    return best_d, best_r

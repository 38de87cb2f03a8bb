"""Distributed build on Ray Data: ``qaindex build CORPUS.jsonl --ray [ADDRESS|auto|local]``.

How it works, and why the result equals the local build's:

1. The driver validates the corpus exactly as the local streaming build does
   (:func:`qaindex.indexing.streaming.validate_corpus`: same rules, same ``file:line`` messages,
   records spooled to a temporary file). A bad line stops the build before Ray starts
   and before anything is written to the index directory.
2. Ray Data reads the corpus in parallel, one read task per chunk of ``chunk_size``
   answers (:func:`chunk_ranges`: the byte range of the chunk's lines, numbered the way the
   local reader numbers them; lines that create no answer, such as an answer-selection row
   repeating an ``aid``, are skipped).
3. ``map_batches`` encodes each chunk in actors that each load the ONNX model once. The
   chunks and so the encoder calls are those of the local build: the vectors are
   bit-identical to ``Ranker.build``'s (batch composition changes float32 rounding).
4. The driver takes the vectors in order (Ray's ``preserve_order``) and builds **one merged
   index** with :func:`qaindex.indexing.streaming.assemble_index`, the code of the local build. The
   result is an ordinary index: ``Ranker.load`` and every command use it unchanged.

``ADDRESS`` is what :func:`ray.init` takes: ``local`` starts a Ray instance in this process
(all local cores), ``auto`` joins the cluster this machine belongs to, ``ray://head:10001``
connects a Ray client to a remote head. If Ray is already initialised (a script that called
``ray.init`` itself), that instance is used. On a cluster, the corpus file and the model
directory must be readable at the same path on every node (a shared filesystem), as for
any Ray Data read of local files, and qaindex must be installed there.

``ray`` is imported only when a build asks for it (``pip install 'qaindex[ray]'``).
"""

from __future__ import annotations

import contextlib
import inspect
import json
import logging
import os
import warnings
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import MissingDependencyError, QAIndexError
from ..model import Model, resolve_model_path
from ..reranker import Reranker
from .streaming import DEFAULT_CHUNK, RecordSpool, VectorSpool, assemble_index, validate_corpus

if TYPE_CHECKING:
    from ..ranker import Ranker

__all__ = ["ClusterError", "build_on_ray", "chunk_ranges", "line_offsets"]

_SHARD_BYTES = 32 << 20  # read tasks cover at most this many bytes of the corpus


class ClusterError(QAIndexError):
    """Ray could not be reached, or a distributed build did not complete."""


def import_ray() -> Any:
    """Import ray, or say which extra to install."""
    try:
        import ray
        import ray.data
    except ImportError:
        raise MissingDependencyError(
            "ray is not installed; install it with `pip install 'qaindex[ray]'` to build with --ray"
        ) from None
    return ray


def line_offsets(path: str | os.PathLike[str], lines: np.ndarray) -> np.ndarray:
    """Byte offsets where the given 1-based lines start (``lines`` ascending), numbered as
    :func:`qaindex.corpus.read_json_lines` numbers them (every ``\\n`` ends a line).

    Example
    -------
    >>> import tempfile, pathlib
    >>> p = pathlib.Path(tempfile.mkdtemp()) / "c.jsonl"
    >>> _ = p.write_bytes(b"a\\nbb\\n\\nccc\\n")
    >>> line_offsets(p, np.array([1, 2, 4])).tolist()
    [0, 2, 6]
    """
    out = np.zeros(len(lines), dtype=np.int64)
    j, line, position = 0, 1, 0
    while j < len(lines) and lines[j] == 1:
        j += 1
    with open(path, "rb") as handle:
        while j < len(lines):
            block = handle.read(1 << 22)
            if not block:
                break
            newlines = np.flatnonzero(np.frombuffer(block, dtype=np.uint8) == 10)
            # the line after this block's i-th newline is number line + i + 1
            while j < len(lines) and lines[j] <= line + len(newlines):
                out[j] = position + newlines[lines[j] - line - 1] + 1
                j += 1
            line += len(newlines)
            position += len(block)
    if j < len(lines):
        raise ClusterError(
            f"{path}: has fewer than {int(lines[j])} lines; was it changed during the build? Build again"
        )
    return out


def chunk_ranges(
    path: str | os.PathLike[str], record_lines: np.ndarray, chunk_size: int
) -> list[tuple[int, int, int, np.ndarray]]:
    """The byte ranges of the corpus that hold each chunk of ``chunk_size`` answers.

    Returns
    -------
    list of (start, end, first_line, lines)
        Byte offsets, the number of the range's first line, and the lines in it that create
        an answer (other lines, such as an answer-selection row repeating an ``aid``, are
        skipped by the reader). Chunk k holds answers ``k * chunk_size`` to
        ``(k + 1) * chunk_size - 1``: the chunks of the local build.
    """
    firsts = record_lines[::chunk_size]
    offsets = line_offsets(path, firsts)
    size = os.path.getsize(path)
    out = []
    for k, (first, start) in enumerate(zip(firsts.tolist(), offsets.tolist(), strict=True)):
        end = int(offsets[k + 1]) if k + 1 < len(offsets) else size
        out.append((int(start), end, int(first), record_lines[k * chunk_size : (k + 1) * chunk_size]))
    return out


def _answers_of_range(path: str, start: int, end: int, first_line: int, wanted: np.ndarray) -> list[str]:
    """The answer texts of the ``wanted`` lines of a byte range (validated before: they parse)."""
    with open(path, "rb") as handle:
        handle.seek(start)
        data = handle.read(end - start)
    pieces = data.split(b"\n")
    answers: list[str] = []
    for number in wanted.tolist():
        text = pieces[number - first_line].decode("utf-8")
        if number == 1:
            text = text.removeprefix("\ufeff")
        answers.append(json.loads(text)["answer"])
    return answers


def _corpus_datasource(path: str, record_lines: np.ndarray, chunk_size: int) -> Any:
    """A Ray Data datasource of ``(line, answer)`` rows: one read task (and block) per chunk."""
    import pyarrow
    from ray.data.block import BlockMetadata
    from ray.data.datasource import Datasource, ReadTask

    class CorpusLines(Datasource):  # type: ignore[misc, unused-ignore]  # Any without ray installed
        def __init__(self) -> None:
            super().__init__()  # type: ignore[no-untyped-call, unused-ignore]
            self.size = os.path.getsize(path)

        def estimate_inmemory_data_size(self) -> int:
            return int(self.size)

        def get_read_tasks(self, parallelism: int, *args: Any, **kwargs: Any) -> list[Any]:
            tasks = []
            for start, end, first, wanted in chunk_ranges(path, record_lines, chunk_size):

                def read(start: int = start, end: int = end, first: int = first, wanted: np.ndarray = wanted) -> Any:
                    answers = _answers_of_range(path, start, end, first, wanted)
                    yield pyarrow.table({"line": wanted, "answer": pyarrow.array(answers, type=pyarrow.string())})

                meta = BlockMetadata(num_rows=len(wanted), size_bytes=end - start, input_files=(path,), exec_stats=None)
                tasks.append(ReadTask(read, meta))
            return tasks

    return CorpusLines()


class _Encoder:
    """A Ray actor's encoder: the ONNX model loaded once, then called on batches."""

    def __init__(self, model_dir: str, device: str, batch_size: int) -> None:
        self.model = Model.load(model_dir, device=device, threads=1)
        self.batch_size = batch_size

    def __call__(self, batch: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        texts = [str(t) for t in batch["answer"]]
        vectors = self.model.encode(texts, role="answer", batch_size=self.batch_size)
        return {"line": np.asarray(batch["line"], dtype=np.int64), "vector": vectors}


def _connect(ray: Any, address: str) -> bool:
    """Initialise Ray for ``address`` unless it already is; True when this call started it."""
    if ray.is_initialized():
        return False
    kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False, "logging_level": "ERROR"}
    try:
        if address == "local":
            ray.init(**kwargs)
        else:
            ray.init(address=address, **kwargs)
    except Exception as exc:  # noqa: BLE001 - ray raises ConnectionError, RuntimeError, ValueError...
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ClusterError(
            f"--ray {address}: cannot connect to Ray ({first}); start the cluster (`ray start --head`), "
            "check the address (e.g. ray://head:10001 or auto), or use --ray local"
        ) from None
    return True


def build_on_ray(
    corpus: str | os.PathLike[str],
    *,
    address: str = "local",
    model: str | os.PathLike[str] | Model | None = None,
    device: str = "auto",
    index_kind: str = "auto",
    hnsw: Mapping[str, int] | None = None,
    overfetch: int = 10,
    batch_size: int = 256,
    chunk_size: int = DEFAULT_CHUNK,
    workers: int | None = None,
    recall: float | None = None,
    reranker: str | os.PathLike[str] | Reranker | None = None,
    hybrid: bool | None = None,
    question_keys: bool = True,
    passage_words: int | str = "auto",
) -> Ranker:
    """Build an index of a corpus file with Ray Data encoding shards in parallel workers.

    Parameters
    ----------
    corpus : path-like
        The JSONL corpus (readable at this path by every Ray node).
    address : str, keyword-only
        ``local``, ``auto`` or a Ray address such as ``ray://head:10001`` (see the module
        docstring); ignored when Ray is already initialised.
    model, device, index_kind, hnsw, overfetch, batch_size, recall, reranker, hybrid, question_keys, passage_words
        As for :meth:`qaindex.Ranker.build`; the BM25 index of ``hybrid`` is built on the
        driver, chunk by chunk as it validates the records, and so are the stored questions'
        and passages' keys, from the stored records (:mod:`qaindex.key_index`).
    chunk_size : int, keyword-only
        Answers per ``map_batches`` call (and per chunk of the driver's validation).
    workers : int, optional
        Encoder actors; default: the cluster's CPUs.

    Returns
    -------
    Ranker
        Not saved yet; identical to ``Ranker.build(corpus, ...)`` (same records, vectors
        and index).

    Example
    -------
    On a Ray cluster (the CLI's ``qaindex build faq.jsonl --ray ray://head:10001``)::

        ranker = build_on_ray("/shared/faq.jsonl", address="ray://head:10001")
        ranker.save("qaindex-index")
    """
    from ..key_index import choose_passage_words
    from ..ranker import Ranker
    from ..search.fusion import with_dense_ratio
    from ..text.lexical import build_hybrid
    from .cuts import AnswerCuts
    from .encoding import encode_keys
    from .lexical_worker import build_analyser

    hybrid = build_hybrid(hybrid)
    choose_passage_words(passage_words, static_encoder=False)  # a bad setting fails before any work
    ray = import_ray()
    source = os.fspath(corpus)
    loaded = model if isinstance(model, Model) else Model.load(model, device=device, threads=None)
    spool = RecordSpool()
    lexical = build_analyser() if hybrid else None  # the BM25 rows, analysed as the driver validates
    cuts = AnswerCuts(loaded, then=lexical)  # counts the answers the model cuts, then BM25 rows
    on_chunk = lambda chunk: cuts.add([r.answer for r in chunk])  # noqa: E731
    record_lines = validate_corpus(source, spool, chunk_size=chunk_size, on_chunk=on_chunk)
    store = spool.store()
    started = _connect(ray, address)
    try:
        with _quiet_ray_data():
            vectors = _encode_on_ray(
                ray,
                source,
                loaded,
                record_lines,
                device,
                batch_size,
                chunk_size,
                workers,
                restart_actors=not (started and address == "local"),
            )
    finally:
        if started:
            ray.shutdown()
    coarse = assemble_index(loaded, vectors, index_kind=index_kind, hnsw=hnsw, device=device, chunk_size=chunk_size)
    if recall is not None and coarse.kind != "flat":  # flat is exact: nothing to tune
        from .tuning import check_target, tune_for_corpus

        tune_for_corpus(coarse, loaded, store, vectors, target=check_target(recall), overfetch=overfetch)
    if reranker is not None and not isinstance(reranker, Reranker):
        reranker = Reranker.load(reranker, device=device)
    keys = encode_keys(
        loaded, store, batch_size, lexical=hybrid, question_keys=question_keys, passage_words=passage_words
    )
    # the BM25 index with adaptive fusion's ratio, measured as a local build measures it
    analysed = None
    if lexical is not None:
        analysed = with_dense_ratio(loaded, vectors, lexical.finish(), lambda row: store.get(row).answer)
    ranker = Ranker(
        loaded,
        store,
        vectors,
        coarse,
        overfetch=overfetch,
        kind_requested=index_kind,
        reranker=reranker,
        lexical=analysed,
        keys=keys,
    )
    ranker.build_report = {"cuts": cuts.report()}
    return ranker


@contextlib.contextmanager
def _quiet_ray_data() -> Iterator[None]:
    """Ray Data's INFO lines and notices (execution plans, "progress bars disabled", actor
    pool sizes) off for a build that succeeds; its errors still show."""
    logger = logging.getLogger("ray.data")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=r"The minimum number of concurrent actors", category=UserWarning)
            # Ray 2.60 deprecates ray_remote_args_fn without another way to set max_restarts
            warnings.filterwarnings("ignore", message=r"`ray_remote_args_fn` is deprecated")
            yield
    finally:
        logger.setLevel(level)


def _no_restarts() -> dict[str, Any]:
    """Remote arguments of encoder actors that are not restarted (merged over Ray Data's defaults)."""
    return {"max_restarts": 0, "max_task_retries": 0}


def _restart_options(dataset: Any, restart_actors: bool) -> dict[str, Any]:
    """``map_batches`` arguments that turn actor restarts off, where this Ray version takes them."""
    if restart_actors or "ray_remote_args_fn" not in inspect.signature(dataset.map_batches).parameters:
        return {}
    return {"ray_remote_args_fn": _no_restarts}


def _encode_on_ray(
    ray: Any,
    source: str,
    model: Model,
    record_lines: np.ndarray,
    device: str,
    batch_size: int,
    chunk_size: int,
    workers: int | None,
    *,
    restart_actors: bool = True,
) -> np.ndarray:
    """The answers' vectors, in order, encoded by Ray Data actors.

    ``restart_actors`` False (a Ray instance this build started on this machine) turns off
    Ray Data's actor restarts (``max_restarts=0``): an encoder that dies fails the build,
    which the user reruns, and Ray does not print its warning about restarting actors whose
    constructor arguments live in the object store on every successful build. On a cluster
    restarts stay on, so a lost node does not fail the build.
    """
    context = ray.data.DataContext.get_current()
    context.execution_options.preserve_order = True
    context.enable_progress_bars = False
    context.print_on_execution_start = False
    if workers is None:
        workers = max(1, int(ray.cluster_resources().get("CPU", 1)))
    model_dir = str(Path(resolve_model_path(model.directory)).resolve())
    # read tasks claim no CPU: the encoder actors hold every core, and reading is the light part
    datasource = _corpus_datasource(str(Path(source).resolve()), record_lines, chunk_size)
    # one block per chunk: Ray must not split blocks (that would change the encoder calls)
    chunks = -(-len(record_lines) // chunk_size)
    dataset = ray.data.read_datasource(datasource, num_cpus=0, override_num_blocks=chunks)
    encoded = dataset.map_batches(
        _Encoder,
        fn_constructor_kwargs={"model_dir": model_dir, "device": device, "batch_size": batch_size},
        batch_size=None,  # one call per block, that is per chunk: the local build's encode calls
        batch_format="numpy",
        compute=ray.data.ActorPoolStrategy(size=workers),
        num_cpus=1,
        **_restart_options(dataset, restart_actors),
    )
    out = VectorSpool(model.dimension)
    for batch in encoded.iter_batches(batch_size=None, batch_format="numpy"):
        lines = np.asarray(batch["line"], dtype=np.int64)
        if not np.array_equal(lines, record_lines[out.count : out.count + len(lines)]):
            raise ClusterError(f"{source}: Ray returned the answers out of order; build again")
        out.append(np.asarray(batch["vector"], dtype=np.float32))
    if out.count != len(record_lines):
        raise ClusterError(
            f"{source}: Ray encoded {out.count} answers, the corpus has {len(record_lines)}; "
            "was the file changed during the build? Build again"
        )
    return out.finish()

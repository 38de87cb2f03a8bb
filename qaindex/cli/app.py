"""The ``qaindex`` command line: a thin layer over :class:`qaindex.Ranker`.

Exit codes: 0 success, 1 a user error (bad corpus, missing index, ...), 2 a usage error.
Errors print one line on stderr, never a traceback.
"""

from __future__ import annotations

import errno
import importlib
import json
import logging
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import click

from ..devices import devices_line
from ..errors import MissingDependencyError, QAIndexError
from ..indexing.cuts import cut_line
from ..model import DEFAULT_MODEL_DIR
from ..ranker import DEFAULT_OVERFETCH, Hit, Ranker
from ..reranker import Reranker
from ..search import filters
from ..store.locking import DEFAULT_LOCK_TIMEOUT
from ..store.ownership import check_writable, orphan_summary
from ..vector_index import INDEX_KINDS
from ..version import __version__
from .calibrate import calibrate_command, calibration_line, hybrid_line
from .eval import eval_command, inspect_command
from .export import export_model_command
from .maintenance import gc_command, orphans_line
from .options import (
    PassageWords,
    Timeout,
    batch_size_option,
    device_option,
    index_option,
    refuse_existing_index,
    torch_extra_hint,
)

lock_timeout_option = click.option(
    "--lock-timeout",
    type=Timeout(),
    default=DEFAULT_LOCK_TIMEOUT,
    show_default=True,
    help="Seconds to wait for another writer of the same index before giving up (inf: wait as long as it takes).",
)


# Commands whose modules import the training package (qaindex_export): loaded when named, so
# that `import qaindex.cli` loads neither it nor torch (click's lazy subcommands).
_LAZY_COMMANDS = {"train": ("qaindex.cli.train", "train")}


class _Group(click.Group):
    """Turns every error into a one-line message: exit 1 for errors, 2 for usage (click).

    The commands of :data:`_LAZY_COMMANDS` are imported when they are looked up.

    :class:`QAIndexError` is the expected case; ``OSError`` (with its file name),
    ``MemoryError``, ``UnicodeError`` and, as a last resort, any other exception are turned
    into one line too, so the CLI never prints a traceback. ``QAINDEX_DEBUG=1`` re-raises
    unexpected exceptions for debugging.
    """

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *_LAZY_COMMANDS})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in _LAZY_COMMANDS and cmd_name not in self.commands:
            module, name = _LAZY_COMMANDS[cmd_name]
            self.add_command(getattr(importlib.import_module(module), name), cmd_name)
        return super().get_command(ctx, cmd_name)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (click.exceptions.Exit, click.exceptions.Abort, click.ClickException):
            raise
        except QAIndexError as exc:
            raise click.ClickException(_one_line(str(exc))) from None
        except KeyboardInterrupt:
            click.echo("interrupted; nothing already saved was changed", err=True)
            sys.exit(130)
        except Exception as exc:
            if os.environ.get("QAINDEX_DEBUG") and not isinstance(exc, OSError | MemoryError):
                raise
            raise click.ClickException(_one_line(describe_unexpected(exc))) from None


def describe_unexpected(exc: BaseException) -> str:
    """One line for an exception that is not a :class:`QAIndexError` (the CLI's last resort).

    Example
    -------
    >>> describe_unexpected(PermissionError(13, "Permission denied", "/x/manifest.json"))
    '/x/manifest.json: Permission denied; check the path and its permissions'
    """
    if isinstance(exc, OSError):
        where = exc.filename if exc.filename is not None else "a file"
        reason = exc.strerror or str(exc) or type(exc).__name__
        if exc.errno == errno.ENOSPC:
            return f"{where}: no space left on the device; free some space and retry"
        if exc.errno == errno.EDQUOT:
            return f"{where}: disk quota exceeded; free some space and retry"
        if exc.errno == errno.EFBIG:
            return f"{where}: larger than this process's file-size limit (`ulimit -f`); raise the limit and retry"
        return f"{where}: {reason}; check the path and its permissions"
    if isinstance(exc, MemoryError):
        return "out of memory; use a smaller -k, --batch-size or corpus"
    if isinstance(exc, UnicodeError):
        return f"text cannot be encoded or decoded ({exc}); use UTF-8 (e.g. set PYTHONIOENCODING=utf-8)"
    if isinstance(exc, RecursionError):
        return "input nested too deeply; flatten it"
    return f"unexpected internal error ({type(exc).__name__}: {exc}); please report this bug"


def _one_line(message: str) -> str:
    return " ".join(message.split()) if "\n" in message or "\r" in message else message


@click.group(
    cls=_Group,
    context_settings={"help_option_names": ["-h", "--help"]},
    epilog=f"The built-in model (used when no --model is given; `default` in eval and inspect) is installed in "
    f"{DEFAULT_MODEL_DIR}.",
)
@click.version_option(__version__, prog_name="qaindex")
@click.option("-v", "--verbose", is_flag=True, help="Log what qaindex does (loads, saves, timings) on stderr.")
def main(verbose: bool) -> None:
    """Question→answer retrieval: build an index of answers, then search it with questions."""
    logger = logging.getLogger("qaindex")
    for old in [h for h in logger.handlers if getattr(h, "qaindex_cli", False)]:
        logger.removeHandler(old)
    if verbose:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("qaindex: %(message)s"))
        handler.qaindex_cli = True  # type: ignore[attr-defined]
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)


@main.command()
@click.argument("corpus", type=click.Path(path_type=Path, dir_okay=False))
@click.option(
    "--model",
    type=click.Path(file_okay=False),
    default=None,
    help="Model directory (default: the built-in model; the word `default` names it too).",
)
@index_option
@device_option()
@click.option(
    "--index-kind",
    type=click.Choice(INDEX_KINDS),
    default="auto",
    show_default=True,
    help="FAISS coarse index: exact flat search, or approximate PQ fast scan refined with the float vectors, "
    "HNSW or IVF (_sq8: 8-bit storage); auto picks flat up to 20,000 answers and pq above.",
)
@click.option(
    "--recall",
    "recall_target",
    type=click.FloatRange(min=0.0, max=1.0, min_open=True),
    default=None,
    help="Tune the PQ/HNSW/IVF search breadth to the smallest that reaches this recall@10 against exact search "
    "(e.g. 0.99), measured on the corpus's questions (or answers) at build time.",
)
@click.option(
    "--overfetch",
    type=click.IntRange(min=1),
    default=DEFAULT_OVERFETCH,
    show_default=True,
    help="The coarse stage recalls k × overfetch candidates for the exact rerank.",
)
@batch_size_option("Answers per encoder call.")
@lock_timeout_option
@click.option(
    "--ray",
    "ray_address",
    is_flag=False,
    flag_value="local",
    default=None,
    metavar="[ADDRESS|auto|local]",
    help="Encode on Ray Data workers (pip install 'qaindex[ray]'): local starts Ray here (the default "
    "with a bare --ray), auto joins this machine's cluster, or a Ray address such as ray://head:10001.",
)
@click.option(
    "--shards",
    type=click.IntRange(min=1, max=1024),
    default=None,
    help="Build a shard set: N indexes of consecutive slices of the corpus (built as Ray tasks with --ray) "
    "that search and merge as one index (docs/large-corpora.md); --index must be new or empty.",
)
@click.option(
    "--reranker",
    type=click.Path(path_type=Path, file_okay=False),
    default=None,
    help="Reranker model directory (qaindex train --model ap-cnn) stored in the index: searches rerank "
    "the first stage's candidates with it unless told otherwise.",
)
@click.option("--force", is_flag=True, help="Replace the index already at --index (without it, build refuses).")
@click.option(
    "--hybrid/--no-hybrid",
    default=None,
    help="Also build a BM25 index of the answers, so that searches fuse the dense and lexical rankings "
    "(docs/hybrid.md); default: when PyStemmer is installed (pip install 'qaindex[hybrid]').",
)
@click.option(
    "--question-keys/--no-question-keys",
    default=True,
    show_default=True,
    help="Also index each record's stored question/questions as search keys mapping to it, so that a "
    "search matches answers and stored questions (each record returned once).",
)
@click.option(
    "--passage-words",
    type=PassageWords(),
    default="auto",
    show_default=True,
    help="Also key each answer longer than this many words by overlapping windows of that many words, "
    "mapping to it (docs/search-keys.md): 'auto' = 64 for a model that cuts its answers (an exported "
    "sentence-transformer), none for a static encoder such as the built-in model; 0 = none.",
)
@click.option(
    "--adapt",
    is_flag=True,
    help="Adapt the model to this corpus first and index with the adapted model (pip install 'qaindex[train]'): "
    "without labels against all-MiniLM-L6-v2, then on the records' stored questions when there are some; "
    "each stage keeps the model it started from when it does not beat it on questions it held out.",
)
def build(
    corpus: Path,
    model: str | None,
    index: Path,
    device: str,
    index_kind: str,
    recall_target: float | None,
    overfetch: int,
    batch_size: int,
    lock_timeout: float,
    ray_address: str | None,
    shards: int | None,
    reranker: Path | None,
    force: bool,
    hybrid: bool | None,
    question_keys: bool,
    passage_words: int | str,
    adapt: bool,
) -> None:
    """Encode the answers of CORPUS (JSONL) and save an index.

    The corpus is read a chunk at a time (memory grows with the vectors and the index, not
    with the text). An index already at --index is replaced only with --force, and only once
    the new one is complete. With --adapt the model is first adapted to the corpus (as
    ``qaindex train`` does) and the adapted model is stored in the index.
    """
    if shards is not None and (reranker is not None or force):
        raise click.UsageError("--shards builds a new shard set: --reranker and --force do not apply to it")
    if _shard_set(index):
        raise click.ClickException(f"{index}: holds a shard set (build --shards); choose another --index, or remove it")
    if shards is None:  # (a shard set's build refuses a directory that is not new or empty itself)
        check_writable(index)  # before the build: a folder qaindex did not write is refused at once
    if not force and shards is None:
        refuse_existing_index(index)
    options: dict[str, Any] = {
        "model": model,
        "device": device,
        "index_kind": index_kind,
        "overfetch": overfetch,
        "recall": recall_target,
        "reranker": reranker,
        "hybrid": hybrid,
        "question_keys": question_keys,
        "passage_words": passage_words,
    }
    if shards is not None:
        options["shards"] = shards
    if not adapt:
        _build(corpus, index, options, batch_size=batch_size, lock_timeout=lock_timeout, ray=ray_address, force=force)
        return
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="qaindex-adapt-") as tmp:  # the index keeps its own copy
        options["model"] = _adapted_model(corpus, model, Path(tmp) / "model", device)
        _build(corpus, index, options, batch_size=batch_size, lock_timeout=lock_timeout, ray=ray_address, force=force)
    click.echo(f"adapted and indexed in {time.perf_counter() - start:.2f} s")


def _adapted_model(corpus: Path, model: str | None, out: Path, device: str) -> str:
    """``model`` adapted to ``corpus`` and written to ``out`` (:func:`qaindex.cli.train.adapt_to_corpus`)."""
    try:
        from .train import adapt_to_corpus
    except ImportError:
        raise MissingDependencyError(f"build --adapt trains: {torch_extra_hint('train')}") from None
    report = adapt_to_corpus(corpus, out, start=model, device=device, log=lambda m: click.echo(m, err=True))
    click.echo(f"adapted:    {report['mode']}; kept epoch {report['kept_epoch']}: {report['why']}")
    return str(out)


def _build(
    corpus: Path,
    index: Path,
    options: dict[str, Any],
    *,
    batch_size: int,
    lock_timeout: float,
    ray: str | None,
    force: bool,
) -> None:
    """Build, save and report the index (the ``build`` command's work, given its options)."""
    start = time.perf_counter()
    if options.get("shards") is not None:
        _build_shards(corpus, index, options, batch_size=batch_size, ray=ray)
        return
    if ray is not None:
        from ..indexing.distributed import build_on_ray

        ranker = build_on_ray(corpus, address=ray, batch_size=batch_size, **options)
    else:
        ranker = Ranker.build(corpus, batch_size=batch_size, progress=True, **options)
    ranker.save(index, overwrite=force, lock_timeout=lock_timeout)
    seconds = time.perf_counter() - start
    info = ranker.info()
    click.echo(
        f"indexed {plural(info['answers'], 'answer')} into {index}: dimension {info['dimension']}, "
        f"{info['index']['kind']} index, model {info['model']['name']}, "
        f"{_devices_line(info)}, {seconds:.2f} s"
    )
    if info["hybrid"] is not None:
        click.echo(f"hybrid:     {hybrid_line(info['hybrid'])}")
    if info["keys"] is not None:
        click.echo(f"keys:       {_keys_line(info['keys'])}")
    if ranker.build_report is not None and ranker.build_report.get("cuts") is not None:
        click.echo(f"answers:    {cut_line(ranker.build_report['cuts'])}")
    if info["near_centre"] is not None and info["near_centre"]["count"]:
        click.echo(_near_centre_line(info["near_centre"]))
    if "tuning" in info["index"]:
        click.echo(_tuning_line(info["index"]["tuning"]))


def _shard_set(index: Path) -> bool:
    """Whether ``index`` is a shard set (``build --shards``: its ``shards.json``)."""
    return (index / "shards.json").is_file()


def _build_shards(corpus: Path, index: Path, options: dict[str, Any], *, batch_size: int, ray: str | None) -> None:
    """Build and report a shard set (``build --shards``)."""
    from ..indexing.sharding import build_shards
    from ..sharded import ShardedRanker

    start = time.perf_counter()
    options = {k: v for k, v in options.items() if k != "reranker"}
    build_shards(corpus, index, ray=ray, batch_size=batch_size, **options)
    seconds = time.perf_counter() - start
    sharded = ShardedRanker.load(index, device=options["device"], verify=False)
    info = sharded.info()
    sharded.close()
    sizes = ", ".join(f"{e['answers']:,}" for e in info["shards"])
    click.echo(
        f"indexed {plural(info['answers'], 'answer')} into {index} in {len(info['shards'])} shards ({sizes}): "
        f"model {info['model']}, hybrid {'on' if info['hybrid'] else 'off'}, {seconds:.2f} s"
    )


@main.command()
@click.argument("question")
@index_option
@click.option("-k", "k", type=click.IntRange(min=1), default=10, show_default=True, help="Number of answers to show.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object per question.")
@device_option()
@click.option(
    "--rerank",
    type=click.Path(path_type=Path, file_okay=False),
    default=None,
    help="Rerank the first stage's candidates with this reranker model directory (default: the one "
    "stored in the index by build --reranker, if any); scores shown are then the reranker's.",
)
@click.option(
    "--rerank-depth",
    type=click.IntRange(min=1),
    default=None,
    help="First-stage candidates to rerank (default 50, at least -k).",
)
@click.option("--no-rerank", is_flag=True, help="Ignore the index's stored reranker: first stage only.")
@click.option(
    "--hybrid/--no-hybrid",
    default=None,
    help="Fuse dense and BM25 rankings (the index must be built with --hybrid), or search dense only "
    "(default: hybrid when the index has a lexical index).",
)
@click.option(
    "--min-score",
    type=click.FloatRange(min=0.0, max=1.0),
    default=None,
    help="Drop answers whose score (estimated probability of relevance, docs/scores.md) is below this.",
)
@click.option(
    "--where",
    "where",
    multiple=True,
    metavar="FIELD=VALUE|JSON",
    callback=lambda ctx, param, value: _where(value),
    help="Only answers whose metadata FIELD (or id) equals VALUE (JSON or text); repeat for more fields "
    "(all must match) or for alternatives of one field. A JSON object is a whole filter with operators "
    """($in, $ne, $gt, $lt, $and, $or, ... docs/filters.md), e.g. '{"price": {"$lt": 10}}'.""",
)
@click.option(
    "--explain",
    is_flag=True,
    help="Show why each answer has its rank: the model's score and rank, BM25's score, rank and matched "
    "terms, the fused value and which key matched.",
)
def search(
    question: str,
    index: Path,
    k: int,
    as_json: bool,
    device: str,
    rerank: Path | None,
    rerank_depth: int | None,
    no_rerank: bool,
    hybrid: bool | None,
    min_score: float | None,
    where: dict[str, Any] | None,
    explain: bool,
) -> None:
    """Show the best answers for QUESTION ('-' reads one question per line from stdin)."""
    if question == "-":
        raw = sys.stdin.buffer.read() if hasattr(sys.stdin, "buffer") else sys.stdin.read().encode("utf-8")
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise click.ClickException(
                f"stdin: not valid UTF-8 (byte 0x{raw[exc.start]:02x} at offset {exc.start}); send UTF-8 text"
            ) from None
        questions = [line.rstrip("\r") for line in text.split("\n") if line.strip()]
        if not questions:
            raise click.ClickException("no questions on stdin; give one question per line")
    else:
        questions = [question]
    if rerank is not None and no_rerank:
        raise click.UsageError("--rerank and --no-rerank contradict each other; pass one of them")
    if _shard_set(index):
        if rerank is not None or rerank_depth is not None:
            raise click.UsageError("a shard set has no reranking stage: drop --rerank and --rerank-depth")
        _search_shards(questions, index, k, as_json, device, hybrid, min_score, where, explain)
        return
    ranker = _load_logged(index, device, verify="lazy")  # one process per search: verify what it reads
    stage = False if no_rerank else (Reranker.load(rerank, device=device) if rerank is not None else None)
    options: dict[str, Any] = {"rerank": stage, "depth": rerank_depth, "hybrid": hybrid}
    options.update(min_score=min_score, where=where, explain=explain)
    step = ranker.plan(k, **options).questions_per_call  # chunks within the memory budget
    started = time.perf_counter()
    for start in range(0, len(questions), step):
        part = questions[start : start + step]
        results = ranker.search_batch(part, k, **options)
        _print_hits(part, results, as_json, len(questions), _no_results(min_score, where))
    _log.info("searched %d question(s), k=%d, in %.2f ms", len(questions), k, (time.perf_counter() - started) * 1000)


def _search_shards(
    questions: list[str],
    index: Path,
    k: int,
    as_json: bool,
    device: str,
    hybrid: bool | None,
    min_score: float | None,
    where: dict[str, Any] | None,
    explain: bool,
) -> None:
    """``search`` of a shard set: every shard in a thread of this process."""
    from ..sharded import ShardedRanker

    sharded = ShardedRanker.load(index, device=device, verify="lazy")
    try:
        options: dict[str, Any] = {"hybrid": hybrid, "min_score": min_score, "where": where, "explain": explain}
        for start in range(0, len(questions), 256):
            part = questions[start : start + 256]
            _print_hits(
                part, sharded.search_batch(part, k, **options), as_json, len(questions), _no_results(min_score, where)
            )
    finally:
        sharded.close()


def _print_hits(questions: list[str], results: list[list[Hit]], as_json: bool, total: int, empty: str) -> None:
    for q, hits in zip(questions, results, strict=True):
        if as_json:
            click.echo(json.dumps({"question": q, "hits": [h.to_json() for h in hits]}, ensure_ascii=False))
        else:
            if total > 1:
                click.echo(f"Q: {q}")
            click.echo(_table(hits) if hits else empty)


_log = logging.getLogger("qaindex.cli")


def _load_logged(index: Path, device: str, verify: bool | str = True) -> Ranker:
    """:meth:`Ranker.load`, logging what was loaded and how long it took (shown by ``qaindex -v``)."""
    started = time.perf_counter()
    ranker = Ranker.load(index, device=device, verify=verify)
    _log.info(
        "loaded %s (%d answers, model %s) in %.1f ms",
        index,
        len(ranker),
        ranker.model.name,
        (time.perf_counter() - started) * 1000,
    )
    return ranker


def _where(items: tuple[str, ...]) -> dict[str, Any] | None:
    """``--where`` options as a ``where`` mapping (a malformed one is a usage error)."""
    try:
        return filters.parse_where_options(items)
    except QAIndexError as exc:
        raise click.BadParameter(str(exc)) from None


def _table(hits: list[Hit]) -> str:
    """Rank, score, id, the metadata (``key=value``, cut to 32 characters; only when a hit has
    some) and the answer cut to the terminal's width; ``--json`` has every field, distance
    included."""
    width = max(60, min(160, shutil.get_terminal_size((100, 20)).columns))
    ids = [str(h.id) for h in hits]
    id_w = max([2, *map(len, ids)])  # ids are never cut: they must paste into `qaindex remove`
    metas = [_cut(" ".join(f"{k}={_value(v)}" for k, v in h.metadata.items()), 32) for h in hits]
    meta_w = max(map(len, metas), default=0)
    head = f"{'#':>2}  {'score':>6}  {'id':<{id_w}}  " + (f"{'metadata':<{meta_w}}  " if meta_w else "") + "answer"
    lines = [head]
    room = max(20, width - len(head) + len("answer"))
    for rank, (h, ident, meta) in enumerate(zip(hits, ids, metas, strict=True), start=1):
        cells = f"{rank:>2}  {h.score:>6.4f}  {ident:<{id_w}}  " + (f"{meta:<{meta_w}}  " if meta_w else "")
        lines.append(cells + _cut(" ".join(h.answer.split()), room))
        if h.explanation is not None:
            lines.append(f"{'':>2}  {h.explanation.line()}")
    return "\n".join(lines)


def _cut(text: str, room: int) -> str:
    return text if len(text) <= room else text[: room - 1] + "…"


def _value(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _no_results(min_score: float | None, where: dict[str, Any] | None) -> str:
    """What an empty result says instead of a bare table header."""
    if min_score is not None:
        among = " matching --where" if where else ""
        return f"no answer{among} with a score of at least {min_score:g} (--min-score)"
    return "no answer matches --where" if where else "no results"


def plural(count: int, noun: str) -> str:
    """``count`` and ``noun``, in the plural unless ``count`` is 1.

    Example
    -------
    >>> plural(1, "answer"), plural(2, "answer"), plural(0, "answer")
    ('1 answer', '2 answers', '0 answers')
    """
    return f"{count:,} {noun}" if count == 1 else f"{count:,} {noun}s"


def _near_centre_line(near: dict[str, Any]) -> str:
    line = (
        f"{plural(near['count'], 'answer')} near the ball's centre (distance from it below "
        f"{near['threshold']:.2f}; the median answer's is {near['median_origin_distance']:.2f})"
    )
    if near["hub_risk"] and near["count"]:
        return (
            f"warning: {line}; this model ranks by plain Poincaré distance, so they can be the top hit "
            f"of every question: retrain it with qaindex train (relative ranking), or re-export its scorer "
            f"with qaindex_export.exporting.onnx_export.set_ranking(MODEL_DIR, 'relative')"
        )
    if near["ranking"] == "distance" or not near["count"]:
        return line
    return line + "; relative ranking scores the centre worst, so they are not hubs"


def _devices_line(info: dict[str, Any]) -> str:
    return devices_line(info["devices"])


@main.command()
@index_option
@device_option()
@click.option(
    "--recall", is_flag=True, help="Measure recall@k of the coarse stage and of the pipeline against exact search."
)
@click.option("-k", "k", type=click.IntRange(min=1), default=10, show_default=True, help="k for --recall.")
@click.option(
    "--sample", type=click.IntRange(min=1), default=200, show_default=True, help="Questions sampled for --recall."
)
@click.option(
    "--verify",
    is_flag=True,
    help="Read the whole index now: the SHA-256 of every file and every record and vector checked "
    "(a plain load checks each part as it is read).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the information as one JSON object.")
def info(index: Path, device: str, recall: bool, k: int, sample: int, verify: bool, as_json: bool) -> None:
    """Describe an index: model, counts, index kind, devices actually used."""
    if _shard_set(index):  # its shards are indexes `info` describes one by one
        from ..sharded import ShardedRanker

        sharded = ShardedRanker.load(index, device=device, verify="full" if verify else "lazy")
        data = sharded.info()
        sharded.close()
        if as_json:
            click.echo(json.dumps(data, ensure_ascii=False))
            return
        sizes = ", ".join(f"{e['directory']} {e['answers']:,}" for e in data["shards"])
        click.echo(
            f"shard set:  {data['path']}\nanswers:    {data['answers']}\nshards:     {sizes}\n"
            f"model:      {data['model']}\nhybrid:     {'on' if data['hybrid'] else 'off'}"
        )
        return
    ranker = _load_logged(index, device, verify="full" if verify else "lazy")  # info reads every row anyway
    data = ranker.info()
    data["orphans"] = orphan_summary(index)
    if verify:
        data["verified"] = True
    if recall:
        data["recall"] = ranker.recall(k, sample=sample)
    if as_json:
        click.echo(json.dumps(data, ensure_ascii=False))
        return
    model = data["model"]
    params = model["parameters"]
    lines = [
        f"index:      {data['path']}",
        f"answers:    {data['answers']}",
        f"model:      {model['name']} ({model['kind']}, {data['geometry']} geometry, dimension {data['dimension']}"
        + (f", {params['trainable']:,} trainable parameters" if "trainable" in params else "")
        + ")",
        f"coarse:     {data['index']['kind']}"
        + (f" {json.dumps(data['index']['params'])}" if data["index"]["params"] else "")
        + f" (over-fetch {data['index']['overfetch']})",
        f"devices:    {_devices_line(data)}",
        f"            why: onnxruntime: {data['devices']['why']['onnxruntime']}; "
        f"faiss: {data['devices']['why']['faiss']}",
        f"created:    {data['created']}",
    ]
    if data["near_centre"] is not None:
        lines.append(f"centre:     {_near_centre_line(data['near_centre'])}")
    if "tuning" in data["index"]:
        lines.append(f"tuning:     {_tuning_line(data['index']['tuning'])}")
    if data["orphans"]["snapshots"]:
        lines.append(f"orphans:    {orphans_line(data['orphans'])}")
    lines.append(f"hybrid:     {hybrid_line(data['hybrid'])}")
    lines.append(f"keys:       {_keys_line(data['keys'])}")
    lines.append(f"scores:     {calibration_line(data['calibration'])}")
    if verify:
        lines.append("verified:   every file matches its checksum; every record and vector checked")
    if recall:
        r = data["recall"]
        lines.append(
            f"recall@{r['k']}:  {r['recall']:.4f} (coarse stage {r['coarse_recall']:.4f}, "
            f"{r['candidates']} candidates, {r['queries']} {r['source']})"
        )
    click.echo("\n".join(lines))


@main.command()
@click.argument("corpus", type=click.Path(path_type=Path, dir_okay=False))
@index_option
@device_option()
@lock_timeout_option
@click.option(
    "--upsert",
    is_flag=True,
    help="Replace the answers whose id is already in the index instead of refusing them (every answer "
    "of CORPUS then needs an id).",
)
def add(corpus: Path, index: Path, device: str, lock_timeout: float, upsert: bool) -> None:
    """Add the answers of CORPUS (JSONL, new ids only; with --upsert, new or replacing) to an index.

    All or nothing: an error in any answer leaves the index unchanged.
    """
    with Ranker.edit(index, device=device, threads=None, lock_timeout=lock_timeout) as ranker:
        before = len(ranker)
        written = ranker.upsert(corpus) if upsert else ranker.add(corpus)
    added = len(ranker) - before
    replaced = f", replaced {plural(written - added, 'answer')}" if upsert else ""
    click.echo(f"added {plural(added, 'answer')}{replaced}; {len(ranker):,} in {index}")


@main.command()
@click.argument("ids", nargs=-1, required=True)
@index_option
@lock_timeout_option
def remove(ids: tuple[str, ...], index: Path, lock_timeout: float) -> None:
    """Remove the answers with these IDS from an index (integer-looking ids match integer ids)."""
    with Ranker.edit(index, device="cpu", threads=1, lock_timeout=lock_timeout) as ranker:
        removed = ranker.remove(ids)
    click.echo(f"removed {plural(removed, 'answer')}; {len(ranker):,} left in {index}")


main.add_command(eval_command)
main.add_command(gc_command)
main.add_command(inspect_command)
main.add_command(export_model_command)
main.add_command(calibrate_command)

if __name__ == "__main__":  # pragma: no cover
    main()


def _keys_line(keys: dict[str, Any] | None) -> str:
    """One line on the stored questions and passages indexed as search keys (:mod:`qaindex.key_index`)."""
    if keys is None:
        return "none (answers only; build without --no-question-keys to search the stored questions)"
    questions = keys.get("stored_questions", keys["count"])
    passages = ""
    if keys.get("passages"):
        words = keys["passages"]["words"]
        count = plural(keys.get("passage_keys", 0), "passage")
        passages = f" and {count} of {words} words (of the answers over {words})"
    return f"{plural(questions, 'stored question')}{passages}, each mapping to its record" + (
        ", with BM25" if keys["lexical"] else ""
    )


def _tuning_line(t: dict[str, Any]) -> str:
    """One line on the build-time recall tuning (:mod:`qaindex.indexing.tuning`)."""
    if t.get("param") is None:
        return f"recall@{t.get('k')} {t['recall']:.4f} at build time (exact index; target {t['target']:.4f})"
    verdict = "reached" if t.get("reached") else "NOT reached: the cheapest breadth near the best recall measured"
    ceiling = t.get("ceiling")
    if not t.get("reached") and isinstance(ceiling, int | float) and ceiling < t["target"]:
        verdict += f", {ceiling:.4f} searching every answer"
    return (
        f"{t.get('param')}={t.get('value')} tuned to recall@{t.get('k')} {t['recall']:.4f} "
        f"(target {t['target']:.4f} {verdict}; {t.get('queries')} {t.get('source', 'queries')})"
    )

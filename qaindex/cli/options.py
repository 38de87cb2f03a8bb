"""Click options shared by the ``qaindex`` commands (one definition, one help text)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from ..devices import DEVICES
from ..store.ownership import existing_index

F = TypeVar("F", bound=Callable[..., Any])
DEFAULT_INDEX = "qaindex-index"


def index_option(f: F) -> F:
    """``--index DIR`` (default ``./qaindex-index``, or ``QAINDEX_INDEX``)."""
    return click.option(
        "--index",
        "index",
        default=DEFAULT_INDEX,
        envvar="QAINDEX_INDEX",
        show_default=True,
        type=click.Path(path_type=Path, file_okay=False),
        help="Index directory (or set QAINDEX_INDEX).",
    )(f)


def torch_extra_hint(extras: str) -> str:
    """How to install the extras a torch command needs (torch pinned to the CPU build the tests use).

    Example
    -------
    >>> torch_extra_hint("train")
    "pip install 'qaindex[train]' (and torch==2.13.0 for the CPU build)"
    """
    return f"pip install 'qaindex[{extras}]' (and torch==2.13.0 for the CPU build)"


def device_option(
    help: str = "Where to run: auto uses CUDA (onnxruntime and FAISS) only when it really works.",
) -> Callable[[F], F]:
    """``--device auto|cpu|cuda``."""
    return click.option("--device", type=click.Choice(DEVICES), default="auto", show_default=True, help=help)


def batch_size_option(help: str) -> Callable[[F], F]:
    """``--batch-size N`` (default 256)."""
    return click.option("--batch-size", type=click.IntRange(min=1), default=256, show_default=True, help=help)


class Timeout(click.ParamType):  # type: ignore[type-arg]
    """Seconds (a non-negative number), or ``inf`` / ``none`` / ``forever`` to wait as long as it takes.

    Checked when the command line is parsed, before any work (:func:`qaindex.store.locking.check_timeout`).
    """

    name = "seconds"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> float:
        from ..errors import QAIndexError
        from ..store.locking import check_timeout

        if isinstance(value, int | float):
            number: Any = value
        else:
            text = str(value).strip().lower()
            if text in ("inf", "infinity", "none", "forever"):
                return float("inf")
            try:
                number = float(text)
            except ValueError:
                self.fail(f"{value!r} is not a number of seconds (or inf to wait forever)", param, ctx)
        try:
            return check_timeout(number)
        except QAIndexError:
            self.fail(f"{value!r} is not a non-negative number of seconds (or inf to wait forever)", param, ctx)


class PassageWords(click.ParamType):  # type: ignore[type-arg]
    """``auto``, 0 or a number of words per passage key (:func:`qaindex.key_index.choose_passage_words`)."""

    name = "words"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int | str:
        from ..errors import QAIndexError
        from ..key_index import MIN_PASSAGE_WORDS, choose_passage_words

        text = str(value).strip().lower()
        try:
            words: int | str = text if text == "auto" else int(text)
            choose_passage_words(words, static_encoder=False)
        except (ValueError, QAIndexError):
            self.fail(f"{value!r} is not 'auto', 0 or a number of words of at least {MIN_PASSAGE_WORDS}", param, ctx)
        return words


def refuse_existing_index(index: Path) -> None:
    """Refuse to build over an index that is already there (``qaindex build`` without ``--force``).

    Raises :class:`click.ClickException` (exit 1) naming the index, its size and the way out;
    ``Ranker.save`` refuses the same way without ``overwrite=True``.
    """
    held = existing_index(index)
    if held is not None:
        raise click.ClickException(
            f"{index} already holds {held}; pass --force to replace it, or add answers to it with `qaindex add`"
        )

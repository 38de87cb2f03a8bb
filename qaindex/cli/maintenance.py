"""``qaindex gc``: remove orphan snapshots and leftovers of interrupted saves from an index."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from ..store.diskspace import describe_size
from ..store.locking import DEFAULT_LOCK_TIMEOUT
from ..store.ownership import collect_garbage
from .options import Timeout, index_option

__all__ = ["gc_command", "orphans_line"]


def orphans_line(orphans: dict[str, Any]) -> str:
    """What ``qaindex info`` says about orphan snapshots.

    Example
    -------
    >>> orphans_line({"snapshots": 1, "bytes": 2048})
    '1 complete snapshot (2.0 KiB) that the index does not use; remove it with `qaindex gc`'
    """
    n = orphans["snapshots"]
    what = "1 complete snapshot" if n == 1 else f"{n} complete snapshots"
    them = "it" if n == 1 else "them"
    return f"{what} ({describe_size(orphans['bytes'])}) that the index does not use; remove {them} with `qaindex gc`"


@click.command("gc")
@index_option
@click.option(
    "--lock-timeout",
    type=Timeout(),
    default=DEFAULT_LOCK_TIMEOUT,
    show_default=True,
    help="Seconds to wait for another writer of the same index before giving up (inf: wait as long as it takes).",
)
def gc_command(index: Path, lock_timeout: float) -> None:
    """Remove orphan snapshots and leftovers of interrupted saves (only what qaindex wrote)."""
    report = collect_garbage(index, lock_timeout=lock_timeout)
    if not report.removed:
        click.echo(f"nothing to remove in {index}")
        return
    n = len(report.removed)
    click.echo(f"removed {n} leftover{'' if n == 1 else 's'} ({describe_size(report.bytes)}) from {index}")

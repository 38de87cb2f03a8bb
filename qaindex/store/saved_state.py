"""Saving an index without losing another writer's update: what a Ranker remembers of disk.

A :class:`SavedState` belongs to one :class:`~qaindex.Ranker`. It knows which snapshot each
index path held when the Ranker last loaded or saved it (a save refuses to replace a snapshot
some other writer committed since), which snapshot the Ranker serves (for ``verify``), and
where the model and reranker files are copied from (a save deletes older snapshots, which may
be where they were loaded from). :meth:`SavedState.save_locked` is the save itself, run under
the index's writer lock (:mod:`.locking`): snapshot written (:func:`.index_format.write_snapshot`),
manifest committed (:func:`.index_format.commit_manifest`), the replaced snapshot removed
(:mod:`.ownership`).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import IndexChangedError, IndexFormatError, QAIndexError
from ..model import Model
from ..reranker import Reranker
from ..text.lexical import LexicalIndex
from ..vector_index import CoarseIndex
from .atomic_files import verify_files
from .index_format import commit_manifest, new_manifest, read_index_manifest, write_snapshot
from .keys import KeyIndex
from .locking import index_lock
from .ownership import (
    check_writable,
    current_snapshot,
    existing_index,
    missing_parents,
    remove_empty,
    remove_garbage,
)
from .records import RecordStore

__all__ = ["SavedState"]

_log = logging.getLogger("qaindex.ranker")


def _current(root: Path) -> str | None:
    """The snapshot ``root``'s manifest names now (None: no index there)."""
    if not (root / "manifest.json").exists():
        return None
    try:
        return str(read_index_manifest(root)["snapshot"])
    except QAIndexError:
        return "(unreadable)"


class SavedState:
    """What one Ranker remembers of the index directories it loaded from and saved to."""

    def __init__(self, model_directory: Path, path: Path | None = None, snapshot: str | None = None) -> None:
        # the snapshot each index path held when this Ranker last loaded or saved it
        self.seen: dict[str, str] = {}
        # the snapshot this Ranker serves and its files table, for verify()
        self.served: tuple[str, dict[str, Any]] | None = None
        # where a save copies the model's files from: the model's own directory until this
        # Ranker saves, then its latest snapshot's copy. Per Ranker: a Model may be shared.
        self.model_source = model_directory
        self.reranker_source: tuple[Reranker, Path] | None = None  # its copy in the last saved snapshot
        if path is not None and snapshot is not None:
            self.seen[os.path.realpath(path)] = snapshot

    def _relocate_model(self, root: Path, model: Model) -> None:
        """Where to copy the model from when the last source is gone (its snapshot was deleted):
        the model's own directory if it still exists, else the identical model copy of the
        index at ``root``, when there is one."""
        if (self.model_source / "manifest.json").is_file():
            return
        if (model.directory / "manifest.json").is_file():  # the directory the model came from
            self.model_source = model.directory
            return
        with contextlib.suppress(QAIndexError, OSError, ValueError):
            current = root / read_index_manifest(root)["snapshot"] / "model"
            theirs = json.loads((current / "manifest.json").read_text(encoding="utf-8"))
            if theirs == model.manifest:
                self.model_source = current

    def save(self, root: Path, *, lock_timeout: float | None, **pieces: Any) -> None:
        """Save under ``root``'s writer lock (:meth:`save_locked`); a failed save leaves no empty
        directory behind."""
        created = missing_parents(root)
        try:
            with index_lock(root, timeout=lock_timeout):
                self.save_locked(root, **pieces)
        except BaseException:
            remove_empty(created)
            raise

    def save_locked(
        self,
        root: Path,
        *,
        overwrite: bool,
        model: Model,
        records: RecordStore,
        vectors: np.ndarray,
        coarse: CoarseIndex,
        reranker: Reranker | None,
        lexical: LexicalIndex | None,
        created: str,
        keys: KeyIndex | None = None,
        requested: str,
        overfetch: int,
    ) -> None:
        """Write a snapshot of these pieces to ``root`` and commit it (the writer lock is held)."""
        previous = current_snapshot(check_writable(root))  # again, under the lock
        key = os.path.realpath(root)
        seen = self.seen.get(key)
        current = _current(root)
        held = None if overwrite or seen is not None else existing_index(root)
        if held is not None:  # the rule of `qaindex build` without --force
            raise IndexChangedError(
                f"{root} already holds {held} that this Ranker did not load; pass overwrite=True to replace "
                "it, or add answers to it with Ranker.edit"
            )
        if not overwrite and seen is not None and current is not None and current != seen:
            raise IndexChangedError(
                f"{root}: another writer changed this index since it was loaded (snapshot {seen} is now "
                f"{current}); saving would drop their update. Load it again and redo the change (use "
                "Ranker.edit for read-modify-write under the lock), or pass overwrite=True"
            )
        # orphans and debris of interrupted saves go first: their space is free for this one
        remove_garbage(root, keep=previous)
        self._relocate_model(root, model)
        rr_source = None
        if reranker is not None:  # its copy in the last saved snapshot, or (first save, or gone) its own directory
            saved = self.reranker_source
            fresh = saved is not None and saved[0] is reranker and (saved[1] / "manifest.json").is_file()
            rr_source = (saved[1] if saved is not None and fresh else reranker.directory, reranker.manifest)
        snap_name, files = write_snapshot(
            root,
            records,
            vectors,
            coarse,
            model,
            model_source=self.model_source,
            reranker=rr_source,
            lexical=lexical,
            keys=keys,
        )
        manifest = new_manifest(
            snapshot=snap_name,
            files=files,
            count=len(records),
            model=model,
            coarse=coarse,
            requested=requested,
            overfetch=overfetch,
            created=created,
            reranker=reranker,
            lexical=lexical is not None,
            keys=keys,
        )
        commit_manifest(root, manifest, model, self.model_source)
        # The new snapshot is live; remove the one it replaced (only qaindex's: qaindex.store.ownership).
        remove_garbage(root, keep=snap_name, previous=previous)
        self.seen[key] = snap_name
        self.served = (snap_name, files)
        # the old snapshot (maybe the model's source) is gone: later saves copy the new one
        self.model_source = root / snap_name / "model"
        if reranker is not None:
            self.reranker_source = (reranker, root / snap_name / "reranker")
        _log.info("saved %d answers to %s (snapshot %s)", len(records), root, snap_name)

    def vectors_source(self, path: Path | None) -> Path | str:
        """The served ``vectors.npy``, for error messages."""
        served = self.served
        return "the stored vectors" if path is None or served is None else path / served[0] / "vectors.npy"

    def verify(self, path: Path | None) -> None:
        """Check the size and SHA-256 of every file of the served snapshot (see ``Ranker.verify``)."""
        if path is None or self.served is None:
            raise QAIndexError("this index has not been saved; nothing to verify")
        name, files = self.served
        snap = path / name
        if not snap.is_dir():
            now = _current(path)
            raise IndexChangedError(
                f"{snap}: the snapshot this Ranker serves is gone (another writer replaced the index"
                + (f" with {now}" if now else "")
                + "); load the index again to verify what is on disk now"
            )
        verify_files(snap, files, error=IndexFormatError, what="index")

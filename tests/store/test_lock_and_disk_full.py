"""The writer lock never writes through a link, and every full-disk failure is a DiskFullError.

1. ``INDEX/.lock`` that is a symbolic link, a hard link, not a regular file or holding more
   than a pid is refused by every writer, and the file it names keeps its bytes.
2. Running out of space, inodes or file size anywhere in a save (numpy's arrays included,
   and the lock file) is a :class:`DiskFullError` that says which; no ``.lock`` is left behind.
"""

from __future__ import annotations

import errno
import hashlib
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from qaindex import IndexFormatError, QAIndexError, Ranker
from qaindex.cli import main
from qaindex.errors import DiskFullError
from qaindex.snapshot import write_snapshot
from qaindex.store.ownership import collect_garbage

THESIS = "Chapter 1. Hyperbolic retrieval\n" + "A paragraph that must survive.\n" * 200


def _tree(folder: Path) -> dict[str, str]:
    """Every entry below ``folder`` (links as links) with a digest of its bytes."""
    out = {}
    for path in sorted(folder.rglob("*")):
        rel = path.relative_to(folder).as_posix()
        if path.is_symlink():
            out[rel] = f"link to {os.readlink(path)}"
        else:
            out[rel] = "dir" if path.is_dir() else hashlib.sha256(path.read_bytes()).hexdigest()
    return out


@pytest.fixture()
def index(faq_model: Path, faq_file: Path, tmp_path: Path) -> Path:
    target = tmp_path / "ix"
    Ranker.build(faq_file, model=faq_model).save(target)
    return target


@pytest.fixture()
def thesis(tmp_path: Path) -> Path:
    path = tmp_path / "home" / "thesis.txt"
    path.parent.mkdir()
    path.write_text(THESIS, encoding="utf-8")
    return path


# -- 1. the lock file -------------------------------------------------------------------------
def _plant(lock: Path, thesis: Path, how: str) -> str:
    """Put ``how`` at ``lock``; return the exact message every writer must refuse it with."""
    if how == "symlink":
        lock.symlink_to(thesis)
        return (
            f"{lock}: a symbolic link, not a lock file qaindex wrote; qaindex never writes through a link: "
            "remove the link (not the file it points to) and retry"
        )
    if how == "hardlink":
        os.link(thesis, lock)
        return (
            f"{lock}: a file with 2 hard links, not a lock file qaindex wrote; qaindex never writes into a "
            f"file that has another name: remove {lock} (the file keeps its other name) and retry"
        )
    raise AssertionError(how)


def _cli(*args: str) -> Callable[[Path], str]:
    def run(index: Path) -> str:
        res = CliRunner().invoke(main, [*args, "--index", str(index)])
        assert res.exit_code == 1, res.output
        assert res.output.startswith("Error: ") and res.output.count("\n") == 1, res.output
        return res.output[len("Error: ") : -1]

    return run


def _api(action: Callable[[Path], Any]) -> Callable[[Path], str]:
    def run(index: Path) -> str:
        with pytest.raises(IndexFormatError) as err:
            action(index)
        return str(err.value)

    return run


def _edit(index: Path) -> None:
    with Ranker.edit(index) as ranker:
        ranker.remove(["no-such-id"])


WRITERS = {
    "cli remove": _cli("remove", "no-such-id"),
    "cli gc": _cli("gc"),
    "Ranker.save": _api(lambda index: Ranker.load(index).save(index)),
    "Ranker.edit": _api(_edit),
    "collect_garbage": _api(collect_garbage),
}


@pytest.mark.parametrize("how", ["symlink", "hardlink"])
@pytest.mark.parametrize("writer", list(WRITERS))
def test_a_linked_lock_file_is_refused_and_its_target_keeps_its_bytes(
    index: Path, thesis: Path, how: str, writer: str
) -> None:
    expected = _plant(index / ".lock", thesis, how)
    before = _tree(index)
    assert WRITERS[writer](index) == expected
    assert thesis.read_text(encoding="utf-8") == THESIS
    assert _tree(index) == before  # the link is left for the user; nothing else changed
    assert len(Ranker.load(index)) > 0


@pytest.mark.parametrize("how", ["symlink", "hardlink"])
def test_building_into_a_new_folder_holding_a_linked_lock_is_refused(
    faq_model: Path, faq_file: Path, tmp_path: Path, thesis: Path, how: str
) -> None:
    target = tmp_path / "new"
    target.mkdir()
    _plant(target / ".lock", thesis, how)
    res = CliRunner().invoke(main, ["build", str(faq_file), "--model", str(faq_model), "--index", str(target)])
    assert res.exit_code == 1
    assert res.output.startswith(f"Error: {target}: exists and is not a qaindex index (it holds '.lock', ")
    assert thesis.read_text(encoding="utf-8") == THESIS
    assert sorted(p.name for p in target.iterdir()) == [".lock"]


def test_a_dangling_symbolic_link_is_refused_and_creates_nothing(index: Path, tmp_path: Path) -> None:
    (index / ".lock").symlink_to(tmp_path / "created-by-the-attack")
    with pytest.raises(IndexFormatError, match=r"\.lock: a symbolic link, not a lock file qaindex wrote"):
        Ranker.load(index).save(index)
    assert not (tmp_path / "created-by-the-attack").exists()


@pytest.mark.parametrize(
    ("make", "what"),
    [
        (lambda lock: lock.mkdir(), "a directory"),
        (lambda lock: os.mkfifo(lock), "a named pipe"),
    ],
)
def test_a_lock_that_is_not_a_regular_file_is_refused(index: Path, make: Callable[[Path], None], what: str) -> None:
    lock = index / ".lock"
    make(lock)
    with pytest.raises(IndexFormatError) as err:
        Ranker.load(index).save(index)
    assert str(err.value) == f"{lock}: {what}, not a lock file qaindex wrote; remove it and retry"


def test_a_lock_file_holding_more_than_a_pid_is_never_truncated(index: Path) -> None:
    lock = index / ".lock"
    lock.write_text("my notes, saved here by mistake\n", encoding="utf-8")
    with pytest.raises(IndexFormatError) as err:
        Ranker.load(index).save(index)
    assert str(err.value) == (
        f"{lock}: a file that holds more than a process id, not a lock file qaindex wrote; "
        "qaindex never truncates it: move it away and retry"
    )
    assert lock.read_text(encoding="utf-8") == "my notes, saved here by mistake\n"


def test_the_lock_file_of_a_killed_writer_is_reused_and_removed(index: Path) -> None:
    lock = index / ".lock"
    lock.write_text("4194304\n", encoding="ascii")  # what a writer killed by SIGKILL leaves
    Ranker.load(index).save(index)
    assert not lock.exists() and not lock.is_symlink()


# -- 2. disk full, inodes, file size -------------------------------------------------------------
def test_a_lexical_index_over_the_file_size_limit_is_a_disk_full_error(faq_model: Path, tmp_path: Path) -> None:
    # answers of many distinct two-letter words: the BM25 arrays (4 bytes a term, twice) are the
    # largest files of the snapshot, so numpy's write is the first to hit the limit
    code = (
        "import itertools, resource, string, sys\n"
        "from qaindex import Ranker, QAIndexError\n"
        "words = [a + b for a, b in itertools.product(string.ascii_lowercase, repeat=2)]\n"
        "rows = [{'id': f'a{i}', 'answer': ' '.join(words[i % 7 :])} for i in range(120)]\n"
        "r = Ranker.build(rows, model=sys.argv[1], hybrid=True)\n"
        "resource.setrlimit(resource.RLIMIT_FSIZE, (260_000, resource.RLIM_INFINITY))\n"
        "try:\n"
        "    r.save(sys.argv[2])\n"
        "except QAIndexError as exc:\n"
        "    print(type(exc).__name__, exc)\n"
    )
    target = tmp_path / "limited"
    out = subprocess.run(
        [sys.executable, "-c", code, str(faq_model), str(target)], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout == (
        f"DiskFullError {target}: lexical of a new snapshot is larger than this process's file-size limit "
        "(253.9 KiB, `ulimit -f`); it needs about 1.2 MiB: raise the limit and retry\n"
    )  # the example in docs/reliability-guarantees.md
    assert not target.exists()


def test_a_failed_write_without_an_errno_on_a_full_disk_is_a_disk_full_error(
    index: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import qaindex.snapshot

    def tofile_like(path: Any, array: Any) -> None:
        raise OSError("4096 requested and 0 written")  # numpy's tofile: no errno

    monkeypatch.setattr(qaindex.snapshot, "save_array", tofile_like)
    monkeypatch.setattr(shutil, "disk_usage", lambda p: shutil._ntuple_diskusage(100, 100, 0))  # type: ignore[attr-defined]
    with pytest.raises(DiskFullError, match=rf"^{index}: no space left on the device while writing records\.offsets"):
        Ranker.load(index).save(index)


def _statvfs(free_bytes: int, free_inodes: int) -> Callable[[Any], os.statvfs_result]:
    """A file system of 4 GiB and 65,536 inodes with this much free."""
    blocks = free_bytes // 4096
    # bsize, frsize, blocks, bfree, bavail, files, ffree, favail, flag, namemax
    fields = (4096, 4096, 1 << 20, blocks, blocks, 1 << 16, free_inodes, free_inodes, 0, 255)
    return lambda path: os.statvfs_result(fields)


def _full_at_encoder_copy(monkeypatch: pytest.MonkeyPatch) -> None:
    """Copying the model's encoder.onnx into a snapshot fails with ENOSPC; other copies work."""
    real_copy = shutil.copyfile

    def full_copy(src: Any, dst: Any, **kwargs: Any) -> Any:
        if str(dst).endswith("encoder.onnx"):
            raise OSError(errno.ENOSPC, "No space left on device", str(dst))
        return real_copy(src, dst, **kwargs)

    monkeypatch.setattr(shutil, "copyfile", full_copy)


def test_out_of_inodes_is_not_reported_as_missing_bytes(
    index: Path, faq_model: Path, faq_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = _tree(index)
    _full_at_encoder_copy(monkeypatch)
    monkeypatch.setattr(os, "statvfs", _statvfs(free_bytes=int(81.7 * 2**20), free_inodes=0))
    with pytest.raises(DiskFullError) as err:
        Ranker.build(faq_file, model=faq_model).save(index, overwrite=True)
    assert str(err.value) == (
        f"{index}: no free inodes left on the device while writing model of a new snapshot (81.7 MiB free, but "
        "no room for another file); delete some files or write elsewhere"
    )
    assert _tree(index) == before


def test_with_free_inodes_a_full_disk_still_reports_bytes(index: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import qaindex.snapshot

    def full(path: Any, array: Any) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(qaindex.snapshot, "save_array", full)
    monkeypatch.setattr(os, "statvfs", _statvfs(free_bytes=8192, free_inodes=1000))
    with pytest.raises(
        DiskFullError, match=rf"^{index}: no space left on the device while writing .*, 8\.0 KiB free\)"
    ):
        Ranker.load(index).save(index)


def test_creating_the_lock_file_on_a_full_disk_is_a_disk_full_error(
    index: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_open = os.open

    def full_open(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        if os.fspath(path).endswith(".lock"):
            raise OSError(errno.ENOSPC, "No space left on device", os.fspath(path))
        return real_open(path, flags, *args, **kwargs)

    before = _tree(index)
    monkeypatch.setattr(os, "open", full_open)
    with pytest.raises(DiskFullError) as err:
        Ranker.load(index).save(index)
    assert str(err.value).startswith(
        f"{index}: no space left on the device while writing the index lock file .lock (this write needs about "
        "4.0 KiB, "
    )
    assert isinstance(err.value, QAIndexError)
    assert _tree(index) == before


def _full_pid_write(monkeypatch: pytest.MonkeyPatch) -> None:
    """A disk with an inode left but no block: the lock file is created, its pid cannot be written."""

    def full(fd: int, data: bytes, offset: int) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "pwrite", full)


def test_a_failed_first_build_on_a_full_disk_leaves_no_lock_and_no_folder(
    faq_model: Path, faq_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _full_pid_write(monkeypatch)
    _full_at_encoder_copy(monkeypatch)
    target = tmp_path / "new" / "ix"
    res = CliRunner().invoke(main, ["build", str(faq_file), "--model", str(faq_model), "--index", str(target)])
    assert res.exit_code == 1
    assert res.output.startswith(f"Error: {target}: no space left on the device while writing model")
    assert not (tmp_path / "new").exists()  # no empty .lock, so no folder either


def test_gc_frees_space_on_a_disk_too_full_for_the_lock_pid(index: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ranker = Ranker.load(index)
    orphan, _ = write_snapshot(index, ranker._records, ranker._vectors, ranker._coarse, ranker.model)
    _full_pid_write(monkeypatch)
    report = collect_garbage(index)
    assert report.removed == (orphan,)
    assert not (index / orphan).exists() and not (index / ".lock").exists()


def test_the_build_spool_over_the_file_size_limit_is_a_disk_full_error(faq_model: Path, tmp_path: Path) -> None:
    corpus = tmp_path / "big.jsonl"
    corpus.write_text(
        "".join(f'{{"id": "a{i}", "answer": "Refunds take {i} days to reach your card."}}\n' for i in range(3000)),
        encoding="utf-8",
    )
    spool = tmp_path / "spool"
    spool.mkdir()
    code = (
        "import resource, sys\n"
        "from qaindex import Ranker, QAIndexError\n"
        "resource.setrlimit(resource.RLIMIT_FSIZE, (60_000, resource.RLIM_INFINITY))\n"
        "try:\n"
        "    Ranker.build(sys.argv[1], model=sys.argv[2])\n"
        "except QAIndexError as exc:\n"
        "    print(type(exc).__name__, exc)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(corpus), str(faq_model)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "TMPDIR": str(spool)},
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith(
        f"DiskFullError {spool}: the build's temporary spool file (set TMPDIR to put it elsewhere) is larger than "
        "this process's file-size limit (58.6 KiB, `ulimit -f`); it needs about "
    ), out.stdout

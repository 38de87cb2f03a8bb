"""What qaindex may delete, how long it waits, and what it says when the disk is full.

A folder qaindex did not write is never modified; clean-up removes only qaindex's own
snapshots and debris (:mod:`qaindex.store.ownership`); timeouts take None / inf and are checked
before any work; a Ranker whose index was replaced verifies what it serves and fails a save
elsewhere without leaving an empty directory; disk-full and file-size errors name the
destination; orphan snapshots are reported by ``info`` and removed by ``gc``.
"""

from __future__ import annotations

import errno
import hashlib
import json
import math
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner
from helpers.onnx_models import make_model

from qaindex import IndexChangedError, IndexFormatError, ModelFormatError, QAIndexError, Ranker
from qaindex.cli import main
from qaindex.errors import DiskFullError
from qaindex.snapshot import write_snapshot
from qaindex.store.locking import index_lock
from qaindex.store.ownership import collect_garbage, orphan_snapshots

ROOT = Path(__file__).resolve().parents[2]


def _tree(folder: Path) -> dict[str, str]:
    """Every entry below ``folder`` with a digest of its bytes (directories as 'dir')."""
    out = {}
    for path in sorted(folder.rglob("*")):
        rel = path.relative_to(folder).as_posix()
        out[rel] = "dir" if path.is_dir() else hashlib.sha256(path.read_bytes()).hexdigest()
    return out


@pytest.fixture()
def index(faq_model: Path, faq_file: Path, tmp_path: Path) -> Path:
    target = tmp_path / "ix"
    Ranker.build(faq_file, model=faq_model).save(target)
    return target


def _user_folder(root: Path, manifest: str | None = '{"name": "my-web-app", "version": 3}') -> Path:
    """A user's folder: its own manifest.json, a data-backup/ and a folder named like a snapshot."""
    root.mkdir()
    if manifest is not None:
        (root / "manifest.json").write_text(manifest)
    (root / "data-backup").mkdir()
    (root / "data-backup" / "users.csv").write_text("id,name\n1,Ada\n")
    (root / "data-20240101T000000000000-1").mkdir()
    (root / "data-20240101T000000000000-1" / "dump.sql").write_text("select 1;")
    return root


# -- 1. never delete or overwrite what qaindex did not write --------------------------------------
def test_cli_build_refuses_a_folder_with_a_foreign_manifest_and_touches_nothing(
    faq_model: Path, faq_file: Path, tmp_path: Path
) -> None:
    app = _user_folder(tmp_path / "app")
    before = _tree(app)
    res = CliRunner().invoke(main, ["build", str(faq_file), "--model", str(faq_model), "--index", str(app)])
    assert res.exit_code == 1
    assert res.output == (
        f'Error: {app}: not a qaindex index (its manifest.json is not a qaindex manifest: its "format" is None, '
        "not 'qaindex-index' with a format_version); qaindex writes only into a new or empty directory or an "
        "existing qaindex index, and never deletes or overwrites files it did not write; choose another "
        "--index path\n"
    )
    assert _tree(app) == before  # no manifest overwritten, no folder deleted, no .lock left


@pytest.mark.parametrize(
    ("manifest", "why"),
    [
        (None, "it holds 'data-20240101T000000000000-1', which qaindex did not write"),
        ("not json at all", "its manifest.json is not a qaindex manifest: it is not JSON"),
        ('{"format": "qaindex-model", "format_version": 1}', "its \"format\" is 'qaindex-model'"),
        ('{"format": "qaindex-index"}', "not 'qaindex-index' with a format_version"),
    ],
)
def test_api_save_refuses_a_folder_qaindex_did_not_write(
    faq_model: Path, faq_file: Path, tmp_path: Path, manifest: str | None, why: str
) -> None:
    app = _user_folder(tmp_path / "app", manifest)
    before = _tree(app)
    ranker = Ranker.build(faq_file, model=faq_model)
    with pytest.raises(IndexFormatError, match=why.replace("(", r"\(").replace(")", r"\)")):
        ranker.save(app, overwrite=True)
    assert _tree(app) == before
    with pytest.raises(IndexFormatError):
        collect_garbage(app)
    assert _tree(app) == before


def test_a_lookalike_snapshot_folder_alone_is_refused(faq_model: Path, faq_file: Path, tmp_path: Path) -> None:
    folder = tmp_path / "out"
    (folder / "data-20240101T000000000000-1").mkdir(parents=True)
    with pytest.raises(IndexFormatError, match="which qaindex did not write"):
        Ranker.build(faq_file, model=faq_model).save(folder)
    assert [p.name for p in folder.iterdir()] == ["data-20240101T000000000000-1"]


def test_saves_into_an_index_keep_foreign_entries(index: Path) -> None:
    lookalike = index / "data-20240101T000000000000-1"
    lookalike.mkdir()
    (lookalike / "keep.txt").write_text("mine")
    (index / "data-backup").mkdir()
    for _ in range(2):
        Ranker.load(index).save(index)
    collect_garbage(index)
    assert (lookalike / "keep.txt").read_text() == "mine" and (index / "data-backup").is_dir()


def test_rebuilding_over_an_old_index_removes_its_unmarked_snapshot(index: Path, faq_model: Path) -> None:
    """Indexes written before the marker existed: the snapshot their manifest names is replaced."""
    manifest = json.loads((index / "manifest.json").read_text())
    old = index / manifest["snapshot"]
    (old / ".qaindex-snapshot").unlink()
    Ranker.build([{"id": 1, "answer": "Refunds are paid."}], model=faq_model).save(index, overwrite=True)
    assert not old.exists()
    assert len(Ranker.load(index)) == 1


# -- 2. timeouts: None / inf wait forever, checked before any work --------------------------------
@pytest.mark.parametrize("timeout", [None, math.inf, 1e308, 10**400])
def test_save_and_edit_accept_wait_forever(index: Path, timeout: Any) -> None:
    Ranker.load(index).save(index, lock_timeout=timeout)
    with Ranker.edit(index, lock_timeout=timeout) as ranker:
        ranker.configure(overfetch=7)
    assert Ranker.load(index).overfetch == 7
    assert collect_garbage(index, lock_timeout=timeout).removed == ()


def test_wait_forever_really_waits_for_the_holder(index: Path) -> None:
    held = threading.Event()

    def hold() -> None:
        with index_lock(index, timeout=5):
            held.set()
            time.sleep(0.5)

    thread = threading.Thread(target=hold)
    thread.start()
    held.wait(5)
    start = time.monotonic()
    Ranker.load(index).save(index, lock_timeout=math.inf)
    assert time.monotonic() - start >= 0.3
    thread.join()


@pytest.mark.parametrize("timeout", [-1, math.nan, "10", True, [1]])
def test_a_bad_timeout_fails_before_any_work(
    faq_model: Path, tmp_path: Path, index: Path, timeout: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    ranker = Ranker.load(index)
    fresh = tmp_path / "fresh"
    with pytest.raises(QAIndexError, match="lock timeout must be a non-negative number of seconds"):
        ranker.save(fresh, lock_timeout=timeout)
    assert not fresh.exists()

    def no_load(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("loaded before checking the timeout")

    monkeypatch.setattr(Ranker, "load", no_load)
    with pytest.raises(QAIndexError, match="lock timeout must be"), Ranker.edit(index, lock_timeout=timeout):
        pass


def test_cli_lock_timeout_inf_and_bad_values(faq_model: Path, faq_file: Path, tmp_path: Path) -> None:
    runner = CliRunner()
    target = tmp_path / "ix"
    for value in ("inf", "1e308", "none"):
        res = runner.invoke(
            main,
            [
                "build",
                str(faq_file),
                "--model",
                str(faq_model),
                "--index",
                str(target),
                "--lock-timeout",
                value,
                "--force",
            ],
        )
        assert res.exit_code == 0, res.output
    res = runner.invoke(main, ["add", str(faq_file), "--index", str(target), "--lock-timeout", "nan"])
    assert res.exit_code == 2
    assert "Invalid value for '--lock-timeout': 'nan' is not a non-negative number of seconds" in res.output
    res = runner.invoke(main, ["build", str(faq_file), "--index", str(tmp_path / "b"), "--lock-timeout", "-3"])
    assert res.exit_code == 2 and not (tmp_path / "b").exists()


# -- 5. a Ranker whose index another writer replaced ----------------------------------------------
@pytest.fixture()
def other_model(tmp_path: Path) -> Path:
    from conftest import FAQ, vocab_for

    vocab = vocab_for([r["answer"] for r in FAQ])
    emb = np.random.default_rng(9).normal(scale=0.15, size=(len(vocab), 6)).astype(np.float32)
    return make_model(tmp_path / "other-model", vocab, emb, name="other")


def test_replaced_index_save_elsewhere_fails_without_leaving_a_directory(
    index: Path, faq_file: Path, other_model: Path, tmp_path: Path
) -> None:
    ranker = Ranker.load(index)
    Ranker.build(faq_file, model=other_model).save(index, overwrite=True)  # another writer, another model
    target = tmp_path / "a" / "b"
    with pytest.raises(ModelFormatError, match="missing, so the model cannot be copied"):
        ranker.save(target)
    assert not (tmp_path / "a").exists()


def test_verify_checks_the_snapshot_served_not_the_new_one(index: Path, faq_file: Path, faq_model: Path) -> None:
    ranker = Ranker.load(index)
    served = json.loads((index / "manifest.json").read_text())["snapshot"]
    ranker.verify()
    Ranker.build(faq_file, model=faq_model).save(index, overwrite=True)  # replaces the snapshot on disk
    new = json.loads((index / "manifest.json").read_text())["snapshot"]
    with pytest.raises(IndexChangedError) as err:
        ranker.verify()
    assert str(err.value) == (
        f"{index / served}: the snapshot this Ranker serves is gone (another writer replaced the index with "
        f"{new}); load the index again to verify what is on disk now"
    )


def test_verify_checks_the_served_snapshot_files(index: Path) -> None:
    ranker = Ranker.load(index)
    snap = index / json.loads((index / "manifest.json").read_text())["snapshot"]
    manifest = json.loads((index / "manifest.json").read_text())
    # the manifest on disk is rewritten to vouch for a changed file: the served table still catches it
    with open(snap / "vectors.npy", "r+b") as handle:
        handle.seek(-1, os.SEEK_END)
        handle.write(b"\x01")
    from qaindex.store.atomic_files import file_entry
    from qaindex.store.index_format import manifest_checksum

    manifest["files"]["vectors.npy"] = file_entry(snap / "vectors.npy")
    manifest["checksum"] = manifest_checksum(manifest)
    (index / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(IndexFormatError, match=r"vectors\.npy: checksum does not match the manifest"):
        ranker.verify()


# -- 7. disk full, quota, file-size limit ---------------------------------------------------------
def test_disk_full_names_the_destination_not_the_source(
    index: Path, faq_model: Path, faq_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = _tree(index)
    real_copy = shutil.copyfile

    def full_copy(src: Any, dst: Any, **kwargs: Any) -> Any:
        if str(dst).endswith("encoder.onnx"):
            raise OSError(errno.ENOSPC, "No space left on device", str(src))  # as the kernel names it
        return real_copy(src, dst, **kwargs)

    monkeypatch.setattr(shutil, "copyfile", full_copy)
    with pytest.raises(DiskFullError) as err:
        Ranker.build(faq_file, model=faq_model).save(index, overwrite=True)
    message = str(err.value)
    assert message.startswith(f"{index}: no space left on the device while writing model of a new snapshot ")
    assert "this write needs about " in message and " free); free some space or write elsewhere" in message
    assert str(faq_model) not in message
    assert isinstance(err.value, QAIndexError) and isinstance(err.value, OSError)
    assert _tree(index) == before  # the previous index is untouched, no debris
    res = CliRunner().invoke(
        main, ["build", str(faq_file), "--model", str(faq_model), "--index", str(index), "--force"]
    )
    assert res.exit_code == 1 and res.output.count("\n") == 1
    assert res.output.startswith(f"Error: {index}: no space left on the device while writing model")


def test_faiss_write_failure_on_a_full_disk_is_a_disk_full_error(index: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from qaindex.vector_index import CoarseIndex

    def failing(self: Any, path: Any) -> None:
        raise RuntimeError("Error in faiss::FileIOWriter: fwrite failed")

    monkeypatch.setattr(CoarseIndex, "save", failing)
    monkeypatch.setattr(shutil, "disk_usage", lambda p: shutil._ntuple_diskusage(100, 100, 0))  # type: ignore[attr-defined]
    with pytest.raises(DiskFullError, match=rf"^{index}: no space left on the device while writing coarse.faiss"):
        Ranker.load(index).save(index)


def test_file_size_limit_names_the_destination_and_the_size(index: Path, tmp_path: Path) -> None:
    code = (
        "import resource, sys\n"
        "from qaindex import Ranker, QAIndexError\n"
        "r = Ranker.load(sys.argv[1])\n"
        "r.add([{'id': f'x{i}', 'answer': 'refund ' * 3} for i in range(3000)])\n"
        "resource.setrlimit(resource.RLIMIT_FSIZE, (60000, resource.RLIM_INFINITY))\n"
        "try:\n"
        "    r.save(sys.argv[2])\n"
        "except QAIndexError as exc:\n"
        "    print(type(exc).__name__, exc)\n"
    )
    target = tmp_path / "limited"
    out = subprocess.run(
        [sys.executable, "-c", code, str(index), str(target)], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith(f"DiskFullError {target}: ")
    assert "is larger than this process's file-size limit (58.6 KiB, `ulimit -f`); it needs about " in out.stdout
    assert not target.exists()


# -- 8. orphan snapshots: reported by info, removed by gc and the next save -----------------------
def _orphan(index: Path) -> str:
    """What a save killed between writing its snapshot and committing the manifest leaves."""
    ranker = Ranker.load(index)
    name, _ = write_snapshot(index, ranker._records, ranker._vectors, ranker._coarse, ranker.model)
    return name


def test_info_reports_orphans_and_gc_removes_only_them(index: Path) -> None:
    name = _orphan(index)
    lookalike = index / "data-20240101T000000000000-1"
    lookalike.mkdir()
    size = sum(p.stat().st_size for p in (index / name).rglob("*") if p.is_file())
    assert orphan_snapshots(index) == [(name, size)]
    runner = CliRunner()
    res = runner.invoke(main, ["info", "--index", str(index), "--json"])
    assert res.exit_code == 0
    assert json.loads(res.output)["orphans"] == {"snapshots": 1, "bytes": size, "names": [name]}
    res = runner.invoke(main, ["info", "--index", str(index)])
    assert "\norphans:    1 complete snapshot (" in res.output
    assert "that the index does not use; remove it with `qaindex gc`\n" in res.output
    res = runner.invoke(main, ["gc", "--index", str(index), "--lock-timeout", "inf"])
    assert res.exit_code == 0, res.output
    assert res.output.startswith("removed 1 leftover (") and res.output.endswith(f") from {index}\n")
    assert not (index / name).exists() and lookalike.is_dir()
    assert orphan_snapshots(index) == []
    Ranker.load(index).verify()
    res = runner.invoke(main, ["gc", "--index", str(index)])
    assert res.output == f"nothing to remove in {index}\n"


def test_the_next_write_removes_orphans(index: Path) -> None:
    name = _orphan(index)
    with Ranker.edit(index) as ranker:
        ranker.configure(overfetch=4)
    assert not (index / name).exists() and orphan_snapshots(index) == []


# -- 3. content checks on load ------------------------------------------------------------------
from tests.robustness import hostile_files, reliability  # noqa: E402

# case -> (file at fault, part of the message)
HOSTILE_EXPECTED = {
    "offsets decreasing": ("records.offsets.npy", "offsets must strictly increase, but line 2 ends at byte"),
    "offsets negative": ("records.offsets.npy", "line 1 ends at byte -5, not after its start 0"),
    "offsets float": ("records.offsets.npy", "dtype float64, expected integer byte offsets"),
    "offsets int8": ("records.offsets.npy", "offsets must strictly increase"),
    "offsets past the end": ("records.jsonl", "size does not match its offsets"),
    "offsets not at line ends": ("records.jsonl", "line 3 (bytes 144..216) is not one JSON object per line"),
    "record not JSON": ("records.jsonl", "line 5: not strict JSON (Expecting property name"),
    "record without answer": ("records.jsonl", 'line 6: field "answer" must be a string, got None'),
    "record answer a number": ("records.jsonl", 'line 7: field "answer" must be a string, got 5'),
    "record without id": ("records.jsonl", 'line 8: field "id" must be a string or an integer, got None'),
    "record id a float": ("records.jsonl", 'line 9: field "id" must be a string or an integer, got 1.5'),
    "record questions not a list": ("records.jsonl", 'line 10: field "questions" must be a list of strings'),
    "record metadata not an object": ("records.jsonl", 'line 11: field "metadata" must be an object'),
    "record NaN in metadata": ("records.jsonl", "line 12: not strict JSON (NaN is not valid JSON"),
    "record Infinity in metadata": ("records.jsonl", "line 13: not strict JSON (Infinity is not valid JSON"),
    "record a JSON array": ("records.jsonl", "line 14 (bytes 950..957) is not one JSON object per line"),
    "record not UTF-8": ("records.jsonl", "line 15: not UTF-8"),
    "record two objects on a line": ("records.jsonl", "line 16: not strict JSON (Extra data"),
    "records duplicate ids": ("records.jsonl", 'id "h0" is on lines 1 and 17; ids must be unique'),
    "vectors NaN": ("vectors.npy", "row 3 holds NaN or infinite values"),
    "vectors all NaN": ("vectors.npy", "row 0 holds NaN or infinite values"),
    "vectors infinite": ("vectors.npy", "row 7 holds NaN or infinite values"),
    "vectors outside the ball": ("vectors.npy", "row 9 has norm 2.54558, outside the unit ball of a Poincaré model"),
    "vectors float64": ("vectors.npy", "dtype float64, expected float32"),
    "vectors float16": ("vectors.npy", "dtype float16, expected float32"),
    "vectors int8": ("vectors.npy", "dtype int8, expected float32"),
    "vectors complex64": ("vectors.npy", "dtype complex64, expected float32"),
    "vectors big-endian": ("vectors.npy", "dtype >f4, expected float32"),
    "postings rows past the end": ("lexical/postings-rows.npy", "rows must be in [0, 59]"),
    "postings rows int64": ("lexical/postings-rows.npy", "must be a 1-D int32 array of"),
    "postings weights changed": ("lexical/postings-weights.npy", "does not match the BM25 terms and counts"),
    "postings weights NaN": ("lexical/postings-weights.npy", "holds NaN or infinite weights"),
    "ef_search 2**62": ("manifest.json", 'field "coarse.params.ef_search" must be at most 1048576'),
    "M 2**40": ("manifest.json", 'field "coarse.params.M" must be at most 1048576'),
    "overfetch 2**62": ("manifest.json", 'field "overfetch" must be at most 1048576'),
    "dimension 2**31": ("manifest.json", 'field "dimension" must be at most 65536'),
    "count off by one": ("", "stored arrays do not match the manifest (61 answers of dimension 8)"),
    "Poincaré model relabelled cosine": ("manifest.json", 'geometry is "cosine", but the model\'s scorer does not'),
    "manifest checksum removed": ("manifest.json", 'field "checksum" must be 64 lowercase hex digits'),
}


@pytest.fixture(scope="module")
def hostile_base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("hostile")
    model = reliability.tiny_model(root / "model")
    base = root / "base"
    Ranker.build(reliability.records("h", 60), model=model, index_kind="hnsw").save(base)
    return base


def test_every_hostile_case_has_an_expected_message() -> None:
    assert set(HOSTILE_EXPECTED) == set(hostile_files.HOSTILE)


READ_TIME, FULL_ONLY = hostile_files.READ_TIME, hostile_files.FULL_ONLY


def _read_everything(index: Path) -> None:
    """A default load, then every read that checks content: all records, their ids, all vectors."""
    ranker = Ranker.load(index)
    state = ranker.state()  # not a search: every chunk of vectors.npy is verified first
    list(ranker.records())
    state.records.ids()


@pytest.mark.parametrize("case", list(HOSTILE_EXPECTED))
def test_the_default_load_refuses_hostile_content(hostile_base: Path, tmp_path: Path, case: str) -> None:
    index = hostile_files.make_hostile(hostile_base, tmp_path / "ix", case)
    where, fragment = HOSTILE_EXPECTED[case]
    snap = index / json.loads((index / "manifest.json").read_text())["snapshot"]
    path = index / where if where == "manifest.json" else (snap / where if where else snap)
    if case in FULL_ONLY:  # the bytes are the writer's (their checksums hold): a full load compares them
        _read_everything(index)
    for how in ("full", "default") if case not in FULL_ONLY else ("full",):
        with pytest.raises(IndexFormatError) as err:
            if how == "full":
                Ranker.load(index, verify="full")
            elif case in READ_TIME:
                Ranker.load(index)  # the content is checked as it is read, not now
                _read_everything(index)
            else:
                Ranker.load(index)
        assert str(err.value).startswith(f"{path}: ")
        assert fragment in str(err.value)
        assert str(err.value).endswith(("rebuild it", "rebuild the index", "rebuild it with --hybrid"))


def test_verify_false_still_refuses_damaged_content_when_it_is_read(hostile_base: Path, tmp_path: Path) -> None:
    index = hostile_files.make_hostile(hostile_base, tmp_path / "a", "record without answer")
    ranker = Ranker.load(index, verify=False)
    with pytest.raises(IndexFormatError, match=r'records\.jsonl: line 6: field "answer" must be a string'):
        list(ranker.records())
    index = hostile_files.make_hostile(hostile_base, tmp_path / "b", "records duplicate ids")
    with pytest.raises(IndexFormatError, match='id "h0" is on lines 1 and 17; ids must be unique'):
        Ranker.load(index, verify=False).get("h0")
    index = hostile_files.make_hostile(hostile_base, tmp_path / "c", "vectors all NaN")
    ranker = Ranker.load(index, verify=False)
    with pytest.raises(IndexFormatError, match=r"vectors\.npy: rows .* give non-finite scores"):
        ranker.search("w1 w2", k=3)
    res = CliRunner().invoke(main, ["search", "w1 w2", "--index", str(index), "--json"])
    assert res.exit_code == 1 and "holds NaN or infinite values" in res.output  # the CLI loads verified


def test_a_valid_index_passes_every_check(hostile_base: Path) -> None:
    ranker = Ranker.load(hostile_base, verify="full")
    assert len(ranker) == 60 and ranker._records._ids is not None  # the ids map comes from the scan
    _read_everything(hostile_base)
    assert [h.id for h in ranker.search("w1 w2 w3", k=3)] == [
        h.id for h in Ranker.load(hostile_base, verify=False).search("w1 w2 w3", k=3)
    ]


def test_writing_a_model_never_replaces_a_folder_with_a_foreign_manifest(tmp_path: Path) -> None:
    from conftest import vocab_for

    app = _user_folder(tmp_path / "app")
    before = _tree(app)
    vocab = vocab_for(["a b c"])
    with pytest.raises(ModelFormatError, match="exists and is not a model directory"):
        make_model(app, vocab, np.zeros((len(vocab), 4), dtype=np.float32))
    assert _tree(app) == before


def test_writing_a_model_on_a_full_disk_names_the_model_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from conftest import vocab_for

    import qaindex.store.model_format

    def full(self: Path, data: bytes) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(qaindex.store.model_format.Path, "write_bytes", full)
    vocab = vocab_for(["a b c"])
    with pytest.raises(
        DiskFullError, match=rf"^{tmp_path / 'm'}: no space left on the device while writing encoder\.onnx"
    ):
        make_model(tmp_path / "m", vocab, np.zeros((len(vocab), 4), dtype=np.float32))
    assert not (tmp_path / "m").exists()

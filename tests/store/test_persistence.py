"""Index persistence: repeated saves, writer lock, lost-update refusal, confinement of manifest
paths, manifest validation, verify-once loading, debris cleanup."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from conftest import FAQ

import qaindex.store.atomic_files
import qaindex.store.index_format
from qaindex import IndexChangedError, IndexFormatError, IndexLockedError, ModelFormatError, QAIndexError, Ranker
from qaindex.cli import main
from qaindex.model import Model, write_model
from qaindex.store.chunk_checks import LAZY_FILES
from qaindex.store.index_format import manifest_checksum
from qaindex.store.locking import index_lock
from qaindex.text.tokenizer import Tokenizer


def _ids(ranker: Ranker) -> set[str]:
    return {str(r.id) for r in ranker.records()}


def _manifest(index: Path) -> dict[str, Any]:
    return json.loads((index / "manifest.json").read_text())  # type: ignore[no-any-return]


def _rewrite(index: Path, manifest: dict[str, Any], *, checksum: bool = True) -> None:
    """Write a hand-edited manifest, with a valid checksum (as an attacker could)."""
    manifest = dict(manifest)
    if checksum:
        manifest["checksum"] = manifest_checksum(manifest)
    (index / "manifest.json").write_text(json.dumps(manifest))


@pytest.fixture()
def index(faq_model: Path, faq_file: Path, tmp_path: Path) -> Path:
    target = tmp_path / "ix"
    Ranker.build(faq_file, model=faq_model).save(target)
    return target


# -- saving any number of times ----------------------------------------------------------------
def test_a_loaded_ranker_saves_any_number_of_times(index: Path, tmp_path: Path) -> None:
    ranker = Ranker.load(index)
    expected = ranker.search("refund", k=5)
    for _ in range(3):
        ranker.save(index)
    assert Ranker.load(index).search("refund", k=5) == expected
    other = tmp_path / "other"
    ranker.save(other)  # to another path ...
    ranker.add([{"id": "late", "answer": "Sync runs every five minutes."}])
    ranker.save(index)  # ... and back: the model is copied from the other index's snapshot
    ranker.save(other)
    for path in (index, other):
        loaded = Ranker.load(path)
        loaded.verify()
        assert _ids(loaded) == {"reset", "refund", "export", "7", "5", "late"}
        assert sorted(p.name for p in path.iterdir())[1:] == ["manifest.json"]  # one snapshot, no debris


def test_save_keeps_snapshot_and_manifest_consistent(index: Path) -> None:
    manifest = _manifest(index)
    assert manifest["checksum"] == manifest_checksum(manifest)
    assert manifest["model"]["manifest_sha256"] == manifest["files"]["model/manifest.json"]["sha256"]
    assert not (index / ".lock").exists()  # removed when the writer releases it


# -- writer lock ---------------------------------------------------------------------------------
def _hold_lock(index: Path) -> subprocess.Popen[str]:
    code = (
        "import sys, time\n"
        "from qaindex.store.locking import index_lock\n"
        f"with index_lock({str(index)!r}):\n"
        "    print('held', flush=True)\n"
        "    sys.stdin.readline()\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline() == "held\n"
    return proc


def test_a_second_writer_waits_then_fails_naming_the_holder(index: Path, faq_file: Path) -> None:
    holder = _hold_lock(index)
    try:
        ranker = Ranker.load(index)  # readers never need the lock
        with pytest.raises(IndexLockedError) as err:
            ranker.save(index, lock_timeout=0.3)
        assert str(err.value) == (
            f"{index}: another writer holds the index lock by process {holder.pid} (waited 0.3 s); "
            "wait for it to finish, or raise --lock-timeout"
        )
        res = CliRunner().invoke(main, ["add", str(faq_file), "--index", str(index), "--lock-timeout", "0.2"])
        assert res.exit_code == 1
        assert res.output == (
            f"Error: {index}: another writer holds the index lock by process {holder.pid} (waited 0.2 s); "
            "wait for it to finish, or raise --lock-timeout\n"
        )
    finally:
        assert holder.stdin is not None
        holder.stdin.write("\n")
        holder.stdin.close()
        holder.wait(timeout=30)
    ranker.save(index, lock_timeout=5)  # free again: the holder's exit released it


def test_a_waiting_writer_proceeds_when_the_lock_is_released(index: Path) -> None:
    holder = _hold_lock(index)
    released = threading.Timer(0.5, lambda: (holder.stdin.write("\n"), holder.stdin.flush()))  # type: ignore[union-attr]
    released.start()
    start = time.monotonic()
    with Ranker.edit(index, lock_timeout=30) as ranker:
        ranker.add([{"id": "waited", "answer": "Added after the other writer finished."}])
    assert time.monotonic() - start >= 0.4
    holder.wait(timeout=30)
    assert "waited" in _ids(Ranker.load(index))


def test_lock_is_reentrant_in_one_thread_and_exclusive_across_threads(index: Path) -> None:
    with index_lock(index, timeout=1), index_lock(index, timeout=1):
        assert int((index / ".lock").read_text()) == os.getpid()
        errors: list[str] = []

        def other() -> None:
            try:
                with index_lock(index, timeout=0.1):
                    pass
            except IndexLockedError as exc:
                errors.append(str(exc))

        thread = threading.Thread(target=other)
        thread.start()
        thread.join()
        assert errors == [
            f"{index}: another thread of this process holds the index lock (waited 0.1 s); "
            "save from one thread at a time"
        ]
    assert not (index / ".lock").exists()
    with pytest.raises(
        QAIndexError,
        match=r"^lock timeout must be a non-negative number of seconds \(or None / inf to wait forever\), got -1$",
    ):
        with index_lock(index, timeout=-1):
            pass


def test_a_stale_lock_file_of_a_killed_writer_does_not_block(index: Path) -> None:
    (index / ".lock").write_text("999999999\n")  # left by a SIGKILLed writer: no flock held
    Ranker.load(index).save(index, lock_timeout=0)
    assert not (index / ".lock").exists()


# -- a reader between a commit and its clean-up ------------------------------------------------
def test_a_manifest_read_just_before_a_save_is_read_again_not_called_corrupted(
    index: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A save commits its manifest, then removes the snapshot the old one named: a reader (or
    ``qaindex add`` checking the index before it waits for the lock) that read the old manifest
    just before finds that snapshot gone, and must read the new manifest, not report corruption."""
    stale = _manifest(index)
    Ranker.load(index).save(index)  # commits a new snapshot and removes the stale one
    assert not (index / stale["snapshot"]).exists()
    real = qaindex.store.index_format._read_once
    reads: list[str] = []

    def racing(root: Path) -> dict[str, Any]:  # the first read lands before the commit
        got = dict(stale) if not reads else real(root)
        reads.append(got["snapshot"])
        return got

    monkeypatch.setattr(qaindex.store.index_format, "_read_once", racing)
    assert len(Ranker.load(index)) == 5
    assert reads[0] == stale["snapshot"] and reads[-1] == _manifest(index)["snapshot"]
    # a snapshot missing while the manifest still names it is corruption, said at once
    (index / _manifest(index)["snapshot"]).rename(index / "moved-away")
    monkeypatch.setattr(qaindex.store.index_format, "_read_once", real)
    with pytest.raises(IndexFormatError) as err:
        Ranker.load(index)
    assert str(err.value) == f"{index / _manifest(index)['snapshot']}: missing; the index is corrupted, rebuild it"


# -- lost updates --------------------------------------------------------------------------------
def test_save_refuses_to_drop_another_writers_update(index: Path, faq_file: Path, faq_model: Path) -> None:
    first, second = Ranker.load(index), Ranker.load(index)
    second.add([{"id": "theirs", "answer": "Saved by the other writer."}])
    second.save(index)
    first.add([{"id": "mine", "answer": "Saved by this writer."}])
    with pytest.raises(IndexChangedError) as err:
        first.save(index)
    now = _manifest(index)["snapshot"]
    assert str(err.value).startswith(f"{index}: another writer changed this index since it was loaded (snapshot ")
    assert str(err.value).endswith(
        f" is now {now}); saving would drop their update. Load it again and redo the change (use "
        "Ranker.edit for read-modify-write under the lock), or pass overwrite=True"
    )
    assert "theirs" in _ids(Ranker.load(index))
    first.save(index, overwrite=True)
    assert _ids(Ranker.load(index)) == {"reset", "refund", "export", "7", "5", "mine"}
    # a fresh build replaces whatever is there when told to
    Ranker.build(faq_file, model=faq_model).save(index, overwrite=True)
    assert "mine" not in _ids(Ranker.load(index))


def test_save_refuses_an_index_built_elsewhere_as_build_does(
    index: Path, faq_file: Path, faq_model: Path, tmp_path: Path
) -> None:
    before = _manifest(index)
    fresh = Ranker.build([{"id": "new", "answer": "Another answer."}], model=faq_model)
    Ranker.load(index).save(tmp_path / "copy")
    for ranker in (fresh, Ranker.load(tmp_path / "copy")):  # neither loaded `index`
        ranker.add([{"id": "extra", "answer": "One more answer."}])
        with pytest.raises(IndexChangedError) as err:
            ranker.save(index)
        assert str(err.value) == (
            f"{index} already holds an index of 5 answers that this Ranker did not load; pass overwrite=True "
            "to replace it, or add answers to it with Ranker.edit"
        )
        assert _manifest(index) == before  # untouched
    cli = CliRunner().invoke(main, ["build", str(faq_file), "--model", str(faq_model), "--index", str(index)])
    assert (cli.exit_code, cli.stderr) == (
        1,
        f"Error: {index} already holds an index of 5 answers; pass --force to replace it, or add answers to it "
        "with `qaindex add`\n",
    )
    fresh.save(index, overwrite=True)
    assert _ids(Ranker.load(index)) == {"new", "extra"}
    fresh.save(index)  # saved there now: later saves need no overwrite
    cli = CliRunner().invoke(
        main, ["build", str(faq_file), "--model", str(faq_model), "--index", str(index), "--force"]
    )
    assert cli.exit_code == 0, cli.output
    assert _ids(Ranker.load(index)) == {"reset", "refund", "export", "7", "5"}


def test_edit_loads_under_the_lock_and_saves_on_success_only(index: Path, tmp_path: Path) -> None:
    with Ranker.edit(index) as ranker:
        assert ranker.add([{"id": "new", "answer": "A new answer."}]) == 1
        assert (index / ".lock").exists()
    assert "new" in _ids(Ranker.load(index))
    before = (index / "manifest.json").read_bytes()
    with pytest.raises(RuntimeError, match="boom"), Ranker.edit(index) as ranker:
        ranker.remove(["new"])
        raise RuntimeError("boom")
    assert (index / "manifest.json").read_bytes() == before
    with pytest.raises(IndexFormatError, match="no index here"), Ranker.edit(tmp_path / "missing"):
        pass
    assert not (tmp_path / "missing").exists()


def test_cli_add_and_remove_land_together(index: Path, tmp_path: Path) -> None:
    corpora = []
    for side in "ab":
        path = tmp_path / f"{side}.jsonl"
        path.write_text("".join(json.dumps({"id": f"{side}{i}", "answer": "word"}) + "\n" for i in range(3)))
        corpora.append(path)
    cmd = [str(Path(sys.executable).parent / "qaindex"), "add"]
    procs = [
        subprocess.Popen([*cmd, str(c), "--index", str(index), "--device", "cpu"], stderr=subprocess.PIPE, text=True)
        for c in corpora
    ]
    assert [p.wait(timeout=120) for p in procs] == [0, 0]
    assert _ids(Ranker.load(index)) == {"reset", "refund", "export", "7", "5", "a0", "a1", "a2", "b0", "b1", "b2"}
    res = CliRunner().invoke(main, ["remove", "a0", "b2", "--index", str(index)])
    assert res.exit_code == 0 and res.output == f"removed 2 answers; 9 left in {index}\n"


# -- confinement ---------------------------------------------------------------------------------
def test_index_snapshot_must_stay_inside(index: Path, tmp_path: Path) -> None:
    manifest = _manifest(index)
    mpath = index / "manifest.json"
    for value in ["../outside", "/etc", "data-x/../../y"]:
        _rewrite(index, {**manifest, "snapshot": value})
        with pytest.raises(IndexFormatError) as err:
            Ranker.load(index)
        assert str(err.value) == (
            f'{mpath}: field "snapshot" must be a snapshot name like data-20250101T000000000000-123, '
            f"got {value!r}; the index is corrupted, rebuild it"
        )
    # a snapshot directory that is a symlink to a copy outside the index
    snap = index / manifest["snapshot"]
    outside = tmp_path / "elsewhere"
    snap.rename(outside)
    snap.symlink_to(outside)
    _rewrite(index, manifest)
    with pytest.raises(IndexFormatError) as err:
        Ranker.load(index)
    assert str(err.value) == (
        f'{mpath}: field "snapshot" is {manifest["snapshot"]!r}, which leads outside {index} (through a '
        "symlink); the manifest is corrupted or crafted, rebuild it from a trusted source"
    )


@pytest.mark.parametrize("name", ["../../etc/passwd", "/etc/passwd", "a/./b", "a\\b", "model/../../x"])
def test_index_files_must_stay_inside(index: Path, name: str) -> None:
    manifest = _manifest(index)
    files = dict(manifest["files"])
    files[name] = {"bytes": 1, "sha256": "0" * 64}
    _rewrite(index, {**manifest, "files": files})
    with pytest.raises(IndexFormatError) as err:
        Ranker.load(index)
    snap = index / manifest["snapshot"]
    assert str(err.value) == (
        f'{index / "manifest.json"}: field "files" entry is {name!r}, which is not a plain relative path inside '
        f"{snap}; the manifest is corrupted or crafted, rebuild it from a trusted source"
    )


def test_a_file_symlinked_outside_is_refused_even_with_identical_content(index: Path, tmp_path: Path) -> None:
    snap = index / _manifest(index)["snapshot"]
    target = snap / "model" / "vocab.txt"
    copy = tmp_path / "vocab-copy.txt"
    copy.write_bytes(target.read_bytes())
    target.unlink()
    target.symlink_to(copy)
    with pytest.raises(IndexFormatError, match=r"field \"files\" entry is 'model/vocab.txt', which leads outside"):
        Ranker.load(index)
    with pytest.raises(IndexFormatError, match="leads outside"):
        Ranker.load(index, verify=False)  # confinement holds without checksums too


def _model_manifest(model: Path) -> dict[str, Any]:
    return json.loads((model / "manifest.json").read_text())  # type: ignore[no-any-return]


def _copy_model(source: Path, target: Path) -> Path:
    target.mkdir(parents=True)
    for p in source.iterdir():
        (target / p.name).write_bytes(p.read_bytes())
    return target


@pytest.mark.parametrize(
    ("field", "edit"),
    [
        ('"files" entry', lambda m: m["files"].update({"../../../PAYLOAD": m["files"]["vocab.txt"]})),
        ('"graphs.scorer"', lambda m: m["graphs"].update(scorer="/tmp/scorer.onnx")),
        ('"graphs.question_encoder"', lambda m: m["graphs"].update(question_encoder="../encoder.onnx")),
        ('"tokenizer.vocab"', lambda m: m["tokenizer"].update(vocab="../vocab.txt")),
    ],
)
def test_model_paths_must_stay_inside(faq_model: Path, faq_file: Path, tmp_path: Path, field: str, edit: Any) -> None:
    model = _copy_model(faq_model, tmp_path / "deep" / "er" / "model")
    manifest = _model_manifest(model)
    edit(manifest)
    (model / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(ModelFormatError, match=rf"^{model / 'manifest.json'}: field {field} is '") as err:
        Ranker.build(faq_file, model=model)
    assert "which is not a plain relative path inside" in str(err.value)
    assert not (tmp_path / "PAYLOAD").exists() and not (tmp_path / "deep" / "PAYLOAD").exists()


def test_copy_model_files_never_writes_outside(faq_model: Path, tmp_path: Path) -> None:
    from qaindex.store.model_format import copy_model_files

    manifest = _model_manifest(faq_model)
    manifest["files"]["../escape.txt"] = manifest["files"]["vocab.txt"]
    with pytest.raises(ModelFormatError, match=r"field \"files\" entry is '../escape.txt'"):
        copy_model_files(faq_model, manifest, tmp_path / "dest" / "model")
    assert not (tmp_path / "dest" / "escape.txt").exists()


# -- manifest validation -------------------------------------------------------------------------
INDEX_FIELD_CASES = [
    ("overfetch", -3, 'field "overfetch" must be a positive integer, got -3'),
    ("overfetch", "10", "field \"overfetch\" must be a positive integer, got '10'"),
    ("count", -1, 'field "count" must be a non-negative integer, got -1'),
    ("count", True, 'field "count" must be a non-negative integer, got True'),
    ("dimension", 0, 'field "dimension" must be a positive integer, got 0'),
    ("geometry", "euclid", "field \"geometry\" must be poincare or cosine or bilinear, got 'euclid'"),
    ("coarse", {}, 'field "coarse.kind" must be flat or hnsw or hnsw_sq8 or ivf or ivf_sq8 or pq, got None'),
    ("coarse", [], 'field "coarse" must be an object with kind and params, got []'),
    (
        "coarse",
        {"kind": "annoy"},
        "field \"coarse.kind\" must be flat or hnsw or hnsw_sq8 or ivf or ivf_sq8 or pq, got 'annoy'",
    ),
    (
        "coarse",
        {"kind": "hnsw", "params": {"M": 0}},
        'field "coarse.params.M" must be a positive integer, got 0',
    ),
    (
        "coarse",
        {"kind": "flat", "params": {"M": 8}},
        "field \"coarse.params\" must be an object with keys among [], got {'M': 8}",
    ),
    (
        "coarse",
        {"kind": "flat", "params": {}, "requested": "exact"},
        "field \"coarse.requested\" must be auto or flat or hnsw or hnsw_sq8 or ivf or ivf_sq8 or pq, got 'exact'",
    ),
    ("snapshot", 5, 'field "snapshot" must be a snapshot name like data-20250101T000000000000-123, got 5'),
    ("created", 5, 'field "created" must be a string, got 5'),
    ("model", None, 'field "model" must be an object with "name" and "directory": "model", got None'),
    ("files", {}, 'field "files" must be a non-empty object of files, got {}'),
]


@pytest.mark.parametrize(("field", "value", "message"), INDEX_FIELD_CASES)
def test_every_index_manifest_field_is_validated(index: Path, field: str, value: Any, message: str) -> None:
    _rewrite(index, {**_manifest(index), field: value})
    with pytest.raises(IndexFormatError) as err:
        Ranker.load(index, verify=False)
    suffix = "" if message.endswith("got {}") else "; the index is corrupted, rebuild it"
    if field == "files":
        suffix = "; rebuild it"
    assert str(err.value) == f"{index / 'manifest.json'}: {message}{suffix}"


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"bytes": -1, "sha256": "0" * 64}, "bytes must be a non-negative integer, got -1"),
        ({"bytes": 1, "sha256": "xyz"}, "sha256 must be 64 lowercase hex digits, got 'xyz'"),
        ("big", "must be an object with bytes and sha256, got 'big'"),
    ],
)
def test_index_file_entries_are_validated(index: Path, entry: Any, message: str) -> None:
    manifest = _manifest(index)
    _rewrite(index, {**manifest, "files": {**manifest["files"], "vectors.npy": entry}})
    with pytest.raises(IndexFormatError) as err:
        Ranker.load(index)
    joiner = " " if message.startswith("must") else "."
    assert str(err.value) == f'{index / "manifest.json"}: field "files.vectors.npy"{joiner}{message}; rebuild it'


def test_a_hand_edited_manifest_fails_its_checksum(index: Path) -> None:
    manifest = _manifest(index)
    _rewrite(index, {**manifest, "overfetch": 3}, checksum=False)
    with pytest.raises(IndexFormatError) as err:
        Ranker.load(index)
    assert str(err.value) == (
        f"{index / 'manifest.json'}: checksum does not match the manifest's content; the index is corrupted "
        "(or its manifest was edited), rebuild it"
    )
    # the checksum is not optional: removing it does not get an edit through
    del manifest["checksum"]
    _rewrite(index, {**manifest, "overfetch": 3}, checksum=False)
    with pytest.raises(IndexFormatError) as err:
        Ranker.load(index)
    assert str(err.value) == (
        f'{index / "manifest.json"}: field "checksum" must be 64 lowercase hex digits (the manifest\'s own '
        "SHA-256), got None; the index is corrupted, rebuild it"
    )


def test_model_manifest_fields_are_validated(faq_model: Path, tmp_path: Path) -> None:
    model = _copy_model(faq_model, tmp_path / "m")
    base = _model_manifest(model)
    mpath = model / "manifest.json"
    cases = [
        ({"files": {"vocab.txt": {"bytes": 1}}}, 'field "files.vocab.txt".sha256 must be 64 lowercase hex digits'),
        ({"files": []}, 'field "files" must be a non-empty object of files, got []'),
        ({"metrics": [1]}, 'field "metrics" must be an object, got [1]; re-export the model'),
        ({"graphs": {**base["graphs"], "scorer": "other.onnx"}}, "field \"graphs.scorer\" names 'other.onnx', which"),
    ]
    for change, message in cases:
        mpath.write_text(json.dumps({**base, **change}))
        with pytest.raises(ModelFormatError) as err:
            Model.read_manifest(model, verify=False)
        assert str(err.value).startswith(f"{mpath}: {message}")


# -- verification ---------------------------------------------------------------------------------
def test_the_default_load_hashes_every_file_once(index: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    hashed: list[str] = []
    real = qaindex.store.atomic_files.sha256_file

    def counting(path: Any) -> str:
        hashed.append(Path(path).relative_to(index).as_posix())
        return real(path)

    monkeypatch.setattr(qaindex.store.atomic_files, "sha256_file", counting)
    Ranker.load(index)
    snap = _manifest(index)["snapshot"]
    listed = _manifest(index)["files"]
    # the large files are verified chunk by chunk as they are read (qaindex.store.chunk_checks), their digests
    # whole now
    lazy = [name for name in LAZY_FILES if name in listed]
    assert set(lazy) >= {"vectors.npy", "records.jsonl"} and all(f"{name}.chunks" in listed for name in lazy)
    assert sorted(hashed) == sorted(f"{snap}/{name}" for name in listed if name not in lazy)
    hashed.clear()
    Ranker.load(index, verify="full")
    assert sorted(hashed) == sorted(f"{snap}/{name}" for name in listed)
    hashed.clear()
    Ranker.load(index, verify=False)
    assert hashed == []


def test_a_model_copy_that_disagrees_with_its_manifest_is_refused(index: Path) -> None:
    manifest = _manifest(index)
    files = dict(manifest["files"])
    del files["model/vocab.txt"]  # the index no longer vouches for a model file
    _rewrite(index, {**manifest, "files": files})
    with pytest.raises(IndexFormatError) as err:
        Ranker.load(index)
    assert str(err.value) == (
        f"{index / 'manifest.json'}: the model files it lists do not match model/manifest.json; the index is "
        "corrupted, rebuild it"
    )


# -- debris ---------------------------------------------------------------------------------------
def test_the_next_save_removes_debris_of_crashed_saves(index: Path) -> None:
    from qaindex.store.ownership import write_marker

    (index / ".manifest.json.tmp-123-abcd1234").write_text("{")
    half = index / ".data-20250101T000000000000-123.tmp"
    (half / "model").mkdir(parents=True)
    write_marker(half, "data-20250101T000000000000-123")
    (half / "vectors.npy").write_bytes(b"x")
    killed_early = index / ".data-20250101T000000000001-124.tmp"
    killed_early.mkdir()  # killed before its marker: empty
    old = index / "data-20240101T000000000000-9"
    old.mkdir()
    write_marker(old, old.name)  # a complete snapshot never committed (an orphan)
    lookalike = index / "data-20240101T000000000000-10"
    lookalike.mkdir()  # named like a snapshot, no marker: not provably qaindex's
    (lookalike / "mine.txt").write_text("user data")
    (index / ".lock").write_text("123\n")
    (index / "notes.txt").write_text("not ours")  # never touched
    Ranker.load(index).save(index)
    snap = _manifest(index)["snapshot"]
    assert sorted(p.name for p in index.iterdir()) == sorted([snap, "manifest.json", "notes.txt", lookalike.name])
    assert (lookalike / "mine.txt").read_text() == "user data"


def test_a_directory_with_only_debris_is_still_an_index_path(faq_model: Path, faq_file: Path, tmp_path: Path) -> None:
    target = tmp_path / "ix"
    target.mkdir()
    (target / ".lock").write_text("")
    (target / ".data-20250101T000000000000-123.tmp").mkdir()  # a first build that was killed
    Ranker.build(faq_file, model=faq_model).save(target)
    assert len(Ranker.load(target)) == 5
    assert sorted(p.name for p in target.iterdir())[1:] == ["manifest.json"]


def test_write_model_removes_debris_of_dead_writers_only(tmp_path: Path) -> None:
    import numpy as np
    from helpers.onnx_models import cosine_scorer_graph, encoder_graph

    target = tmp_path / "model"
    dead = tmp_path / ".model.tmp-999999999-abcd1234"
    dead_old = tmp_path / ".model.old-999999999"
    alive = tmp_path / f".model.tmp-{os.getpid()}-abcd1234"
    for d in (dead, dead_old, alive):
        d.mkdir()
    emb = np.ones((3, 2), dtype=np.float32)
    write_model(
        target,
        name="m",
        geometry={"name": "cosine"},
        dimension=2,
        tokenizer=Tokenizer(["[PAD]", "[UNK]", "a"], kind="word"),
        max_tokens={"question": 4, "answer": 4},
        encoder=encoder_graph(emb, max_norm=None),
        scorer=cosine_scorer_graph(),
        score={"formula": "cos", "higher_is_better": True, "parameters": {}},
    )
    assert not dead.exists() and not dead_old.exists() and alive.exists()
    assert Model.read_manifest(target)["name"] == "m"


def test_rankers_sharing_a_model_save_independently(faq_model: Path, tmp_path: Path) -> None:
    """A save must not change the shared Model: once the first index is deleted, the second
    Ranker built on the same Model still saves (found by benchmarks/speed/search.py)."""
    import shutil

    model = Model.load(faq_model, device="cpu")
    first = Ranker.build(FAQ, model=model, device="cpu")
    second = Ranker.build(FAQ[:3], model=model, device="cpu")
    first.save(tmp_path / "one")
    assert model.directory == faq_model
    shutil.rmtree(tmp_path / "one")
    second.save(tmp_path / "two")
    assert len(Ranker.load(tmp_path / "two", device="cpu")) == 3
    first.save(tmp_path / "three")  # its own source was deleted: it copies from the model again
    assert len(Ranker.load(tmp_path / "three", device="cpu")) == len(FAQ)

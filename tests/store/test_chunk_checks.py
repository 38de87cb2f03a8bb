"""The answers' vectors, records and BM25 arrays verified chunk by chunk as a search reads them
(qaindex.store.chunk_checks)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from qaindex import IndexFormatError, Ranker
from qaindex.search.pipeline import pool_size
from qaindex.store.chunk_checks import CHUNK_BYTES, LAZY_FILES, CheckedBytes, CheckedRows, ChunkedFile, chunk_digests
from tests.robustness.store_fixtures import records, tiny_model

REBUILD = "the index is corrupted, rebuild it"
ANSWERS = 3000  # 256 floats a row: 733 chunks of vectors.npy


@pytest.fixture(scope="module")
def clean(tmp_path_factory: pytest.TempPathFactory) -> Path:
    work = tmp_path_factory.mktemp("chunks")
    model = tiny_model(work / "model", dimension=256)
    index = work / "index"
    Ranker.build(records("c", ANSWERS), model=model, index_kind="flat", hybrid=False).save(index)
    return index


def _manifest(index: Path) -> dict[str, Any]:
    return json.loads((index / "manifest.json").read_text())  # type: ignore[no-any-return]


def _vectors(index: Path) -> Path:
    return index / _manifest(index)["snapshot"] / "vectors.npy"


def _damaged(clean: Path, tmp_path: Path, row: int) -> Path:
    """A copy of the index with one byte of ``row``'s vector changed (checksums as written)."""
    index = tmp_path / "damaged"
    shutil.copytree(clean, index)
    path = _vectors(index)
    data = bytearray(path.read_bytes())
    offset = path.stat().st_size - ANSWERS * 1024 + row * 1024 + 5
    data[offset] ^= 0x01
    path.write_bytes(bytes(data))
    return index


def _chunks_of(rows: np.ndarray, header: int) -> set[int]:
    """Brute force: the chunks holding any byte of these rows."""
    out: set[int] = set()
    for r in np.asarray(rows).ravel().tolist():
        out.update(range((header + r * 1024) // CHUNK_BYTES, (header + r * 1024 + 1023) // CHUNK_BYTES + 1))
    return out


def test_a_save_stores_the_chunk_digests(clean: Path) -> None:
    files = _manifest(clean)["files"]
    path = _vectors(clean)
    assert files["vectors.npy"]["chunk_bytes"] == CHUNK_BYTES
    assert (path.parent / "vectors.npy.chunks").read_bytes() == chunk_digests(path)
    assert files["vectors.npy.chunks"]["bytes"] == 32 * -(-path.stat().st_size // CHUNK_BYTES)


def test_a_search_verifies_exactly_the_chunks_of_the_rows_it_reads(clean: Path) -> None:
    ranker = Ranker.load(clean, verify="lazy")
    checks = ranker._vector_checks
    assert checks is not None and not checks.done.any() and checks.background is None  # none hashed yet
    stored = np.asarray(ranker.state().vectors)  # not a search: reads (and verifies) everything
    assert checks.complete
    ranker = Ranker.load(clean, verify="lazy")
    checks = ranker._vector_checks
    assert checks is not None
    q = stored[[17]]
    read = ranker.candidates(q, pool_size(3, ranker.overfetch, ANSWERS))  # the rows a search for 3 rescores
    ranker.search_vectors(q, 3)
    assert set(np.flatnonzero(checks.done).tolist()) == _chunks_of(read, checks.header)
    assert 0 < checks.done.sum() < len(checks.done)


def test_damaged_bytes_are_refused_by_the_first_read_and_only_then(clean: Path, tmp_path: Path) -> None:
    row = 2000
    index = _damaged(clean, tmp_path, row)
    clean_ranker = Ranker.load(clean)
    stored = np.asarray(clean_ranker.state().vectors)
    chunk = (Ranker.load(clean)._vector_checks.header + row * 1024 + 5) // CHUNK_BYTES  # type: ignore[union-attr]
    pool = pool_size(3, clean_ranker.overfetch, ANSWERS)
    header = clean_ranker._vector_checks.header if clean_ranker._vector_checks else 128
    far = next(i for i in range(ANSWERS) if chunk not in _chunks_of(clean_ranker.candidates(stored[[i]], pool), header))
    ranker = Ranker.load(index, verify="lazy")  # the damaged chunk is not read: the load succeeds
    far_hits = ranker.search_vectors(stored[[far]], 3)
    assert [a.tolist() for a in far_hits] == [a.tolist() for a in clean_ranker.search_vectors(stored[[far]], 3)]
    for _ in range(2):  # refused on every read that touches it
        with pytest.raises(IndexFormatError) as err:
            ranker.search_vectors(stored[[row]], 3)
        message = str(err.value)
        assert message.startswith(f"{_vectors(index)}: bytes {chunk * CHUNK_BYTES}..{(chunk + 1) * CHUNK_BYTES} (rows ")
        assert message.endswith(f"do not match their checksum in vectors.npy.chunks; {REBUILD}")
    with pytest.raises(IndexFormatError, match="do not match their checksum"):
        ranker.info()  # not a search: every row
    with pytest.raises(IndexFormatError, match="checksum does not match the manifest"):
        Ranker.load(index, verify="full")
    with pytest.raises(IndexFormatError, match="checksum does not match the manifest"):
        ranker.verify()


def test_a_default_load_verifies_the_rest_in_the_background(clean: Path) -> None:
    ranker = Ranker.load(clean)
    checks = ranker._vector_checks
    assert checks is not None and checks.background is not None
    checks.background.join(timeout=60)
    assert checks.complete and checks.done.all() and checks.background_error is None
    stored = np.load(_vectors(clean))
    # a search afterwards hashes nothing and answers as a load that verified everything first
    full = Ranker.load(clean, verify="full")
    for i in (0, 1234, ANSWERS - 1):
        got, want = ranker.search_vectors(stored[[i]], 5), full.search_vectors(stored[[i]], 5)
        assert [a.tolist() for a in got] == [a.tolist() for a in want]


def test_searches_beside_the_background_thread_answer_as_without_it(clean: Path) -> None:
    stored = np.load(_vectors(clean))
    want = Ranker.load(clean, verify="full").search_vectors(stored[::7], 5)
    for _ in range(3):  # the thread and the searches verify the same chunks at the same time
        ranker = Ranker.load(clean)
        got = ranker.search_vectors(stored[::7], 5)
        assert [a.tolist() for a in got] == [a.tolist() for a in want]
        assert ranker._vector_checks is not None and ranker._vector_checks.background is not None
        ranker._vector_checks.background.join(timeout=60)
        assert ranker._vector_checks.complete


def test_the_background_thread_reports_damage_and_searches_still_refuse_it(
    clean: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    row = 2000
    index = _damaged(clean, tmp_path, row)
    stored = np.load(_vectors(clean))
    chunk = (Ranker.load(clean, verify="lazy")._vector_checks.header + row * 1024 + 5) // CHUNK_BYTES  # type: ignore[union-attr]
    with caplog.at_level("WARNING", logger="qaindex.store"):
        ranker = Ranker.load(index)
        checks = ranker._vector_checks
        assert checks is not None and checks.background is not None
        checks.background.join(timeout=60)
    assert checks.background_error is not None and not checks.complete and not checks.done[chunk]
    message = f"{_vectors(index)}: bytes {chunk * CHUNK_BYTES}..{(chunk + 1) * CHUNK_BYTES} (rows "
    assert str(checks.background_error).startswith(message)
    assert any(
        r.getMessage().startswith(message) and "background verification" in r.getMessage() for r in caplog.records
    )
    with pytest.raises(IndexFormatError, match="do not match their checksum"):
        ranker.search_vectors(stored[[row]], 3)


def test_a_save_never_writes_unverified_vectors(clean: Path, tmp_path: Path) -> None:
    index = _damaged(clean, tmp_path, 5)
    before = _manifest(index)
    ranker = Ranker.load(index)
    with pytest.raises(IndexFormatError, match="do not match their checksum"):
        ranker.save(index)
    with pytest.raises(IndexFormatError, match="do not match their checksum"):
        ranker.add([{"id": "new", "answer": "w1 w2"}])
    assert _manifest(index) == before
    assert not (tmp_path / "copy").exists()
    with pytest.raises(IndexFormatError, match="do not match their checksum"):
        ranker.save(tmp_path / "copy")
    assert not (tmp_path / "copy" / "manifest.json").exists()


def test_an_index_saved_without_chunk_digests_is_hashed_whole(clean: Path, tmp_path: Path) -> None:
    from tests.robustness.hostile_files import reseal

    index = _damaged(clean, tmp_path, 2000)
    manifest = _manifest(index)
    (index / manifest["snapshot"] / "vectors.npy.chunks").unlink()
    del manifest["files"]["vectors.npy.chunks"]
    vectors = manifest["files"]["vectors.npy"]
    del vectors["chunk_bytes"]
    (index / "manifest.json").write_text(json.dumps(manifest))
    reseal(index)  # vectors.npy's checksum is wrong again after this edit: keep the damage
    manifest = _manifest(index)
    manifest["files"]["vectors.npy"] = vectors
    from qaindex.store.index_format import manifest_checksum

    manifest["checksum"] = manifest_checksum({k: v for k, v in manifest.items() if k != "checksum"})
    (index / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(IndexFormatError) as err:
        Ranker.load(index)
    assert str(err.value) == f"{_vectors(index)}: checksum does not match the manifest; {REBUILD}"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda m: m["files"]["vectors.npy"].update(chunk_bytes=1000),
         'field "files.vectors.npy.chunk_bytes" must be a power of two from 4096 to 67108864, got 1000'),
        (lambda m: m["files"]["vectors.npy"].update(chunk_bytes=True),
         'field "files.vectors.npy.chunk_bytes" must be a power of two from 4096 to 67108864, got True'),
        (lambda m: m["files"]["vectors.npy"].update(chunk_bytes=1 << 15),
         'field "files.vectors.npy.chunk_bytes" needs "files.vectors.npy.chunks" of '),
        (lambda m: m["files"].pop("vectors.npy.chunks"),
         'field "files.vectors.npy.chunk_bytes" needs "files.vectors.npy.chunks" of '),
    ],
)  # fmt: skip
def test_a_bad_chunk_entry_is_refused(clean: Path, tmp_path: Path, change: Any, message: str) -> None:
    from qaindex.store.index_format import manifest_checksum

    index = tmp_path / "ix"
    shutil.copytree(clean, index)
    manifest = _manifest(index)
    change(manifest)
    manifest["checksum"] = manifest_checksum({k: v for k, v in manifest.items() if k != "checksum"})
    (index / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(IndexFormatError) as err:
        Ranker.load(index)
    assert str(err.value).startswith(f"{index / 'manifest.json'}: {message}")
    assert str(err.value).endswith(REBUILD)
    assert len(Ranker.load(index, verify=False)) == ANSWERS  # a load that verifies nothing does not read it


@settings(max_examples=60, deadline=None)
@given(
    rows=st.integers(1, 300),
    dim=st.sampled_from([1, 3, 8, 64, 300, 1100]),
    chunk_log=st.integers(12, 14),
    picks=st.lists(st.integers(0, 10**6), max_size=20),
)
def test_check_rows_hashes_exactly_the_chunks_of_the_rows(
    tmp_path_factory: pytest.TempPathFactory, rows: int, dim: int, chunk_log: int, picks: list[int]
) -> None:
    path = tmp_path_factory.mktemp("prop") / "v.npy"
    np.save(path, np.random.default_rng(rows).uniform(-0.01, 0.01, size=(rows, dim)).astype(np.float32))
    chunk = 1 << chunk_log
    checks = ChunkedFile(path, np.load(path, mmap_mode="r"), chunk_digests(path, chunk), chunk, ball=True)
    wanted = np.array([p % rows for p in picks], dtype=np.int64)
    checks.check_rows(wanted)
    header, width = checks.header, dim * 4
    expected = set()
    for r in wanted.tolist():
        expected.update(range((header + r * width) // chunk, (header + (r + 1) * width - 1) // chunk + 1))
    assert set(np.flatnonzero(checks.done).tolist()) == expected
    checks.check_all()
    assert checks.complete and checks.done.all()


@settings(max_examples=60, deadline=None)
@given(
    rows=st.integers(1, 200),
    dim=st.sampled_from([1, 8, 300, 1100]),
    bad=st.integers(0, 10**6),
    picks=st.lists(st.integers(0, 10**6), min_size=1, max_size=10),
)
def test_a_row_is_content_checked_when_a_chunk_holding_it_is_verified(
    tmp_path_factory: pytest.TempPathFactory, rows: int, dim: int, bad: int, picks: list[int]
) -> None:
    path = tmp_path_factory.mktemp("nan") / "v.npy"
    vectors = np.full((rows, dim), 0.001, np.float32)
    bad %= rows
    vectors[bad, dim // 2] = np.nan
    np.save(path, vectors)
    checks = ChunkedFile(path, np.load(path, mmap_mode="r"), chunk_digests(path, 4096), 4096, ball=True)
    wanted = np.array([p % rows for p in picks], dtype=np.int64)
    width, header = dim * 4, checks.header
    touched = set()
    for r in wanted.tolist():
        touched.update(range((header + r * width) // 4096, (header + (r + 1) * width - 1) // 4096 + 1))
    bad_chunks = set(range((header + bad * width) // 4096, (header + (bad + 1) * width - 1) // 4096 + 1))
    if touched & bad_chunks:
        with pytest.raises(IndexFormatError, match=f"v.npy: row {bad} holds NaN or infinite values"):
            checks.check_rows(wanted)
    else:
        checks.check_rows(wanted)
        assert not checks.done[sorted(bad_chunks)].any()


def test_the_background_thread_stops_once_the_index_is_let_go(tmp_path: Path) -> None:
    import gc
    import weakref

    from qaindex.store.chunk_checks import _verify_rest

    path = tmp_path / "v.npy"
    np.save(path, np.full((2000, 256), 0.01, np.float32))
    checks = ChunkedFile(path, np.load(path, mmap_mode="r"), chunk_digests(path), CHUNK_BYTES, ball=True)
    ref = weakref.ref(checks)
    del checks
    gc.collect()
    _verify_rest(ref, np.arange(500))  # returns at once: nothing left to verify for
    assert ref() is None


def test_the_background_thread_waits_while_a_search_verifies_its_rows(tmp_path: Path) -> None:
    import time

    path = tmp_path / "v.npy"
    np.save(path, np.full((2000, 256), 0.01, np.float32))
    checks = ChunkedFile(path, np.load(path, mmap_mode="r"), chunk_digests(path), CHUNK_BYTES, ball=True)
    checks.readers.count = 1  # as check_rows sets it while it hashes a search's chunks
    checks.verify_in_background()
    time.sleep(0.6)  # beyond the thread's start delay
    assert not checks.done.any()
    checks.readers.count = 0
    assert checks.background is not None
    checks.background.join(timeout=60)
    assert checks.complete


# -- the records and the BM25 arrays, verified as they are read ----------------------------------
@pytest.fixture(scope="module")
def hybrid(tmp_path_factory: pytest.TempPathFactory) -> Path:
    work = tmp_path_factory.mktemp("hybrid")
    index = work / "index"
    Ranker.build(records("h", ANSWERS), model=tiny_model(work / "model"), index_kind="flat", hybrid=True).save(index)
    return index


def _copy(index: Path, tmp_path: Path) -> tuple[Path, Path]:
    copy = tmp_path / "copy"
    shutil.copytree(index, copy)
    return copy, copy / _manifest(copy)["snapshot"]


def test_a_save_stores_the_chunk_digests_of_every_large_file(hybrid: Path) -> None:
    files, snap = _manifest(hybrid)["files"], hybrid / _manifest(hybrid)["snapshot"]
    for name in LAZY_FILES:
        assert files[name]["chunk_bytes"] == CHUNK_BYTES, name
        assert (snap / f"{name}.chunks").read_bytes() == chunk_digests(snap / name), name


def test_a_damaged_record_line_is_refused_by_the_searches_that_return_it(hybrid: Path, tmp_path: Path) -> None:
    rows = records("h", ANSWERS)
    row, far = 2000, 10
    index, snap = _copy(hybrid, tmp_path)
    path = snap / "records.jsonl"
    data = bytearray(path.read_bytes())
    offsets = np.load(snap / "records.offsets.npy")
    line = bytes(data[offsets[row] : offsets[row + 1]])
    at = int(offsets[row]) + line.index(b'"answer": "w') + len(b'"answer": "w')  # a digit of the first word
    data[at] = ord("1") if data[at] != ord("1") else ord("2")  # still a valid record
    path.write_bytes(bytes(data))
    chunk = at // CHUNK_BYTES
    assert chunk != int(offsets[far]) // CHUNK_BYTES
    clean = Ranker.load(hybrid)
    ranker = Ranker.load(index, verify="lazy")  # nothing read yet: the load succeeds
    checks = {c.path.name: c for c in ranker._file_checks}
    assert set(checks) == {Path(n).name for n in LAZY_FILES if n != "vectors.npy"}
    assert not any(c.done.any() for c in checks.values())
    assert ranker.search(rows[far]["answer"], k=1) == clean.search(rows[far]["answer"], k=1)
    assert checks["records.jsonl"].done[int(offsets[far]) // CHUNK_BYTES]
    assert not checks["records.jsonl"].done[chunk] and not checks["records.jsonl"].complete
    for _ in range(2):  # refused on every read that touches it
        with pytest.raises(IndexFormatError) as err:
            ranker.search(rows[row]["answer"], k=1)
        assert str(err.value) == (
            f"{path}: bytes {chunk * CHUNK_BYTES}..{min(len(data), (chunk + 1) * CHUNK_BYTES)} do not match their "
            f"checksum in records.jsonl.chunks; {REBUILD}"
        )
    with pytest.raises(IndexFormatError, match=r"records\.jsonl: bytes .* do not match their checksum"):
        ranker.info()  # not a search: every file
    with pytest.raises(IndexFormatError, match=r"records\.jsonl: checksum does not match the manifest"):
        Ranker.load(index, verify="full")


def test_damaged_postings_are_refused_by_the_searches_that_read_them(hybrid: Path, tmp_path: Path) -> None:
    index, snap = _copy(hybrid, tmp_path)
    path = snap / "lexical" / "postings-weights.npy"
    weights = np.load(path)
    indptr = np.load(snap / "lexical" / "postings-indptr.npy")
    vocab = json.loads((snap / "lexical" / "vocab.json").read_text())["vocab"]
    entry = len(weights) // 2
    term = int(np.searchsorted(indptr, entry, side="right")) - 1  # the term whose postings hold it
    weights[entry] *= 2  # still finite and positive: only its checksum tells
    np.save(path, weights, allow_pickle=False)
    at = (path.stat().st_size - 4 * len(weights) + 4 * entry) // CHUNK_BYTES
    ranker = Ranker.load(index, verify="lazy")
    clean = Ranker.load(hybrid)
    other = next(
        t
        for t in range(len(vocab))
        if indptr[t + 1] > indptr[t]
        and (path.stat().st_size - 4 * len(weights) + 4 * int(indptr[t + 1]) - 1) // CHUNK_BYTES < at
    )
    assert ranker.search(vocab[other], k=3) == clean.search(vocab[other], k=3)
    with pytest.raises(IndexFormatError, match=rf"postings-weights.npy: bytes {at * CHUNK_BYTES}\.\.\d+ \(entries "):
        ranker.search(vocab[term], k=3)


def test_a_default_load_verifies_every_large_file_in_the_background(hybrid: Path) -> None:
    ranker = Ranker.load(hybrid)
    every = [ranker._vector_checks, *ranker._file_checks]
    assert len(every) == len(LAZY_FILES) and all(c is not None for c in every)
    threads = {c.background for c in every if c is not None}
    assert len(threads) == 1  # one thread, file after file
    thread = threads.pop()
    assert thread is not None
    thread.join(timeout=60)
    assert all(c is not None and c.complete and c.background_error is None for c in every)


@settings(max_examples=80, deadline=None)
@given(
    size=st.integers(0, 40_000),
    chunk_log=st.integers(12, 13),
    spans=st.lists(st.tuples(st.integers(-50_000, 50_000), st.integers(-50_000, 50_000)), max_size=6),
    dtype=st.sampled_from(["uint8", "int32", "float32"]),
)
def test_slices_verify_exactly_the_chunks_they_read(
    tmp_path_factory: pytest.TempPathFactory, size: int, chunk_log: int, spans: list[tuple[int, int]], dtype: str
) -> None:
    chunk = 1 << chunk_log
    path = tmp_path_factory.mktemp("span") / "a"
    if dtype == "uint8":  # a raw file (records.jsonl): bytes, no header
        array = np.random.default_rng(size).integers(0, 255, size, dtype=np.uint8)
        path.write_bytes(array.tobytes())
    else:
        np.save(path.with_suffix(".npy"), np.arange(size // 4, dtype=dtype))
        path = path.with_suffix(".npy")
        array = np.load(path, mmap_mode="r")
    checks = ChunkedFile(path, array, chunk_digests(path, chunk), chunk)
    reader = CheckedBytes(checks, array.tobytes()) if dtype == "uint8" else CheckedRows(checks)
    expected: set[int] = set()
    width, header = array.dtype.itemsize, checks.header
    for a, b in spans:
        got = reader[a:b]
        assert (got == array[a:b].tobytes()) if dtype == "uint8" else np.array_equal(got, array[a:b])
        start, stop, _ = slice(a, b).indices(len(array))
        if stop > start:
            expected.update(range((header + start * width) // chunk, (header + stop * width - 1) // chunk + 1))
    assert set(np.flatnonzero(checks.done).tolist()) == expected
    whole = reader.verified() if isinstance(reader, CheckedBytes) else np.asarray(reader)
    assert checks.complete and bytes(whole) == array.tobytes()

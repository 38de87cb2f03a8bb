"""(d) of :mod:`tests.robustness.reliability`: hostile files and foreign folders.

Each case of :data:`HOSTILE` edits a copy of an index (offsets, records, vectors, manifest
fields), usually recomputing every checksum afterwards (:func:`reseal`) so that only the
content checks of a load can catch it; :func:`hostile_files` checks that the default load and
the CLI refuse every case with a clear error, and that foreign folders are never touched.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from qaindex import QAIndexError, Ranker
from tests.robustness.store_fixtures import cli_command, records, write_jsonl

__all__ = ["FULL_ONLY", "HOSTILE", "READ_TIME", "hostile_files", "make_hostile", "reseal"]


def reseal(index: Path) -> None:
    """Recompute every checksum of the index's manifest and the chunk digests of its vectors
    (as someone editing its files could), so that only the content checks of a load, or of
    the first read of the rows changed, can catch what was changed."""
    from qaindex.store.atomic_files import file_entry
    from qaindex.store.chunk_checks import chunk_digests
    from qaindex.store.index_format import manifest_checksum

    manifest = json.loads((index / "manifest.json").read_text())
    snap = index / manifest["snapshot"]
    chunked = {name: e["chunk_bytes"] for name, e in manifest["files"].items() if "chunk_bytes" in e}
    for name, size in chunked.items():
        (snap / f"{name}.chunks").write_bytes(chunk_digests(snap / name, size))
    manifest["files"] = {name: file_entry(snap / name) for name in manifest["files"]}
    for name, size in chunked.items():
        manifest["files"][name]["chunk_bytes"] = size
    manifest["model"]["manifest_sha256"] = manifest["files"]["model/manifest.json"]["sha256"]
    manifest["checksum"] = manifest_checksum(manifest)
    (index / "manifest.json").write_text(json.dumps(manifest))


def _lines(snap: Path) -> list[bytes]:
    return (snap / "records.jsonl").read_bytes().splitlines(keepends=True)


def _write_lines(snap: Path, lines: list[bytes]) -> None:
    (snap / "records.jsonl").write_bytes(b"".join(lines))
    offsets = np.zeros(len(lines) + 1, dtype=np.int64)
    np.cumsum([len(x) for x in lines], out=offsets[1:])
    np.save(snap / "records.offsets.npy", offsets, allow_pickle=False)


def _edit_line(snap: Path, row: int, change: Callable[[dict[str, Any]], Any]) -> None:
    lines = _lines(snap)
    obj = json.loads(lines[row])
    out = change(obj)
    lines[row] = (out if isinstance(out, bytes) else json.dumps(obj).encode()) + b"\n"
    _write_lines(snap, lines)


def _offsets(snap: Path, change: Callable[[np.ndarray], np.ndarray]) -> None:
    offsets = np.load(snap / "records.offsets.npy")
    np.save(snap / "records.offsets.npy", change(offsets.copy()), allow_pickle=False)


def _vectors(snap: Path, change: Callable[[np.ndarray], np.ndarray]) -> None:
    vectors = np.load(snap / "vectors.npy")
    np.save(snap / "vectors.npy", change(vectors.copy()), allow_pickle=False)


def _postings(snap: Path, name: str, change: Callable[[np.ndarray], np.ndarray]) -> None:
    path = snap / "lexical" / f"postings-{name}.npy"
    np.save(path, change(np.load(path)))


def _set(arr: np.ndarray, index: Any, value: Any) -> np.ndarray:
    arr[index] = value
    return arr


def _manifest_edit(index: Path, change: Callable[[dict[str, Any]], None]) -> None:
    manifest = json.loads((index / "manifest.json").read_text())
    change(manifest)
    (index / "manifest.json").write_text(json.dumps(manifest))


def _model_geometry(snap: Path, geometry: dict[str, Any]) -> None:
    mpath = snap / "model" / "manifest.json"
    manifest = json.loads(mpath.read_text())
    manifest["geometry"] = geometry
    mpath.write_text(json.dumps(manifest))


def _relabel_cosine(index: Path, snap: Path) -> None:
    _model_geometry(snap, {"name": "cosine"})
    _manifest_edit(index, lambda m: m.update(geometry="cosine"))


def _no_checksum(index: Path) -> None:
    _manifest_edit(index, lambda m: m.update(overfetch=3))
    reseal(index)
    _manifest_edit(index, lambda m: m.pop("checksum"))


# name -> (edit of the index (its directory, its snapshot), reseal checksums afterwards)
HOSTILE: dict[str, tuple[Callable[[Path, Path], None], bool]] = {
    "offsets decreasing": (lambda i, s: _offsets(s, lambda o: _set(o, [1, 2], o[[2, 1]])), True),
    "offsets negative": (lambda i, s: _offsets(s, lambda o: _set(o, 1, -5)), True),
    "offsets float": (lambda i, s: _offsets(s, lambda o: o.astype(np.float64)), True),
    "offsets int8": (lambda i, s: _offsets(s, lambda o: o.astype(np.int8)), True),
    "offsets past the end": (lambda i, s: _offsets(s, lambda o: _set(o, -1, o[-1] + 100)), True),
    "offsets not at line ends": (lambda i, s: _offsets(s, lambda o: _set(o, 3, o[3] - 2)), True),
    "record not JSON": (lambda i, s: _edit_line(s, 4, lambda r: b'{"id": "x", not json'), True),
    "record without answer": (lambda i, s: _edit_line(s, 5, lambda r: r.pop("answer")), True),
    "record answer a number": (lambda i, s: _edit_line(s, 6, lambda r: r.update(answer=5)), True),
    "record without id": (lambda i, s: _edit_line(s, 7, lambda r: r.pop("id")), True),
    "record id a float": (lambda i, s: _edit_line(s, 8, lambda r: r.update(id=1.5)), True),
    "record questions not a list": (lambda i, s: _edit_line(s, 9, lambda r: r.update(questions="q")), True),
    "record metadata not an object": (lambda i, s: _edit_line(s, 10, lambda r: r.update(metadata=[1])), True),
    "record NaN in metadata": (lambda i, s: _edit_line(s, 11, lambda r: r.update(metadata={"x": float("nan")})), True),
    "record Infinity in metadata": (
        lambda i, s: _edit_line(s, 12, lambda r: r.update(metadata={"x": float("inf")})),
        True,
    ),
    "record a JSON array": (lambda i, s: _edit_line(s, 13, lambda r: b"[1, 2]"), True),
    "record not UTF-8": (lambda i, s: _edit_line(s, 14, lambda r: b'{"id": "u", "answer": "\xff\xfe"}'), True),
    "record two objects on a line": (lambda i, s: _edit_line(s, 15, lambda r: b'{"id": 1} {"id": 2}'), True),
    "records duplicate ids": (
        lambda i, s: _edit_line(s, 16, lambda r: r.update(id=json.loads(_lines(s)[0])["id"])),
        True,
    ),
    "vectors NaN": (lambda i, s: _vectors(s, lambda v: _set(v, (3, 0), np.nan)), True),
    "vectors all NaN": (lambda i, s: _vectors(s, lambda v: np.full_like(v, np.nan)), True),
    "vectors infinite": (lambda i, s: _vectors(s, lambda v: _set(v, (7, 2), np.inf)), True),
    "vectors outside the ball": (lambda i, s: _vectors(s, lambda v: _set(v, 9, 0.9)), True),
    "vectors float64": (lambda i, s: _vectors(s, lambda v: v.astype(np.float64)), True),
    "vectors float16": (lambda i, s: _vectors(s, lambda v: v.astype(np.float16)), True),
    "vectors int8": (lambda i, s: _vectors(s, lambda v: v.astype(np.int8)), True),
    "vectors complex64": (lambda i, s: _vectors(s, lambda v: v.astype(np.complex64)), True),
    "vectors big-endian": (lambda i, s: _vectors(s, lambda v: v.astype(">f4")), True),
    "postings rows past the end": (lambda i, s: _postings(s, "rows", lambda r: _set(r, 2, 10**6)), True),
    "postings rows int64": (lambda i, s: _postings(s, "rows", lambda r: r.astype(np.int64)), True),
    "postings weights changed": (lambda i, s: _postings(s, "weights", lambda w: w * 2), True),
    "postings weights NaN": (lambda i, s: _postings(s, "weights", lambda w: _set(w, 0, np.nan)), True),
    "ef_search 2**62": (lambda i, s: _manifest_edit(i, lambda m: m["coarse"]["params"].update(ef_search=2**62)), True),
    "M 2**40": (lambda i, s: _manifest_edit(i, lambda m: m["coarse"]["params"].update(M=2**40)), True),
    "overfetch 2**62": (lambda i, s: _manifest_edit(i, lambda m: m.update(overfetch=2**62)), True),
    "dimension 2**31": (lambda i, s: _manifest_edit(i, lambda m: m.update(dimension=2**31)), True),
    "count off by one": (lambda i, s: _manifest_edit(i, lambda m: m.update(count=m["count"] + 1)), True),
    "Poincaré model relabelled cosine": (_relabel_cosine, True),
    "manifest checksum removed": (lambda i, s: _no_checksum(i), False),
}


# what a default load leaves to the first read of the content (records decoded, ids mapped, vectors
# verified chunk by chunk), and what only a full verification scans (BM25 postings against the terms)
READ_TIME = frozenset(case for case in HOSTILE if case.startswith(("record", "vectors ")))
FULL_ONLY = frozenset({"postings weights changed"})


def make_hostile(base: Path, target: Path, case: str) -> Path:
    """A copy of the index ``base`` at ``target`` with the hostile change ``case``."""
    shutil.copytree(base, target)
    edit, seal = HOSTILE[case]
    snap = target / json.loads((target / "manifest.json").read_text())["snapshot"]
    edit(target, snap)
    if seal:
        reseal(target)
    return target


def _foreign_folder(root: Path) -> Path:
    root.mkdir()
    (root / "manifest.json").write_text('{"name": "my-web-app", "version": 3}')
    (root / "data-backup").mkdir()
    (root / "data-backup" / "users.csv").write_text("id,name\n1,Ada\n")
    (root / "data-20240101T000000000000-1").mkdir()
    (root / "data-20240101T000000000000-1" / "dump.sql").write_text("select 1;")
    return root


def _snapshot_of(folder: Path) -> dict[str, str]:
    return {
        p.relative_to(folder).as_posix(): ("dir" if p.is_dir() else p.read_text(errors="replace"))
        for p in sorted(folder.rglob("*"))
    }


def _cli_run(args: list[str]) -> tuple[int, str]:
    proc = subprocess.run([*cli_command(), *args], capture_output=True, text=True, timeout=300)
    return proc.returncode, proc.stderr


def hostile_files(workdir: Path, model: Path) -> dict[str, Any]:
    """Every hostile case x {default load, load verify=False + search + get + ids, CLI search --json,
    CLI info, CLI add}, and writers pointed at a foreign folder.

    A run is a defect when it raises anything but a ``QAIndexError`` (API), prints a traceback or
    "please report this bug" or exits 0 (CLI), or when a search returns a non-finite score or
    the foreign folder changes.
    """
    base = workdir / "hostile-base"
    Ranker.build(records("h", 60), model=model, index_kind="hnsw").save(base)
    corpus = write_jsonl(workdir / "hostile-add.jsonl", records("hadd", 2))
    runs = defects = refused = refused_on_read = 0
    failures: list[str] = []

    def defect(what: str) -> None:
        nonlocal defects
        defects += 1
        failures.append(what)

    for n, case in enumerate(HOSTILE):
        index = make_hostile(base, workdir / f"hostile-{n}", case)
        runs += 1
        try:
            Ranker.load(index, verify="full")
        except QAIndexError:
            refused += 1
        except Exception as exc:  # noqa: BLE001 - any other exception is a defect
            defect(f"{case}: load: {type(exc).__name__}: {exc}")
        else:
            defect(f"{case}: the full load accepted it")
        runs += 1
        try:  # the default load checks content as it is read: all of it read here
            ranker = Ranker.load(index)
            ranker.state()
            list(ranker.records())
            ranker.state().records.ids()
        except QAIndexError:
            refused_on_read += 1
        except Exception as exc:  # noqa: BLE001 - any other exception is a defect
            defect(f"{case}: default load: {type(exc).__name__}: {exc}")
        runs += 1
        try:
            ranker = Ranker.load(index, verify=False)
            for hit in ranker.search("w1 w2 w3", k=5):
                if not np.isfinite(hit.score):
                    raise AssertionError(f"score {hit.score}")
            ranker.get(
                json.loads(_lines(index / json.loads((index / "manifest.json").read_text())["snapshot"])[0])["id"]
            )
            list(ranker.records())
        except QAIndexError:
            pass
        except Exception as exc:  # noqa: BLE001
            defect(f"{case}: verify=False: {type(exc).__name__}: {exc}")
        for args, may_pass in (
            # a search reads the records it returns and the vectors it rescores, checking them then
            (["search", "w1 w2 w3", "--index", str(index), "--json"], case in READ_TIME | FULL_ONLY),
            # info reads every vector, no record
            (["info", "--index", str(index)], case.startswith("record") or case in FULL_ONLY),
            (["info", "--index", str(index), "--verify"], False),
            (["add", str(corpus), "--index", str(index), "--device", "cpu"], case in FULL_ONLY),
        ):
            runs += 1
            code, err = _cli_run(args)
            clean = "Traceback" not in err and "please report this bug" not in err
            declined = code != 0 and err.count("\n") == 1  # one clear line
            if not clean or not (declined or (may_pass and code == 0)):
                defect(
                    f"{case}: qaindex {' '.join(a for a in args if not a.startswith('/'))}: exit {code}: "
                    f"{err.strip()[-200:]}"
                )
        shutil.rmtree(index)
    # writers pointed at a user's folder: refused, the folder unchanged
    folder = _foreign_folder(workdir / "user-app")
    before = _snapshot_of(folder)
    corpus_big = write_jsonl(workdir / "hostile-build.jsonl", records("hb", 20))
    foreign_runs = 0
    for args in (
        ["build", str(corpus_big), "--model", str(model), "--index", str(folder)],
        ["build", str(corpus_big), "--model", str(model), "--index", str(folder), "--lock-timeout", "inf"],
        ["add", str(corpus), "--index", str(folder)],
        ["remove", "x", "--index", str(folder)],
        ["gc", "--index", str(folder)],
    ):
        runs += 1
        foreign_runs += 1
        code, err = _cli_run(args)
        if code not in (1, 2) or "Traceback" in err or "please report this bug" in err:
            defect(f"foreign folder: qaindex {args[0]}: exit {code}: {err.strip()[-200:]}")
    for overwrite in (False, True):
        runs += 1
        foreign_runs += 1
        try:
            Ranker.load(base).save(folder, overwrite=overwrite)
        except QAIndexError:
            pass
        except Exception as exc:  # noqa: BLE001
            defect(f"foreign folder: save: {type(exc).__name__}: {exc}")
        else:
            defect("foreign folder: save accepted it")
    modified = _snapshot_of(folder) != before
    if modified:
        defect("foreign folder modified")
    stats = {
        "cases": len(HOSTILE),
        "runs": runs,
        "refused_by_full_load": refused,
        "refused_by_default_load_or_first_read": refused_on_read,
        "defects": defects,
        "foreign_folder_runs": foreign_runs,
        "foreign_folder_modified": modified,
        "failures": failures[:10],
    }
    print(
        f"hostile files: {len(HOSTILE)} cases, {runs} runs: {refused}/{len(HOSTILE)} refused by a full load, "
        f"{refused_on_read}/{len(HOSTILE)} by the default load or the first read, "
        f"{defects} defects (non-QAIndexError, traceback, 'please report this bug', exit 0, non-finite score); "
        f"foreign folder {'MODIFIED' if modified else 'untouched'} after {foreign_runs} writer runs",
        flush=True,
    )
    return stats

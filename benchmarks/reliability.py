"""Reliability figures: kill loop, concurrent writers, corruption matrix.

(a) Kill loop: each operation (``build`` over an existing index, ``add``, ``remove``,
    ``save`` of a loaded and reconfigured index) runs in a forked child that is SIGKILLed at
    a random moment; after every kill the index must load with the default (verifying) load,
    and hold exactly the content before or after the operation: same ids, stored vectors equal
    to the encoding of the stored answers (records and vectors never from different saves),
    over-fetch of one state. Kills that land after the child finished are not counted.
(b) Concurrent writers: two ``qaindex add`` processes with different new ids start together
    on the same index; both must exit 0 without a traceback and both updates must land.
(c) Corruption matrix: every file of an index and of its model copy, and ``manifest.json``,
    x {flip a byte, truncate, append, delete, replace by a symlink to an identical copy
    outside the index}, at two sizes (one with files above 64 MiB); the default
    ``Ranker.load`` must refuse every case with a ``QAIndexError``.

A tiny bag-of-words ONNX model (tests/onnx_models.py) keeps it fast. Prints the counts and
writes ``benchmarks/results/reliability.json`` (keeping a ``fuzz`` entry that
``benchmarks/fuzz.py`` fills).

Usage::

    python benchmarks/reliability.py            # >= 200 kills per operation, 50 pairs, 2 sizes
    python benchmarks/reliability.py --quick    # small counts, small index only
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from onnx_models import make_model  # noqa: E402

from qaindex import QAIndexError, Ranker  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / "reliability.json"
VOCAB_WORDS = 500
CORRUPTIONS = ("flip", "truncate", "append", "delete", "symlink")


# -- fixtures ------------------------------------------------------------------------------
def tiny_model(directory: Path, *, dimension: int = 8, seed: int = 0) -> Path:
    """A Poincaré bag-of-words model over the words w0 .. w499."""
    vocab = ["[PAD]", "[UNK]", *(f"w{i}" for i in range(VOCAB_WORDS))]
    rng = np.random.default_rng(seed)
    emb = rng.normal(scale=0.3 / np.sqrt(dimension), size=(len(vocab), dimension)).astype(np.float32)
    emb[0] = 0.0
    return make_model(directory, vocab, emb, name="tiny-reliability")


def records(prefix: str, n: int, seed: int = 0) -> list[dict[str, Any]]:
    """``n`` answers of three random words with ids ``prefix0 ..``."""
    rng = random.Random(f"{prefix}-{seed}")
    return [
        {"id": f"{prefix}{i}", "answer": " ".join(f"w{rng.randrange(VOCAB_WORDS)}" for _ in range(3))} for i in range(n)
    ]


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def check_index(index: Path) -> dict[str, Any]:
    """Load with the default verifying load and check that records and vectors agree."""
    ranker = Ranker.load(index)
    recs = list(ranker.records())
    stored = np.asarray(ranker._vectors)
    encoded = ranker.model.encode([r.answer for r in recs], role="answer")
    if not np.array_equal(stored, encoded):
        raise AssertionError("stored vectors do not match the stored answers (mixed snapshot)")
    return {"ids": sorted(str(r.id) for r in recs), "overfetch": ranker.overfetch}


def debris(index: Path) -> list[str]:
    """Entries other than the manifest, the current snapshot and the lock file."""
    manifest = json.loads((index / "manifest.json").read_text())
    keep = {"manifest.json", manifest["snapshot"], ".lock"}
    return sorted(p.name for p in index.iterdir() if p.name not in keep)


# -- (a) kill loop -------------------------------------------------------------------------
class _Verifier:
    """A subprocess that loads and checks indexes (the parent never runs onnxruntime, so that
    forking it stays safe)."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, __file__, "--verifier"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    def check(self, index: Path) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(str(index) + "\n")
        self.proc.stdin.flush()
        return json.loads(self.proc.stdout.readline())  # type: ignore[no-any-return]

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        self.proc.wait(timeout=30)


def _verifier_main() -> None:
    for line in sys.stdin:
        try:
            out: dict[str, Any] = {"ok": True, **check_index(Path(line.strip()))}
        except Exception as exc:  # noqa: BLE001 - report every failure, QAIndexError or not
            out = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
        sys.stdout.write(json.dumps(out) + "\n")
        sys.stdout.flush()


def _run_killed(op: Callable[[], None], delay: float | None) -> bool:
    """Run ``op`` in a forked child, SIGKILL it after ``delay`` s (None: let it finish);
    True if it was killed."""
    pid = os.fork()
    if pid == 0:  # child
        code = 0
        try:
            op()
        except BaseException:  # noqa: BLE001 - the exit code reports it
            code = 3
        os._exit(code)
    if delay is None:
        done, status = os.waitpid(pid, 0)
    else:
        time.sleep(delay)
        done, status = os.waitpid(pid, os.WNOHANG)
    if done:
        if os.WEXITSTATUS(status) != 0:
            raise RuntimeError("an operation failed without being killed")
        return False
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    return True


def _in_child(op: Callable[[], None]) -> None:
    """Run ``op`` in a forked child to completion."""
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            op()
        except BaseException:  # noqa: BLE001 - the exit code reports it
            code = 3
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    if os.WEXITSTATUS(status) != 0:
        raise RuntimeError("a setup step failed")


def _rebuild(index: Path, model: Path, prefix: str) -> None:
    _in_child(lambda: Ranker.build(records(prefix, 300), model=model).save(index) and None)


def kill_loop(workdir: Path, model: Path, kills: int, *, seed: int = 0) -> dict[str, Any]:
    """>= ``kills`` SIGKILLs per operation; counts broken and mixed indexes."""
    rng = random.Random(seed)
    index = workdir / "killed-index"
    verifier = _Verifier()
    out: dict[str, Any] = {}
    try:
        for op_name in ("build", "add", "remove", "save"):
            _rebuild(index, model, "base")
            state = verifier.check(index)
            stats = {"kills": 0, "completed": 0, "broken": 0, "mixed": 0, "errors": []}
            durations: list[float] = []
            step = 0
            while stats["kills"] < kills:
                step += 1
                before = state
                after: dict[str, Any]
                if op_name == "build":
                    new = records(f"b{step}-", 300 + step % 7)
                    after = {"ids": sorted(str(r["id"]) for r in new), "overfetch": before["overfetch"]}

                    def op(new: list[dict[str, Any]] = new, overfetch: int = before["overfetch"]) -> None:
                        Ranker.build(new, model=model, overfetch=overfetch).save(index)

                elif op_name == "add":
                    new = records(f"a{step}-", 2)
                    after = {
                        "ids": sorted(before["ids"] + [str(r["id"]) for r in new]),
                        "overfetch": before["overfetch"],
                    }

                    def op(new: list[dict[str, Any]] = new) -> None:
                        with Ranker.edit(index, device="cpu", threads=1) as r:
                            r.add(new)

                elif op_name == "remove":
                    if len(before["ids"]) < 20:
                        _rebuild(index, model, f"refill{step}-")
                        state = verifier.check(index)
                        continue
                    gone = rng.choice(before["ids"])
                    after = {"ids": [i for i in before["ids"] if i != gone], "overfetch": before["overfetch"]}

                    def op(gone: str = gone) -> None:
                        with Ranker.edit(index, device="cpu", threads=1) as r:
                            r.remove([gone])

                else:
                    value = 2 + step % 40
                    if value == before["overfetch"]:
                        value += 1
                    after = {"ids": before["ids"], "overfetch": value}

                    def op(value: int = value) -> None:
                        r = Ranker.load(index, device="cpu")
                        r.configure(overfetch=value)
                        r.save(index)

                # the first runs finish, to time the operation; kills then land uniformly
                # over 0 .. 1.3 x its typical duration
                delay = rng.uniform(0.0, 1.3 * float(np.median(durations))) if len(durations) >= 3 else None
                t0 = time.perf_counter()
                killed = _run_killed(op, delay)
                if not killed:
                    durations.append(time.perf_counter() - t0)
                    stats["completed"] += 1
                else:
                    stats["kills"] += 1
                now = verifier.check(index)
                if not now["ok"]:
                    stats["broken"] += 1
                    stats["errors"].append(now["error"])
                    _rebuild(index, model, f"rebuilt{step}-")
                    state = verifier.check(index)
                    continue
                if now != {**before, "ok": True} and now != {**after, "ok": True}:
                    stats["mixed"] += 1
                    stats["errors"].append(f"step {step}: neither the old nor the new content")
                if not killed and now != {**after, "ok": True}:
                    stats["mixed"] += 1
                    stats["errors"].append(f"step {step}: a completed {op_name} did not land")
                state = now
            # the next good save removes whatever the killed ones left behind
            left = debris(index)
            _in_child(lambda: Ranker.load(index).save(index) and None)
            stats["debris_before_next_save"] = len(left)
            stats["debris_after_next_save"] = len(debris(index))
            stats["errors"] = stats["errors"][:5]
            out[op_name] = stats
            print(
                f"kill loop {op_name:>6}: {stats['kills']} kills ({stats['completed']} runs finished first), "
                f"{stats['broken']} broken, {stats['mixed']} mixed, debris {len(left)} -> "
                f"{stats['debris_after_next_save']} after the next save",
                flush=True,
            )
    finally:
        verifier.close()
    return out


# -- (b) concurrent writers ----------------------------------------------------------------
def _cli() -> list[str]:
    script = Path(sys.executable).parent / "qaindex"
    return [str(script)] if script.exists() else [sys.executable, "-c", "from qaindex.cli import main; main()"]


def concurrent_writers(workdir: Path, model: Path, runs: int) -> dict[str, Any]:
    """``runs`` pairs of concurrent ``qaindex add`` with different new ids."""
    base = workdir / "base-index"
    Ranker.build(records("base", 50), model=model).save(base)
    stats = {"runs": runs, "lost_updates": 0, "broken": 0, "tracebacks": 0, "failed_commands": 0, "errors": []}
    for run in range(runs):
        index = workdir / f"pair-{run}"
        shutil.copytree(base, index)
        files = [write_jsonl(workdir / f"pair-{run}-{side}.jsonl", records(f"r{run}{side}-", 3)) for side in "ab"]
        procs = [
            subprocess.Popen(
                [*_cli(), "add", str(f), "--index", str(index), "--device", "cpu"],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for f in files
        ]
        for p in procs:
            _, err = p.communicate(timeout=300)
            if p.returncode != 0:
                stats["failed_commands"] += 1
                stats["errors"].append(err.strip()[-300:])
            if "Traceback" in err:
                stats["tracebacks"] += 1
        try:
            got = set(check_index(index)["ids"])
        except QAIndexError as exc:
            stats["broken"] += 1
            stats["errors"].append(str(exc))
            continue
        want = {f"base{i}" for i in range(50)} | {f"r{run}{s}-{i}" for s in "ab" for i in range(3)}
        if got != want:
            stats["lost_updates"] += len(want - got) // 3 or 1
        shutil.rmtree(index)
    stats["errors"] = stats["errors"][:5]
    print(
        f"concurrent writers: {runs} pairs of `qaindex add`: {stats['lost_updates']} lost updates, "
        f"{stats['broken']} broken, {stats['failed_commands']} failed commands, {stats['tracebacks']} tracebacks",
        flush=True,
    )
    return stats


# -- (c) corruption matrix -----------------------------------------------------------------
def index_files(index: Path) -> list[Path]:
    """``manifest.json`` and every file of the current snapshot (model copy included)."""
    manifest = json.loads((index / "manifest.json").read_text())
    snap = index / manifest["snapshot"]
    # not the ownership marker: it says who wrote the snapshot (for clean-up), loads never read it
    files = sorted(p for p in snap.rglob("*") if p.is_file() and p.name != ".qaindex-snapshot")
    return [index / "manifest.json", *files]


def corrupt(path: Path, how: str, outside: Path) -> None:
    """Damage one file in place."""
    if how == "flip":
        with open(path, "r+b") as handle:
            handle.seek(path.stat().st_size // 2)
            byte = handle.read(1)
            handle.seek(-1, os.SEEK_CUR)
            handle.write(bytes([byte[0] ^ 0xFF]))
    elif how == "truncate":
        os.truncate(path, path.stat().st_size // 2)
    elif how == "append":
        with open(path, "ab") as handle:
            handle.write(b"\x00tail")
    elif how == "delete":
        path.unlink()
    elif how == "symlink":  # an identical copy outside the index, linked in
        copy = outside / f"{path.parent.name}-{path.name}"
        shutil.copyfile(path, copy)
        path.unlink()
        path.symlink_to(copy)
    else:
        raise ValueError(how)


def corruption_matrix(index: Path, outside: Path, label: str) -> dict[str, Any]:
    """Every file x every corruption; the default load must refuse each one."""
    outside.mkdir(parents=True, exist_ok=True)
    cases = detected = 0
    missed: list[str] = []
    crashed: list[str] = []
    sizes = {}
    for path in index_files(index):
        rel = path.relative_to(index).as_posix()
        sizes[rel] = path.stat().st_size
        original = path.read_bytes()
        for how in CORRUPTIONS:
            cases += 1
            corrupt(path, how, outside)
            try:
                Ranker.load(index)
            except QAIndexError:
                detected += 1
            except Exception as exc:  # noqa: BLE001 - not a clean error: counted as a defect
                crashed.append(f"{rel} {how}: {type(exc).__name__}: {exc}")
            else:
                missed.append(f"{rel} {how}")
            if path.is_symlink() or path.exists():
                path.unlink()
            path.write_bytes(original)
        Ranker.load(index)  # restored
    big = sum(1 for s in sizes.values() if s > 64 << 20)
    print(
        f"corruption matrix ({label}, {len(sizes)} files, {big} above 64 MiB, largest "
        f"{max(sizes.values()) / 2**20:.1f} MiB): {detected}/{cases} detected by the default load, "
        f"{len(crashed)} non-QAIndexError",
        flush=True,
    )
    return {
        "files": len(sizes),
        "files_above_64MiB": big,
        "largest_bytes": max(sizes.values()),
        "cases": cases,
        "detected": detected,
        "missed": missed,
        "non_qaindex_errors": crashed,
    }


def build_large(workdir: Path, answers: int, dimension: int) -> Path:
    model = tiny_model(workdir / f"model-{dimension}", dimension=dimension, seed=1)
    index = workdir / f"index-{answers}"
    Ranker.build(records("big", answers), model=model, index_kind="flat").save(index)
    return index


# -- (d) hostile files and foreign folders ----------------------------------------------------
def reseal(index: Path) -> None:
    """Recompute every checksum of the index's manifest (as someone editing its files could),
    so that only the content checks of a load can catch what was changed."""
    from qaindex.store.index_format import manifest_checksum
    from qaindex.store.storage import file_entry

    manifest = json.loads((index / "manifest.json").read_text())
    snap = index / manifest["snapshot"]
    manifest["files"] = {name: file_entry(snap / name) for name in manifest["files"]}
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
    "ef_search 2**62": (lambda i, s: _manifest_edit(i, lambda m: m["coarse"]["params"].update(ef_search=2**62)), True),
    "M 2**40": (lambda i, s: _manifest_edit(i, lambda m: m["coarse"]["params"].update(M=2**40)), True),
    "overfetch 2**62": (lambda i, s: _manifest_edit(i, lambda m: m.update(overfetch=2**62)), True),
    "dimension 2**31": (lambda i, s: _manifest_edit(i, lambda m: m.update(dimension=2**31)), True),
    "count off by one": (lambda i, s: _manifest_edit(i, lambda m: m.update(count=m["count"] + 1)), True),
    "Poincaré model relabelled cosine": (_relabel_cosine, True),
    "manifest checksum removed": (lambda i, s: _no_checksum(i), False),
}


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
    proc = subprocess.run([*_cli(), *args], capture_output=True, text=True, timeout=300)
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
    runs = defects = refused = 0
    failures: list[str] = []

    def defect(what: str) -> None:
        nonlocal defects
        defects += 1
        failures.append(what)

    for n, case in enumerate(HOSTILE):
        index = make_hostile(base, workdir / f"hostile-{n}", case)
        runs += 1
        try:
            Ranker.load(index)
        except QAIndexError:
            refused += 1
        except Exception as exc:  # noqa: BLE001 - any other exception is a defect
            defect(f"{case}: load: {type(exc).__name__}: {exc}")
        else:
            defect(f"{case}: the default load accepted it")
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
        for args in (
            ["search", "w1 w2 w3", "--index", str(index), "--json"],
            ["info", "--index", str(index)],
            ["add", str(corpus), "--index", str(index), "--device", "cpu"],
        ):
            runs += 1
            code, err = _cli_run(args)
            if code == 0 or "Traceback" in err or "please report this bug" in err or err.count("\n") != 1:
                defect(f"{case}: qaindex {args[0]}: exit {code}: {err.strip()[-200:]}")
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
        "refused_by_default_load": refused,
        "defects": defects,
        "foreign_folder_runs": foreign_runs,
        "foreign_folder_modified": modified,
        "failures": failures[:10],
    }
    print(
        f"hostile files: {len(HOSTILE)} cases, {runs} runs: {refused}/{len(HOSTILE)} refused by the default load, "
        f"{defects} defects (non-QAIndexError, traceback, 'please report this bug', exit 0, non-finite score); "
        f"foreign folder {'MODIFIED' if modified else 'untouched'} after {foreign_runs} writer runs",
        flush=True,
    )
    return stats


# -- main ----------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small counts, small index only")
    parser.add_argument("--kills", type=int, default=None, help="kills per operation (default 200, quick 10)")
    parser.add_argument("--pairs", type=int, default=None, help="concurrent add pairs (default 50, quick 5)")
    parser.add_argument("--large", type=int, default=60000, help="answers of the large index")
    parser.add_argument("--only", default="kill,writers,corruption,hostile", help="comma-separated parts to run")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--verifier", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.verifier:
        _verifier_main()
        return {}
    kills = args.kills or (10 if args.quick else 200)
    pairs = args.pairs or (5 if args.quick else 50)
    start = time.perf_counter()
    parts = set(args.only.split(","))
    result: dict[str, Any] = {"quick": args.quick}
    with tempfile.TemporaryDirectory(prefix="qaindex-reliability-") as tmp:
        work = Path(tmp)
        model = tiny_model(work / "model")
        if "kill" in parts:
            result["kill_loop"] = kill_loop(work, model, kills)
        if "writers" in parts:
            result["concurrent_writers"] = concurrent_writers(work, model, pairs)
        if "corruption" in parts:
            small = work / "small-index"
            Ranker.build(records("s", 300), model=model).save(small)
            matrix = {"small": corruption_matrix(small, work / "outside-small", "300 answers")}
            if not args.quick:
                large = build_large(work, args.large, 320)
                matrix["large"] = corruption_matrix(large, work / "outside-large", f"{args.large} answers")
            result["corruption"] = matrix
        if "hostile" in parts:
            result["hostile_files"] = hostile_files(work, model)
    previous = json.loads(args.out.read_text()) if args.out.exists() else {}
    kept = []
    for part, key in (
        ("kill", "kill_loop"),
        ("writers", "concurrent_writers"),
        ("corruption", "corruption"),
        ("hostile", "hostile_files"),
    ):
        if part not in parts and key in previous and not args.quick:  # a partial run keeps the rest
            result[key] = previous[key]
            kept.append(key)
    if kept:
        result["kept_from_previous_run"] = kept
    result["fuzz"] = previous.get("fuzz", {"note": "filled by benchmarks/fuzz.py", "inputs": None})
    result["seconds"] = round(time.perf_counter() - start, 1)
    kill = result.get("kill_loop", {})
    matrix = result.get("corruption", {})
    totals = {
        "kills": sum(v["kills"] for v in kill.values()),
        "broken_or_mixed": sum(v["broken"] + v["mixed"] for v in kill.values()),
        "lost_updates": result.get("concurrent_writers", {}).get("lost_updates"),
        "corruption_cases": sum(v["cases"] for v in matrix.values()),
        "corruption_detected": sum(v["detected"] for v in matrix.values()),
    }
    result["totals"] = totals
    print(json.dumps(totals))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    return result


if __name__ == "__main__":
    main()

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
(d) Hostile files and foreign folders (:mod:`tests.robustness.hostile_files`).

A tiny bag-of-words ONNX model (tests/helpers/onnx_models.py) keeps it fast. Prints the counts and
writes ``benchmarks/results/reliability.json`` (keeping a ``fuzz`` entry that
``tests/robustness/fuzz.py`` fills).

Usage::

    python -m tests.robustness.reliability            # >= 200 kills per operation, 50 pairs, 2 sizes
    python -m tests.robustness.reliability --quick    # small counts, small index only
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

from benchmarks.common import ROOT, argument_parser, write_results
from qaindex import QAIndexError, Ranker
from tests.robustness.hostile_files import hostile_files
from tests.robustness.store_fixtures import check_index, cli_command, debris, records, tiny_model, write_jsonl

RESULTS = ROOT / "benchmarks" / "results" / "reliability.json"
CORRUPTIONS = ("flip", "truncate", "append", "delete", "symlink")


# -- (a) kill loop -------------------------------------------------------------------------
class _Verifier:
    """A subprocess that loads and checks indexes (the parent never runs onnxruntime, so that
    forking it stays safe)."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.robustness.reliability", "--verifier"],
            cwd=ROOT,
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


def _forked(op: Callable[[], None]) -> int:
    """Run ``op`` in a forked child, which exits 3 if it raised (0 otherwise); the child's pid."""
    pid = os.fork()
    if pid == 0:  # child
        code = 0
        try:
            op()
        except BaseException:  # noqa: BLE001 - the exit code reports it
            code = 3
        os._exit(code)
    return pid


def _run_killed(op: Callable[[], None], delay: float | None) -> bool:
    """Run ``op`` in a forked child, SIGKILL it after ``delay`` s (None: let it finish);
    True if it was killed."""
    pid = _forked(op)
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
    _, status = os.waitpid(_forked(op), 0)
    if os.WEXITSTATUS(status) != 0:
        raise RuntimeError("a setup step failed")


def _rebuild(index: Path, model: Path, prefix: str) -> None:
    _in_child(lambda: Ranker.build(records(prefix, 300), model=model).save(index, overwrite=True) and None)


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
                        Ranker.build(new, model=model, overfetch=overfetch).save(index, overwrite=True)

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
                [*cli_command(), "add", str(f), "--index", str(index), "--device", "cpu"],
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
            try:  # the default load, then every read (vectors.npy is verified chunk by chunk as it is read)
                Ranker.load(index).state()
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
        f"{max(sizes.values()) / 2**20:.1f} MiB): {detected}/{cases} detected by the default load or the first read, "
        f"{len(crashed)} non-QAIndexError",
        flush=True,
    )
    return {
        "files": len(sizes),
        "files_above_64MiB": big,
        "largest_bytes": max(sizes.values()),
        "cases": cases,
        "detected": detected,
        "detected_on_read": True,
        "missed": missed,
        "non_qaindex_errors": crashed,
    }


def build_large(workdir: Path, answers: int, dimension: int) -> Path:
    model = tiny_model(workdir / f"model-{dimension}", dimension=dimension, seed=1)
    index = workdir / f"index-{answers}"
    Ranker.build(records("big", answers), model=model, index_kind="flat").save(index)
    return index


# -- main ----------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argument_parser(__doc__, out=RESULTS)
    parser.add_argument("--quick", action="store_true", help="small counts, small index only")
    parser.add_argument("--kills", type=int, default=None, help="kills per operation (default 200, quick 10)")
    parser.add_argument("--pairs", type=int, default=None, help="concurrent add pairs (default 50, quick 5)")
    parser.add_argument("--large", type=int, default=60000, help="answers of the large index")
    parser.add_argument("--only", default="kill,writers,corruption,hostile", help="comma-separated parts to run")
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
    result["fuzz"] = previous.get("fuzz", {"note": "filled by tests/robustness/fuzz.py", "inputs": None})
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
    write_results(args.out, result, run=True)
    return result


if __name__ == "__main__":
    main()

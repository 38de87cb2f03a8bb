"""The CLI half of :mod:`tests.robustness.fuzz`: generated ``qaindex`` command lines through click and subprocesses."""

from __future__ import annotations

import collections
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from qaindex.model import Model
from tests.robustness.fuzz_inputs import JSONL, SURROGATES, TEXT, hypothesis_settings

# -- the CLI fuzz ------------------------------------------------------------------------------

OPTION_VALUES = st.one_of(
    st.sampled_from(
        ["0", "-1", "1", "3", "99999999999999999999", "1e3", "nan", "", "auto", "cpu", "cuda", "hnsw", "flat"]
    ),
    st.text(max_size=12),
    SURROGATES,
    st.integers(-(10**25), 10**25).map(str),
)


def _cli_args(data: st.DataObject, world: tuple[Model, Path, Path], scratch: Path) -> list[str]:
    model, corpus, index = world
    paths = st.sampled_from(
        [str(index)] * 4
        + [str(scratch / "ix")] * 4
        + ["/proc/foo", "/proc/self/status", str(corpus), str(scratch), "/", "", "\udcff", "/proc/self/fd/0/x"]
    )
    command = data.draw(
        st.sampled_from(
            ["search"] * 6 + ["info"] * 2 + ["add", "remove", "build", "eval", "inspect", "nope", "--version", "-h"]
        )
    )
    args = [command]
    if command == "search":
        args += [data.draw(st.one_of(TEXT, st.just("reset password"), st.just("-")))]
    elif command in ("add", "build"):
        jsonl = scratch / "c.jsonl"
        jsonl.write_bytes(data.draw(JSONL))
        args += [data.draw(st.sampled_from([str(jsonl), str(jsonl), str(corpus), "/proc/foo", str(scratch)]))]
    elif command == "remove":
        args += data.draw(st.lists(st.one_of(st.sampled_from(["a1", "a2", "3"]), TEXT), max_size=3))
    elif command in ("eval", "inspect"):
        args += [data.draw(st.sampled_from([str(model.directory), str(corpus), "/proc/foo"]))]
        jsonl = scratch / "d.jsonl"
        jsonl.write_bytes(data.draw(JSONL))
        args += [str(jsonl)]
    valid = {
        "search": ["--index", "-k", "--json", "--device"],
        "info": ["--index", "-k", "--json", "--device", "--recall", "--sample", "--verify"],
        "build": ["--index", "--model", "--index-kind", "--overfetch", "--batch-size", "--device"],
        "add": ["--index", "--device"],
        "remove": ["--index"],
        "eval": ["--json", "--via-index", "--index-kind", "--device", "--batch-size"],
        "inspect": ["--device", "--batch-size"],
    }.get(command, ["--json"])
    numeric = st.one_of(st.integers(1, 20).map(str), st.sampled_from(["10000000000", "99999999999999999999"]))
    for _ in range(data.draw(st.integers(0, 4))):
        opt = data.draw(st.sampled_from(valid) if data.draw(st.integers(0, 9)) else st.just("--bogus"))
        args.append(opt)
        if opt in ("--index", "--model"):
            args.append(data.draw(paths))
        elif opt not in ("--json", "--recall", "--verify", "--via-index"):
            args.append(data.draw(st.one_of(numeric, numeric, OPTION_VALUES)))
    if "--index" not in args and command in ("search", "info", "add", "remove", "build"):
        args += ["--index", str(scratch / "ix") if command in ("add", "remove", "build") else str(index)]
    if command == "build" and "--model" not in args:
        args += ["--model", str(model.directory)]
    if "--device" not in args and command in ("search", "info", "add", "build", "eval", "inspect"):
        args += ["--device", "cpu"]
    return args


def fuzz_cli(world: tuple[Model, Path, Path], n: int, n_sub: int, seed: int, tmp: Path) -> dict[str, Any]:
    """``n`` CliRunner runs and ``n_sub`` real subprocesses."""
    from click.testing import CliRunner

    from qaindex.cli import main

    _, _, index = world
    runner = CliRunner()
    stats: dict[str, Any] = {"runs": 0, "subprocess_runs": 0, "exit_codes": collections.Counter(), "bad": []}

    def judge(args: list[str], code: int, output: str, exc: BaseException | None) -> None:
        stats["exit_codes"][str(code)] += 1
        problems = []
        if code not in (0, 1, 2):
            problems.append(f"exit {code}")
        if "Traceback" in output:
            problems.append("traceback")
        if exc is not None and not isinstance(exc, SystemExit):
            problems.append(f"unhandled {type(exc).__name__}: {exc!s:.100}")
        if "unexpected internal error" in output:
            problems.append("last-resort handler: " + output.strip().splitlines()[-1][:160])
        if code != 0 and len([line for line in output.splitlines() if line.startswith("Error:")]) != 1:
            problems.append("not exactly one Error: line")
        if problems:
            stats["bad"].append(
                {"args": [a.encode("utf-8", "backslashreplace").decode() for a in args], "problems": problems}
            )

    def scratch_index(scratch: Path) -> None:
        shutil.rmtree(scratch, ignore_errors=True)
        scratch.mkdir(parents=True)
        shutil.copytree(index, scratch / "ix")

    scratch = tmp / "cli"

    @hypothesis_settings(n, seed)
    @given(st.data())
    def run(data: st.DataObject) -> None:
        scratch_index(scratch)
        args = _cli_args(data, world, scratch)
        stdin = data.draw(st.one_of(st.just(b"reset password\n"), st.binary(max_size=30)))
        res = runner.invoke(main, args, input=stdin)
        stats["runs"] += 1
        judge(args, res.exit_code, res.output, res.exception)

    run()

    rng = random.Random(seed)
    exe = [sys.executable, "-m", "qaindex.cli"]
    fixed = [
        ["search", "reset", "--index", str(index), "-k", "99999999999999999999"],
        ["search", "reset", "--index", "/proc/foo"],
        ["search", "-", "--index", str(index)],
        ["build", "/proc/foo", "--index", str(tmp / "sub-ix")],
        ["remove", "12", "--index", "/proc/self"],
        ["info", "--index", str(index), "--recall", "-k", "1000000000"],
    ]
    for i in range(n_sub):
        args = (
            fixed[i % len(fixed)]
            if i < len(fixed)
            else [*rng.choice(fixed)[:-1], rng.choice(["0", "-5", "x", "\udcff"])]
        )
        env = dict(os.environ, PYTHONIOENCODING=rng.choice(["utf-8", "ascii", "latin-1"]))
        proc = subprocess.run(
            [*exe, *args], input=rng.choice([b"reset\n", b"\xff\xfe\n", b""]), capture_output=True, timeout=120, env=env
        )
        stats["subprocess_runs"] += 1
        judge(args, proc.returncode, (proc.stdout + proc.stderr).decode("utf-8", "replace"), None)

    return {
        "runs": stats["runs"],
        "subprocess_runs": stats["subprocess_runs"],
        "exit_codes": dict(stats["exit_codes"]),
        "unclean": len(stats["bad"]),
        "examples": stats["bad"][:20],
    }

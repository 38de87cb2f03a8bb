"""A fast run of benchmarks/fuzz.py: generated inputs through the API and the CLI.

Every API input must end in a result or a QAIndexError; every CLI run in exit 0/1/2 with
at most one error line and no traceback. (The full run: ``python benchmarks/fuzz.py``.)
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def fuzz() -> Any:
    spec = importlib.util.spec_from_file_location("qaindex_fuzz", ROOT / "benchmarks" / "fuzz.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["qaindex_fuzz"] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def world(fuzz: Any, tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Path, Path, Path]:
    tmp = tmp_path_factory.mktemp("fuzz")
    return (*fuzz.make_world(tmp), tmp)


def test_api_fuzz_raises_only_qaindex_errors(fuzz: Any, world: tuple[Any, Path, Path, Path]) -> None:
    *w, tmp = world
    report = fuzz.fuzz_api(tuple(w), 300, 0, tmp)
    assert report["inputs"] >= 300
    assert report["unclean_by_kind"] == {}, report["examples"]
    assert 0 < report["clean_errors"] < report["inputs"]  # both refused and accepted inputs were generated


def test_cli_fuzz_is_always_clean(fuzz: Any, world: tuple[Any, Path, Path, Path]) -> None:
    *w, tmp = world
    report = fuzz.fuzz_cli(tuple(w), 40, 1, 0, tmp)
    assert report["runs"] == 40 and report["subprocess_runs"] == 1
    assert report["examples"] == []
    assert set(report["exit_codes"]) <= {"0", "1", "2"}


def test_the_tally_catches_what_is_not_a_qaindex_error(fuzz: Any) -> None:
    tally = fuzz.Tally()
    tally.call("x", lambda: 1 / 0)
    tally.call("y", lambda: None)
    assert tally.report()["unclean_by_kind"] == {"x: ZeroDivisionError": 1} and tally.inputs == 2

"""A fast run of ``tests.robustness.fuzz``: generated inputs through the API and the CLI.

Every API input must end in a result or a QAIndexError; every CLI run in exit 0/1/2 with
at most one error line and no traceback. ``QAINDEX_ROBUSTNESS=full`` runs them at the full
run's counts (50,000 API inputs, 1,000 CLI runs; also ``python -m tests.robustness.fuzz``).
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
FULL = os.environ.get("QAINDEX_ROBUSTNESS") == "full"
API_INPUTS, CLI_RUNS = (50_000, 1_000) if FULL else (900, 40)


@pytest.fixture(scope="module")
def fuzz() -> Any:
    return importlib.import_module("tests.robustness.fuzz")


@pytest.fixture(scope="module")
def world(fuzz: Any, tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Path, Path, Path]:
    tmp = tmp_path_factory.mktemp("fuzz")
    return (*fuzz.make_world(tmp), tmp)


def test_api_fuzz_raises_only_qaindex_errors(fuzz: Any, world: tuple[Any, Path, Path, Path]) -> None:
    *w, tmp = world
    report = fuzz.fuzz_api(tuple(w), API_INPUTS, 0, tmp)
    assert report["inputs"] >= API_INPUTS
    assert report["unclean_by_kind"] == {}, report["examples"]
    assert 0 < report["clean_errors"] < report["inputs"]  # both refused and accepted inputs were generated
    calls = set(report["inputs_by_call"])
    for entry in (
        "Ranker.load", "Ranker.edit", "Ranker.save", "Ranker.hits", "Ranker.search(options)", "Model.load",
        "Reranker.load", "evaluate_pooled", "pooled_metrics", "Ranker.configure",
    ):  # fmt: skip
        assert entry in calls, entry
    assert any(c.startswith("memory: ") for c in calls)


def test_the_argument_groups_that_escaped_before(fuzz: Any, world: tuple[Any, Path, Path, Path]) -> None:
    """The reproducers of the fuzz groups, through the fuzz's own tally."""
    import numpy as np

    from qaindex import Ranker

    _, _, index, tmp = world
    r = Ranker.load(index, device="cpu")
    tally = fuzz.Tally()
    for call in (
        lambda: Ranker.load({}),
        lambda: Ranker.load(b"idx"),
        lambda: Ranker.edit(1000000000).__enter__(),
        lambda: r.save(str(tmp / "d" / ("x" * 300))),
        lambda: Ranker.load("x" * 300),
        lambda: r.hits([[1.0], [2.0, 3.0]], [[1.0], [2.0, 3.0]], [[0], [1, 2]]),
        lambda: r.search("reset", min_score=10**400),
        lambda: Ranker.load(index, verify=np.array([1, 2])),
        lambda: r.save("a\0b"),
        lambda: r.add(np.array(0)),
        lambda: Ranker.load(index, threads=-1),
        lambda: Ranker.load(index, threads=10**9),
    ):
        tally.call("reproducer", call)
    assert tally.report()["unclean_by_kind"] == {} and tally.clean_errors == 12


def test_largest_requests_stay_bounded(fuzz: Any, world: tuple[Any, Path, Path, Path]) -> None:
    """The resource run at small scale under an 8 MiB budget: over-budget results are refused
    (exit 1), the rest run in chunks, and every process stays small."""
    *_, tmp = world
    result = fuzz.measure_resources(tmp, answers=1000, questions=20, cli_questions=20, budget="8MiB")
    runs = list(result["requests"].values())
    assert [r["exit_code"] for r in runs] == [1, 0, 0, 1, 0], runs
    assert runs[0]["output"].startswith("QAIndexError: a search of 20 question(s) for 1,000 hits each needs about")
    assert runs[1]["output"] == "(20, 1000) arrays"
    assert runs[3]["output"].startswith("Error: recall@1,000 over 1,000 questions needs about")
    assert runs[2]["stdout_mb"] > 1  # 20 questions x 1,000 hits printed, in chunks
    assert result["max_peak_rss_mb"] < 2000


def test_cli_fuzz_is_always_clean(fuzz: Any, world: tuple[Any, Path, Path, Path]) -> None:
    *w, tmp = world
    report = fuzz.fuzz_cli(tuple(w), CLI_RUNS, 1, 0, tmp)
    assert report["runs"] == CLI_RUNS and report["subprocess_runs"] == 1
    assert report["examples"] == []
    assert set(report["exit_codes"]) <= {"0", "1", "2"}


def test_the_tally_catches_what_is_not_a_qaindex_error(fuzz: Any) -> None:
    tally = fuzz.Tally()
    tally.call("x", lambda: 1 / 0)
    tally.call("y", lambda: None)
    assert tally.report()["unclean_by_kind"] == {"x: ZeroDivisionError": 1} and tally.inputs == 2


def test_shard_reports_merge(fuzz: Any) -> None:
    one = {
        "inputs": 3,
        "clean_errors": 2,
        "unclean_by_kind": {"a: X": 1},
        "inputs_by_call": {"a": 3},
        "examples": {"a: X": "e1"},
    }
    two = {"inputs": 4, "clean_errors": 1, "unclean_by_kind": {"a: X": 2, "b: Y": 1}, "inputs_by_call": {"a": 1, "b": 3},
           "examples": {"a: X": "e2", "b: Y": "e3"}}  # fmt: skip
    merged = fuzz.merge_reports([one, two])
    assert merged == {
        "inputs": 7,
        "clean_errors": 3,
        "unclean": 4,
        "unclean_by_kind": {"a: X": 3, "b: Y": 1},
        "inputs_by_call": {"a": 4, "b": 3},
        "examples": {"a: X": "e1", "b: Y": "e3"},
        "shards": 2,
    }

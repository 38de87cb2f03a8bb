"""How far a search travels: the files a ``qaindex search`` crosses from the CLI to its hits.

Every call into a ``qaindex`` source file during one search is traced (:func:`sys.settrace`);
the *file call graph* has an edge ``a → b`` when a function in ``a`` calls one in ``b`` (the
nearest ``qaindex`` frame up the stack is the caller). Two facts are asserted:

- no back-and-forth: the graph has no circle (no file calls a file that calls it back, through
  any number of others), so the search can be read downward, file by file;
- at most :data:`MAX_FILES` files on any path from the CLI's command to the deepest call;
- the Ranker hands its state and a checked plan down: nothing the pipeline calls reaches
  ``ranker.py`` (the Ranker) or ``search/plan.py`` (the argument checks, made once, at the
  Ranker);
- a filtered dense search, whichever plan ``search/filters.py`` chooses (exact among the
  matches, the whole small index, a predicate's widening coarse stage), is run by the
  pipeline: the filters decide and call no search.

The CLI run traces only what happens inside ``Ranker.search_batch``, which the command calls
(opening the index is not part of the search), and counts ``cli/app.py`` as the first file.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType
from typing import Any

import pytest
from click.testing import CliRunner
from helpers.graphs import circles

import qaindex
from qaindex import Ranker
from qaindex.cli import main

PACKAGE = Path(qaindex.__file__).resolve().parent
FAQ = Path(__file__).resolve().parents[2] / "examples" / "faq.jsonl"
MAX_FILES = 8


def _file(frame: FrameType) -> str | None:
    path = Path(frame.f_code.co_filename)
    return path.relative_to(PACKAGE).as_posix() if path.is_relative_to(PACKAGE) else None


def _in_search(frame: FrameType | None) -> bool:
    while frame is not None:
        if frame.f_code.co_name in ("search", "search_batch") and _file(frame) == "ranker.py":
            return True
        frame = frame.f_back
    return False


def trace(run: Callable[[], Any], *, only_search: bool = False) -> dict[str, set[str]]:
    """The file call graph of ``run()`` (``{caller file: {callee files}}``, every file a key)."""
    graph: dict[str, set[str]] = {}

    def tracer(frame: FrameType, event: str, arg: Any) -> None:
        callee = _file(frame)
        if event != "call" or callee is None or (only_search and not _in_search(frame)):
            return
        graph.setdefault(callee, set())
        caller = frame.f_back
        while caller is not None and _file(caller) is None:
            caller = caller.f_back
        if caller is not None and _file(caller) != callee and (not only_search or _in_search(caller)):
            graph.setdefault(_file(caller) or "", set()).add(callee)

    sys.settrace(tracer)  # type: ignore[arg-type]
    try:
        run()
    finally:
        sys.settrace(None)
    return graph


def reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    """The files ``start`` calls, directly or through others."""
    seen: set[str] = set()
    todo = [start]
    while todo:
        for callee in graph.get(todo.pop(), ()):
            if callee not in seen:
                seen.add(callee)
                todo.append(callee)
    return seen


def longest_path(graph: dict[str, set[str]], start: str) -> list[str]:
    """The longest path of files from ``start`` (the graph has no circle)."""
    best: dict[str, list[str]] = {}

    def walk(node: str) -> list[str]:
        if node not in best:
            best[node] = [node, *max((walk(n) for n in graph.get(node, ())), key=len, default=[])]
        return best[node]

    return walk(start)


def test_the_tracer_sees_a_circle_and_a_path() -> None:
    graph = {"a.py": {"b.py"}, "b.py": {"a.py", "c.py"}, "c.py": set()}
    assert circles(graph)
    assert longest_path({"a.py": {"b.py", "c.py"}, "b.py": {"c.py"}, "c.py": set()}, "a.py") == ["a.py", "b.py", "c.py"]
    assert reachable(graph, "c.py") == set() and reachable(graph, "a.py") == {"a.py", "b.py", "c.py"}


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("search-path") / "idx"
    Ranker.build(FAQ, hybrid=True).save(path)
    return path


def _searches(ranker: Ranker) -> Iterator[tuple[str, Callable[[], Any]]]:
    yield "hybrid", lambda: ranker.search("how do I reset my password", k=5)
    yield "dense", lambda: ranker.search("how do I reset my password", k=5, hybrid=False)
    yield "filtered", lambda: ranker.search("refund", k=3, where={"category": "billing"})
    yield "batch", lambda: ranker.search_batch(["refund", "export my notes"], k=3)


def test_a_search_goes_down_through_at_most_eight_files(index: Path) -> None:
    ranker = Ranker.load(index)
    for name, run in _searches(ranker):
        run()  # warm: lazy imports and caches are not the search
        graph = trace(run)
        assert "search/pipeline.py" in graph and "search/hits.py" in graph, name
        assert circles(graph) == [], (name, circles(graph))
        below = reachable(graph, "search/pipeline.py")
        assert "ranker.py" not in below and "search/plan.py" not in below, (name, sorted(below))
        assert "search/plan.py" in graph["ranker.py"], name  # the arguments are checked at the Ranker
        entry = "store/concurrency.py"  # the read lock's wrapper is what the caller enters
        path = longest_path(graph, entry)
        assert len(path) + 1 <= MAX_FILES, (name, path)  # + the CLI command's own file


def test_the_cli_search_crosses_at_most_eight_files(index: Path) -> None:
    runner = CliRunner()
    args = ["search", "how do I reset my password", "--index", str(index), "-k", "3"]
    assert runner.invoke(main, args).exit_code == 0
    graph = trace(lambda: runner.invoke(main, args), only_search=True)
    assert circles(graph) == [], circles(graph)
    path = ["cli/app.py", *longest_path(graph, "ranker.py")]
    assert "search/hits.py" in graph and len(path) <= MAX_FILES, path


def _billing(record: qaindex.Record) -> bool:
    return record.metadata.get("category") == "billing"


def test_the_filters_choose_a_plan_and_the_pipeline_runs_it(index: Path) -> None:
    ranker = Ranker.load(index)
    plans = {
        "exact": lambda: ranker.search("refund", k=3, where={"category": "billing"}, hybrid=False),
        "whole": lambda: ranker.search("refund", k=40, where={"category": "billing"}, hybrid=False),
        "predicate": lambda: ranker.search("refund", k=3, where=_billing, hybrid=False),
    }
    for name, run in plans.items():
        run()
        graph = trace(run)
        assert circles(graph) == [], (name, circles(graph))
        assert "search/filters.py" in graph["search/pipeline.py"], name
        below = reachable(graph, "search/filters.py")
        assert not below & {"search/pipeline.py", "search/exact.py", "model.py", "vector_index.py"}, (name, below)

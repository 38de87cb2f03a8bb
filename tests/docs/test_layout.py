"""The runtime's layout: no import circles, no module over 700 lines of code, no torch on import.

Imports are read from the source with :mod:`ast`: every ``import`` and ``from ... import`` of
a ``qaindex`` module, at module level, inside a function (a function-level import still
closes a circle when it runs) or under ``if TYPE_CHECKING:`` (never run, but a type-only
import is still a dependency a reader follows: two modules that name each other's types are
one concern split in two). An import of a package's name counts as an import of its
``__init__``; the parent packages Python imports first are not counted (they would make every
module depend on ``qaindex``).

The size cap counts lines of code (:mod:`helpers.source_lines`): docstrings, comments and blank
lines are free, and no module switches the formatter off (``# fmt: skip``) to pack code under it.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

from helpers.graphs import circles
from helpers.source_lines import code_lines, formatter_pragmas

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "qaindex"
TESTS = Path(__file__).resolve().parents[1]
# the runtime's wings, and the folders of what is not one: the model, the adapters, training
# and export, the benchmarks, the robustness runs, the tools, the documentation and the layout
TEST_FOLDERS = {"indexing", "cli", "eval", "geometry", "search", "store", "text"} | {
    "model",
    "integrations",
    "export",
    "bench",
    "robustness",
    "tools",
    "docs",
}
MAX_LINES = 700  # lines of code per module
# Files that still switch the formatter off, while other work on them is in flight: remove an
# entry when its pragmas are gone (test_the_packed_file_list_is_current says when).
PACKED: set[str] = set()


def _modules() -> dict[str, Path]:
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The ``qaindex`` modules that module ``name`` imports (type-only imports included)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name in modules)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target not in modules:
                continue
            named = [f"{target}.{a.name}" for a in node.names if f"{target}.{a.name}" in modules]
            out.update(named)
            if len(named) < len(node.names):  # names defined in the module itself
                out.add(target)
    out.discard(name)
    return out


def import_graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: imports(name, path, modules) for name, path in modules.items()}


def test_the_circle_finder_finds_circles() -> None:
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set()}) == []


def test_the_import_reader_resolves_relative_and_package_imports() -> None:
    graph = import_graph()
    assert (
        "qaindex.geometry.hyperbolic" in graph["qaindex.vector_index"]
        or "qaindex.geometry" in graph["qaindex.vector_index"]
    )
    assert "qaindex.cli.app" in graph["qaindex.cli"]
    assert "qaindex.store.index_format" in graph["qaindex.ranker"]
    assert "qaindex.store.index_format" in graph["qaindex.snapshot"]
    assert "qaindex.search.state" in graph["qaindex.search.pipeline"]  # under TYPE_CHECKING: counted
    assert "qaindex.ranker" not in graph["qaindex.search.pipeline"]  # the pipeline reads a state, not the Ranker


def test_no_import_circles() -> None:
    """Not even through a type-only import (``if TYPE_CHECKING:``)."""
    found = circles(import_graph())
    assert found == [], f"import circles in qaindex/: {found}"


def _reaches(graph: dict[str, set[str]], start: str) -> set[str]:
    """The modules ``start`` imports, directly or through others."""
    seen: set[str] = set()
    todo = [start]
    while todo:
        for name in graph.get(todo.pop(), ()):
            if name not in seen:
                seen.add(name)
                todo.append(name)
    return seen


def test_store_is_one_level_of_files_below_the_snapshot() -> None:
    """``store/`` holds the files (formats, atomic writes, locks, records); assembling a snapshot
    from the runtime's pieces (model, indexes, reranker) is ``qaindex.snapshot``'s, beside the
    Ranker. So no ``store/`` module imports the Ranker, the snapshot, the search, the indexing,
    the model or the reranker, nor any module that imports ``store/`` back (through any number
    of others): the store is one level, below whatever uses it."""
    graph = import_graph()
    store = {name for name in graph if name == "qaindex.store" or name.startswith("qaindex.store.")}
    above = ("qaindex.ranker", "qaindex.snapshot", "qaindex.model", "qaindex.reranker", "qaindex.key_index")
    wings = ("qaindex.search", "qaindex.indexing", "qaindex.cli", "qaindex.eval", "qaindex.integrations")
    found = {}
    for name in sorted(store):
        outside = graph[name] - store - {"qaindex"}
        wrong = {m for m in outside if m in above or m.startswith(wings) or _reaches(graph, m) & store}
        if wrong:
            found[name] = sorted(wrong)
    assert found == {}, f"store/ modules importing what is above the store: {found}"
    assert {"qaindex.store.records", "qaindex.store.index_format"} <= _reaches(graph, "qaindex.snapshot")


def test_the_code_line_counter_skips_docstrings_comments_and_blank_lines() -> None:
    source = (
        '"""Module.\n\nMore prose.\n"""\n'
        "import os  # a comment\n"
        "\n"
        "# a comment line\n"
        "class A:\n"
        "    '''Class doc.'''\n"
        "    def f(self, x):\n"
        '        """Function doc,\n        on two lines."""\n'
        '        s = """a string,\nnot a docstring"""\n'
        "        return (x +\n"
        "                1)\n"
    )
    # import, class, def, the two lines of s, the two lines of the return
    assert code_lines(source) == 7
    assert formatter_pragmas("x = [1,\n  2]  # fmt: skip\ny = '# fmt: skip'\n# fmt: off\n") == [2, 4]


def test_no_module_over_700_lines_of_code() -> None:
    sizes = {name: code_lines(path.read_text(encoding="utf-8")) for name, path in _modules().items()}
    over = {name: n for name, n in sizes.items() if n > MAX_LINES}
    assert over == {}, f"modules over {MAX_LINES} lines of code: {over}; split them by concern"


def _pragmas() -> dict[str, list[int]]:
    found = {}
    for folder in ("qaindex", "export"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            if lines := formatter_pragmas(path.read_text(encoding="utf-8")):
                found[str(path.relative_to(ROOT))] = lines
    return found


def test_no_code_is_packed_past_the_formatter() -> None:
    """No ``# fmt: skip`` / ``# fmt: off`` in the runtime or the training side: split a module, never pack it."""
    packed = {name: lines for name, lines in _pragmas().items() if name not in PACKED}
    assert packed == {}, f"formatter switched off at {packed}; let ruff format the code"


def test_the_packed_file_list_is_current() -> None:
    stale = sorted(PACKED - set(_pragmas()))
    assert stale == [], f"{stale} no longer switch the formatter off: remove them from PACKED"


def test_every_wing_says_its_job() -> None:
    wings = sorted(p.parent.name for p in PACKAGE.glob("*/__init__.py"))
    assert {"indexing", "cli", "eval", "geometry", "search", "store", "text"} <= set(wings)
    for wing in wings:
        doc = ast.get_docstring(ast.parse((PACKAGE / wing / "__init__.py").read_text(encoding="utf-8")))
        assert doc and len(doc.split()) >= 8, f"qaindex/{wing}/__init__.py needs a docstring saying its job"


def test_importing_the_runtime_and_the_cli_loads_no_torch_and_no_exporter() -> None:
    code = (
        "import sys, json, qaindex, qaindex.cli; "
        "print(json.dumps(sorted(m for m in sys.modules "
        "if m.split('.')[0] in ('torch', 'onnx', 'qaindex_export', 'transformers', 'sentence_transformers'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == []


def test_the_public_names_stay_at_the_top() -> None:
    import qaindex
    from qaindex.cli import main
    from qaindex.vector_index import CoarseIndex

    assert {"Ranker", "Model", "Reranker", "Hit", "Record", "QAIndexError", "read_corpus"} <= set(qaindex.__all__)
    assert (
        qaindex.Ranker.__module__ == "qaindex.ranker"
        and callable(main)
        and CoarseIndex.__module__ == "qaindex.vector_index"
    )


def test_every_error_a_user_can_catch_is_exported_at_the_top() -> None:
    """``except qaindex.DiskFullError``: each error class of ``qaindex.errors`` is a public name of ``qaindex``."""
    import qaindex
    from qaindex import errors

    classes = {n for n, v in vars(errors).items() if isinstance(v, type) and issubclass(v, errors.QAIndexError)}
    assert {"QAIndexError", "DiskFullError", "QueryError"} <= classes
    assert sorted(classes - set(qaindex.__all__)) == []
    assert all(getattr(qaindex, name) is getattr(errors, name) for name in classes)


def test_the_modules_that_moved_live_only_at_their_new_paths() -> None:
    """No alias module keeps a path from before the wings: each name is found at one place."""
    import importlib

    import pytest

    moved = {
        "qaindex.evaluate": ("qaindex.eval.evaluate", "evaluate_model"),
        "qaindex.calibration": ("qaindex.eval.calibration_fit", "calibrate_model"),
        "qaindex.ownership": ("qaindex.store.ownership", "collect_garbage"),
        "qaindex.hyperbolic": ("qaindex.geometry.hyperbolic", "lognorm_map"),
    }
    for old, (new, name) in moved.items():
        sys.modules.pop(old, None)
        with pytest.raises(ModuleNotFoundError, match=old):
            importlib.import_module(old)
        assert callable(getattr(importlib.import_module(new), name))


def test_tests_are_grouped_by_wing() -> None:
    loose = sorted(p.name for p in TESTS.glob("test_*.py"))
    assert loose == [], f"tests/ holds folders, conftest.py and helpers/ only: move {loose} into a folder"
    files = sorted(TESTS.rglob("test_*.py"))
    folders = {p.relative_to(TESTS).parts[0] for p in files}
    assert folders <= TEST_FOLDERS, f"test folders that mirror no wing: {sorted(folders - TEST_FOLDERS)}"
    assert {"search", "store", "indexing", "cli", "docs"} <= folders
    # no __init__.py in the folders (pytest imports test files by their base name): names are unique
    names = [p.name for p in files]
    assert sorted({n for n in names if names.count(n) > 1}) == []
    assert sorted(str(p.relative_to(TESTS)) for p in TESTS.rglob("__init__.py")) == ["helpers/__init__.py"]
    assert sorted(str(p.relative_to(TESTS)) for p in TESTS.rglob("conftest.py")) == ["conftest.py"]


def test_pytest_collects_every_test_folder() -> None:
    import tomllib

    config = tomllib.loads((TESTS.parent / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["pytest"]
    skipped = set(config["ini_options"].get("norecursedirs", ["build", "dist"]))  # pytest's default skips build/
    assert sorted(skipped & TEST_FOLDERS) == []

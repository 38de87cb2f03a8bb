"""The layout of the training side, the benchmarks and the tools: no import circles, no file over
700 lines of code (docstrings, comments and blank lines not counted), no ``sys.path`` manipulation
anywhere.

Imports are read with ``ast`` (no module is imported), at any depth: an import inside a
function counts like one at the top, so a circle cannot hide behind a function-level import.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from helpers.graphs import circles as cycles
from helpers.source_lines import code_lines

ROOT = Path(__file__).resolve().parents[2]
MAX_LINES = 700  # lines of code
# Files allowed over MAX_LINES, each with its reason (remove an entry when the file is split).
LONG_FILES: dict[str, str] = {}  # file -> why it may stay over the limit
PACKAGES = {"export": "qaindex_export", "benchmarks": "benchmarks", "tools": "tools"}
# every folder of Python code: each imports the others as packages, never by extending sys.path
CODE_FOLDERS = ("qaindex", "export", "benchmarks", "tools", "tests", "examples")


def import_graph(folder: Path, package: str) -> dict[str, dict[str, int]]:
    """``{module: {imported sibling module: first line}}`` for the ``*.py`` files of ``folder``.

    ``package`` is the name the folder is imported as; relative imports count too.
    """
    modules = {p.stem for p in folder.glob("*.py")}
    graph: dict[str, dict[str, int]] = {}
    for path in sorted(folder.glob("*.py")):
        found: dict[str, int] = {}

        def add(name: str, line: int, found: dict[str, int] = found, me: str = path.stem) -> None:
            if name in modules and name != me:
                found.setdefault(name, line)

        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.ImportFrom):
                parts = (node.module or "").split(".") if node.module else []
                if node.level == 1 or (node.level == 0 and parts[:1] == [package]):
                    inner = parts if node.level == 1 else parts[1:]
                    if inner:
                        add(inner[0], node.lineno)
                    else:  # from . import a, b / from package import a, b
                        for alias in node.names:
                            add(alias.name, node.lineno)
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    parts = alias.name.split(".")
                    if parts[0] == package and len(parts) > 1:
                        add(parts[1], node.lineno)
        graph[path.stem] = found
    return graph


def test_the_checker_finds_a_circle_behind_a_function_level_import(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text("from .b import x\n", encoding="utf-8")
    (tmp_path / "b.py").write_text("def f():\n    from pkg.c import y\n", encoding="utf-8")
    (tmp_path / "c.py").write_text("def g():\n    from . import a\n", encoding="utf-8")
    (tmp_path / "d.py").write_text("import pkg.a\nimport os\n", encoding="utf-8")
    graph = import_graph(tmp_path, "pkg")
    assert graph == {"a": {"b": 1}, "b": {"c": 2}, "c": {"a": 2}, "d": {"a": 1}}
    assert cycles(graph) == [["a", "b", "c"]]


@pytest.mark.parametrize("folder", sorted(PACKAGES))
def test_no_import_circles(folder: str) -> None:
    graph = import_graph(ROOT / folder, PACKAGES[folder])
    assert graph, f"{folder}/ has no modules"
    found = cycles(graph)
    detail = {c: {m: graph[m] for m in c} for c in map(tuple, found)}
    assert not found, f"import circles in {folder}/: {detail}"


@pytest.mark.parametrize("folder", sorted(PACKAGES))
def test_no_file_over_the_line_limit(folder: str) -> None:
    long = {
        f"{folder}/{p.name}": n
        for p in sorted((ROOT / folder).glob("*.py"))
        if (n := code_lines(p.read_text(encoding="utf-8"))) > MAX_LINES
    }
    unexplained = {name: n for name, n in long.items() if name not in LONG_FILES}
    assert not unexplained, f"files over {MAX_LINES} lines of code: {unexplained}; split them by concern"


def test_the_long_file_list_is_current() -> None:
    for name in LONG_FILES:
        path = ROOT / name
        assert path.is_file(), f"{name}: listed in LONG_FILES but gone; remove the entry"
        lines = code_lines(path.read_text(encoding="utf-8"))
        assert lines > MAX_LINES, f"{name}: {lines} lines of code now; remove it from LONG_FILES"


def sys_path_edits(root: Path, folders: tuple[str, ...] = CODE_FOLDERS) -> list[str]:
    """``file:line`` of every ``sys.path`` insert, append or extend under ``folders`` of ``root``."""
    found = []
    for folder in folders:
        for path in sorted((root / folder).rglob("*.py")):
            lines = set()
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
                call = node.func if isinstance(node, ast.Call) else None
                if isinstance(call, ast.Attribute) and ast.unparse(call.value) == "sys.path":
                    lines.add(node.lineno)
                elif isinstance(node, ast.Assign | ast.AugAssign) and "sys.path" in map(
                    ast.unparse, node.targets if isinstance(node, ast.Assign) else [node.target]
                ):
                    lines.add(node.lineno)
            found += [f"{path.relative_to(root)}:{line}" for line in sorted(lines)]
    return found


def test_the_sys_path_finder_finds_every_form(tmp_path: Path) -> None:
    (tmp_path / "tools").mkdir()
    (tmp_path / "tools" / "a.py").write_text(
        "import sys\nsys.path.insert(0, 'x')\ndef f():\n    sys.path.append('y')\n"
        "sys.path += ['z']\nsys.path = ['w']\nprint(sys.path[0])\n",
        encoding="utf-8",
    )
    assert sys_path_edits(tmp_path, ("tools",)) == ["tools/a.py:2", "tools/a.py:4", "tools/a.py:5", "tools/a.py:6"]


def test_benchmarks_and_tools_are_packages_run_as_modules() -> None:
    """``python -m benchmarks.NAME``, ``python -m tools.NAME``: no file extends ``sys.path`` to import a sibling."""
    assert (ROOT / "benchmarks" / "__init__.py").is_file() and (ROOT / "tools" / "__init__.py").is_file()
    offenders = sys_path_edits(ROOT)
    assert not offenders, f"sys.path changed at {offenders}; import through the benchmarks or tools package"

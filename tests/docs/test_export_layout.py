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
import tomllib
from helpers.graphs import circles as cycles
from helpers.source_lines import code_lines

ROOT = Path(__file__).resolve().parents[2]
MAX_LINES = 700  # lines of code
# Files allowed over MAX_LINES, each with its reason (remove an entry when the file is split).
LONG_FILES: dict[str, str] = {}  # file -> why it may stay over the limit
PACKAGES = {
    "export": "qaindex_export",
    "benchmarks": "benchmarks",
    "tools": "tools",
    "tests/robustness": "tests.robustness",
}
# every folder of Python code: each imports the others as packages, never by extending sys.path
CODE_FOLDERS = ("qaindex", "export", "benchmarks", "tools", "tests", "examples")


def module_names(folder: Path) -> dict[str, Path]:
    """``{dotted name below folder: path}`` of every ``*.py`` of ``folder`` and its subpackages
    (a package's ``__init__.py`` is named as the package; the folder's own is left out)."""
    names: dict[str, Path] = {}
    for path in sorted(folder.rglob("*.py")):
        parts = path.relative_to(folder).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        if parts:
            names[".".join(parts)] = path
    return names


def import_graph(folder: Path, package: str) -> dict[str, dict[str, int]]:
    """``{module: {imported module: first line}}`` for the modules of ``folder`` and its subpackages,
    named by their dotted path below it (``training.loop``).

    ``package`` is the name the folder is imported as; relative imports count too. An import
    resolves to the deepest module it names (``from ..networks import models`` →
    ``networks.models``; ``from ..networks.models import BallMap`` → ``networks.models``).
    """
    modules = module_names(folder)
    package_parts = package.split(".")
    graph: dict[str, dict[str, int]] = {}
    for me, path in modules.items():
        found: dict[str, int] = {}
        here = list(path.relative_to(folder).parent.parts)  # the package the module is in

        def add(parts: list[str], line: int, found: dict[str, int] = found, me: str = me) -> None:
            for end in range(len(parts), 0, -1):  # the deepest module the name reaches
                name = ".".join(parts[:end])
                if name in modules:
                    if name != me:
                        found.setdefault(name, line)
                    return

        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.ImportFrom):
                named = (node.module or "").split(".") if node.module else []
                if node.level > 0:
                    base = here[: len(here) - (node.level - 1)] + named
                elif named[: len(package_parts)] == package_parts:
                    base = named[len(package_parts) :]
                else:
                    continue
                for alias in node.names:  # from . import a / from .pkg import module / from .module import name
                    add([*base, alias.name], node.lineno)
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    parts = alias.name.split(".")
                    if parts[: len(package_parts)] == package_parts:
                        add(parts[len(package_parts) :], node.lineno)
        graph[me] = found
    return graph


def test_the_checker_finds_a_circle_behind_a_function_level_import(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text("from .b import x\n", encoding="utf-8")
    (tmp_path / "b.py").write_text("def f():\n    from pkg.c import y\n", encoding="utf-8")
    (tmp_path / "c.py").write_text("def g():\n    from . import a\n", encoding="utf-8")
    (tmp_path / "d.py").write_text("import pkg.a\nimport os\n", encoding="utf-8")
    graph = import_graph(tmp_path, "pkg")
    assert graph == {"a": {"b": 1}, "b": {"c": 2}, "c": {"a": 2}, "d": {"a": 1}}
    assert cycles(graph) == [["a", "b", "c"]]


def test_the_checker_follows_imports_across_subpackages(tmp_path: Path) -> None:
    for sub in ("one", "two"):
        (tmp_path / sub).mkdir()
        (tmp_path / sub / "__init__.py").write_text('"""A subpackage."""\n', encoding="utf-8")
    (tmp_path / "top.py").write_text("X = 1\n", encoding="utf-8")
    (tmp_path / "one" / "a.py").write_text("from ..two.b import y\nfrom ..top import X\n", encoding="utf-8")
    (tmp_path / "one" / "c.py").write_text("from . import a\nfrom ..two import b\n", encoding="utf-8")
    (tmp_path / "two" / "b.py").write_text("def f():\n    import pkg.one.c\n", encoding="utf-8")
    graph = import_graph(tmp_path, "pkg")
    assert graph["one.a"] == {"two.b": 1, "top": 2}
    assert graph["one.c"] == {"one.a": 1, "two.b": 2}
    assert graph["two.b"] == {"one.c": 2}
    assert cycles(graph) == [["one.a", "one.c", "two.b"]]


@pytest.mark.parametrize("folder", sorted(PACKAGES))
def test_no_import_circles(folder: str) -> None:
    graph = import_graph(ROOT / folder, PACKAGES[folder])
    assert graph, f"{folder}/ has no modules"
    found = cycles(graph)
    detail = {c: {m: graph[m] for m in c} for c in map(tuple, found)}
    assert not found, f"import circles in {folder}/: {detail}"


def test_the_export_subpackages_import_in_one_direction() -> None:
    """Between the subpackages of ``export/`` (a top-level module counts as its own node) the
    imports go one way too: networks below training, training below exporting and adaptation."""
    packages: dict[str, set[str]] = {}
    for module, imported in import_graph(ROOT / "export", "qaindex_export").items():
        mine = module.split(".")[0]
        packages.setdefault(mine, set()).update(o for name in imported if (o := name.split(".")[0]) != mine)
    assert {"networks", "training", "exporting", "adaptation", "embeddings"} <= packages.keys()
    found = cycles(packages)
    assert not found, f"subpackages of export/ that import each other: {found}"


@pytest.mark.parametrize("folder", sorted(PACKAGES))
def test_no_file_over_the_line_limit(folder: str) -> None:
    long = {
        p.relative_to(ROOT).as_posix(): n
        for p in sorted((ROOT / folder).rglob("*.py"))
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


def test_every_export_subpackage_says_its_job_and_installs() -> None:
    """Each folder of ``export/`` is a package with a docstring, listed in pyproject's packages."""
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]["packages"])
    folders = sorted(p.parent for p in (ROOT / "export").rglob("*.py"))
    for folder in folders:
        init = folder / "__init__.py"
        assert init.is_file(), f"{folder.relative_to(ROOT)}/ has no __init__.py"
        assert ast.get_docstring(ast.parse(init.read_text(encoding="utf-8"))), f"{init.relative_to(ROOT)}: say its job"
        name = ".".join(["qaindex_export", *folder.relative_to(ROOT / "export").parts])
        assert name in listed, f"{name} is not in pyproject.toml's [tool.setuptools] packages"


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
    """``python -m benchmarks.JOB.NAME``, ``python -m tools.NAME``: no file extends ``sys.path`` to import a sibling."""
    assert (ROOT / "benchmarks" / "__init__.py").is_file() and (ROOT / "tools" / "__init__.py").is_file()
    offenders = sys_path_edits(ROOT)
    assert not offenders, f"sys.path changed at {offenders}; import through the benchmarks or tools package"


def private_runtime_reads(root: Path, folders: tuple[str, ...]) -> list[str]:
    """``file:line name`` of every private name of ``qaindex`` imported or read through a module.

    Counted: ``from qaindex.x import _name`` and ``module._name`` where ``module`` was imported
    from ``qaindex`` (``import qaindex.x as module``, ``from qaindex import module``).
    """
    found = []
    for folder in folders:
        for path in sorted((root / folder).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
            modules: set[str] = set()
            for node in ast.walk(tree):
                if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "qaindex":
                    for alias in node.names:
                        if alias.name.startswith("_") and not alias.name.startswith("__"):
                            found.append(f"{path.relative_to(root)}:{node.lineno} {alias.name}")
                        modules.add(alias.asname or alias.name)
                elif isinstance(node, ast.Import):
                    modules.update(a.asname or a.name.split(".")[0] for a in node.names if a.name.startswith("qaindex"))
            for node in ast.walk(tree):
                if (
                    isinstance(node, ast.Attribute)
                    and node.attr.startswith("_")
                    and not node.attr.startswith("__")
                    and isinstance(node.value, ast.Name | ast.Attribute)
                    and ast.unparse(node.value).split(".")[0] in modules
                ):
                    found.append(f"{path.relative_to(root)}:{node.lineno} {ast.unparse(node)}")
    return found


def test_the_private_read_finder_finds_imports_and_module_reads(tmp_path: Path) -> None:
    (tmp_path / "benchmarks").mkdir()
    (tmp_path / "benchmarks" / "a.py").write_text(
        "import qaindex.search.fusion as fusion\nfrom qaindex.eval import _fit, metrics\nfrom qaindex import Ranker\n"
        "x = fusion._rule\ny = metrics.mrr\nz = metrics._ties\nr = Ranker.__name__\n",
        encoding="utf-8",
    )
    assert private_runtime_reads(tmp_path, ("benchmarks",)) == [
        "benchmarks/a.py:2 _fit",
        "benchmarks/a.py:4 fusion._rule",
        "benchmarks/a.py:6 metrics._ties",
    ]


def test_benchmarks_and_tools_use_the_runtime_public_names_only() -> None:
    """They measure the library as users call it: a name they need is public where it is shared."""
    offenders = private_runtime_reads(ROOT, ("benchmarks", "tools", "tests/robustness"))
    assert not offenders, f"private runtime names read at {offenders}"


def test_benchmarks_never_import_the_tools() -> None:
    """The tools (data preparation, the model builder) use the benchmarks' evaluation, not the other way."""
    found = [
        f"{path.relative_to(ROOT)}:{node.lineno}"
        for path in sorted((ROOT / "benchmarks").rglob("*.py"))
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path)))
        if (isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "tools")
        or (isinstance(node, ast.Import) and any(a.name.split(".")[0] == "tools" for a in node.names))
    ]
    assert not found, f"benchmarks import tools at {found}"

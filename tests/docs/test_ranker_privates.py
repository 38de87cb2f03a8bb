"""No module of ``qaindex/`` but ``ranker.py`` reads a private attribute of a ``Ranker``.

The Ranker hands its index down as a read-only :class:`~qaindex.search.state.IndexState`
(``ranker.state()`` outside it); what it keeps private stays inside ``qaindex/ranker.py``.

The rule, read from the source with :mod:`ast`: an expression *denotes a Ranker* when it is

- a name bound to a Ranker anywhere in the module: a parameter or variable annotated with a
  type that names ``Ranker`` (``Ranker``, ``Ranker | None``, ``"Ranker"``), or the target of
  an assignment, ``with ... as`` or walrus whose value is a call of ``Ranker`` or of one of
  its attributes (``Ranker(...)``, ``Ranker.load(...)``, ``Ranker.edit(...)``);
- or a name or attribute spelled as Rankers are named in this code base: ``ranker``,
  ``relative_ranker``, ``ranker2``, ``self.ranker`` (the word ``ranker`` between underscores
  or at the ends; ``reranker`` is another class and does not count).

A *private read* is ``X._name`` (one leading underscore or two, not a dunder such as
``__len__``; an assignment to it counts too) or ``getattr(X, "_name")`` (``setattr``,
``hasattr``, ``delattr``) with ``X`` denoting a Ranker. Binding a name is
module-wide, not per scope: a name that holds a Ranker in one function counts in all of them,
which can only flag more.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "qaindex"
OWNER = PACKAGE / "ranker.py"
_RANKER_WORD = re.compile(r"(^|_)ranker\d*(_|$)", re.IGNORECASE)


def _names_ranker(annotation: ast.expr | None) -> bool:
    if annotation is None:
        return False
    if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
        try:
            annotation = ast.parse(annotation.value, mode="eval").body
        except SyntaxError:
            return False
    return any(
        (isinstance(n, ast.Name) and n.id == "Ranker") or (isinstance(n, ast.Attribute) and n.attr == "Ranker")
        for n in ast.walk(annotation)
    )


def _makes_ranker(value: ast.expr | None) -> bool:
    """``Ranker(...)`` or ``Ranker.anything(...)``."""
    if not isinstance(value, ast.Call):
        return False
    func = value.func
    while isinstance(func, ast.Attribute):
        if func.attr == "Ranker":
            return True
        func = func.value
    return isinstance(func, ast.Name) and func.id == "Ranker"


def _bound_names(tree: ast.Module) -> set[str]:
    """Names bound to a Ranker anywhere in the module (see the module docstring)."""
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.arg) and _names_ranker(node.annotation):
            out.add(node.arg)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            if _names_ranker(node.annotation) or _makes_ranker(node.value):
                out.add(node.target.id)
        elif isinstance(node, ast.Assign) and _makes_ranker(node.value):
            out.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.NamedExpr) and _makes_ranker(node.value):
            out.add(node.target.id)
        elif isinstance(node, ast.withitem) and _makes_ranker(node.context_expr):
            if isinstance(node.optional_vars, ast.Name):
                out.add(node.optional_vars.id)
    return out


def _denotes_ranker(node: ast.expr, bound: set[str]) -> bool:
    if isinstance(node, ast.Name):
        return node.id in bound or bool(_RANKER_WORD.search(node.id))
    if isinstance(node, ast.Attribute):
        return bool(_RANKER_WORD.search(node.attr))
    return False


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def private_reads(source: str) -> list[tuple[int, str]]:
    """``(line, expression)`` of every read of a Ranker's private attribute in ``source``."""
    tree = ast.parse(source)
    bound = _bound_names(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _private(node.attr) and _denotes_ranker(node.value, bound):
            found.append((node.lineno, ast.unparse(node)))
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("getattr", "setattr", "hasattr", "delattr")
            and len(node.args) >= 2
            and isinstance(node.args[1], ast.Constant)
            and isinstance(node.args[1].value, str)
            and _private(node.args[1].value)
            and _denotes_ranker(node.args[0], bound)
        ):
            found.append((node.lineno, ast.unparse(node)))
    return sorted(found)


def test_the_rule_finds_private_reads_of_a_ranker() -> None:
    source = """
from qaindex import Ranker
def f(index: Ranker, other: "Ranker | None", ranker, relative_ranker):
    index._records
    other._vectors
    ranker._keys
    relative_ranker._coarse
    getattr(ranker, "_lexical")
def g(path):
    built = Ranker.build(path)
    built._lexical
    with Ranker.edit(path) as open_one:
        open_one._disk
    c.ranker._lexical
    setattr(ranker, "_coarse_stale", True)
"""
    found = [expr for _, expr in private_reads(source)]
    assert found == [
        "index._records",
        "other._vectors",
        "ranker._keys",
        "relative_ranker._coarse",
        "getattr(ranker, '_lexical')",
        "built._lexical",
        "open_one._disk",
        "c.ranker._lexical",
        "setattr(ranker, '_coarse_stale', True)",
    ]


def test_the_rule_leaves_other_objects_and_public_names_alone() -> None:
    source = """
def f(ranker, reranker, lexical, state):
    ranker.model, ranker.state().lexical, ranker.__len__()
    reranker._sessions
    lexical._offsets
    state.records
    self._lock
"""
    assert private_reads(source) == []


# the runtime, and the code that uses it as an application would: benchmarks, tools, examples,
# the robustness runs (the unit tests under tests/ may look inside, as white-box tests)
USERS = [PACKAGE, ROOT / "benchmarks", ROOT / "tools", ROOT / "examples", ROOT / "tests" / "robustness"]


def test_no_module_but_the_ranker_reads_its_privates() -> None:
    found = {}
    for path in sorted(p for folder in USERS for p in folder.rglob("*.py")):
        if path == OWNER:
            continue
        if reads := private_reads(path.read_text(encoding="utf-8")):
            found[str(path.relative_to(ROOT))] = reads
    assert found == {}, f"private Ranker attributes read outside qaindex/ranker.py (use ranker.state()): {found}"


def test_the_rule_counts_writes_as_reads() -> None:
    """``ranker._lexical = ...`` (what an update did before it returned a new state) is caught too."""
    assert private_reads("def build(cls):\n    ranker = cls()\n    ranker._lexical = 1\n") == [(3, "ranker._lexical")]

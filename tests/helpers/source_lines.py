"""Lines of code in Python source, for the layout tests' size caps.

A line counts when it holds part of a statement: blank lines, comments and docstrings (the
string that opens a module, class or function) do not. The cap measures how much code a reader
must follow, so moving prose into a docstring never pushes a module over it, and reformatting
never hides code from it. Found with :mod:`ast` (the docstrings) and :mod:`tokenize` (the rest).
"""

from __future__ import annotations

import ast
import io
import tokenize

# tokens that are layout or commentary, never code
_NOT_CODE = {
    tokenize.COMMENT,
    tokenize.NL,
    tokenize.NEWLINE,
    tokenize.INDENT,
    tokenize.DEDENT,
    tokenize.ENCODING,
    tokenize.ENDMARKER,
}
FORMATTER_PRAGMAS = ("fmt: skip", "fmt: off", "fmt: on", "yapf: disable")


def docstring_lines(tree: ast.Module) -> set[int]:
    """Line numbers of every module, class and function docstring of ``tree``."""
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and node.body:
            first = node.body[0]
            if (
                isinstance(first, ast.Expr)
                and isinstance(first.value, ast.Constant)
                and isinstance(first.value.value, str)
            ):
                lines.update(range(first.lineno, (first.end_lineno or first.lineno) + 1))
    return lines


def code_lines(source: str) -> int:
    """How many lines of ``source`` hold code (a multi-line string that is not a docstring counts whole)."""
    docs = docstring_lines(ast.parse(source))
    lines: set[int] = set()
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type not in _NOT_CODE:
            lines.update(line for line in range(token.start[0], token.end[0] + 1) if line not in docs)
    return len(lines)


def formatter_pragmas(source: str) -> list[int]:
    """Line numbers of the comments that switch the formatter off (``# fmt: skip`` and the like)."""
    return [
        token.start[0]
        for token in tokenize.generate_tokens(io.StringIO(source).readline)
        if token.type == tokenize.COMMENT and any(p in token.string for p in FORMATTER_PRAGMAS)
    ]

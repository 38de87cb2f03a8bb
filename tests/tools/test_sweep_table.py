"""Every table of ``tools/sweep_table.py`` in the docs equals what the command written beside it prints."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from tools.sweep_table import table_for

ROOT = Path(__file__).resolve().parents[2]
COMMAND = re.compile(r"`python -m tools\.sweep_table ([^`]+)`")


def commands() -> list[tuple[str, str]]:
    return [
        (page.name, found.group(1))
        for page in sorted((ROOT / "docs").glob("*.md"))
        for found in COMMAND.finditer(page.read_text(encoding="utf-8"))
    ]


def test_the_docs_hold_a_sweep_table_command() -> None:
    assert commands(), "no `python -m tools.sweep_table ...` command in docs/"


@pytest.mark.parametrize(("page", "command"), commands())
def test_sweep_table_in_docs_equals_its_command(page: str, command: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    table = table_for(shlex.split(command))
    assert table in (ROOT / "docs" / page).read_text(encoding="utf-8")

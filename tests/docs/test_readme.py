"""The README is for users: short, its commands are the ones CI runs, its examples run, and no
page carries internal references (issue numbers, paths outside the repository)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from qaindex.cli import main

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text(encoding="utf-8")
PAGES = [ROOT / "README.md", ROOT / "CHANGES.md", *sorted((ROOT / "docs").glob("*.md"))]


def _blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", README, flags=re.S)


def test_readme_is_short() -> None:
    assert len(README.splitlines()) <= 250


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_no_internal_references(page: Path) -> None:
    text = page.read_text(encoding="utf-8")
    assert not re.search(r"(?i)\bissues? ?#\d+|issue's target|\.\./shared", text), page
    assert not re.search(r"(?im)^\s*[-|] ?\**missed\b|\| \*\*missed\*\* \|", text), page


def test_readme_test_command_is_the_one_ci_runs() -> None:
    (command,) = [b.strip() for b in _blocks("bash") if "pytest" in b and "pip install torch==" in b]
    pip = re.search(r"\.venv/bin/pip (install .*?) &&", command)
    assert pip is not None
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8").replace("pip install -q ", "pip install ")
    assert f".venv-ci/bin/pip {pip.group(1)}\n" in ci
    pytest_args = command.split(".venv/bin/python -m pytest", 1)[1].strip()
    assert "-n auto" in pytest_args  # parallel workers: the suite takes minutes, not a quarter of an hour
    assert f".venv-ci/bin/python -m pytest {pytest_args} " in ci


def test_readme_quickstart_builds_and_searches_with_the_built_in_model() -> None:
    (command,) = [b.strip() for b in _blocks("bash") if "qaindex build examples/faq.jsonl &&" in b]
    assert command.startswith("python3 -m venv .venv && .venv/bin/pip install -e '.[cpu]' && ")
    assert command.endswith('.venv/bin/qaindex search "How do I reset my password?"')


def test_readme_install_advice() -> None:
    assert "pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu" in README
    assert set(re.findall(r"torch==[\d.]+", README)) == {"torch==2.13.0"}  # one version, the one CI installs
    assert "CUDA 13 / cuDNN 9" in README and "CUDA 12" in README
    assert "only costs download size" in README
    assert "pip install 'qaindex" not in README  # not on a package index: install from a checkout
    assert "pip install -e '.[cpu]'" in README


def test_readme_documents_get_and_the_scores_subsection() -> None:
    assert "ranker.get(" in README
    assert "## Scores" in README and "min_score" in README.split("## Scores", 1)[1].split("\n## ", 1)[0]


def _python_block(marker: str) -> str:
    (block,) = [b for b in _blocks("python") if marker in b]
    return block


def test_readme_python_api_example_runs(tmp_path: Path) -> None:
    code = _python_block("qaindex.Ranker.build(")  # run as written, from a folder holding examples/
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    quickstart = ["build", str(ROOT / "examples" / "faq.jsonl"), "--index", str(tmp_path / "qaindex-index")]
    assert CliRunner().invoke(main, quickstart).exit_code == 0  # run after the quickstart, as the README reads
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0].startswith("account-reset-password ")
    import qaindex

    edited = qaindex.Ranker.load(tmp_path / "qaindex-index")
    faq = [
        json.loads(line)["id"] for line in (ROOT / "examples" / "faq.jsonl").read_text(encoding="utf-8").splitlines()
    ]
    removed = re.findall(r'r\.remove\(\["([^"]+)"\]\)', code)
    assert removed and set(removed) <= set(faq)  # the snippet removes answers the example FAQ has
    assert sorted(str(r.id) for r in edited.records()) == sorted({*faq, "new-1"} - set(removed))


def test_the_readme_names_only_files_the_repository_has() -> None:
    named = set(re.findall(r"\b((?:examples|docs|benchmarks|tools)/[\w./-]+\.(?:jsonl|py|md))\b", README))
    assert "examples/faq-test.jsonl" in named
    assert [p for p in sorted(named) if not (ROOT / p).is_file()] == []


@pytest.mark.parametrize("framework", ["langchain", "llamaindex"])
def test_readme_integration_examples_run(framework: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("langchain_core" if framework == "langchain" else "llama_index.core")
    import qaindex

    qaindex.Ranker.build(ROOT / "examples" / "faq.jsonl").save(tmp_path / "qaindex-index")
    monkeypatch.chdir(tmp_path)
    code = _python_block("integrations.langchain" if framework == "langchain" else "MockLLM")
    if framework == "llamaindex":
        assert "Settings.llm = MockLLM()" in code
        code = code.replace("print(", "answer = (")
    namespace: dict[str, object] = {}
    exec(compile(code, "README.md", "exec"), namespace)
    if framework == "langchain":
        docs = namespace["docs"]
        assert docs and all(d.metadata["category"] == "billing" for d in docs)  # type: ignore[attr-defined]
    else:
        assert isinstance(namespace["answer"], str) and namespace["answer"]

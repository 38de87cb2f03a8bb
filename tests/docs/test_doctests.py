"""Every example in the runtime's docstrings runs, against the shipped default model.

Examples run in a scratch directory that holds ``examples/`` (the FAQ), a small labelled
file ``test.jsonl`` (FAQ questions against their answers) and nothing else, with ``ranker``
(the FAQ indexed with the default model, built fresh for each docstring) and ``model`` (the
default model) in scope. No example is skipped: a docstring that shows an id, a shape or a
number shows what the code does today.
"""

from __future__ import annotations

import doctest
import importlib
import json
import pkgutil
from pathlib import Path

import pytest

import qaindex
from qaindex import Model, Ranker

ROOT = Path(__file__).resolve().parents[2]
MODULES = sorted(
    name for info in pkgutil.walk_packages(qaindex.__path__, "qaindex.") if not (name := info.name).endswith("__main__")
)
OPTIONAL = {"qaindex.integrations.langchain": "langchain_core", "qaindex.integrations.llamaindex": "llama_index.core"}


@pytest.fixture(scope="module")
def default_model() -> Model:
    return Model.load(None, device="cpu")


@pytest.fixture()
def scratch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    records = [json.loads(line) for line in (ROOT / "examples" / "faq.jsonl").read_text(encoding="utf-8").splitlines()]
    lines = []
    for i, rec in enumerate(records[:6]):
        for j, other in enumerate(records[:6]):
            label = int(i == j)
            lines.append(
                {
                    "qid": f"q{i}",
                    "question": rec["questions"][0],
                    "aid": other["id"],
                    "answer": other["answer"],
                    "label": label,
                }
            )
    (tmp_path / "test.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines), encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.mark.parametrize("name", [qaindex.__name__, *MODULES])
def test_docstring_examples_run(name: str, scratch: Path, default_model: Model) -> None:
    if name in OPTIONAL:
        pytest.importorskip(OPTIONAL[name])
    if name == "qaindex.eval.inspect":
        pytest.importorskip("matplotlib")
    module = importlib.import_module(name)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    tests = [t for t in doctest.DocTestFinder(exclude_empty=True).find(module, name) if t.examples]
    for test in tests:
        if "ranker" in test.docstring or "model" in test.docstring:  # type: ignore[operator]
            test.globs["model"] = default_model
            test.globs["ranker"] = Ranker.build("examples/faq.jsonl", model=default_model)
        runner.run(test)
    result = runner.summarize(verbose=False)
    assert result.failed == 0, f"{result.failed} of {result.attempted} examples failed in {name} (output above)"

"""A model whose encoder emits NaN or infinite vectors is refused, and blamed (not the input).

The tiny broken model (``tests/helpers/onnx_models.broken_model``) encodes the word ``poison`` to NaN
(or inf) and every other word to a finite vector, so one model shows every path: build from
records and from a file, add, and a question.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from helpers.onnx_models import broken_model

import qaindex.cli
from qaindex import Model, ModelFormatError, QueryError, Ranker

WORDS = ["reset", "password", "refund", "order"]
ANSWERS = [{"id": i, "answer": w} for i, w in enumerate(WORDS)]


def _blame(model: Path, role: str, which: str) -> str:
    return (
        f"{model}: the model's {role} encoder returned NaN or infinite values for {which}; "
        "the model is broken, not the text: re-export or retrain it, or use another model"
    )


@pytest.fixture(scope="module", params=["nan", "inf", "-inf"])
def model(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return broken_model(tmp_path_factory.mktemp("broken") / "m", WORDS, ["poison"], value=float(request.param))


@pytest.mark.parametrize("geometry", ["poincare", "cosine"])
def test_the_broken_model_is_what_it_says(tmp_path: Path, geometry: str) -> None:
    path = broken_model(tmp_path / "m", WORDS, ["poison"], geometry=geometry)
    m = Model.load(path, device="cpu")
    session = m._graphs.encoders["answer"].small
    ids, mask = m.tokenizer.pad([m.tokenizer.encode("reset poison", 8), m.tokenizer.encode("reset", 8)])
    raw = session.run(None, {"input_ids": ids, "attention_mask": mask})[0]
    assert np.isnan(raw[0]).all() and np.isfinite(raw[1]).all()


def test_build_from_records_refuses_the_model(model: Path) -> None:
    with pytest.raises(ModelFormatError) as info:
        Ranker.build([*ANSWERS, {"id": "p", "answer": "order poison"}], model=model, device="cpu")
    assert str(info.value) == _blame(model, "answer", "text 4 ('order poison')")


def test_build_from_a_file_refuses_the_model(model: Path, tmp_path: Path) -> None:
    corpus = tmp_path / "c.jsonl"
    lines = [*ANSWERS, {"id": "p", "answer": "poison refund"}, {"id": "q", "answer": "reset"}]
    corpus.write_text("".join(json.dumps(r) + "\n" for r in lines), encoding="utf-8")
    with pytest.raises(ModelFormatError) as info:
        Ranker.build(corpus, model=model, device="cpu")
    assert str(info.value) == _blame(model, "answer", "text 4 ('poison refund')")


def test_add_refuses_and_keeps_the_index(model: Path) -> None:
    ranker = Ranker.build(ANSWERS, model=model, device="cpu")
    with pytest.raises(ModelFormatError) as info:
        ranker.add([{"id": "new", "answer": "reset"}, {"id": "p", "answer": "poison"}])
    assert str(info.value) == _blame(model, "answer", "text 1 ('poison')")
    assert len(ranker) == 4 and [h.id for h in ranker.search("refund", k=1)] == [2]


def test_a_question_the_model_cannot_encode_blames_the_model(model: Path) -> None:
    ranker = Ranker.build(ANSWERS, model=model, device="cpu")
    with pytest.raises(ModelFormatError) as info:
        ranker.search("poison password")
    assert not isinstance(info.value, QueryError)
    assert str(info.value) == _blame(model, "question", "text 0 ('poison password')")
    with pytest.raises(ModelFormatError, match=r"for text 1 \('poison'\)"):
        ranker.search_batch(["refund", "poison"])


def test_cli_build_exits_1_blaming_the_model(model: Path, tmp_path: Path) -> None:
    corpus = tmp_path / "c.jsonl"
    corpus.write_text(json.dumps({"id": "p", "answer": "poison"}) + "\n", encoding="utf-8")
    index = tmp_path / "ix"
    result = CliRunner().invoke(qaindex.cli.main, ["build", str(corpus), "--index", str(index), "--model", str(model)])
    assert result.exit_code == 1
    assert result.output.strip().splitlines() == ["Error: " + _blame(model, "answer", "text 0 ('poison')")]
    assert not (index / "manifest.json").exists()

"""Damaged and hostile files are QAIndexErrors naming the file, never tracebacks: ``.npy``
headers (numpy parses them with tokenize and ast), deeply nested JSON, damaged or missing
records with ``verify=False``, model manifests out of range, scorers of the wrong shape or that
fail inside onnxruntime."""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from conftest import FAQ
from helpers.onnx_models import _const, _model
from onnx import TensorProto, helper

from qaindex import IndexFormatError, ModelFormatError, Ranker
from qaindex.cli import main
from qaindex.model import Model

DEEP = "[" * 100_000 + "]" * 100_000


@pytest.fixture(scope="module")
def hybrid_index(faq_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    target = tmp_path_factory.mktemp("ix") / "ix"
    Ranker.build(FAQ, model=faq_model, hybrid=True).save(target)
    return target


@pytest.fixture()
def index(hybrid_index: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(hybrid_index, tmp_path / "ix", symlinks=True))


def _snapshot(index: Path) -> Path:
    return index / json.loads((index / "manifest.json").read_text())["snapshot"]


def _flip_header(path: Path, at: int, value: int) -> None:
    raw = bytearray(path.read_bytes())
    raw[at] = value
    path.write_bytes(bytes(raw))


def test_every_damaged_npy_header_is_a_value_error(tmp_path: Path) -> None:
    # numpy's header parser raises TokenError, SyntaxError, TypeError, ValueError ...: read_array
    # turns each into one ValueError (its callers name the file), and reads an intact file
    from qaindex.store.atomic_files import read_array

    buf = io.BytesIO()
    np.save(buf, np.arange(6, dtype=np.int64))
    raw = buf.getvalue()
    path = tmp_path / "a.npy"
    seen = set()
    for at in range(8, 128):
        for value in (0, 13, 34, 40, 44, 66, 91, 123, 255):
            damaged = bytearray(raw)
            damaged[at] = value
            path.write_bytes(bytes(damaged))
            try:
                array = read_array(path)
            except ValueError as exc:
                assert str(exc).startswith("not a valid .npy file: "), exc
                seen.add(str(exc).split(":")[1].strip())
            else:
                assert array.shape == (6,) or array.dtype != np.int64 or array.size != 6
    assert {"TokenError", "SyntaxError", "ValueError"} <= seen
    path.write_bytes(raw)
    assert read_array(path).tolist() == list(range(6))


@pytest.mark.parametrize("name", ["vectors.npy", "records.offsets.npy", "lexical/terms.npy"])
def test_a_damaged_npy_header_names_the_file_without_verify(index: Path, name: str) -> None:
    path = _snapshot(index) / name
    _flip_header(path, 10, 0)  # the header's "{" becomes NUL: tokenize's "EOF in multi-line statement"
    with pytest.raises(IndexFormatError) as err:
        Ranker.load(index, verify=False)
    assert str(err.value).startswith(f"{path}: cannot be read (not a valid .npy file: TokenError: ")
    assert str(err.value).endswith(
        "the index is corrupted, rebuild it" + (" with --hybrid" if "lexical" in name else "")
    )


def test_deeply_nested_vocab_json_names_the_file(index: Path) -> None:
    path = _snapshot(index) / "lexical" / "vocab.json"
    path.write_text(DEEP)
    with pytest.raises(IndexFormatError) as err:
        Ranker.load(index, verify=False)
    assert str(err.value) == (
        f"{path}: cannot be read (JSON nested too deeply); the index is corrupted, rebuild it with --hybrid"
    )


def test_deeply_nested_model_manifest_names_the_file(faq_model: Path, index: Path, tmp_path: Path) -> None:
    model = Path(shutil.copytree(faq_model, tmp_path / "m"))
    (model / "manifest.json").write_text(DEEP)
    message = f"{model / 'manifest.json'}: JSON nested too deeply to read; the model directory is corrupted, rebuild it"
    with pytest.raises(ModelFormatError) as err:
        Model.load(model, verify=False)
    assert str(err.value) == message
    (tmp_path / "none.jsonl").write_text(json.dumps(FAQ[0]) + "\n")
    result = CliRunner().invoke(
        main, ["build", str(tmp_path / "none.jsonl"), "--model", str(model), "--index", str(tmp_path / "ix2")]
    )
    assert result.exit_code == 1 and result.output == f"Error: {message}\n"
    inside = _snapshot(index) / "model" / "manifest.json"
    inside.write_text(DEEP)
    with pytest.raises(ModelFormatError) as err:
        Ranker.load(index, verify=False)
    assert str(err.value).startswith(f"{inside}: JSON nested too deeply to read")


def test_a_filtered_search_over_a_damaged_record_names_the_line(index: Path) -> None:
    path = _snapshot(index) / "records.jsonl"
    lines = path.read_bytes().splitlines(keepends=True)
    lines[1] = lines[1].replace(b'"category": ', b'"category"  ', 1)  # same length: offsets still hold
    path.write_bytes(b"".join(lines))
    ranker = Ranker.load(index, verify=False)
    with pytest.raises(IndexFormatError) as err:
        ranker.search("refund", k=3, where={"category": "billing"})
    assert str(err.value).startswith(f"{path}: line 2: not strict JSON (Expecting ':' delimiter")
    assert str(err.value).endswith("; the index is corrupted, rebuild it")


def test_a_damaged_record_metadata_type_names_the_line(index: Path) -> None:
    path = _snapshot(index) / "records.jsonl"
    lines = path.read_bytes().splitlines(keepends=True)
    assert lines[2].rstrip().endswith(b'"metadata": {"category": "data"}}')
    lines[2] = lines[2].replace(b'{"category": "data"}', b'["category", "data"]', 1)
    path.write_bytes(b"".join(lines))
    with pytest.raises(IndexFormatError) as err:
        Ranker.load(index, verify=False).search("export", k=3, where={"category": "data"})
    assert str(err.value).startswith(f"{path}: line 3: ")


def test_a_missing_records_file_names_it(index: Path) -> None:
    path = _snapshot(index) / "records.jsonl"
    path.unlink()
    with pytest.raises(IndexFormatError) as err:
        Ranker.load(index, verify=False)
    assert str(err.value) == f"{path}: cannot be read (No such file or directory); the index is corrupted, rebuild it"


@pytest.mark.parametrize("dimension", [0, 65537, 2_000_000_000, 2e9])
def test_a_model_dimension_out_of_range_is_refused_at_load(faq_model: Path, tmp_path: Path, dimension: float) -> None:
    model = Path(shutil.copytree(faq_model, tmp_path / "m"))
    manifest = json.loads((model / "manifest.json").read_text())
    (model / "manifest.json").write_text(json.dumps({**manifest, "dimension": dimension}))
    with pytest.raises(ModelFormatError) as err:
        Model.load(model, verify=False)
    if isinstance(dimension, float):
        assert (
            str(err.value)
            == f'{model / "manifest.json"}: field "dimension" has an invalid value 2000000000.0; re-export the model'
        )
    else:
        assert str(err.value) == (
            f'{model / "manifest.json"}: field "dimension" must be an integer in [1, 65536], got {dimension}; '
            "re-export the model"
        )


def _scorer(nodes: list, score_type: int = TensorProto.FLOAT) -> bytes:  # type: ignore[type-arg]
    inputs = [
        helper.make_tensor_value_info("query", TensorProto.FLOAT, ["n", "dim"]),
        helper.make_tensor_value_info("candidates", TensorProto.FLOAT, ["n", "m", "dim"]),
    ]
    outputs = [
        helper.make_tensor_value_info("score", score_type, ["s"]),
        helper.make_tensor_value_info("distance", TensorProto.FLOAT, ["d"]),
    ]
    return _model([_const("axis_last", np.array([-1], dtype=np.int64)), *nodes], inputs, outputs)


_DISTANCE = helper.make_node("ReduceSum", ["candidates", "axis_last"], ["distance"], keepdims=0)  # (n, m)
HOSTILE_SCORERS = {
    # score (n, dim) instead of (n, m)
    "query": (_scorer([_DISTANCE, helper.make_node("Identity", ["query"], ["score"])]), "score of shape (1, 6)"),
    # one score for all
    "scalar": (
        _scorer([_DISTANCE, helper.make_node("ReduceSum", ["distance"], ["score"], keepdims=0)]),
        "score of shape ()",
    ),
    # booleans are not numbers
    "bool": (
        _scorer([_DISTANCE, helper.make_node("Cast", ["distance"], ["score"], to=TensorProto.BOOL)], TensorProto.BOOL),
        ") (bool), expected",
    ),
    # a 256 GB allocation: onnxruntime fails, the model is named
    "huge": (
        _scorer(
            [
                _DISTANCE,
                _const("shape", np.array([2**36], dtype=np.int64)),
                helper.make_node("ConstantOfShape", ["shape"], ["score"]),
            ]
        ),
        "onnxruntime failed to run this graph (",
    ),
}


@pytest.mark.parametrize("name", sorted(HOSTILE_SCORERS))
def test_a_hostile_scorer_is_a_model_error_naming_it(faq_model: Path, tmp_path: Path, name: str) -> None:
    graph, message = HOSTILE_SCORERS[name]
    model = Path(shutil.copytree(faq_model, tmp_path / "m"))
    (model / "scorer.onnx").write_bytes(graph)
    with pytest.raises(ModelFormatError) as err:  # refused by the build's check of the scorer, naming it
        Ranker.build(FAQ, model=Model.load(model, verify=False)).search("reset password", k=2)
    assert f"{model / 'scorer.onnx'}: " in str(err.value)
    assert message in str(err.value)
    assert "\n" not in str(err.value)

"""Out-of-range values in checksum-valid files are refused where they are read, naming the file,
the field and the value (``qaindex.store.field_ranges``); build and save apply the same checks.

Each damaged index here is re-signed (the files table and the manifest's checksum recomputed),
as an index copied from elsewhere would be: only the value is wrong.
"""

from __future__ import annotations

import json
import math
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner
from helpers.onnx_models import faulty_model

import qaindex.cli
from qaindex import IndexFormatError, Model, ModelFormatError, QueryError, Ranker
from qaindex.search.fusion import Fusion
from qaindex.store import field_ranges
from qaindex.store.atomic_files import file_entry
from qaindex.store.field_ranges import FUSION, LEXICAL, Range, check_term_counts
from qaindex.store.index_format import manifest_checksum

ANSWERS = [
    "Open settings and choose reset password to get a link by mail.",
    "Refunds reach your card within five working days of the return.",
    "Orders ship from the warehouse within two days of payment.",
    "Change the delivery address before the order ships.",
    "The invoice is attached to the confirmation mail of each order.",
    "Cancel a subscription from the billing page at any time.",
]
RECORDS = [{"id": i, "answer": a} for i, a in enumerate(ANSWERS * 5)]
for i, r in enumerate(RECORDS):
    r["id"] = f"a{i}"
REBUILD = "the index is corrupted, rebuild it"
REFIT = "refit it with `python -m tools.fit_default_fusion` or remove the field"
RECALIBRATE = "recalibrate the model with `qaindex calibrate`, or remove the field"


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return Ranker.build(RECORDS, hybrid=True, device="cpu").save(tmp_path_factory.mktemp("saved") / "ix")


@pytest.fixture()
def index(saved: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(saved, tmp_path / "ix"))


def _snapshot(index: Path) -> Path:
    return index / json.loads((index / "manifest.json").read_text())["snapshot"]


def _resign(index: Path, *names: str) -> None:
    """Make the index manifest vouch for the files ``names`` as they are now."""
    manifest = json.loads((index / "manifest.json").read_text())
    snap = index / manifest["snapshot"]
    for name in names:
        manifest["files"][name] = file_entry(snap / name)
        if name == "model/manifest.json":
            manifest["model"]["manifest_sha256"] = manifest["files"][name]["sha256"]
    manifest["checksum"] = manifest_checksum(manifest)
    (index / "manifest.json").write_text(json.dumps(manifest))


def _edit_json(index: Path, name: str, change: Callable[[dict[str, Any]], None]) -> Path:
    path = _snapshot(index) / name
    obj = json.loads(path.read_text())
    change(obj)
    path.write_text(json.dumps(obj, ensure_ascii=False))
    _resign(index, name)
    return path


def _load_error(index: Path, error: type[Exception], verify: bool | str = True) -> str:
    with pytest.raises(error) as info:
        Ranker.load(index, device="cpu", verify=verify)
    return str(info.value)


def _cli_info_verify(index: Path) -> str:
    result = CliRunner().invoke(qaindex.cli.main, ["info", "--index", str(index), "--verify", "--device", "cpu"])
    assert result.exit_code == 1 and "Traceback" not in result.output
    return result.output


# -- the BM25 index: lexical/vocab.json ---------------------------------------------------------
@pytest.mark.parametrize(
    ("field", "value", "shown", "valid"),
    [
        ("b", 5, "5", "outside [0, 1]"),
        ("b", -0.25, "-0.25", "outside [0, 1]"),
        ("k1", 1e308, "1e+308", "outside [0, 10]"),
        ("k1", -1.0, "-1.0", "outside [0, 10]"),
        ("k1", "1.5", "'1.5'", "not a number in [0, 10]"),
    ],
)
def test_bm25_parameters_out_of_range_are_refused(index: Path, field: str, value: Any, shown: str, valid: str) -> None:
    path = _edit_json(index, "lexical/vocab.json", lambda meta: meta.update({field: value}))
    expected = f'{path}: field "{field}" is {shown}, {valid}; {REBUILD} with --hybrid'
    assert _load_error(index, IndexFormatError) == expected
    assert _load_error(index, IndexFormatError, verify=False) == expected  # a field check, not a scan
    assert f'field "{field}" is {shown}' in _cli_info_verify(index)


@pytest.mark.parametrize(
    ("ratio", "message"),
    [
        ({"ratio": 1e308}, 'field "dense_ratio.ratio" is 1e+308, outside [0, 2000]'),
        ({"ratio": 0.9, "pool": 2**31 - 1}, 'field "dense_ratio.pool" is 2147483647, outside [1, 2000]'),
        ({"ratio": 0.9, "questions": 2.5}, 'field "dense_ratio.questions" is 2.5, not an integer in [1, 200]'),
        ({"ratio": 0.9, "dense_mrr": 3.0}, 'field "dense_ratio.dense_mrr" is 3.0, outside [0, 1]'),
        (
            {"ratio": 0.9, "answers": 2**31 - 1},
            'field "dense_ratio.answers" is 2147483647, but the index has 30 answers (add and remove measure the '
            "ratio again beyond a change of 10%)",
        ),
        (
            {"ratio": 0.9, "answers": "30"},
            "field \"dense_ratio.answers\" is '30', not an integer in [1, 1099511627776]",
        ),
    ],
)
def test_a_dense_ratio_out_of_range_is_refused(index: Path, ratio: dict[str, Any], message: str) -> None:
    path = _edit_json(index, "lexical/vocab.json", lambda meta: meta.update(dense_ratio=ratio))
    assert _load_error(index, IndexFormatError) == f"{path}: {message}; {REBUILD} with --hybrid"


def test_term_counts_beyond_the_answer_are_refused(index: Path) -> None:
    path = _snapshot(index) / "lexical" / "counts.npy"
    counts = np.load(path)
    end = int(np.load(path.with_name("offsets.npy"))[1])
    total = 2**31 - 1 + int(counts[1:end].sum())
    counts[0] = 2**31 - 1  # the first term of answer 0
    np.save(path, counts)
    _resign(index, "lexical/counts.npy")
    line = len((_snapshot(index) / "records.jsonl").read_bytes().splitlines(keepends=True)[0])
    assert _load_error(index, IndexFormatError) == (
        f"{path}: answer 0 (line 1 of records.jsonl) counts {total} BM25 terms, more than its line's {line} "
        f"bytes can hold; {REBUILD} with --hybrid"
    )


def test_check_term_counts_sums_in_64_bits() -> None:
    counts = np.array([2**31 - 1, 2**31 - 1, 1], dtype=np.int32)  # wraps to a negative sum in int32
    offsets = np.array([0, 2, 3])
    assert check_term_counts(counts, offsets, np.array([100, 100])) == 0
    assert check_term_counts(np.array([3, 4, 1], np.int32), offsets, np.array([7, 1])) is None


# -- the model manifest: fusion and calibration (in an index's model copy, and in a model directory) --
@pytest.mark.parametrize(
    ("fusion", "message"),
    [
        ({"rule": "adaptive", "score": {"bias": 1e308, "dense": 0.3, "bm25": 2.0, "fused": 5.0}},
         'field "fusion.score.bias" is 1e+308, outside [-40, 40]'),
        ({"rule": "adaptive", "b": 1e308}, 'field "fusion.b" is 1e+308, outside [-1000, 1000]'),
        ({"rule": "rrf", "c": 0}, 'field "fusion.c" is 0, outside (0, 1e+06]'),
        ({"rule": "adaptive", "terms": 0}, 'field "fusion.terms" is 0, outside (0, 1e+06]'),
        ({"rule": "magic"}, "field \"fusion.rule\" is 'magic', not one of rrf, convex, adaptive"),
        ({"rule": "adaptive", "a": math.nan}, 'field "fusion.a" is nan, outside [-1000, 1000]'),
        ({"rule": "convex", "weight": 1.5}, 'field "fusion.weight" is 1.5, outside [0, 1]'),
        ({"rule": "adaptive", "score": [0.0, 1.0, 0.0, 1e4]}, 'field "fusion.score.fused" is 10000.0, outside'),
    ],
)  # fmt: skip
def test_a_fusion_out_of_range_is_refused_at_load(index: Path, fusion: dict[str, Any], message: str) -> None:
    path = _edit_json(index, "model/manifest.json", lambda m: m.update(fusion=fusion))
    got = _load_error(index, ModelFormatError)
    assert got.startswith(f"{path}: {message}") and got.endswith(REFIT)
    assert message in _cli_info_verify(index)
    # a model directory is refused by Model.load, before any search
    with pytest.raises(ModelFormatError) as info:
        Model.load(path.parent, device="cpu", verify=False)
    assert str(info.value) == got


@pytest.mark.parametrize(
    ("calibration", "message"),
    [
        ({"method": "platt", "a": 1e308, "b": 0.0}, 'field "calibration.a" is 1e+308, outside [0, 10000]'),
        ({"method": "platt", "a": 1.0, "b": -1e308}, 'field "calibration.b" is -1e+308, outside [-1e+06, 1e+06]'),
        ({"method": "platt", "a": 1.0, "b": 0.0, "c": 1e9}, 'field "calibration.c" is 1000000000.0, outside [0, 10000]'),
        ({"method": "isotonic", "x": [0.0, 1e300], "y": [0.1, 0.9]}, 'field "calibration.x" is 1e+300, outside'),
    ],
)  # fmt: skip
def test_a_calibration_out_of_range_is_refused_at_load(index: Path, calibration: dict[str, Any], message: str) -> None:
    path = _edit_json(index, "model/manifest.json", lambda m: m.update(calibration=calibration))
    got = _load_error(index, ModelFormatError)
    assert got.startswith(f"{path}: {message}") and got.endswith(RECALIBRATE)


def test_the_api_takes_the_same_fusion_ranges() -> None:
    with pytest.raises(QueryError, match=r"the rrf constant c must be a number in \(0, 1e\+06\], got 0"):
        Fusion("rrf", c=0)
    with pytest.raises(QueryError, match=r"the adaptive constant b must be a number in \[-1000, 1000\]"):
        Fusion("adaptive", b=1e308)
    with pytest.raises(QueryError, match=r"score calibration must be 4 or 5 finite numbers \(bias in \[-40, 40\]"):
        Fusion("adaptive", score=(1e308, 0.0, 0.0, 0.0))
    assert Fusion("adaptive", terms=math.inf).terms == math.inf


# -- records.jsonl ---------------------------------------------------------------------------------
def _replace_line(index: Path, row: int, line: bytes) -> Path:
    snap = _snapshot(index)
    lines = (snap / "records.jsonl").read_bytes().splitlines(keepends=True)
    lines[row] = line
    (snap / "records.jsonl").write_bytes(b"".join(lines))
    offsets = np.zeros(len(lines) + 1, np.int64)
    np.cumsum([len(x) for x in lines], out=offsets[1:])
    np.save(snap / "records.offsets.npy", offsets)
    _resign(index, "records.jsonl", "records.offsets.npy")
    return snap / "records.jsonl"


@pytest.mark.parametrize(
    ("line", "message"),
    [
        (b'{"id": 1180591620717411303424, "answer": "x", "questions": [], "metadata": {}}\n',
         'field "id" is 1180591620717411303424, outside [-9223372036854775808, 9223372036854775807]'),
        (b'{"id": -9223372036854775809, "answer": "x", "questions": [], "metadata": {}}\n',
         'field "id" is -9223372036854775809, outside [-9223372036854775808, 9223372036854775807]'),
        (b'{"id": "a\\ud800", "answer": "x", "questions": [], "metadata": {}}\n',
         'a string holds a lone surrogate (not valid Unicode), in field "id"'),
        (b'{"id": "z", "answer": "x\\uDC00y", "questions": [], "metadata": {}}\n',
         'a string holds a lone surrogate (not valid Unicode), in field "answer"'),
        (b'{"id": "z", "answer": "x", "questions": [], "metadata": {"k": ["\\udbff"]}}\n',
         'a string holds a lone surrogate (not valid Unicode), in field "metadata"'),
    ],
)  # fmt: skip
def test_a_record_value_out_of_range_is_refused(index: Path, line: bytes, message: str) -> None:
    path = _replace_line(index, 3, line)
    expected = f"{path}: line 4: {message}; {REBUILD}"
    assert _load_error(index, IndexFormatError, verify="full").startswith(expected)
    assert message in _cli_info_verify(index)
    for verify in (True, False):  # no scan: refused when the record is read
        ranker = Ranker.load(index, device="cpu", verify=verify)
        with pytest.raises(IndexFormatError) as info:
            list(ranker.records())
        assert str(info.value).startswith(expected)
    # a save applies the load's checks: the damaged record is not written into a new index
    with pytest.raises(IndexFormatError) as info:
        ranker.save(index.parent / "copy")
    assert str(info.value).startswith(expected)
    assert not (index.parent / "copy" / "manifest.json").exists()


def test_a_paired_surrogate_escape_is_a_valid_character(index: Path) -> None:
    path = _replace_line(index, 2, b'{"id": "smile", "answer": "x \\ud83d\\ude00", "questions": [], "metadata": {}}\n')
    ranker = Ranker.load(index, device="cpu")
    assert ranker._records.get(2).answer == "x \U0001f600" and path.exists()


# -- the table itself --------------------------------------------------------------------------------
def test_ranges_hold_what_qaindex_writes() -> None:
    from qaindex.model import DEFAULT_MODEL_DIR
    from qaindex.text.lexical import K1, B

    assert LEXICAL["k1"].holds(K1) and LEXICAL["b"].holds(B)
    Model.load(DEFAULT_MODEL_DIR)  # its fitted fusion and calibration are in range
    assert not Range(0, 1).holds(math.nan) and not Range(0, 1).holds(True)
    assert not FUSION["c"].holds(0) and FUSION["c"].holds(60)


# -- broken encoders and scorers are refused at build ------------------------------------------------
WORDS = ["reset", "password", "refund", "order", "ship"]


@pytest.mark.parametrize(
    ("fault", "message"),
    [
        ("one-row", "the model's answer encoder returned 1 vector(s) for a batch of 5 texts; the model is broken"),
        ("int64", "the model's answer encoder returned values of type int64 (not floating point); the model is broken"),
        ("outside", "the model's answer encoder returned a vector of norm 3.36098 for text 0 ('reset password'), "
                    "outside the unit ball of a Poincaré model; the model is broken, not the text"),
        ("inf-score", "the model's scorer returns NaN or infinite values for two test vectors (score -inf, distance "),
        ("nan-score", "the model's scorer returns NaN or infinite values for two test vectors (score nan, distance "),
    ],
)  # fmt: skip
def test_a_broken_model_is_refused_at_build(tmp_path: Path, fault: str, message: str) -> None:
    model = faulty_model(tmp_path / "m", WORDS, fault)
    corpus = [{"id": i, "answer": f"{w} {WORDS[(i + 1) % 5]}"} for i, w in enumerate(WORDS)]
    with pytest.raises(ModelFormatError) as info:
        Ranker.build(corpus, model=model, device="cpu")
    assert str(info.value).startswith(f"{model}: {message}")
    (tmp_path / "c.jsonl").write_text("".join(json.dumps(r) + "\n" for r in corpus))
    result = CliRunner().invoke(
        qaindex.cli.main, ["build", str(tmp_path / "c.jsonl"), "--index", str(tmp_path / "ix"), "--model", str(model)]
    )
    assert result.exit_code == 1 and message in result.output and "Traceback" not in result.output
    assert not (tmp_path / "ix" / "manifest.json").exists()


def test_a_save_does_not_copy_a_model_manifest_changed_on_disk(index: Path, tmp_path: Path) -> None:
    ranker = Ranker.load(index, device="cpu")
    path = _snapshot(index) / "model" / "manifest.json"  # the copy a save of this Ranker reads
    manifest = json.loads(path.read_text())
    manifest["calibration"] = {"method": "platt", "a": 1e308, "b": 0.0}
    path.write_text(json.dumps(manifest))
    with pytest.raises(ModelFormatError, match="the model files changed on disk since the model was loaded"):
        ranker.save(tmp_path / "copy")
    assert not (tmp_path / "copy" / "manifest.json").exists()


def test_the_docs_show_the_table() -> None:
    from qaindex.search import fusion
    from qaindex.store.field_ranges import DENSE_RATIO, ranges_table

    docs = (Path(__file__).parents[2] / "docs" / "formats.md").read_text(encoding="utf-8")
    assert ranges_table() in docs
    assert DENSE_RATIO["pool"].high == fusion.RATIO_POOL and DENSE_RATIO["questions"].high == fusion.RATIO_QUESTIONS


def test_a_save_scans_only_records_not_known_good(index: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from qaindex.store import index_checks
    from qaindex.store import records as records_module

    scanned: list[Path] = []
    real = index_checks.check_records

    def counting(path: Path, *a: Any) -> Any:
        scanned.append(path)
        return real(path, *a)

    monkeypatch.setattr(index_checks, "check_records", counting)
    monkeypatch.setattr(records_module, "check_records", counting)  # the ids of a store loaded unscanned
    ranker = Ranker.load(index, device="cpu")
    ranker.add([{"id": "new", "answer": "A new answer."}])
    ranker.save(tmp_path / "a")
    assert len(scanned) == 1  # the scan of the add's ids; the save trusts it
    Ranker.build(RECORDS[:3], device="cpu", hybrid=False).save(tmp_path / "b")
    assert len(scanned) == 1  # records read from a corpus are validated there
    Ranker.load(index, device="cpu", verify=False).save(tmp_path / "c")
    assert len(scanned) == 2  # never scanned: the save does


@pytest.mark.parametrize("block", [1, 2, 3, 7, 1 << 22])
def test_check_term_counts_by_blocks_finds_the_first_row_over_its_bytes(
    block: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(field_ranges, "ENTRY_BLOCK", block)
    rng = np.random.default_rng(block)
    lengths = rng.integers(0, 4, size=60)  # empty rows too
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    counts = rng.integers(1, 5, size=int(offsets[-1])).astype(np.int32)
    per_row = np.add.reduceat(np.r_[counts, 0], offsets[:-1]) * (np.diff(offsets) > 0)
    assert check_term_counts(counts, offsets, per_row) is None  # exactly at the bound: within
    held = np.flatnonzero(per_row)
    for bad in (held[0], held[len(held) // 2], held[-1]):
        tight = per_row.copy()
        tight[held[held >= bad]] -= 1  # every non-empty row from bad on is over: bad is the first
        assert check_term_counts(counts, offsets, tight) == bad
    blocks = list(field_ranges.row_blocks(offsets, block))
    assert blocks[0][0] == 0 and blocks[-1][1] == 60
    assert [b[0] for b in blocks[1:]] == [b[1] for b in blocks[:-1]]  # a cover, in order

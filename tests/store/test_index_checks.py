"""The content checks of a snapshot being loaded (qaindex.store.index_checks), called directly:
each damage is an IndexFormatError naming the file, the line or row, and what is wrong; the
fast block path agrees with the one-record-at-a-time reference."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from qaindex import IndexFormatError
from qaindex.store.index_checks import (
    check_offsets,
    check_records,
    check_vectors,
    parse_record,
    stored_vectors_error,
)

PATH = Path("/idx/records.jsonl")
REBUILD = "the index is corrupted, rebuild it"


def _store(objects: list[Any]) -> tuple[bytes, np.ndarray]:
    lines = [(o if isinstance(o, str) else json.dumps(o)).encode() + b"\n" for o in objects]
    offsets = np.cumsum([0, *map(len, lines)]).astype(np.int64)
    return b"".join(lines), offsets


def _records(n: int) -> list[dict[str, Any]]:
    return [
        {"id": i if i % 2 else f"s{i}", "answer": f"a{i}", "questions": ["q"], "metadata": {"i": i}} for i in range(n)
    ]


def test_good_records_give_their_ids_in_every_block_size(monkeypatch: pytest.MonkeyPatch) -> None:
    data, offsets = _store(_records(50))
    want = {str(r["id"]): row for row, r in enumerate(_records(50))}
    for block in (1, 64, 1 << 24):  # one line per block, a few lines, everything
        monkeypatch.setattr("qaindex.store.index_checks._BLOCK_BYTES", block)
        assert check_records(PATH, data, offsets) == want
    check_offsets(PATH, offsets, data)


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ('{"id": 1, "answer": "x", "metadata": {"v": NaN}}', "not strict JSON (NaN is not valid JSON"),
        ('{"id": true, "answer": "x"}', 'field "id" must be a string or an integer, got True'),
        ('{"id": 1.5, "answer": "x"}', 'field "id" must be a string or an integer, got 1.5'),
        ('{"id": 7, "answer": 3}', 'field "answer" must be a string, got 3'),
        ('{"id": 7, "answer": "x", "questions": "q"}', 'field "questions" must be a list of strings'),
        ('{"id": 7, "answer": "x", "questions": [1]}', 'field "questions" must be a list of strings'),
        ('{"id": 7, "answer": "x", "metadata": []}', 'field "metadata" must be an object'),
        ("[1, 2]", "not a JSON object but list"),
    ],
)
def test_a_bad_record_is_named_by_its_line(bad: str, message: str) -> None:
    data, offsets = _store([*_records(3), bad, *_records(2)])
    with pytest.raises(IndexFormatError) as info:
        check_records(PATH, data, offsets)
    assert str(info.value).startswith(f"{PATH}: line 4: {message}")
    assert str(info.value).endswith(REBUILD)
    with pytest.raises(ValueError, match="^" + message.replace("(", r"\(").replace(")", r"\)")):
        parse_record(bad.encode() + b"\n")


def test_a_duplicate_id_names_both_lines() -> None:
    records = [*_records(4), {"id": 1, "answer": "again"}]
    data, offsets = _store(records)
    with pytest.raises(IndexFormatError) as info:
        check_records(PATH, data, offsets)
    assert str(info.value) == f"{PATH}: id 1 is on lines 2 and 5; ids must be unique; {REBUILD}"


def test_an_integer_id_and_its_text_are_different_ids() -> None:
    data, offsets = _store([{"id": 1, "answer": "a"}, {"id": "1", "answer": "b"}])
    with pytest.raises(IndexFormatError, match='id "1" is on lines 1 and 2'):
        check_records(PATH, data, offsets)  # str(id) keys the id map: both are "1"


def test_offsets_are_checked() -> None:
    data, offsets = _store(_records(3))
    where = PATH.with_name("records.offsets.npy")
    with pytest.raises(IndexFormatError, match=f"^{where}: dtype float64, expected integer byte offsets"):
        check_offsets(PATH, offsets.astype(np.float64), data)
    with pytest.raises(IndexFormatError, match=f"^{where}: must start at byte 0"):
        check_offsets(PATH, offsets + 1, data)
    back = offsets.copy()
    back[2] = back[1]
    with pytest.raises(IndexFormatError, match="offsets must strictly increase, but line 2 ends at byte"):
        check_offsets(PATH, back, data)
    with pytest.raises(IndexFormatError, match="size does not match its offsets"):
        check_offsets(PATH, offsets, data + b"{}\n")
    shifted = offsets.copy()
    shifted[1] += 1  # line 1 now ends inside line 2
    with pytest.raises(IndexFormatError, match=r"line 1 \(bytes 0\.\.\d+\) is not one JSON object per line"):
        check_offsets(PATH, shifted, data)


def test_vectors_are_checked() -> None:
    path = Path("/idx/vectors.npy")
    good = np.full((5, 3), 0.1, np.float32)
    check_vectors(path, good, ball=True, scan=True)
    with pytest.raises(IndexFormatError, match="dtype float64, expected float32"):
        check_vectors(path, good.astype(np.float64), ball=False, scan=False)
    bad = good.copy()
    bad[3, 1] = np.nan
    check_vectors(path, bad, ball=True, scan=False)  # without the scan only the dtype is checked
    with pytest.raises(IndexFormatError, match=f"^{path}: row 3 holds NaN or infinite values"):
        check_vectors(path, bad, ball=True, scan=True)
    huge = good.copy()
    huge[2] = 3e38  # finite, but its squared norm overflows
    with pytest.raises(IndexFormatError, match="row 2 has norm inf, outside the unit ball"):
        check_vectors(path, huge, ball=True, scan=True)
    check_vectors(path, huge, ball=False, scan=True)  # finite: fine off the ball
    out = good.copy()
    out[4] = 0.6
    with pytest.raises(IndexFormatError, match=r"row 4 has norm 1\.03923, outside the unit ball of a Poincaré model"):
        check_vectors(path, out, ball=True, scan=True)


def test_the_error_for_non_finite_scores_names_rows() -> None:
    error = stored_vectors_error("/idx/vectors.npy", np.array([9, 3, 3, 12, 1, 5, 7]))
    assert str(error) == (
        f"/idx/vectors.npy: rows 1, 3, 5, 7, 9 give non-finite scores (NaN or infinite values stored); {REBUILD} "
        "(a load with verify=True checks every vector)"
    )

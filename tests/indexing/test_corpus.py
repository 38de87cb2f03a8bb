"""Corpus reading: formats, defaults, and the exact error messages."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from qaindex.corpus import Record, read_corpus, records_from_dicts
from qaindex.errors import CorpusError


def write(tmp_path: Path, text: str | bytes) -> Path:
    p = tmp_path / "c.jsonl"
    if isinstance(text, str):
        p.write_text(text, encoding="utf-8")
    else:
        p.write_bytes(text)
    return p


def test_fields_defaults_and_metadata(tmp_path: Path) -> None:
    p = write(
        tmp_path,
        '\ufeff{"answer": "A", "tag": 1}\n\n'
        '{"id": "x", "answer": "B", "questions": ["q1", " ", "q2"]}\n'
        '{"id": 9, "answer": "C ☕ 🙂", "question": "q3", "extra": {"k": [1]}}\n',
    )
    recs = read_corpus(p)
    assert recs == [
        Record(1, "A", (), {"tag": 1}),
        Record("x", "B", ("q1", "q2"), {}),
        Record(9, "C ☕ 🙂", ("q3",), {"extra": {"k": [1]}}),
    ]


def test_benchmark_format_merges_repeated_answers(tmp_path: Path) -> None:
    rows = [
        {"qid": "Q1", "question": "who?", "aid": "D1-0", "answer": "Ann", "label": 1},
        {"qid": "Q1", "question": "who?", "aid": "D1-1", "answer": "Bob", "label": 0},
        {"qid": "Q2", "question": "which?", "aid": "D1-0", "answer": "Ann", "label": 1},
        {"qid": "Q3", "question": "what?", "aid": "D1-0", "answer": "Ann", "label": 0},
    ]
    p = write(tmp_path, "".join(json.dumps(r) + "\n" for r in rows))
    recs = read_corpus(p)
    assert recs == [Record("D1-0", "Ann", ("who?", "which?"), {}), Record("D1-1", "Bob", (), {})]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (
            '{"answer": "a"}\n{"answer": "b",}\n',
            "c.jsonl:2: not valid JSON (Expecting property name enclosed in double quotes at column 16); each line must be one JSON object",
        ),
        ('{"id": 1}\n', 'c.jsonl:1: field "answer" is missing; every record needs a non-empty "answer" text'),
        ('{"answer": "  "}\n', 'c.jsonl:1: field "answer" is empty; give it the answer text or drop the line'),
        ('{"answer": 5}\n', 'c.jsonl:1: field "answer" must be a string, got int'),
        (
            '{"id": "a", "answer": "x"}\n{"id": "a", "answer": "y"}\n',
            'c.jsonl:2: duplicate id "a" (first seen at {p}:1); ids must be unique',
        ),
        (
            '{"answer": "x"}\n{"id": 1, "answer": "y"}\n',
            "c.jsonl:2: duplicate id 1 (first seen at {p}:1); ids must be unique",
        ),
        ('{"id": 1.5, "answer": "x"}\n', 'c.jsonl:1: field "id" must be a string or an integer, got 1.5'),
        ('{"id": true, "answer": "x"}\n', 'c.jsonl:1: field "id" must be a string or an integer, got true'),
        ("[1, 2]\n", 'c.jsonl:1: expected a JSON object, got list; write one object per line, e.g. {"answer": "..."}'),
        ('{"answer": "x", "questions": "q"}\n', 'c.jsonl:1: field "questions" must be a list of strings'),
        (
            '{"answer": "x", "question": "q", "questions": ["q"]}\n',
            'c.jsonl:1: give either "question" or "questions", not both',
        ),
        ("\n  \n", 'c.jsonl: no answers found; write one JSON object per line with an "answer" field'),
        (
            '{"qid": 1, "question": "q", "aid": "a", "answer": "x", "label": 2}\n',
            'c.jsonl:1: field "label" must be 0 or 1, got 2',
        ),
        (
            '{"aid": "a", "answer": "x", "label": 1}\n',
            'c.jsonl:1: field "qid" is missing; benchmark lines need qid, question, aid, answer, label',
        ),
        (
            '{"qid": 1, "question": "q", "aid": "a", "answer": "x", "label": 0}\n{"qid": 1, "question": "q", "aid": "a", "answer": "y", "label": 0}\n',
            'c.jsonl:2: aid "a" was first seen at {p}:1 with a different answer text; an aid must always name the same answer',
        ),
    ],
)
def test_error_messages(tmp_path: Path, content: str, message: str) -> None:
    p = write(tmp_path, content)
    with pytest.raises(CorpusError) as info:
        read_corpus(p)
    assert str(info.value) == str(tmp_path) + "/" + message.replace("{p}", str(p))


def test_invalid_utf8_names_line_and_byte(tmp_path: Path) -> None:
    p = write(tmp_path, b'{"answer": "ok"}\n{"answer": "caf\xe9"}\n')
    with pytest.raises(CorpusError) as info:
        read_corpus(p)
    assert str(info.value) == f"{p}:2: not valid UTF-8 (byte 0xe9 at column 16); save the file as UTF-8"


def test_missing_file_and_directory(tmp_path: Path) -> None:
    with pytest.raises(CorpusError, match=r"nope.jsonl: no such file$"):
        read_corpus(tmp_path / "nope.jsonl")
    with pytest.raises(CorpusError, match=r"is a directory; give a JSONL corpus file$"):
        read_corpus(tmp_path)


def test_existing_ids_are_rejected(tmp_path: Path) -> None:
    p = write(tmp_path, '{"id": "a", "answer": "x"}\n')
    with pytest.raises(CorpusError) as info:
        read_corpus(p, existing_ids=["a"])
    assert str(info.value) == f'{p}:1: id "a" is already in the index; remove it first or use another id'


def test_records_from_dicts_positions() -> None:
    recs = records_from_dicts([{"answer": "a"}, Record("r", "b", ("q",), {"m": 1})])
    assert recs == [Record(1, "a", (), {}), Record("r", "b", ("q",), {"m": 1})]
    with pytest.raises(CorpusError) as info:
        records_from_dicts([{"answer": "a"}, {"text": "b"}])
    assert str(info.value) == 'records[2]: field "answer" is missing; every record needs a non-empty "answer" text'
    with pytest.raises(CorpusError, match=r"^records: no answers found"):
        records_from_dicts([])


@pytest.mark.parametrize("fast", [True, False])
def test_a_line_over_the_maximum_is_refused_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fast: bool
) -> None:
    import contextlib

    import qaindex.corpus
    from qaindex import fast_path_switch

    monkeypatch.setattr(qaindex.corpus, "MAX_LINE_BYTES", 64)
    monkeypatch.setattr(qaindex.corpus, "_READ_HINT", 40)  # lines straddle the bulk reads
    at_most = json.dumps({"answer": "x" * (64 - 14)})  # 64 bytes: the longest line accepted
    assert len(at_most) == 64
    p = write(tmp_path, f'{{"answer": "a"}}\n{at_most}\n{at_most}')
    with contextlib.nullcontext() if fast else fast_path_switch.generic_only():
        assert [r.answer for r in read_corpus(p)] == ["a", "x" * 50, "x" * 50]
        over = json.dumps({"answer": "x" * 51})
        p = write(tmp_path, f'{{"answer": "a"}}\n{at_most}\n{over}\n{{"answer": "b"}}\n')
        with pytest.raises(CorpusError) as err:
            read_corpus(p)
    assert str(err.value) == (
        f"{p}:3: line longer than 64 bytes, the most one line may hold (is this a JSONL file?); split or shorten the answer"
    )


def test_an_endless_input_stops_at_its_first_line() -> None:
    # /dev/zero has no newline: its first line passes the 64 MiB maximum
    with pytest.raises(CorpusError) as err:
        read_corpus("/dev/zero")
    assert str(err.value) == (
        "/dev/zero:1: line longer than 67,108,864 bytes, the most one line may hold (is this a JSONL file?); "
        "split or shorten the answer"
    )

"""Search filters, min_score, hits from arrays, logging, and the thread-safety contract."""

from __future__ import annotations

import json
import logging
import math
import threading
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from conftest import FAQ
from hypothesis import given, settings
from hypothesis import strategies as st

import qaindex
import qaindex.cli
from qaindex import QueryError, Ranker
from qaindex.search.hits import Hit
from qaindex.store.concurrency import ReadWriteLock

QUESTIONS = ["how do I reset my password", "can I get a refund", "export notes", "login app", "sync minutes"]


@pytest.fixture()
def ranker(faq_model: Path) -> Ranker:
    extra = [
        {"id": f"x{i}", "answer": f"{w} notes refund password sync", "category": ["account", "billing", "data"][i % 3]}
        for i, w in enumerate(["open", "close", "print", "share", "copy", "move", "tag", "pin", "lock", "star"])
    ]
    # dense, answers only: scores fall with rank, and search equals hits(search_vectors)
    return Ranker.build(FAQ + extra, model=faq_model, device="cpu", hybrid=False, question_keys=False)


def _brute_filtered(ranker: Ranker, question: str, k: int, keep) -> list[str | int]:  # type: ignore[no-untyped-def]
    everything = ranker.search(question, k=len(ranker))
    return [h.id for h in everything if keep(h)][:k]


@pytest.mark.parametrize("question", QUESTIONS)
@pytest.mark.parametrize(
    ("where", "keep"),
    [
        ({"category": "account"}, lambda h: h.metadata.get("category") == "account"),
        ({"category": ["billing", "data"]}, lambda h: h.metadata.get("category") in ("billing", "data")),
        ({"id": [7, "refund", "x3"]}, lambda h: h.id in (7, "refund", "x3")),
        ({"category": "nope"}, lambda h: False),
        ({}, lambda h: True),
    ],
)
def test_where_equals_filtering_the_full_ranking(ranker: Ranker, question: str, where, keep) -> None:  # type: ignore[no-untyped-def]
    got = [h.id for h in ranker.search(question, k=2, where=where)]
    assert got == _brute_filtered(ranker, question, 2, keep)


def test_where_accepts_a_predicate_on_records(ranker: Ranker) -> None:
    got = ranker.search("refund", k=3, where=lambda r: str(r.id).startswith("x"))
    assert [h.id for h in got] == _brute_filtered(ranker, "refund", 3, lambda h: str(h.id).startswith("x"))
    assert all(isinstance(h.id, str) and h.id.startswith("x") for h in got) and len(got) == 3


def test_min_score_cuts_the_ranking(ranker: Ranker) -> None:
    full = ranker.search("reset password", k=len(ranker))
    threshold = full[4].score
    got = ranker.search("reset password", k=10, min_score=threshold)
    assert [h.id for h in got] == [h.id for h in full[:10] if h.score >= threshold]
    assert len(got) >= 5 and all(h.score >= threshold for h in got)
    filtered = ranker.search("reset password", k=10, min_score=threshold, where={"category": "account"})
    assert [h.id for h in filtered] == [
        h.id for h in full if h.score >= threshold and h.metadata.get("category") == "account"
    ][:10]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"where": "account"},
            "where must be a mapping of metadata fields to values (or lists of values), or a "
            "function of a Record returning True or False; got str",
        ),
        (
            {"where": {1: "a"}},
            "where must be a mapping of metadata fields to values (or lists of values), or a "
            "function of a Record returning True or False; got dict",
        ),
        ({"min_score": "high"}, "min_score must be a finite number or None, got 'high'"),
        ({"min_score": float("nan")}, "min_score must be a finite number or None, got nan"),
        ({"min_score": True}, "min_score must be a finite number or None, got True"),
    ],
)
def test_bad_filters_are_query_errors(ranker: Ranker, kwargs, message: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(QueryError) as err:
        ranker.search("refund", **kwargs)
    assert str(err.value) == message


def test_hits_turns_search_vectors_rows_into_hits(ranker: Ranker) -> None:
    qv = ranker.model.encode(QUESTIONS, role="question")
    scores, distances, rows = ranker.search_vectors(qv, 3)
    hits = ranker.hits(scores, distances, rows)
    assert hits == ranker.search_batch(QUESTIONS, k=3)
    assert [[h.row for h in row] for row in hits] == rows.tolist()
    missing = rows.copy()
    missing[:, 1] = -1
    assert [len(h) for h in ranker.hits(scores, distances, missing)] == [2] * len(QUESTIONS)
    with pytest.raises(QueryError, match=r"^rows must be integers in \[-1, 14\]"):
        ranker.hits(scores, distances, rows + 100)
    with pytest.raises(QueryError, match=r"^scores, distances and rows must be 2-D arrays of one shape"):
        ranker.hits(scores[0], distances, rows)


def test_hits_are_json_without_the_row(ranker: Ranker) -> None:
    hit = ranker.search("refund", k=1)[0]
    assert set(hit.to_json()) == {"id", "answer", "score", "raw_score", "distance", "metadata", "matched"}
    assert hit.row >= 0 and ranker.records().__next__() is not None


_HIT_VALUES = st.one_of(st.integers(), st.text(max_size=3), st.lists(st.integers(), max_size=2))


@settings(max_examples=200, deadline=None)
@given(
    ident=st.one_of(st.integers(-3, 3), st.sampled_from(["a", "b"])),
    answer=st.sampled_from(["x", "y"]),
    score=st.sampled_from([0.0, -0.0, 0.5, math.nan]),
    distance=st.sampled_from([0.0, 1.0]),
    metadata=st.dictionaries(st.sampled_from(["c", "tags"]), _HIT_VALUES, max_size=2),
    raw=st.sampled_from([0.0, 2.0, math.nan]),
    row=st.integers(-1, 5),
    other_row=st.integers(-1, 5),
)
def test_hits_are_hashable_and_equal_hits_hash_equally(
    ident: str | int, answer: str, score: float, distance: float, metadata: dict, raw: float, row: int, other_row: int
) -> None:
    a = Hit(ident, answer, score, distance, metadata, row, raw)
    twin = Hit(ident, answer, score, distance, json.loads(json.dumps(metadata)), other_row, raw)  # a copy, other row
    assert a == twin  # the row is not part of equality
    assert hash(a) == hash(twin)
    assert len({a, twin}) == 1 and {a: 1}[twin] == 1
    other = Hit(ident, answer + "!", score, distance, metadata, row, raw)
    assert a != other and len({a, other}) == 2


def test_search_hits_go_into_sets(ranker: Ranker) -> None:
    hits = ranker.search_batch(QUESTIONS, k=3)
    union = {h for row in hits for h in row}
    assert union == {h for row in ranker.search_batch(QUESTIONS, k=3) for h in row}
    assert len(union) == len({json.dumps(h.to_json(), sort_keys=True) for row in hits for h in row})


def test_library_logs_to_the_qaindex_logger(faq_model: Path, caplog: pytest.LogCaptureFixture, tmp_path: Path) -> None:
    with caplog.at_level(logging.INFO, logger="qaindex"):
        ranker = Ranker.build(FAQ, model=faq_model, device="cpu")
        ranker.save(tmp_path / "ix")
    messages = [r.getMessage() for r in caplog.records if r.name.startswith("qaindex")]
    assert any(m.startswith("encoded 5 answers with ") for m in messages)
    assert any(m.startswith(f"saved 5 answers to {tmp_path / 'ix'} (snapshot data-") for m in messages)


def test_cli_verbose_logs_on_stderr(faq_model: Path, faq_file: Path, tmp_path: Path) -> None:
    index = str(tmp_path / "ix")
    args = ["build", str(faq_file), "--model", str(faq_model), "--device", "cpu", "--index", index]
    quiet = CliRunner().invoke(qaindex.cli.main, args)
    loud = CliRunner().invoke(qaindex.cli.main, ["-v", *args, "--force"])
    assert quiet.exit_code == 0 and loud.exit_code == 0
    assert "qaindex: encoded 5 answers with " not in quiet.stderr
    assert "qaindex: encoded 5 answers with " in loud.stderr
    CliRunner().invoke(qaindex.cli.main, ["info", "--index", index])  # a later run without -v drops the handler
    assert not [h for h in logging.getLogger("qaindex").handlers if getattr(h, "qaindex_cli", False)]
    logging.getLogger("qaindex").setLevel(logging.NOTSET)


# -- thread safety ------------------------------------------------------------------------------


def test_searches_from_threads_see_each_update_whole(ranker: Ranker) -> None:
    question = "refund password notes refund password"
    new = [{"id": f"n{i}", "answer": question} for i in range(3)]
    before = [h.id for h in ranker.search(question, k=5)]
    ranker.add(new)
    after_add = [h.id for h in ranker.search(question, k=5)]
    ranker.remove([r["id"] for r in new])
    assert [h.id for h in ranker.search(question, k=5)] == before
    assert sorted(after_add[:3]) == ["n0", "n1", "n2"] and "n0" not in before
    allowed = {tuple(before), tuple(after_add)}
    seen: set[tuple[str | int, ...]] = set()
    errors: list[BaseException] = []
    stop = threading.Event()

    def searcher() -> None:
        try:
            while not stop.is_set():
                seen.add(tuple(h.id for h in ranker.search(question, k=5)))
        except BaseException as exc:  # noqa: BLE001 - collected and re-raised by the test
            errors.append(exc)

    threads = [threading.Thread(target=searcher) for _ in range(4)]
    for t in threads:
        t.start()
    try:
        for _ in range(15):
            ranker.add(new)
            ranker.configure(overfetch=3)
            ranker.remove([r["id"] for r in new])
            ranker.configure(overfetch=10)
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert not errors, errors
    assert seen and seen <= allowed


def test_read_write_lock_excludes_writers_and_prefers_them() -> None:
    lock = ReadWriteLock()
    events: list[str] = []
    reader_in = threading.Event()
    release_reader = threading.Event()

    def reader() -> None:
        with lock.read():
            events.append("read")
            reader_in.set()
            release_reader.wait(5)
        events.append("read done")

    def writer() -> None:
        with lock.write():
            events.append("write")

    def late_reader() -> None:
        with lock.read():
            events.append("late read")

    r = threading.Thread(target=reader)
    r.start()
    assert reader_in.wait(5)
    w = threading.Thread(target=writer)
    w.start()
    while not lock._writers_waiting:  # the writer is queued behind the reader
        threading.Event().wait(0.001)
    late = threading.Thread(target=late_reader)
    late.start()
    threading.Event().wait(0.05)
    assert events == ["read"]  # neither the writer nor the late reader got in
    release_reader.set()
    for t in (r, w, late):
        t.join(5)
    assert events == ["read", "read done", "write", "late read"]


def test_updating_from_inside_a_search_is_refused() -> None:
    lock = ReadWriteLock()
    with lock.read(), pytest.raises(RuntimeError, match="cannot update a Ranker from inside one of its own searches"):
        with lock.write():
            pass


def test_search_json_is_strict(ranker: Ranker) -> None:
    for hit in ranker.search("refund", k=3):
        json.loads(json.dumps(hit.to_json(), allow_nan=False))
    assert np.isfinite([h.score for h in ranker.search("refund", k=3)]).all()

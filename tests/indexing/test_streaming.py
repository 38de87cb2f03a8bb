"""Streaming build: the corpus read and encoded in chunks gives exactly the in-memory result."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from conftest import FAQ

from qaindex import Ranker
from qaindex.cli import main
from qaindex.corpus import Record, read_corpus
from qaindex.errors import CorpusError
from qaindex.indexing.streaming import RecordSpool, build_from_file, validate_corpus
from qaindex.model import Model
from qaindex.store.records import RecordStore


def _corpus(path: Path, count: int = 40) -> Path:
    """Plain records of varied lengths, a blank line, and answer-selection rows whose
    ``aid`` repeats far apart (so a later row adds a question to an answer already spooled)."""
    lines = []
    for i in range(count):
        words = FAQ[i % len(FAQ)]["answer"].split()
        lines.append(json.dumps({"id": f"a{i}", "answer": " ".join(words[: 3 + i % 9]), "n": i}))
        if i == 5:
            lines.append("   ")
    lines.append(
        json.dumps({"qid": "q1", "question": "reset?", "aid": "b1", "answer": "Use the reset link.", "label": 1})
    )
    lines.append(
        json.dumps({"qid": "q1", "question": "reset?", "aid": "b2", "answer": "Refunds take days.", "label": 0})
    )
    lines += [json.dumps({"id": f"c{i}", "answer": f"Filler answer {i}"}) for i in range(12)]
    lines.append(
        json.dumps({"qid": "q2", "question": "refund?", "aid": "b2", "answer": "Refunds take days.", "label": 1})
    )
    lines.append(
        json.dumps({"qid": "q3", "question": "link?", "aid": "b1", "answer": "Use the reset link.", "label": 1})
    )
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@pytest.mark.parametrize("chunk", [1, 7, 10_000])
def test_chunked_build_equals_in_memory(faq_model: Path, tmp_path: Path, chunk: int) -> None:
    path = _corpus(tmp_path / "c.jsonl")
    model = Model.load(faq_model, device="cpu")
    expected = read_corpus(path)
    store, vectors, coarse = build_from_file(path, model, device="cpu", chunk_size=chunk, batch_size=4)
    assert store.content() == RecordStore.from_records(expected).content()
    assert [store.get(r) for r in range(len(store))] == expected
    merged = {r.id: r.questions for r in expected if r.id in ("b1", "b2")}
    assert merged == {"b1": ("reset?", "link?"), "b2": ("refund?",)}  # questions added after spooling
    answers = [r.answer for r in expected]
    # each chunk is one Model.encode call: bit-identical to encoding the chunks one by one ...
    by_chunk = [
        model.encode(answers[i : i + chunk], role="answer", batch_size=4) for i in range(0, len(answers), chunk)
    ]
    np.testing.assert_array_equal(vectors, np.concatenate(by_chunk))
    # ... and equal to encoding everything at once up to float32 rounding (padding differs per batch)
    np.testing.assert_allclose(vectors, model.encode(answers, role="answer"), rtol=0, atol=1e-6)
    assert coarse.ntotal == len(expected)


def test_ranker_build_from_file_searches_like_records(faq_model: Path, tmp_path: Path) -> None:
    path = _corpus(tmp_path / "c.jsonl")
    from_file = Ranker.build(path, model=faq_model, device="cpu")
    from_records = Ranker.build(read_corpus(path), model=faq_model, device="cpu")
    assert [r.to_json() for r in from_file.records()] == [r.to_json() for r in from_records.records()]
    questions = ["how do I reset my password", "refund", "export markdown"]
    assert [[h.id for h in hits] for hits in from_file.search_batch(questions, 5)] == [
        [h.id for h in hits] for hits in from_records.search_batch(questions, 5)
    ]
    saved = Ranker.load(from_file.save(tmp_path / "ix"), device="cpu")
    assert [r.to_json() for r in saved.records()] == [r.to_json() for r in from_records.records()]


def test_only_one_chunk_of_records_is_pending(tmp_path: Path) -> None:
    path = _corpus(tmp_path / "c.jsonl", count=25)
    spool = RecordSpool()
    sizes: list[int] = []

    def on_chunk(chunk: list[Record]) -> None:
        assert spool.pending == []  # handed over, no longer held by the spool
        sizes.append(len(chunk))

    lines = validate_corpus(path, spool, chunk_size=4, on_chunk=on_chunk)
    total = len(read_corpus(path))
    assert sum(sizes) == total == len(lines)
    assert all(size == 4 for size in sizes[:-1]) and 1 <= sizes[-1] <= 4
    assert lines[:7].tolist() == [1, 2, 3, 4, 5, 6, 8]  # line 7 is blank


@pytest.mark.parametrize(
    "bad, message",
    [
        ('{"id": "a3", "answer": "again"}', 'duplicate id "a3" (first seen at {path}:4); ids must be unique'),
        ('{"answer": ""}', 'field "answer" is empty; give it the answer text or drop the line'),
        (
            '{"qid": "q", "question": "?", "aid": "a2", "answer": "other", "label": 1}',
            'aid "a2" was first seen at {path}:3 with a different answer text; an aid must always name the same answer',
        ),
    ],
)
def test_errors_name_the_line_after_many_chunks(faq_model: Path, tmp_path: Path, bad: str, message: str) -> None:
    path = tmp_path / "c.jsonl"
    lines = [json.dumps({"id": f"a{i}", "answer": f"answer {i}"}) for i in range(30)]
    path.write_text("\n".join([*lines, bad]) + "\n", encoding="utf-8")
    expected = f"{path}:31: " + message.format(path=path)
    with pytest.raises(CorpusError) as memory:
        read_corpus(path)
    assert str(memory.value) == expected
    with pytest.raises(CorpusError) as streamed:
        build_from_file(path, Model.load(faq_model, device="cpu"), device="cpu", chunk_size=3)
    assert str(streamed.value) == expected


def test_cli_error_in_a_late_line_leaves_the_index_untouched(faq_model: Path, faq_file: Path, tmp_path: Path) -> None:
    index = tmp_path / "ix"
    runner = CliRunner()
    base = ["--model", str(faq_model), "--index", str(index), "--device", "cpu"]
    assert runner.invoke(main, ["build", str(faq_file), *base]).exit_code == 0
    before = (index / "manifest.json").read_bytes()
    bad = tmp_path / "bad.jsonl"
    bad.write_text("".join(json.dumps({"answer": f"x {i}"}) + "\n" for i in range(20000)) + "[1]\n", encoding="utf-8")
    result = runner.invoke(main, ["build", str(bad), *base, "--force"])
    assert result.exit_code == 1
    assert result.stderr == (
        f'Error: {bad}:20001: expected a JSON object, got list; write one object per line, e.g. {{"answer": "..."}}\n'
    )
    assert (index / "manifest.json").read_bytes() == before
    assert sorted(p.name for p in index.iterdir() if p.name.startswith(".data-")) == []


@pytest.mark.parametrize("kind", ["ivf", "ivf_sq8", "pq", "hnsw_sq8"])
def test_a_chunked_index_is_the_in_memory_one(kind: str) -> None:
    """assemble_index (streamed and Ray builds) sizes and trains like Ranker.build: the defaults
    follow the whole count and training uses the same seeded sample of every answer."""
    from qaindex import geometry as geometries
    from qaindex.indexing.streaming import assemble_index
    from qaindex.vector_index import CoarseIndex

    class Geometry:  # what assemble_index reads of a model
        geometry, dimension, ranking = "poincare", 16, "relative"
        space = geometries.get("poincare", "relative")

    rng = np.random.default_rng(0)
    x = rng.normal(size=(3000, 16))
    vectors = (x / np.linalg.norm(x, axis=1, keepdims=True) * rng.uniform(0.3, 0.9, (3000, 1))).astype(np.float32)
    chunked = assemble_index(Geometry(), vectors, index_kind=kind, device="cpu", chunk_size=256)  # type: ignore[arg-type]
    whole = CoarseIndex("poincare", 16, kind, ranking="relative", count=len(vectors))
    whole.add(vectors)
    assert chunked.params == whole.params
    if kind.startswith("ivf"):
        assert chunked.params["nlist"] == 110  # about 2·√3000, not the 1 list of a count of 0
    queries = vectors[:50] * 0.9
    np.testing.assert_array_equal(
        chunked.search(queries, 30, vectors=vectors), whole.search(queries, 30, vectors=vectors)
    )

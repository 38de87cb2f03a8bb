"""Per-request memory bound (qaindex.search.budget): results over half the budget are refused before
any work, and the working memory is chunked without changing any result."""

from __future__ import annotations

import json
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

import qaindex.cli
from qaindex import QueryError, Ranker
from qaindex.search.budget import (
    DEFAULT_BUDGET,
    ENV_VAR,
    HIT_OVERHEAD,
    hit_bytes,
    parse_size,
    questions_per_call,
    request_budget,
)

WORDS = ["reset", "password", "refund", "order", "export", "notes", "sync", "login", "app", "menu", "email"]
N = 600


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from helpers.onnx_models import make_model

    from qaindex.text.tokenizer import Tokenizer

    vocab = Tokenizer.build_word_vocab(WORDS)
    emb = np.random.default_rng(5).normal(scale=0.2, size=(len(vocab), 6)).astype(np.float32)
    emb[0] = 0.0
    return make_model(tmp_path_factory.mktemp("m") / "m", vocab, emb)


def _records() -> list[dict]:
    rng = np.random.default_rng(0)
    return [
        {
            "id": i,
            "answer": " ".join(rng.choice(WORDS, size=4)),
            "questions": [" ".join(rng.choice(WORDS, size=2))],
            "group": int(i % 7),
        }
        for i in range(N)
    ]


@pytest.fixture(scope="module")
def ranker(model: Path) -> Ranker:
    return Ranker.build(_records(), model=model, device="cpu", index_kind="hnsw")


@pytest.fixture()
def small(ranker: Ranker) -> Ranker:
    ranker.memory_budget = 1 << 20  # 1 MiB: chunks of a few questions and candidates
    yield ranker
    ranker.memory_budget = None


QUESTIONS = [" ".join(WORDS[i % 11 : i % 11 + 2]) or "reset" for i in range(40)]


def test_a_result_over_the_budget_is_refused_before_any_work(ranker: Ranker, monkeypatch: pytest.MonkeyPatch) -> None:
    ranker.configure(memory_budget=1 << 24)  # 16 MiB
    hit = hit_bytes(ranker._records)
    assert HIT_OVERHEAD < hit < HIT_OVERHEAD + 200
    called = []
    monkeypatch.setattr(ranker.model, "encode", lambda *a, **kw: called.append(1))
    tracemalloc.start()
    with pytest.raises(QueryError) as info:
        ranker.search_batch(["reset"] * 300, k=10**9)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    need = 300 * N * hit / 2**20
    assert str(info.value) == (
        f"a search of 300 question(s) for {N} hits each needs about {need:.1f} MiB for its result, more than half "
        "of the memory budget of 16.0 MiB; ask fewer questions per call or a smaller k (or rerank depth), or "
        f"raise the budget (ranker.configure(memory_budget=...) or the {ENV_VAR} environment variable)"
    )
    assert called == [] and peak < 1 << 20  # refused before encoding or allocating
    ranker.memory_budget = None


def test_search_vectors_and_recall_refuse_what_does_not_fit(small: Ranker) -> None:
    qv = small.model.encode(QUESTIONS, role="question")
    with pytest.raises(QueryError, match=r"^a search of 100 question vectors for 600 hits each needs about 937.5 KiB"):
        small.search_vectors(np.repeat(qv, 3, axis=0)[:100], 10**9)
    with pytest.raises(QueryError, match=r"^recall@600 over 40 questions needs about 3.1 MiB for its result"):
        small.recall(10**9, questions=QUESTIONS)
    with pytest.raises(QueryError, match=r"^candidates of 300 question vectors, 600 each needs about 1.4 MiB"):
        small.candidates(np.repeat(qv, 8, axis=0)[:300], 10**9)
    with pytest.raises(QueryError, match=r"^hits for 2 x 600 rows needs about"):
        small.hits(*small.search_vectors(qv[:2], 600))


def test_chunked_work_gives_the_same_results(ranker: Ranker) -> None:
    qv = ranker.model.encode(QUESTIONS, role="question")
    wide = ranker.search_vectors(qv, 200, use_coarse=True)
    full = ranker.search_vectors(qv, 600)
    batch = ranker.search_batch(QUESTIONS, k=5, where={"group": 3})
    recall = ranker.recall(50, questions=QUESTIONS)
    ranker.memory_budget = 1 << 20  # the same requests in chunks of questions and of candidates
    try:
        for want, got in zip(wide, ranker.search_vectors(qv, 200, use_coarse=True), strict=True):
            np.testing.assert_array_equal(want, got)
        for want, got in zip(full, ranker.search_vectors(qv, 600), strict=True):
            np.testing.assert_array_equal(want, got)
        assert ranker.search_batch(QUESTIONS, k=5, where={"group": 3}) == batch
        assert ranker.recall(50, questions=QUESTIONS) == recall
        np.testing.assert_array_equal(ranker.candidates(qv, 600), np.broadcast_to(np.arange(N), (len(qv), N)))
    finally:
        ranker.memory_budget = None
    assert all(h.metadata["group"] == 3 for hits in batch for h in hits) and all(len(h) == 5 for h in batch)


def test_chunked_search_stays_within_the_budget(ranker: Ranker) -> None:
    qv = np.repeat(ranker.model.encode(QUESTIONS, role="question"), 5, axis=0)  # 200 vectors
    ranker.memory_budget = 1 << 22  # 4 MiB: the result (200 x 600 x 16 = 1.8 MiB) fits in half
    try:
        tracemalloc.start()
        ranker.search_vectors(qv, 10**9)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    finally:
        ranker.memory_budget = None
    assert peak < 1 << 22, peak


def test_the_budget_setting(ranker: Ranker, monkeypatch: pytest.MonkeyPatch) -> None:
    assert request_budget() == DEFAULT_BUDGET == 2**30
    assert parse_size("512MiB") == 2**29 and parse_size("2GB") == 2 * 10**9 and parse_size(" 1048576 ") == 2**20
    monkeypatch.setenv(ENV_VAR, "64MiB")
    assert request_budget() == 2**26 and request_budget(2**21) == 2**21
    monkeypatch.setenv(ENV_VAR, "lots")
    with pytest.raises(QueryError) as info:
        ranker.search("reset")
    assert str(info.value) == f"{ENV_VAR} must be a size in bytes such as 1073741824, 512MiB or 4GiB; got 'lots'"
    for bad in (0, 1000, True, 2.0**30, "1GiB"):
        with pytest.raises(QueryError, match=r"^memory_budget must be a number of bytes of at least 1,048,576"):
            ranker.configure(memory_budget=bad)  # type: ignore[arg-type]
    assert ranker.memory_budget is None


def test_cli_search_prints_every_question_in_chunks(
    ranker: Ranker, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    index = ranker.save(tmp_path / "ix")
    args = ["search", "-", "--index", str(index), "-k", "1000000000", "--json", "--device", "cpu"]
    stdin = "\n".join(QUESTIONS[:12]) + "\n"
    monkeypatch.setenv(ENV_VAR, "2MiB")
    loaded = Ranker.load(index)
    assert questions_per_call(loaded.state(), 10**9) == 2  # 1 MiB of hits: two questions at a time
    assert loaded.plan(10**9, rerank=False).questions_per_call == 2  # what the CLI asks for
    chunked = CliRunner().invoke(qaindex.cli.main, args, input=stdin)
    monkeypatch.delenv(ENV_VAR)
    whole = CliRunner().invoke(qaindex.cli.main, args, input=stdin)
    assert chunked.exit_code == whole.exit_code == 0, chunked.output
    lines = [json.loads(line) for line in chunked.output.splitlines()]
    assert [r["question"] for r in lines] == QUESTIONS[:12] and all(len(r["hits"]) == N for r in lines)
    assert chunked.output == whole.output


def test_cli_recall_over_the_budget_is_one_clear_line(ranker: Ranker, tmp_path: Path) -> None:
    index = ranker.save(tmp_path / "ix")
    result = CliRunner().invoke(
        qaindex.cli.main,
        ["info", "--index", str(index), "--recall", "--sample", "1000000000", "-k", "1000000000", "--device", "cpu"],
        env={ENV_VAR: "8MiB"},
    )
    assert result.exit_code == 1
    assert result.output.startswith("Error: recall@600 over 600 questions needs about 46.7 MiB for its result")
    assert len(result.output.strip().splitlines()) == 1

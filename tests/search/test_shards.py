"""A shard set (``qaindex build --shards N``) searched in parallel returns what one index of
the whole corpus returns: the same hits in the same order, with the same keys matched and
the same scores (to the scorer's float32 rounding, which depends on how many candidates one
call scores), in dense and hybrid search, with and without stored questions, through BM25's
scan and its best-postings path; and a shard set refuses what it cannot do."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import qaindex.search.fusion as fusion_module
import qaindex.sharded as sharded_module
from qaindex import Ranker
from qaindex.errors import IndexFormatError, QAIndexError, QueryError
from qaindex.indexing.sharding import SHARDS_FILE, build_shards
from qaindex.sharded import ShardedRanker
from qaindex.text.lexical import CollectionStats, LexicalIndex

pytest.importorskip("Stemmer")

ROOT = Path(__file__).resolve().parents[2]
RECORDS = [json.loads(line) for line in (ROOT / "examples" / "faq.jsonl").read_text(encoding="utf-8").splitlines()]
STORED = [q for r in RECORDS for q in r.get("questions", [])][::3][:60]
QUESTIONS = [*STORED, "how much does it cost", "can I use it offline on my phone", "zzz unknown words qqq"]


def _same(sharded: list, one: list) -> None:
    for got, want in zip(sharded, one, strict=True):
        assert [(h.id, h.matched, h.row) for h in got] == [(h.id, h.matched, h.row) for h in want]
        for a, b in zip(got, want, strict=True):
            assert a.score == pytest.approx(b.score, rel=1e-5, abs=1e-6)
            assert a.raw_score == pytest.approx(b.raw_score, rel=1e-5, abs=1e-6)
            assert a.distance == pytest.approx(b.distance, rel=1e-5, abs=1e-6)
            assert a.answer == b.answer and a.metadata == b.metadata


@pytest.fixture(scope="module")
def one() -> Ranker:
    return Ranker.build(RECORDS, index_kind="flat")


@pytest.fixture(scope="module", params=[1, 3])
def shard_set(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> ShardedRanker:
    out = tmp_path_factory.mktemp("sets") / f"faq-{request.param}"
    return ShardedRanker.build(RECORDS, out, shards=request.param, index_kind="flat")


@pytest.mark.parametrize("hybrid", [True, False])
@pytest.mark.parametrize("k", [1, 10, 300])
def test_a_shard_set_returns_what_one_index_returns(
    shard_set: ShardedRanker, one: Ranker, hybrid: bool, k: int
) -> None:
    _same(shard_set.search_batch(QUESTIONS, k, hybrid=hybrid), one.search_batch(QUESTIONS, k, hybrid=hybrid))


def test_without_keys_and_through_the_best_postings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No stored questions; BM25 above its scan limit (each term's best postings), as in
    collections of more than 50,000 answers; min_score and explanations alike."""
    monkeypatch.setattr(fusion_module, "LEXICAL_SCAN_LIMIT", 20)
    monkeypatch.setattr(sharded_module, "LEXICAL_SCAN_LIMIT", 20)
    one = Ranker.build(RECORDS, index_kind="flat", question_keys=False)
    sharded = ShardedRanker.build(RECORDS, tmp_path / "set", shards=4, index_kind="flat", question_keys=False)
    for hybrid in (True, False):
        _same(sharded.search_batch(QUESTIONS, 10, hybrid=hybrid), one.search_batch(QUESTIONS, 10, hybrid=hybrid))
    kept = sharded.search_batch(QUESTIONS, 10, min_score=0.3)
    _same(kept, one.search_batch(QUESTIONS, 10, min_score=0.3))
    assert any(len(h) < 10 for h in kept)
    for q in QUESTIONS[:5]:
        got, want = sharded.search(q, 5, explain=True), one.search(q, 5, explain=True)
        assert [h.explanation for h in got] == [h.explanation for h in want]


def test_each_shard_scores_bm25_as_the_collection() -> None:
    """A shard with the collection's statistics gives its rows the whole index's BM25
    scores, bounds and coverage."""
    texts = [r["answer"] for r in RECORDS]
    whole = LexicalIndex.from_texts(texts)
    part = LexicalIndex.from_texts(texts[100:150])
    df, _ = whole.term_counts()
    totals = dict(zip(whole.vocab, df.tolist(), strict=True))
    stats = CollectionStats(len(texts), whole.term_counts()[1], np.array([totals[w] for w in part.vocab]))
    shard = part.with_collection(stats)
    for q in QUESTIONS:
        np.testing.assert_allclose(shard.scores(q), whole.scores(q)[100:150], rtol=1e-6)
        (t1, n1), (t2, n2) = shard.query(q), whole.query(q)
        if len(t1) == len(t2):  # every term of the question is in the shard too
            assert shard.score_bound(t1, n1) == pytest.approx(whole.score_bound(t2, n2))
    assert part.with_collection(None).collection is None


def test_the_collection_stats_are_saved_with_a_shard(tmp_path: Path) -> None:
    out = build_shards(RECORDS, tmp_path / "set", shards=2, index_kind="flat")
    manifest = json.loads((out / SHARDS_FILE).read_text())
    assert [e["directory"] for e in manifest["shards"]] == ["shard-000", "shard-001"]
    assert manifest["answers"] == len(RECORDS) and manifest["collection"]["answers"] == len(RECORDS)
    assert manifest["dense_ratio"]["answers"] == len(RECORDS)
    shard = Ranker.load(out / "shard-001")
    lexical = shard.state().lexical
    assert lexical is not None and lexical.collection is not None
    assert lexical.collection.answers == len(RECORDS) and len(shard) == manifest["shards"][1]["answers"]
    assert shard.info()["hybrid"]["collection"]["answers"] == len(RECORDS)
    one = Ranker.build(RECORDS, index_kind="flat")
    assert manifest["dense_ratio"]["ratio"] == one.state().lexical.ratio  # type: ignore[union-attr]


def test_what_a_shard_set_refuses(tmp_path: Path) -> None:
    out = build_shards(RECORDS, tmp_path / "set", shards=2, index_kind="flat")
    sharded = ShardedRanker.load(out)
    with pytest.raises(QueryError, match="filters"):
        sharded.search("refund", where={"category": "billing"})
    with pytest.raises(QueryError, match="empty"):
        sharded.search(" ")
    with pytest.raises(QAIndexError, match="not an empty directory"):
        build_shards(RECORDS, out, shards=2)
    with pytest.raises(QAIndexError, match="at most one shard per record"):
        build_shards(RECORDS[:3], tmp_path / "few", shards=4)
    with Ranker.edit(out / "shard-001") as shard:  # a shard changed on its own
        shard.add([{"id": "extra", "answer": "An answer added to one shard."}])
    with pytest.raises(IndexFormatError, match=r"shard-001.*changed after the set was built"):
        ShardedRanker.load(out)
    (out / SHARDS_FILE).write_text("{}")
    with pytest.raises(IndexFormatError, match='"format"'):
        ShardedRanker.load(out)


def test_the_command_line_builds_searches_and_describes_a_shard_set(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from qaindex.cli import main

    corpus, index = ROOT / "examples" / "faq.jsonl", tmp_path / "set"
    runner = CliRunner()
    built = runner.invoke(main, ["build", str(corpus), "--index", str(index), "--shards", "2", "--index-kind", "flat"])
    assert built.exit_code == 0, built.output
    assert built.output.startswith(f"indexed 289 answers into {index} in 2 shards (144, 145): model ")
    found = runner.invoke(main, ["search", "How do I reset my password?", "--index", str(index), "--json", "-k", "3"])
    one = Ranker.build(corpus, index_kind="flat").search("How do I reset my password?", k=3)
    assert found.exit_code == 0 and [h["id"] for h in json.loads(found.output)["hits"]] == [h.id for h in one]
    described = runner.invoke(main, ["info", "--index", str(index), "--json"])
    assert json.loads(described.output)["answers"] == 289
    again = runner.invoke(main, ["build", str(corpus), "--index", str(index), "--shards", "2"])
    assert (again.exit_code, again.stderr) == (
        1,
        f"Error: {index}: holds a shard set (build --shards); choose another --index, or remove it\n",
    )
    filtered = runner.invoke(main, ["search", "refund", "--index", str(index), "--where", "category=billing"])
    assert filtered.exit_code == 1 and "searches without filters" in filtered.stderr
    usage = runner.invoke(main, ["build", str(corpus), "--index", str(tmp_path / "x"), "--shards", "2", "--force"])
    assert usage.exit_code == 2 and "--reranker and --force do not apply" in usage.stderr


def test_holds_is_the_row_by_row_definition() -> None:
    """LexicalIndex.holds (which question terms each candidate holds, for the shard merge's
    coverage and explanations), vectorised, against a set per row; unknown and repeated terms."""
    rng = np.random.default_rng(3)
    words = ["cat", "dog", "emu", "fox", "gnu", "hen", "ibis", "jay"]
    texts = [" ".join(rng.choice(words, rng.integers(0, 6))) for _ in range(80)]
    lex = LexicalIndex.from_texts(texts)
    for _ in range(30):
        asked = list(rng.choice([*words, "yak"], rng.integers(0, 6)))
        ids = lex.term_ids(asked)
        rows = rng.choice(len(texts), rng.integers(0, 20), replace=False)
        own = [set(lex.query(texts[r])[0].tolist()) for r in rows]
        expected = [[t >= 0 and t in o for t in ids] for o in own]
        assert lex.holds(ids, rows).tolist() == (expected if len(rows) else [])


def test_a_shard_set_with_passages_returns_what_one_index_returns(tmp_path: Path) -> None:
    """Passage keys (every answer over 12 words keyed by its windows) across shards: the
    same hits, scores and matched keys as one index."""
    one = Ranker.build(RECORDS, index_kind="flat", passage_words=12)
    sharded = ShardedRanker.build(RECORDS, tmp_path / "set", shards=3, index_kind="flat", passage_words=12)
    questions = [*QUESTIONS, "print a page in landscape", "which browsers are supported"]
    for hybrid in (True, False):
        got, want = sharded.search_batch(questions, 10, hybrid=hybrid), one.search_batch(questions, 10, hybrid=hybrid)
        _same(got, want)
        assert any(h.matched == "passage" for hits in want for h in hits)

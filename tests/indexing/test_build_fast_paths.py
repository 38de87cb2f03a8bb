"""The build's fast paths give exactly what the generic code gives.

Each fast path (tokenizer, padding, corpus validation, JSONL parsing, stored record lines,
the pipelined streaming build) is checked against the generic code it shortcuts, which
:func:`qaindex.fast_path_switch.generic_only` forces: on random inputs with hypothesis, on the
error cases whose messages tests elsewhere pin, and (slow) on every real answer and question
of ../shared/datasets.
"""

from __future__ import annotations

import contextlib
import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

import qaindex
from qaindex import fast_path_switch
from qaindex.corpus import Record, read_corpus, records_from_dicts
from qaindex.errors import CorpusError
from qaindex.indexing.streaming import build_from_file
from qaindex.model import Model
from qaindex.store.records import RecordStore, encode_record, encode_records
from qaindex.text import tokenizer as tokenizer_module
from qaindex.text.lexical import LexicalBuilder, LexicalIndex, tokenizer_available
from qaindex.text.tokenizer import Tokenizer

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT.parent / "shared" / "datasets"

_MODEL = Model.load(None)
_WORDPIECE = _MODEL.tokenizer
_SMALL_VOCAB = ["[PAD]", "[UNK]", "a", "b", "##b", "ab", "##a", "un", "##aff", "##able", ",", ".", "!", "x" * 12, "1"]
_TOKENIZERS = {
    "default": _WORDPIECE,
    "word": Tokenizer(_SMALL_VOCAB, kind="word"),
    "cased": Tokenizer(_SMALL_VOCAB, lowercase=False, max_chars_per_word=12),
}

# ASCII-heavy text: letters of both cases, digits, every ASCII punctuation character, every
# whitespace kind, control characters, and some non-ASCII (accents, CJK, sigma, a surrogate).
_ASCII_PRINTABLE = [chr(c) for c in range(32, 127)]
_CHARS = st.one_of(
    st.sampled_from(list("abcdefgunAFFABLExyzXYZ0123456789  ")),
    st.sampled_from(_ASCII_PRINTABLE),
    st.sampled_from(list("\t\n\r\x0b\x0c\x1c\x1d\x1e\x1f\x00\x01\x07\x7f\x85\xa0\u2028\u3000")),
    st.sampled_from(list("éÉ\u0301中字ΣσςİﬁŉΑ🙂\ufffd\ud800")),
)
_ASCII_CHARS = st.one_of(
    st.sampled_from(list("abcdefgunAFFABLExyzXYZ0123456789  ")),
    st.sampled_from(_ASCII_PRINTABLE),
    st.sampled_from([chr(c) for c in range(32)] + ["\x7f"]),
)
_TEXT = st.one_of(st.text(_ASCII_CHARS, max_size=80), st.text(_CHARS, max_size=80), st.text(max_size=40))
_LIMITS = st.sampled_from([None, 0, 1, 2, 3, 5, 128])


def _generic(tok: Tokenizer, text: str, limit: int | None) -> list[int]:
    with fast_path_switch.generic_only():
        return tok.encode(text, limit)


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(sorted(_TOKENIZERS)), _TEXT, _LIMITS)
@example("default", "ab\x1ccd ab\x0bcd", None)  # separators for str.split(), deleted by BERT
@example("default", "Un\x7faff\x00able\x1f!", None)  # other control characters: deleted
@example("cased", "AB ab\tUN\n,\r", None)
@example("word", "ab, AB!!", 2)
def test_fast_encode_matches_the_generic_path(name: str, text: str, limit: int | None) -> None:
    tok = _TOKENIZERS[name]
    expected = tok._encode_generic(text, limit)
    assert _generic(tok, text, limit) == expected
    assert tok.encode(text, limit) == expected
    assert tok.encode(text, limit) == expected  # again, from the chunk cache


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(sorted(_TOKENIZERS)), st.lists(_TEXT, max_size=12), _LIMITS)
def test_batch_encode_and_padding_match_the_generic_path(name: str, texts: list[str], limit: int | None) -> None:
    tok = _TOKENIZERS[name]
    expected = [tok._encode_generic(t, limit) for t in texts]
    assert tok.encode_many(texts, limit) == expected
    flat, starts, lengths = tok.encode_ragged(texts, limit)
    assert [flat[s : s + n].tolist() for s, n in zip(starts, lengths, strict=True)] == expected
    rows = np.arange(len(texts))[::-1].copy()
    ids, mask = tok.pad_ragged(flat, starts, lengths, rows)
    ref_ids, ref_mask = tok._pad_generic([expected[r] for r in rows])
    assert np.array_equal(ids, ref_ids) and np.array_equal(mask, ref_mask)
    assert ids.dtype == ref_ids.dtype == mask.dtype == np.int64
    if limit is not None:
        fast_pad = tok.encode_batch(texts, limit)
        with fast_path_switch.generic_only():
            generic_pad = tok.encode_batch(texts, limit)
        assert all(np.array_equal(a, b) for a, b in zip(fast_pad, generic_pad, strict=True))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(st.integers(0, len(_SMALL_VOCAB) - 1), max_size=6), max_size=6))
def test_pad_matches_the_row_by_row_padding(rows: list[list[int]]) -> None:
    tok = _TOKENIZERS["word"]
    got = tok.pad(rows)
    expected = tok._pad_generic(rows)
    assert all(np.array_equal(a, b) and a.shape == b.shape for a, b in zip(got, expected, strict=True))


def test_long_text_with_a_limit_uses_a_prefix_and_stays_exact() -> None:
    tok = _WORDPIECE
    text = "The quick brown fox, unaffable; jumps. " * 2000  # ~78,000 chars
    for limit in (1, 7, 128):
        assert tok.encode(text, limit) == tok._encode_generic(text, limit)
        assert tok.encode_many([text, "x"], limit)[0] == tok._encode_generic(text, limit)
    # A long text without spaces after the cut, and one whose prefix has too few tokens.
    assert tok.encode("a" * 5000, 3) == tok._encode_generic("a" * 5000, 3)
    sparse = "word " * 10 + "x" * 3000 + " tail"
    assert tok.encode(sparse, 128) == tok._encode_generic(sparse, 128)


def test_cache_is_bounded_and_clearing_it_changes_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tokenizer_module, "_FAST_CACHE_SIZE", 5)
    tok = Tokenizer(_SMALL_VOCAB)
    texts = [f"ab{i} un{i}aff, b{i}." for i in range(40)]
    expected = [tok._encode_generic(t, None) for t in texts]
    assert tok.encode_many(texts) == expected
    assert [tok.encode(t) for t in texts] == expected
    assert len(tok._fast_cache) <= 5
    with pytest.raises(TypeError, match="text must be a str, got int"):
        tok.encode_many(["a", 3])  # type: ignore[list-item]
    with pytest.raises(TypeError, match="single str"):
        tok.encode_many("ab")


def test_copied_tokenizer_starts_with_an_empty_cache() -> None:
    # The state a copy (or Ray's serialisation of a Model) carries leaves the caches out.
    tok = Tokenizer(_SMALL_VOCAB)
    tok.encode("ab un")
    assert "_fast_cache" not in tok.__getstate__() and "ab" in tok._fast_cache
    duplicate = copy.deepcopy(tok)
    assert list(duplicate._fast_cache) == ["\x01"]  # only the batch separator
    assert duplicate.encode("ab un, b") == tok.encode("ab un, b") == tok._encode_generic("ab un, b", None)


# --------------------------------------------------------------------------- corpus validation

_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.sampled_from([2**1024 - 1, 2**1024, -(2**1100)]),  # around the 1024-bit limit
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(_CHARS, max_size=8),
)
_IDS = st.one_of(
    st.integers(-(2**64), 2**64), st.sampled_from(["", " ", "a", "b", "\ud800", "x y"]), st.booleans(), st.floats()
)
_KEYS = st.sampled_from(["id", "answer", "question", "questions", "qid", "aid", "label", "meta", "k\ud800", "tag"])
_VALUES = st.one_of(
    _SCALARS,
    _IDS,
    st.lists(st.text(_CHARS, max_size=6), max_size=3),
    st.lists(_SCALARS, max_size=2),
    st.dictionaries(st.text(max_size=3), _SCALARS, max_size=2),
    st.tuples(st.text(max_size=3)),
    st.sampled_from([0, 1, 2, "answer text", " ", "Q?"]),
)
_NEAR_PLAIN = st.fixed_dictionaries(
    {"answer": st.sampled_from(["A.", "B", "\t", "é\ud800", "caf\u00e9"])},
    optional={"meta": _SCALARS, "tag": _VALUES, "id": _IDS, "question": _VALUES, "questions": _VALUES},
)
_RECORD = st.one_of(
    st.dictionaries(_KEYS, _VALUES, max_size=5),
    st.fixed_dictionaries({"id": _IDS, "answer": st.text(_CHARS, max_size=10)}),
    st.fixed_dictionaries(
        {"answer": st.text(_CHARS, max_size=10)},
        optional={"questions": st.lists(st.text(_CHARS, max_size=5), max_size=3), "id": st.integers(0, 3)},
    ),
    _NEAR_PLAIN,
    st.fixed_dictionaries(
        {
            "qid": _IDS,
            "question": st.sampled_from(["q1", " ", "q2"]),
            "aid": st.sampled_from(["a1", "a2", 7]),
            "answer": st.sampled_from(["A one", "A two", ""]),
            "label": st.sampled_from([0, 1, 2, True]),
        }
    ),
    st.sampled_from([[1], "text", 3, None]),
)


def _outcome(call: Callable[[], list[Record]]) -> Any:
    try:
        return [(type(r.id), r.id, r.answer, r.questions, r.metadata) for r in call()]
    except CorpusError as exc:
        return ("error", str(exc))


def _repr_equal(a: Any, b: Any) -> bool:
    return repr(a) == repr(b)  # NaN != NaN, but its repr is equal


@settings(max_examples=500, deadline=None)
@given(st.lists(_RECORD, max_size=6), st.sampled_from([(), ("a1", 2)]))
def test_records_from_dicts_fast_path_matches_the_generic_path(items: list[Any], existing: tuple[Any, ...]) -> None:
    fast = _outcome(lambda: records_from_dicts(items, existing_ids=existing))
    with fast_path_switch.generic_only():
        generic = _outcome(lambda: records_from_dicts(items, existing_ids=existing))
    assert _repr_equal(fast, generic)


@settings(max_examples=500, deadline=None)
@given(_NEAR_PLAIN)
@example({"answer": "A.", "meta": 2**1024})  # more than 1024 bits: refused
@example({"answer": "A.", "meta": 2**1024 - 1})
@example({"answer": "A.", "questions": ["q", "\ud800"]})
@example({"answer": "A.", "question": "\ud800"})
@example({"answer": "A.", "k\ud800": 1})
@example({"answer": "A.", "id": True})
@example({"answer": "A.", "id": 2**63})
@example({"answer": "A.", "id": -(2**63)})
@example({"answer": "A.", "id": " "})
@example({"answer": " \t"})
@example({"answer": "A.", "n": float("inf")})
def test_one_record_fast_path_matches_the_generic_path(item: dict[str, Any]) -> None:
    fast = _outcome(lambda: records_from_dicts([item]))
    with fast_path_switch.generic_only():
        generic = _outcome(lambda: records_from_dicts([item]))
    assert _repr_equal(fast, generic)


@settings(max_examples=300, deadline=None)
@given(st.lists(_RECORD, max_size=6))
def test_read_corpus_fast_path_matches_the_generic_path(tmp_path_factory: Any, items: list[Any]) -> None:
    path = tmp_path_factory.mktemp("c") / "corpus.jsonl"
    lines = []
    for item in items:
        try:
            lines.append(json.dumps(item, ensure_ascii=False, allow_nan=True))
        except (TypeError, ValueError):
            continue
    path.write_text("\n".join(lines) + "\n", encoding="utf-8", errors="surrogatepass")
    fast = _outcome(lambda: read_corpus(path))
    with fast_path_switch.generic_only():
        generic = _outcome(lambda: read_corpus(path))
    assert _repr_equal(fast, generic)


@pytest.mark.parametrize(
    "content",
    [
        b'{"answer": "a"}\n{"answer": "b"} x\n',
        b'{"answer": "a"}\n{"answer": "\xff"}\n',
        b'{"answer": "a"}\n\xef\xbb\xbf{"answer": "b"}\n',
        b'\xef\xbb\xbf{"answer": "a"}\r\n  \n{"answer": "b", "n": NaN}\n',
        b'{"answer": "a"}\n{"answer": "b", "x": ' + b"[" * 70 + b"]" * 70 + b"}\n",
        b'{"answer": "a"}\n{"answer": "b", "x": 1' + b"0" * 5000 + b"}\n",
        b'{"answer": "a"}\n{"id": 1, "answer": "b"}\t \r\n{"id": 1, "answer": "c"}\n',
        b'{"answer": "a"}\n[{"answer": "b"}]\n',
        b'{"answer": "a"}\n{"answer": "caf\xc3\xa9 \\ud800"}\n',
    ],
)
def test_file_errors_and_edge_lines_are_unchanged(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "c.jsonl"
    path.write_bytes(content)
    fast = _outcome(lambda: read_corpus(path))
    with fast_path_switch.generic_only():
        generic = _outcome(lambda: read_corpus(path))
    assert _repr_equal(fast, generic)


def test_duplicate_and_existing_ids_keep_their_messages() -> None:
    items = [{"id": 1, "answer": "a"}, {"id": "x", "answer": "b"}, {"id": 1, "answer": "c"}]
    with pytest.raises(CorpusError) as fast:
        records_from_dicts(items)
    assert str(fast.value) == "records[3]: duplicate id 1 (first seen at records[1]); ids must be unique"
    with pytest.raises(CorpusError) as existing:
        records_from_dicts(items[1:2], existing_ids=["x"])
    assert str(existing.value) == 'records[1]: id "x" is already in the index; remove it first or use another id'


def test_fast_path_copies_what_it_stores() -> None:
    questions = ["Q?", " "]
    item = {"id": "a", "answer": "A.", "questions": questions, "tag": "t"}
    (record,) = records_from_dicts([item])
    questions.append("later")
    item["tag"] = "changed"
    assert record.questions == ("Q?",) and record.metadata == {"tag": "t"}


# --------------------------------------------------------------------------- stored records

_RECORDS = st.builds(
    Record,
    id=st.one_of(st.integers(-(2**63), 2**63 - 1), st.text(_CHARS, min_size=1, max_size=6)),
    answer=st.text(_CHARS, max_size=20).filter(lambda s: "\ud800" not in s),
    questions=st.lists(st.text(max_size=5).filter(lambda s: "\ud800" not in s), max_size=3).map(tuple),
    metadata=st.dictionaries(
        st.text(max_size=4), st.one_of(_SCALARS, st.lists(st.integers(), max_size=2)), max_size=3
    ).filter(lambda d: "\ud800" not in repr(d)),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(_RECORDS, max_size=5))
def test_stored_lines_are_the_same_bytes(records: list[Record]) -> None:
    try:
        expected = [(json.dumps(r.to_json(), ensure_ascii=False) + "\n").encode("utf-8") for r in records]
    except UnicodeEncodeError:  # a lone surrogate generated by st.text(): both paths raise
        with pytest.raises(UnicodeEncodeError):
            encode_records(records)
        return
    assert encode_records(records) == expected
    assert [encode_record(r) for r in records] == expected
    assert RecordStore.from_records(records).content() == b"".join(expected)
    with fast_path_switch.generic_only():
        assert encode_records(records) == expected


def _utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate
        return False
    return True


_TRICKY = st.sampled_from(['"questions": ["x"]', '\\"questions\\": [\\"', "questions", '"questions": []', ""])
_KEYED_RECORDS = st.builds(
    Record,
    id=st.one_of(st.integers(0, 9), _TRICKY.filter(bool)),
    answer=st.one_of(_TRICKY, st.text(_CHARS, max_size=8).filter(_utf8)),
    questions=st.lists(st.one_of(_TRICKY, st.text(_CHARS, max_size=4).filter(_utf8)), max_size=2).map(tuple),
    metadata=st.dictionaries(
        st.sampled_from(["questions", "tag"]), st.one_of(st.lists(_TRICKY, max_size=2), _TRICKY), max_size=2
    ),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(_KEYED_RECORDS, max_size=6), st.lists(_KEYED_RECORDS, max_size=3))
def test_stored_questions_are_found_without_decoding_every_record(records: list[Record], more: list[Record]) -> None:
    """``key_texts`` of a store qaindex encoded decodes only the rows whose bytes hold a non-empty
    questions list, and finds exactly what decoding every row finds: answers, ids and metadata
    that spell the key in their text change nothing."""
    from qaindex.key_index import key_texts

    def expected(rs: list[Record]) -> list[tuple[int, str]]:
        return [(row, q) for row, r in enumerate(rs) for q in r.questions]

    store = RecordStore.from_records(records)
    assert list(key_texts(store)) == expected(records)
    assert set(store.question_rows().tolist()) >= {row for row, r in enumerate(records) if r.questions}
    with fast_path_switch.generic_only():
        assert store.question_rows().tolist() == list(range(len(records)))  # the reference: every row
        assert list(key_texts(store)) == expected(records)
    both = store.append(more)
    assert both.canonical and list(key_texts(both)) == expected(records + more)
    rows = np.arange(len(records))[::-1]
    assert list(key_texts(store.keep(rows))) == expected([records[r] for r in rows])
    read_back = RecordStore(store.content(), store.offsets)  # lines from a file: spacing not ours
    assert not read_back.canonical and read_back.question_rows().tolist() == list(range(len(records)))


def test_unusual_records_fall_back_to_json_dumps() -> None:
    odd = [
        Record(id=True, answer="a"),  # not validated input: stored as json.dumps would
        Record(id=1.5, answer="a"),  # type: ignore[arg-type]
        Record(id="x", answer="a", questions=["q"]),  # type: ignore[arg-type]
        Record(id="x", answer="a", metadata={"n": float("nan"), "t": (1, 2)}),
    ]
    assert encode_records(odd) == [(json.dumps(r.to_json(), ensure_ascii=False) + "\n").encode() for r in odd]


# --------------------------------------------------------------------------- whole builds


def _corpus(n: int) -> list[dict[str, Any]]:
    words = ["refund", "password", "reset", "Export", "PDF", "café", "naïve", "order", "e-mail", "#401", "中文"]
    rng = np.random.default_rng(0)
    out: list[dict[str, Any]] = []
    for i in range(n):
        text = " ".join(rng.choice(words, size=int(rng.integers(1, 30)))) + rng.choice([".", "?", "!\n", "\t"])
        record: dict[str, Any] = {"id": i if i % 3 else f"doc-{i}", "answer": text}
        if i % 4 == 0:
            record["questions"] = [f"How to {text[:10]}?"]
        if i % 5 == 0:
            record["category"] = ["billing", "account"][i % 2]
        out.append(record)
    return out


def test_builds_are_identical_with_and_without_fast_paths(tmp_path: Path) -> None:
    items = _corpus(700)
    path = tmp_path / "corpus.jsonl"
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in items), encoding="utf-8")
    fast_dicts = qaindex.Ranker.build(items, model=_MODEL, index_kind="flat")
    fast_store, fast_vectors, _ = build_from_file(path, _MODEL, index_kind="flat", chunk_size=128, batch_size=32)
    with fast_path_switch.generic_only():
        generic_dicts = qaindex.Ranker.build(items, model=_MODEL, index_kind="flat")
        generic_store, generic_vectors, _ = build_from_file(
            path, _MODEL, index_kind="flat", chunk_size=128, batch_size=32
        )
    assert np.array_equal(fast_dicts._vectors, generic_dicts._vectors)
    assert fast_dicts._records.content() == generic_dicts._records.content()
    assert np.array_equal(np.asarray(fast_vectors), np.asarray(generic_vectors))  # 6 pipelined chunks
    assert fast_store.content() == generic_store.content()
    assert np.array_equal(fast_store.offsets, generic_store.offsets)
    # The streamed build's vectors are Model.encode's for each chunk, in order.
    texts = [r["answer"] for r in items]
    chunks = [_MODEL.encode(texts[i : i + 128], role="answer", batch_size=32) for i in range(0, len(texts), 128)]
    assert np.array_equal(np.asarray(fast_vectors), np.concatenate(chunks))


def test_an_in_memory_build_encodes_in_the_chunks_of_a_file_build(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A list of records is encoded chunk by chunk through the same pipeline as a file (the
    next chunk tokenized while the encoder runs): the same vectors as the file build, with or
    without the fast paths, and the BM25 rows of every chunk in order."""
    import qaindex.indexing.encoding

    monkeypatch.setattr(qaindex.indexing.encoding, "DEFAULT_CHUNK", 128)
    items = _corpus(700)
    path = tmp_path / "corpus.jsonl"
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in items), encoding="utf-8")
    _, from_file, _ = build_from_file(path, _MODEL, index_kind="flat", chunk_size=128, batch_size=32)
    in_memory = qaindex.Ranker.build(items, model=_MODEL, index_kind="flat", batch_size=32, hybrid=False)
    assert np.array_equal(in_memory._vectors, np.asarray(from_file))
    with fast_path_switch.generic_only():
        generic = qaindex.Ranker.build(items, model=_MODEL, index_kind="flat", batch_size=32, hybrid=False)
    assert np.array_equal(generic._vectors, in_memory._vectors)
    if tokenizer_available():
        hybrid = qaindex.Ranker.build(items, model=_MODEL, index_kind="flat", batch_size=32, hybrid=True)
        assert hybrid._lexical is not None
        _same_lexical(hybrid._lexical, LexicalIndex.from_texts([r["answer"] for r in items]))


def _same_lexical(a: Any, b: Any) -> None:
    assert a.vocab == b.vocab
    for name in ("_terms", "_counts", "_offsets"):
        assert np.array_equal(getattr(a, name), getattr(b, name)), name


@pytest.mark.skipif(not tokenizer_available(), reason="PyStemmer is not installed")
def test_the_bm25_index_made_while_encoding_equals_one_made_from_the_stored_answers(tmp_path: Path) -> None:
    """A hybrid build analyses the answers in its encoding pass (beside the encoder, chunk by
    chunk for a file): the result equals the BM25 index of the stored answers built afterwards."""
    items = _corpus(700)
    path = tmp_path / "corpus.jsonl"
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in items), encoding="utf-8")
    expected = LexicalIndex.from_texts([r["answer"] for r in items])
    built = [qaindex.Ranker.build(items, model=_MODEL, index_kind="flat", hybrid=True),
             qaindex.Ranker.build(path, model=_MODEL, index_kind="flat", hybrid=True)]  # fmt: skip
    with fast_path_switch.generic_only():
        built.append(qaindex.Ranker.build(items, model=_MODEL, index_kind="flat", hybrid=True))
    for ranker in built:
        _same_lexical(ranker._lexical, expected)
        assert ranker._lexical.ratio_info is not None  # measured, as enable_hybrid measures it
        assert ranker._lexical.ratio_info == ranker.enable_hybrid()._lexical.ratio_info
        _same_lexical(ranker._lexical, expected)
    for generic in (False, True):
        builder = LexicalBuilder()
        with fast_path_switch.generic_only() if generic else contextlib.nullcontext():
            build_from_file(path, _MODEL, index_kind="flat", chunk_size=128, batch_size=32, lexical=builder)
        _same_lexical(builder.finish(), expected)


def test_an_error_in_a_later_chunk_stops_the_pipelined_build(tmp_path: Path) -> None:
    items = _corpus(300)
    path = tmp_path / "corpus.jsonl"
    lines = [json.dumps(r) for r in items]
    lines[250] = '{"answer": ""}'
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(CorpusError) as raised:
        build_from_file(path, _MODEL, chunk_size=64)
    assert str(raised.value) == (f'{path}:251: field "answer" is empty; give it the answer text or drop the line')


# --------------------------------------------------------------------------- real data (slow)


@pytest.mark.slow
@pytest.mark.skipif(not (DATA / "wikiqa").is_dir(), reason=f"{DATA}: the shared datasets are not here")
def test_every_real_answer_and_question_tokenizes_exactly_as_before() -> None:
    texts: set[str] = set()
    for path in sorted(DATA.glob("*/*.jsonl")):
        with path.open(encoding="utf-8") as fh:
            for line in fh:
                row = json.loads(line)
                texts.update(v for v in (row.get("answer"), row.get("question")) if isinstance(v, str))
    ordered = sorted(texts)
    assert len(ordered) > 50_000
    for tok in _TOKENIZERS.values():
        for limit in (None, 40, 128):
            expected = [tok._encode_generic(t, limit) for t in ordered]
            assert tok.encode_many(ordered, limit) == expected
            assert [tok.encode(t, limit) for t in ordered] == expected

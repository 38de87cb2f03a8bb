"""Tiny randomly initialised sentence-transformers, built here (nothing downloaded)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

HIDDEN = 32


def tiny_config(kind: str, vocab_size: int, positions: int, layers: int = 2) -> Any:
    """A ``transformers`` config of ``kind`` (``"bert"`` or ``"mpnet"``): 32 wide, 4 heads."""
    transformers = pytest.importorskip("transformers")
    config = transformers.BertConfig if kind == "bert" else transformers.MPNetConfig
    return config(
        vocab_size=vocab_size, hidden_size=HIDDEN, num_hidden_layers=layers, num_attention_heads=4,
        intermediate_size=2 * HIDDEN, max_position_embeddings=positions,
    )  # fmt: skip


def save_sentence_transformer(config: Any, hf_dir: Path, out: Path, max_seq_length: int = 24) -> Path:
    """The model of ``config`` (seeded), saved in ``hf_dir`` beside its tokenizer, then wrapped with
    mean pooling and normalisation and saved by sentence-transformers in ``out``."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    st_models = pytest.importorskip("sentence_transformers.models")
    from sentence_transformers import SentenceTransformer

    torch.manual_seed(0)
    model = transformers.BertModel if config.model_type == "bert" else transformers.MPNetModel
    model(config).save_pretrained(hf_dir)
    word = st_models.Transformer(str(hf_dir), max_seq_length=max_seq_length)
    pooled = [word, st_models.Pooling(HIDDEN, "mean"), st_models.Normalize()]
    SentenceTransformer(modules=pooled, device="cpu").save(str(out))
    return out

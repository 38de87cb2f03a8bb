"""Fixtures of the store benchmarks (reliability, hostile files): a tiny model, records, index checks."""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path
from typing import Any

import numpy as np

from qaindex import Ranker
from tests.helpers.onnx_models import make_model

__all__ = ["VOCAB_WORDS", "check_index", "cli_command", "debris", "records", "tiny_model", "write_jsonl"]

VOCAB_WORDS = 500


def tiny_model(directory: Path, *, dimension: int = 8, seed: int = 0) -> Path:
    """A Poincaré bag-of-words model over the words w0 .. w499."""
    vocab = ["[PAD]", "[UNK]", *(f"w{i}" for i in range(VOCAB_WORDS))]
    rng = np.random.default_rng(seed)
    emb = rng.normal(scale=0.3 / np.sqrt(dimension), size=(len(vocab), dimension)).astype(np.float32)
    emb[0] = 0.0
    return make_model(directory, vocab, emb, name="tiny-reliability")


def records(prefix: str, n: int, seed: int = 0) -> list[dict[str, Any]]:
    """``n`` answers of three random words with ids ``prefix0 ..``."""
    rng = random.Random(f"{prefix}-{seed}")
    return [
        {"id": f"{prefix}{i}", "answer": " ".join(f"w{rng.randrange(VOCAB_WORDS)}" for _ in range(3))} for i in range(n)
    ]


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def check_index(index: Path) -> dict[str, Any]:
    """Load with the default verifying load and check that records and vectors agree."""
    ranker = Ranker.load(index)
    recs = list(ranker.records())
    stored = np.asarray(ranker.state().vectors)
    encoded = ranker.model.encode([r.answer for r in recs], role="answer")
    if not np.array_equal(stored, encoded):
        raise AssertionError("stored vectors do not match the stored answers (mixed snapshot)")
    return {"ids": sorted(str(r.id) for r in recs), "overfetch": ranker.overfetch}


def debris(index: Path) -> list[str]:
    """Entries other than the manifest, the current snapshot and the lock file."""
    manifest = json.loads((index / "manifest.json").read_text())
    keep = {"manifest.json", manifest["snapshot"], ".lock"}
    return sorted(p.name for p in index.iterdir() if p.name not in keep)


def cli_command() -> list[str]:
    """The ``qaindex`` command of this interpreter."""
    script = Path(sys.executable).parent / "qaindex"
    return [str(script)] if script.exists() else [sys.executable, "-c", "from qaindex.cli import main; main()"]

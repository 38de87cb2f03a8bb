"""A tiny datasets folder in the shared benchmark format (WikiQA/TrecQA JSONL), for the
smoke tests of the benchmarks that read ``--data``."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from benchmarks import common
from qaindex.corpus import read_corpus

ROOT = Path(__file__).resolve().parents[2]


def _words() -> list[str]:
    return sorted({w for r in read_corpus(ROOT / "examples" / "faq.jsonl") for w in r.answer.lower().split()})


def tiny_datasets(root: Path) -> Path:
    """A datasets folder in the benchmark format under ``root``: 60 distinct answers, 15 questions."""
    rng = np.random.default_rng(0)
    words = _words()
    for name in common.QA_DATASETS:
        (root / name).mkdir()
        rows = []
        for q in range(5):
            question = f"{name} question {q} " + " ".join(rng.choice(words, 4))
            for a in range(4):
                answer = f"{name} {q} {a} " + " ".join(rng.choice(words, int(rng.integers(5, 15))))
                rows.append(
                    {"qid": f"Q{q}", "question": question, "aid": f"A{q}-{a}", "answer": answer, "label": a == 0}
                )
        (root / name / "test.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return root

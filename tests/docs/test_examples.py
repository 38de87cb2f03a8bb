"""The shipped example corpus and the example app."""

from __future__ import annotations

import importlib.util
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from conftest import vocab_for
from helpers.onnx_models import make_model

from qaindex import Ranker, read_corpus

ROOT = Path(__file__).resolve().parents[2]
FAQ = ROOT / "examples" / "faq.jsonl"


def test_faq_corpus_is_valid_and_large_enough() -> None:
    records = read_corpus(FAQ)
    assert len(records) >= 200
    assert len({str(r.id) for r in records}) == len(records)
    assert all(r.questions for r in records)
    assert len({r.answer for r in records}) == len(records)
    categories = Counter(r.metadata["category"] for r in records)
    assert len(categories) >= 10


def load_bot_module():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("support_bot", ROOT / "examples" / "support_bot.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["support_bot"] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def faq_word_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A bag-of-words model where each FAQ answer's own words point its way (no training)."""
    records = read_corpus(FAQ)
    texts = [r.answer for r in records] + [q for r in records for q in r.questions]
    vocab = vocab_for(texts)
    rng = np.random.default_rng(0)
    emb = rng.normal(scale=0.05, size=(len(vocab), 32)).astype(np.float32)
    emb[0] = 0
    return make_model(tmp_path_factory.mktemp("m") / "faqwords", vocab, emb)


def test_support_bot_answers_and_hands_off(faq_word_model: Path) -> None:
    bot_module = load_bot_module()
    ranker = Ranker.build(FAQ, model=faq_word_model)
    bot = bot_module.SupportBot(ranker, margin=0.0, threshold=0.0)
    reply = bot.ask("How do I create a Lumen Notes account?")
    assert not reply.handoff and reply.answer is not None and len(reply.related) == 3
    assert reply.answer_id == ranker.search("How do I create a Lumen Notes account?", k=1)[0].id
    cautious = bot_module.SupportBot(ranker, margin=1e9, threshold=0.0)
    reply = cautious.ask("anything at all")
    assert reply.handoff and reply.answer is None and len(reply.related) == 4 and not reply.unknown


def test_support_bot_says_it_does_not_know_below_the_threshold(faq_word_model: Path) -> None:
    bot_module = load_bot_module()
    ranker = Ranker.build(FAQ, model=faq_word_model)
    question = "How do I create a Lumen Notes account?"
    best = ranker.search(question, k=1)[0].score
    assert 0.0 < best < 1.0
    sure = bot_module.SupportBot(ranker, margin=0.0, threshold=best).ask(question)
    assert not sure.unknown and sure.answer is not None and sure.score == best
    unsure = bot_module.SupportBot(ranker, margin=0.0, threshold=min(1.0, best + 1e-6)).ask(question)
    assert unsure.unknown and unsure.handoff and unsure.answer is None and unsure.score == best

"""tools/training_corpus.py on tiny stand-ins of its three sources."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))

from training_corpus import build

WORDNET_LINE = (
    "00001740 29 v 04 breathe 0 take_a_breath 0 respire 0 suspire 3 000 | draw air into, and expel out of, "
    'the lungs; "I can breathe better when the air is clean"; "The patient is respiring"  \n'
)
MEDQUAD = """<?xml version="1.0" encoding="UTF-8"?>
<Document id="1"><QAPairs>
<QAPair pid="1"><Question qid="1-1">What are the symptoms of Flu ?</Question>
<Answer>Fever, cough and aching muscles are the usual symptoms of flu.</Answer></QAPair>
<QAPair pid="2"><Question qid="1-2">How to prevent Flu ?</Question><Answer></Answer></QAPair>
</QAPairs></Document>
"""
FAQ_PAGE = """<html><body><h2>General questions<a class="headerlink" href="#x">¶</a></h2>
<h3>Why is Python slow sometimes?<a class="headerlink" href="#y">¶</a></h3>
<p>Python is interpreted, so a loop in pure Python does more work per step than compiled code.</p>
<p>A second paragraph that is not part of the answer pair but long enough to be kept.</p>
</body></html>"""


def test_corpus_from_every_source(tmp_path: Path) -> None:
    wordnet = tmp_path / "wordnet"
    wordnet.mkdir()
    for pos in ("noun", "verb", "adj", "adv"):
        header = "  1 This software and database is being provided to you\n"
        (wordnet / f"data.{pos}").write_text(header + (WORDNET_LINE if pos == "verb" else ""), encoding="latin-1")
    medquad = tmp_path / "medquad" / "1_Test"
    medquad.mkdir(parents=True)
    (medquad / "0001.xml").write_text(MEDQUAD)
    pydoc = tmp_path / "html" / "faq"
    pydoc.mkdir(parents=True)
    (pydoc / "general.html").write_text(FAQ_PAGE)

    counts = build(tmp_path / "out", wordnet, tmp_path / "medquad", tmp_path / "html")
    records = [json.loads(line) for line in (tmp_path / "out" / "texts.jsonl").read_text().splitlines()]
    texts = [r["text"] for r in records]
    pairs = np.load(tmp_path / "out" / "pairs.npy")
    assert len(set(texts)) == len(texts) == counts["texts"]
    # WordNet: the gloss, both examples, one template question about a lemma, paired with the gloss
    assert "I can breathe better when the air is clean" in texts and "The patient is respiring" in texts
    gloss = next(t for t in texts if t.endswith("draw air into, and expel out of, the lungs"))
    questions = {texts[q] for q, a in pairs if texts[a] == gloss}
    assert len(questions) == 1
    question = questions.pop()
    assert any(w in question for w in ("breathe", "take a breath", "respire", "suspire")), question
    # MedQuAD: the answered question paired; the unanswered one kept alone
    i, j = (
        texts.index("What are the symptoms of Flu ?"),
        texts.index("Fever, cough and aching muscles are the usual symptoms of flu."),
    )
    assert [i, j] in pairs.tolist() and "How to prevent Flu ?" in texts
    # Python docs: the FAQ question paired with its first paragraph (header links dropped)
    q, a = (
        texts.index("Why is Python slow sometimes?"),
        texts.index("Python is interpreted, so a loop in pure Python does more work per step than compiled code."),
    )
    assert [q, a] in pairs.tolist()
    assert {r["source"] for r in records} == {"wordnet", "medquad", "pydoc"}
    assert counts["pairs"] == len(pairs) == 3
